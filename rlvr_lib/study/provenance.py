"""Stale run records: which committed records were made by code or data that has changed since.

Runs are cached by their config hash, so a change to the training loop that keeps the hash silently reuses
records made by older code. Each record is checked against the commit it was made at (``git_commit``): it is
*stale* when a file on its code path differs between that commit and ``rev`` (HEAD), *declared* when every
commit that touched that file in between is listed in :data:`DECLARATIONS` as result-neutral for it, and
*unknown* (counted stale) when its commit is ``None`` or not in the history.

The code path, read statically at ``rev``: the closure of ``rlvr_lib`` modules imported from
:data:`RUN_ENTRIES` (every ``import``, parsed with `ast`), without :data:`NOT_ON_PATH`, plus :data:`DATA_PATHS`.
A change to docstrings or comments only is not a change; a merge counts only where it resolved a conflict.
Why this superset and what it misses: docs/study/README.md ("Provenance of records").

``python -m rlvr_lib.study.provenance`` prints, per notebook, its records, the stale and the undeclared ones, and
exits 1 when a record a committed table reads is stale without a declaration (``tests/test_provenance.py``).
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from rlvr_lib.study import papers

__all__ = ["DATA_PATHS", "DECLARATIONS", "GitMissing", "NOT_ON_PATH", "RUN_ENTRIES", "SUPPORTING", "changed_paths",
           "code_path_files", "commits_touching", "failing", "format_report", "import_closure", "load_declarations",
           "main", "record_status", "stale_records", "table_records"]

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "rlvr_lib"
DECLARATIONS = "results/result_neutral_commits.json"
"""The reviewed list of result-neutral commits, relative to the repository root."""

TABLE_ENTRIES = papers.TABLE_ENTRIES
RUN_ENTRIES: dict[str, tuple[str, ...]] = {
    # The tables' runs: each notebook's of the manifest, made by `evaluate_base` / `train_and_evaluate` (called by
    # the notebooks directly or through Arms) and by the modules that set its configs (notebook 07's equal-compute
    # budget and pair rules, notebook 08's regimes).
    **{nb.folder: nb.entries for nb in papers.NOTEBOOKS},
    # Reported, not gating: the lr sweep behind testbed.TUNED_LR and the dynamics calibration behind the step count.
    **{s.experiment: s.entries for s in papers.SUPPORTING},
}
"""Per experiment, the modules whose functions make its run records (the roots of its code path), from the manifest
(`rlvr_lib.study.papers`)."""

SUPPORTING = {s.experiment: s.label for s in papers.SUPPORTING}
"""Experiments that feed the study indirectly: listed by the check, never failing it."""

NOT_ON_PATH = frozenset({"rlvr_lib.study.claims", "rlvr_lib.study.claims.tables"})
"""Modules a run's path imports that compute nothing a record's numbers depend on (claim-row fingerprints)."""

DATA_PATHS = ("rlvr_lib/policy/checkpoints/tiny-mul", "rlvr_lib/tasks/data")
"""The shipped policy (weights, tokenizer, strategy profile) and the task data, relative to the root."""

_SHA = re.compile(r"^[0-9a-f]{40}$")
_DECL_KEYS = {"about", "commits"}
_ENTRY_KEYS = {"commit", "paths", "reason"}


# ------------------------------------------------------------------- git
class GitMissing(RuntimeError):
    """git is not installed: the check reads the repository's history, so it cannot run."""

    def __init__(self) -> None:
        super().__init__("the stale-record check needs git on PATH (it reads the repository's history)")


def _git(repo: Path, *args: str) -> str:
    """Runs ``git -C repo args`` and returns its stdout.

    Raises:
        GitMissing: git is not installed.
        RuntimeError: the command fails (its stderr is in the message).
    """
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    except FileNotFoundError as err:
        raise GitMissing() from err
    if out.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {repo}: {out.stderr.strip()}")
    return out.stdout


def _has_commit(repo: Path, sha: str) -> bool:
    """Whether ``sha`` names a commit of the repository."""
    try:
        _git(repo, "cat-file", "-e", f"{sha}^{{commit}}")
    except GitMissing:
        raise
    except RuntimeError:
        return False
    return True


def _blobs(repo: Path, shas: Iterable[str]) -> dict[str, str]:
    """The text of each blob ``sha``, read by one ``git cat-file --batch`` ("<sha> blob <size>\\n<bytes>\\n" each)."""
    shas = list(dict.fromkeys(shas))
    if not shas:
        return {}
    try:
        done = subprocess.run(["git", "-C", str(repo), "cat-file", "--batch"],
                              input="".join(f"{s}\n" for s in shas).encode(), capture_output=True, check=False)
    except FileNotFoundError as err:
        raise GitMissing() from err
    if done.returncode != 0:
        raise RuntimeError(f"git cat-file --batch failed in {repo}: {done.stderr.decode(errors='replace').strip()}")
    out = done.stdout
    texts, at = {}, 0
    for sha in shas:
        header_end = out.index(b"\n", at)
        header = out[at:header_end].split()
        if header[-1] == b"missing":
            raise RuntimeError(f"git object {sha} is missing from {repo}")
        size = int(header[2])
        texts[sha] = out[header_end + 1: header_end + 1 + size].decode(errors="replace")
        at = header_end + 1 + size + 1
    return texts


# --------------------------------------------------------------- code path
def _module_file(name: str, source: Mapping[str, str]) -> Optional[str]:
    """The repository path of module ``name`` among ``source``'s files (a package is its ``__init__``)."""
    base = name.replace(".", "/")
    for path in (f"{base}.py", f"{base}/__init__.py"):
        if path in source:
            return path
    return None


def _imported_names(tree: ast.AST, package: str) -> list[str]:
    """Every dotted name an import statement of ``tree`` names (``from a import b`` gives ``a`` and ``a.b``)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative to the importing package
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            names += [base] + [f"{base}.{alias.name}" for alias in node.names]
    return names


@functools.lru_cache(maxsize=4096)
def _module_imports(text: str, path: str, package: str) -> tuple[str, ...]:
    """`_imported_names` of one module's text, parsed once per process (each entry set's closure reads the same
    modules again)."""
    return tuple(_imported_names(ast.parse(text, path), package))


def _parents(name: str) -> list[str]:
    """The packages Python runs before module ``name``: ``a.b.c`` gives ``a`` and ``a.b``."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_closure(entries: Iterable[str], source: Mapping[str, str], *, package: str = PACKAGE,
                   skip: Iterable[str] = NOT_ON_PATH) -> dict[str, str]:
    """The modules of ``package`` that importing ``entries`` can run: ``{module: repository path}``.

    ``source``: ``{repository path: text}`` of the package's ``.py`` files at the revision; ``skip``: modules not
    followed.

    Raises:
        ValueError: an entry module is not in ``source``.
    """
    skip = frozenset(skip)
    found: dict[str, str] = {}
    todo = []
    for entry in entries:
        if _module_file(entry, source) is None:
            raise ValueError(f"entry module {entry!r} is not a module of {package!r} at the revision checked")
        todo.append(entry)
    while todo:
        name = todo.pop()
        path = _module_file(name, source)
        if name in found or name in skip or path is None:
            continue
        found[name] = path
        todo += _parents(name)
        own = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        for target in _module_imports(source[path], path, own):
            if target == package or target.startswith(package + "."):
                todo.append(target)  # "a.b" that is a name in module "a" has no file: skipped above
    return found


def _sources(repo: Path, rev: str, package: str) -> dict[str, str]:
    """``{path: text}`` of every ``.py`` file under ``package/`` at ``rev``."""
    blobs = {}
    for line in _git(repo, "ls-tree", "-r", rev, "--", package).splitlines():
        meta, path = line.split("\t", 1)
        kind, sha = meta.split()[1:3]
        if kind == "blob" and path.endswith(".py"):
            blobs[path] = sha
    texts = _blobs(repo, blobs.values())
    return {path: texts[sha] for path, sha in blobs.items()}


def code_path_files(entries: Iterable[str], repo: Path = REPO_ROOT, *, rev: str = "HEAD", package: str = PACKAGE,
                    skip: Iterable[str] = NOT_ON_PATH, data: Sequence[str] = DATA_PATHS) -> list[str]:
    """The files that affect a record made by ``entries``: their import closure at ``rev`` plus ``data``."""
    sha = _git(repo, "rev-parse", "--verify", f"{rev}^{{commit}}").strip()  # the cache is per commit, not per name
    closure = import_closure(entries, _cached_sources(repo, sha, package), package=package, skip=skip)
    return sorted(set(closure.values()) | set(data))


@functools.lru_cache(maxsize=8)
def _cached_sources(repo: Path, rev: str, package: str) -> Mapping[str, str]:
    return _sources(repo, rev, package)


# ---------------------------------------------------------------- changes
def _code_only(text: Optional[str], path: str) -> Optional[str]:
    """``path``'s syntax tree without its string statements (docstrings), as text; ``None`` if not Python."""
    if text is None:
        return None
    try:
        tree = ast.parse(text, path)
    except SyntaxError:
        return None
    for node in ast.walk(tree):  # a string statement (a docstring, an attribute's docstring) does nothing
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                kept = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                                and isinstance(s.value.value, str))]
                setattr(node, field, kept or [ast.Pass()])
    return ast.dump(tree)


_NO_BLOB = "0" * 40


def _documentation(path: str) -> bool:
    """A Markdown file (a checkpoint's model card) says what the data is and computes nothing, as a docstring."""
    return path.endswith(".md")


def changed_paths(repo: Path, commit: str, rev: str, paths: Sequence[str]) -> list[str]:
    """The files among ``paths`` (files or folders) whose content, or code for ``.py``, differs between
    ``commit`` and ``rev``; renames count as a deletion and an addition, Markdown files (model cards) never."""
    raw = _git(repo, "diff", "--raw", "--no-renames", "--abbrev=40", commit, rev, "--", *paths).splitlines()
    diffs = []  # (path, old blob, new blob); a missing side is all zeros
    for line in raw:
        meta, path = line.split("\t", 1)
        old, new = meta.split()[2:4]
        diffs.append((path, old, new))
    code = _code_of(repo, [b for path, old, new in diffs if path.endswith(".py") for b in (old, new) if b != _NO_BLOB])
    return sorted(path for path, old, new in diffs if not _documentation(path)
                  and not (path.endswith(".py") and code.get(old) is not None and code.get(old) == code.get(new)))


_CODE: dict[str, Optional[str]] = {}  # blob sha -> its code without docstrings (blobs never change)


def _code_of(repo: Path, shas: Sequence[str]) -> dict[str, Optional[str]]:
    """``{blob: _code_only(its text)}``, each blob read and parsed once per process."""
    todo = [s for s in shas if s not in _CODE]
    for sha, text in _blobs(repo, todo).items():
        _CODE[sha] = _code_only(text, sha)
    return {s: _CODE[s] for s in shas}


def commits_touching(repo: Path, commit: str, rev: str, paths: Sequence[str]) -> dict[str, list[str]]:
    """``{path: commits in (commit, rev] that changed it, newest first}`` for the files under ``paths``.

    Docstring-, comment- or layout-only changes to ``.py`` files and Markdown files do not count; a merge counts
    only where its content differs from every parent's (``--cc``).
    """
    changes = []  # (commit, path, old blob or None for a merge, new blob)
    sha = None
    for line in _git(repo, "log", "--cc", "--raw", "--no-abbrev", "--no-renames", "--format=@%H", f"{commit}..{rev}",
                     "--", *paths).splitlines():
        if line.startswith("@"):
            sha = line[1:]
        elif line.startswith(":"):
            meta, path = line.split("\t", 1)
            blobs = [f for f in meta.split() if re.fullmatch(r"[0-9a-f]{40}", f)]
            merge = line.startswith("::")
            changes.append((sha, path, None if merge else blobs[0], blobs[-1]))
    code = _code_of(repo, [b for _, path, old, new in changes if old and path.endswith(".py")
                           for b in (old, new) if b != _NO_BLOB])
    out: dict[str, list[str]] = {}
    for sha, path, old, new in changes:
        if _documentation(path):
            counts = False
        elif old is None:
            counts = _merge_changed(repo, sha, path)
        else:
            counts = not (path.endswith(".py") and code.get(old) is not None and code.get(old) == code.get(new))
        if counts:
            out.setdefault(path, []).append(sha)
    return out


def _merge_changed(repo: Path, merge: str, path: str) -> bool:
    """Whether merge commit ``merge`` has content of its own in ``path`` (a hunk of its dense combined diff)."""
    combined = _git(repo, "show", "--cc", "--format=", merge, "--", path)
    return any(line.startswith("@@@") for line in combined.splitlines())


# ------------------------------------------------------------ declarations
def load_declarations(path: Path, repo: Path = REPO_ROOT) -> dict[str, dict[str, Any]]:
    """Reads and validates :data:`DECLARATIONS`: ``{"about", "commits": [{"commit", "paths": [...] | "all",
    "reason"}]}``.

    Returns:
        ``{commit: entry}``; ``{}`` when the file does not exist.

    Raises:
        ValueError: an unknown key, a bad or unknown commit, a duplicate, a path the commit did not touch, or an
            empty reason (named).
    """
    path = Path(path)
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or set(data) - _DECL_KEYS or not isinstance(data.get("commits"), list):
        raise ValueError(f"{path}: expected an object with keys {sorted(_DECL_KEYS)} ('commits' a list), got "
                         f"{sorted(data) if isinstance(data, dict) else type(data).__name__}")
    out: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(data["commits"]):
        where = f"{path}: commits[{i}]"
        if not isinstance(entry, dict) or set(entry) != _ENTRY_KEYS:
            got = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
            raise ValueError(f"{where}: expected exactly the keys {sorted(_ENTRY_KEYS)}, got {got}")
        sha, paths, reason = entry["commit"], entry["paths"], entry["reason"]
        if not isinstance(sha, str) or not _SHA.match(sha):
            raise ValueError(f"{where}: commit {sha!r} is not a full sha (40 lowercase hex digits)")
        if sha in out:
            raise ValueError(f"{where}: commit {sha} is declared twice")
        if not _has_commit(repo, sha):
            raise ValueError(f"{where}: commit {sha} is not in the repository's history")
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"{where}: commit {sha} needs a non-empty 'reason' (why it changes no result)")
        if paths != "all":
            if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and p for p in paths):
                raise ValueError(f"{where}: 'paths' of {sha} must be \"all\" or a non-empty list of repository "
                                 f"paths, got {paths!r}")
            touched = set(_git(repo, "show", "--no-renames", "--name-only", "--format=", sha).split())
            missing = sorted(set(paths) - touched)
            if missing:
                raise ValueError(f"{where}: commit {sha} did not touch {missing}; it touched {sorted(touched)}")
        out[sha] = entry
    return out


def _declared(declarations: Mapping[str, Mapping[str, Any]], sha: str, path: str) -> bool:
    entry = declarations.get(sha)
    return entry is not None and (entry["paths"] == "all" or path in entry["paths"])


# ----------------------------------------------------------------- records
def record_status(repo: Path, commit: Optional[str], rev: str, paths: Sequence[str],
                  declarations: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Whether a record made at ``commit`` is current, stale but declared, stale, or of unknown provenance.

    Returns:
        ``{"status": "current" | "declared" | "stale" | "unknown", "changed": [paths],
        "undeclared": {path: [commits not declared for it]}}``.
    """
    if commit is None or not _has_commit(repo, commit):
        return {"status": "unknown", "changed": [], "undeclared": {}}
    changed = changed_paths(repo, commit, rev, paths)
    undeclared = {}
    touching = commits_touching(repo, commit, rev, changed) if changed else {}
    for path in changed:
        commits = touching.get(path, [])
        late = [c for c in commits if not _declared(declarations, c, path)] or ([] if commits else ["?"])
        if late:
            undeclared[path] = late
    status = "current" if not changed else "stale" if undeclared else "declared"
    return {"status": status, "changed": changed, "undeclared": undeclared}


def table_records(root: Path) -> list[tuple[str, str, Any]]:
    """``(notebook, experiment, record)`` for every record a committed table reads
    (`rlvr_lib.study.papers.NOTEBOOKS`), then the :data:`SUPPORTING` experiments'.
    """
    from rlvr_lib.study.runs import load_runs

    out = []
    for nb in papers.NOTEBOOKS:
        out += [(nb.notebook, nb.folder, r) for r in load_runs(nb.folder, root)]
        for other, name, _ in nb.shared:
            out += [(nb.notebook, other, r) for r in load_runs(other, root, name=name)]
    for experiment, label in SUPPORTING.items():
        out += [(label, experiment, r) for r in load_runs(experiment, root)]
    return out


def stale_records(root: str | Path | None = None, *, repo: str | Path | None = None, rev: str = "HEAD",
                  records: Optional[Sequence[tuple[str, str, Any]]] = None,
                  entries: Optional[Mapping[str, Sequence[str]]] = None, data: Sequence[str] = DATA_PATHS,
                  declarations: str | Path | None = None) -> list[dict[str, Any]]:
    """Checks every record (default :func:`table_records`) against the commit it was made at.

    Returns:
        One dict per record: ``notebook``, ``experiment``, ``run_id``, ``commit``, ``gating`` (a table reads it),
        and :func:`record_status`'s ``status``, ``changed`` and ``undeclared``.

    Raises:
        ValueError: an experiment without entry modules, or an invalid declarations file.
        RuntimeError: git is missing or fails.
    """
    from rlvr_lib.study.runs import results_root

    repo = Path(repo) if repo is not None else REPO_ROOT
    entries = RUN_ENTRIES if entries is None else entries
    records = table_records(results_root(root)) if records is None else records
    declared = load_declarations(repo / DECLARATIONS if declarations is None else Path(declarations), repo)
    paths_of: dict[str, list[str]] = {}
    status_of: dict[tuple, dict[str, Any]] = {}
    rows = []
    for notebook, experiment, record in records:
        if experiment not in entries:
            raise ValueError(f"no entry modules for experiment {experiment!r}; known: {sorted(entries)}")
        if experiment not in paths_of:
            paths_of[experiment] = code_path_files(entries[experiment], repo, rev=rev, data=data)
        key = (record.git_commit, tuple(paths_of[experiment]))
        if key not in status_of:
            status_of[key] = record_status(repo, record.git_commit, rev, paths_of[experiment], declared)
        rows.append({"notebook": notebook, "experiment": experiment, "run_id": record.run_id,
                     "commit": record.git_commit, "gating": experiment not in SUPPORTING, **status_of[key]})
    return rows


# --------------------------------------------------------------------- CLI
def format_report(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per notebook: records, stale, declared and undeclared; then each undeclared group's commits."""
    lines = []
    for notebook in dict.fromkeys(r["notebook"] for r in rows):
        mine = [r for r in rows if r["notebook"] == notebook]
        count = {s: sum(r["status"] == s for r in mine) for s in ("current", "declared", "stale", "unknown")}
        note = "" if mine[0]["gating"] else " (reported, not gating)"
        lines.append(f"{notebook}{note}: {len(mine)} records, {count['current']} current, {count['declared']} "
                     f"changed but declared, {count['stale']} stale undeclared, {count['unknown']} unknown provenance")
        groups: dict[tuple, list[str]] = {}
        for r in mine:
            if r["status"] in ("stale", "unknown"):
                groups.setdefault((r["experiment"], r["commit"], r["status"]), []).append(r["run_id"])
        for (experiment, commit, status), run_ids in groups.items():
            lines.append(f"  {experiment} at {str(commit)[:10]} ({len(run_ids)} records, {status}): "
                         f"{', '.join(run_ids[:4])}{', ...' if len(run_ids) > 4 else ''}")
            undeclared = next(r["undeclared"] for r in mine if r["commit"] == commit and r["experiment"] == experiment)
            for path, commits in sorted(undeclared.items()):
                lines.append(f"    {path}: {' '.join(c[:10] for c in commits)}")
    return lines


def failing(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows that fail the check: a record a table reads, stale without a declaration or of unknown provenance."""
    return [r for r in rows if r["gating"] and r["status"] in ("stale", "unknown")]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m rlvr_lib.study.provenance``: prints the check; 1 when a table reads an undeclared stale record."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None, help="results root (default: this checkout's results/)")
    parser.add_argument("--rev", default="HEAD", help="revision to check the records against (default HEAD)")
    args = parser.parse_args(argv)
    rows = stale_records(args.root, rev=args.rev)
    print("\n".join(format_report(rows)))
    bad = failing(rows)
    print(f"{len({r['run_id'] + r['experiment'] for r in bad})} records read by a table are stale without a "
          f"declaration ({DECLARATIONS})" if bad else "no record read by a table is stale without a declaration")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
