"""What changed between an archived and a recomputed notebook: each claims row's old and new verdict, and why.

A recompute moves a notebook's committed records and executed copy to ``results/archive/<archive>/``
(`rlvr_lib.study.staging.promote`) and executes the notebook again on new records. This module reads both executed
copies' claims tables, pairs their rows by id and names each row's *cause* from evidence, never by hand:

* ``regime: ...`` -- the row's regime or premise tag differs between the versions (or its premise's measured status
  on the regime: present, absent, not measured); a row of a version before the tags existed counts as untagged.
* ``protocol: ...`` -- the row now reads an evaluation under its paper's protocol (`rlvr_lib.study.protocols`)
  that the old version's records did not carry: the new records the notebook reads hold the evaluation
  ``protocol-<name>`` (an extra evaluation of a trained arm, or the base policy's ``base-protocol-<name>`` run) and
  the archived ones do not. Which rows read a protocol is the claims module's: its ``PROTOCOL_ROWS`` where it
  declares them, else every row whose registered text names pass@1 (the protocols are the papers' pass@1
  protocols), under `rlvr_lib.study.protocols.claim_protocol` (measurements: the module's one ``PROTOCOL``).
* ``fidelity: <keys>`` -- the configs of the records the row reads changed beyond their evaluation fields
  (``eval``, ``extra_evals``, ``seed``): archived and new records are compared by run name (``record["name"]``)
  and the differing config keys named (``kl_coef``, ``method_options.scheme``, ``policy_sha``: a train key without
  its ``train.`` prefix); run names in only one version are named too. The records a row reads are its pairs'
  arms (the claims module's ``COMPARISONS``); a row no pair names reads every record its notebook reads (its own
  folder and the rows of other notebooks' folders `rlvr_lib.study.papers.Notebook.shared` names), and says so.
* ``none`` -- none of these changed: the verdict moved within noise, or did not move.

A row in one version only is ``added`` or ``removed`` (with the claims module's note on it where it has one). A row
of an old table that carried no ids (notebook 04 before the claims registry) takes the id of the new row with the
same claim text (in today's wording, :data:`REWORDED`), and is listed with no id when no new row has
that text.

Where each executed copy is looked up: :func:`executed_notebooks`. A notebook the archive has no executed copy of,
or whose new execution is not there yet, is listed as not recomputed yet.

``python -m rlvr_lib.study what-changed --archive NAME [--write]`` prints (or writes into ``docs/what-changed.md``,
between its markers) one table per notebook; :func:`render` gives the same text to the report.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from rlvr_lib.study import papers
from rlvr_lib.study.claims.tables import html_tables
from rlvr_lib.study.runs import results_root
from rlvr_lib.validation import check, invalid

__all__ = ["BEGIN", "CAUSES", "END", "ClaimRow", "RowChange", "claims_rows", "compare", "config_keys_changed",
           "executed_notebooks", "main", "notebook_changes", "protocols_read", "render", "row_protocols",
           "write_page"]

BEGIN, END = "<!-- what-changed:begin {archive} -->", "<!-- what-changed:end {archive} -->"
"""The markers of one archive's rendered part of ``docs/what-changed.md`` (``{archive}``: its name); a page holds one
part per archive compared, the latest first."""

CAUSES = ("regime", "protocol", "fidelity", "none", "added", "removed")
"""The kinds of cause a row can have (the text before ``:`` of each listed cause)."""

PAGE = Path("docs") / "what-changed.md"
"""The page, relative to the repository root."""

EVAL_FIELDS = ("eval", "extra_evals", "seed", "train.seed")
"""Config fields a fidelity comparison leaves out: the evaluations a record carries (the protocol cause reads them)
and the seed (records are compared by run name, over their seeds)."""

_PROTOCOL_LABEL = re.compile(r"^(?:base-)?protocol-([A-Za-z0-9_]+)$")
_BULLET = re.compile(r"^- \*\*(?P<verdict>[^*]+)\*\*[^:]*?: (?P<claim>.+?) (?:\((?P<source>[^()]+)\) )?-- ours ")
_OLD_VERDICT = {"True": "holds", "False": "does not hold"}
_INTRO = """# What changed: archived claims tables against the recomputed ones

Each notebook's claims rows, as its archived executed copy and its recomputed one state them, paired by row id:
the old and the new verdict and the cause of the difference, read from the notebooks and their records by
`rlvr_lib.study.what_changed` (its docstring gives the rules: `regime`, `protocol`, `fidelity`, `none`; `added`
and `removed` for rows of one version only). Rendered by `python -m rlvr_lib.study what-changed --archive NAME
--write`; do not edit between the markers.

"""


@dataclasses.dataclass(frozen=True)
class ClaimRow:
    """One row of an executed notebook's claims (or measurements) table.

    Attributes:
        id: The row's id (None in a table that carried none).
        claim: The claim (or measurement) in words.
        kind: ``"claim"`` or ``"measurement"``.
        source: The paper (``"-"`` for a measurement or a table without the column).
        paper: Where the paper states it (``"-"`` where not shown).
        verdict: The row's verdict as the table states it.
        ours: Our interval, as shown.
        regime: The regime the row is measured on (None before rows carried it).
        premise: The premise column as shown (``"discovery -- absent: ..."``; None before rows carried it).
    """

    id: Optional[str]
    claim: str
    kind: str
    source: str
    paper: str
    verdict: str
    ours: str
    regime: Optional[str] = None
    premise: Optional[str] = None

    @property
    def premise_tag(self) -> Optional[str]:
        """The premise the row needs (``"discovery"``, ``"retention"``, ``"none"``), without its measurement."""
        return None if self.premise is None else self.premise.split(" -- ")[0].strip()

    @property
    def premise_status(self) -> Optional[str]:
        """``"present"``, ``"absent"`` or ``"not measured"`` as the premise column states it; None without one."""
        if self.premise is None or " -- " not in self.premise:
            return None
        said = self.premise.split(" -- ", 1)[1]
        for status in ("present", "absent", "premise not measured"):
            if said.startswith(status):
                return status.replace("premise ", "")
        return None


@dataclasses.dataclass(frozen=True)
class RowChange:
    """One output row: a claims row in either version, its two verdicts and its causes."""

    id: Optional[str]
    claim: str
    old_verdict: Optional[str]
    new_verdict: Optional[str]
    causes: tuple[str, ...]
    matched_by: str = "id"

    @property
    def status(self) -> str:
        """``"added"``, ``"removed"`` or ``"kept"``."""
        return "added" if self.old_verdict is None else "removed" if self.new_verdict is None else "kept"


def _load_notebook(path: Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise invalid("notebook", str(path), "an executed notebook (.ipynb) that exists")
    try:
        nb = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise invalid("notebook", str(path), f"a readable .ipynb JSON file ({e})") from None
    check(isinstance(nb, dict) and isinstance(nb.get("cells"), list), "notebook", str(path),
          "a notebook JSON object with a 'cells' list")
    return nb


def _rows_of(header: list[str], body: list[list[str]], where: str) -> list[ClaimRow]:
    """The claim rows of one HTML table (header without the index cell), or [] when it is not a claims table."""
    cols = header[1:] if header and header[0] == "" else header
    kind = "claim" if "claim" in cols else "measurement" if "measurement" in cols else None
    if kind is None or not ("verdict" in cols or "holds" in cols):
        return []
    rows = []
    for cells in body:
        values = cells[1:] if len(cells) == len(cols) + 1 else cells
        check(len(values) == len(cols), where, f"a row of {len(values)} cells",
              f"{len(cols)} cells, one per column {cols}")
        if all(v == "..." for v in values):
            raise ValueError(f"{where}: the table's display is truncated (a row of '...'); must show every row")
        row = dict(zip(cols, values))
        if "verdict" in row:
            verdict = row["verdict"]
        else:  # the table before the claims registry: holds True / False and the point estimate's side
            verdict = ("holds" if row["holds"] == "True" else
                       "not resolved" if row.get("point_side") == "True" else "does not hold")
        rows.append(ClaimRow(id=row.get("id") or None, claim=row[kind], kind=kind, source=row.get("source", "-"),
                             paper=row.get("paper", "-"), verdict=verdict, ours=row.get("ours", "-"),
                             regime=row.get("regime") or None, premise=row.get("premise") or None))
    return rows


def claims_rows(path: str | Path) -> list[ClaimRow]:
    """Every claims and measurements row of an executed notebook's tables (their HTML outputs), in order.

    A table without ids takes each row's verdict from the notebook's bullets (``- **verdict**: claim -- ours ...``)
    where one states that claim, else from its ``holds`` and ``point_side`` columns.

    Raises:
        ValueError: a path that is not an executed notebook, a truncated table, a notebook without a claims table,
            or an id twice.
    """
    path = Path(path)
    nb = _load_notebook(path)
    rows: list[ClaimRow] = []
    bullets: dict[str, str] = {}
    for c, cell in enumerate(nb["cells"]):
        for o in cell.get("outputs", []) or []:
            data = o.get("data", {}) or {}
            md = "".join(data.get("text/markdown", ""))
            for line in md.splitlines():
                m = _BULLET.match(line)
                if m:
                    bullets.setdefault(m.group("claim"), m.group("verdict"))
            html = "".join(data.get("text/html", ""))
            if "<table" not in html:
                continue
            for t, table in enumerate(html_tables(html)):
                table = [[" ".join(cell.split()) for cell in row] for row in table]
                if table:
                    rows += _rows_of(table[0], table[1:], f"{path} cell {c} table {t}")
    if not rows:
        raise invalid("notebook", str(path), "an executed notebook with a claims table (a table with a 'claim' or "
                      "'measurement' column and a 'verdict' one); run it first")
    rows = [dataclasses.replace(r, verdict=bullets.get(r.claim, r.verdict)) if r.id is None else r for r in rows]
    ids = [r.id for r in rows if r.id is not None]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    check(not dup, f"{path}: row ids", dup, "each id once over the notebook's claims and measurements tables")
    return rows


# --- evidence: the records a notebook reads -------------------------------------------------------------------


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: None if isinstance(value, Mapping) else value}


def _config_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """A record's config, flattened to dotted keys, without :data:`EVAL_FIELDS`; ``train.`` keys without it."""
    flat = _flatten(config)
    out = {}
    for key, v in flat.items():
        if any(key == f or key.startswith(f + ".") for f in EVAL_FIELDS):
            continue
        out[key[len("train."):] if key.startswith("train.") else key] = v
    return out


def config_keys_changed(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> list[str]:
    """The config keys (:func:`_config_fields`) in which any of ``old`` differs from any of ``new`` (one run name's
    configs over its seeds), sorted; a key that differs only because a key below it does is left out."""
    keys: set[str] = set()
    old_f, new_f = [_config_fields(c) for c in old], [_config_fields(c) for c in new]
    for a in old_f:
        for b in new_f:
            keys |= {k for k in set(a) | set(b) if a.get(k, "<absent>") != b.get(k, "<absent>")}
    return sorted(k for k in keys if not any(o != k and o.startswith(k + ".") for o in keys))


def _records(folder: Path) -> list[dict]:
    out = []
    for p in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            rec = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and isinstance(rec.get("config"), dict) and "name" in rec:
            out.append(rec)
    return out


@dataclasses.dataclass
class _Evidence:
    """A notebook's records in both versions: per folder, per run name, the records."""

    old: dict[str, dict[str, list[dict]]]
    new: dict[str, dict[str, list[dict]]]
    missing: list[str]  # folders the archive does not hold where the notebook's own was moved

    def commits(self, which: str) -> list[str]:
        recs = [r for names in getattr(self, which).values() for rs in names.values() for r in rs]
        return sorted({str(r.get("git_commit"))[:10] for r in recs if r.get("git_commit")})

    def runs(self, which: str, wanted: Optional[Iterable[tuple[str, str]]] = None) -> dict[tuple[str, str], list]:
        side = getattr(self, which)
        out = {}
        for folder, names in side.items():
            for name, recs in names.items():
                out[folder, name] = recs
        if wanted is None:
            return out
        wanted = list(wanted)
        return {k: v for k, v in out.items()
                if any(k[0] == f and (k[1] == n or k[1].startswith(n + "@")) for f, n in wanted)}


def _group(records: Iterable[dict], names: Optional[set[str]] = None) -> dict[str, list[dict]]:
    """Records by run name; ``names``: the names kept (one ending in ``@`` keeps every name it starts)."""
    out: dict[str, list[dict]] = {}
    for r in records:
        if names is None or r["name"] in names or any(n.endswith("@") and r["name"].startswith(n) for n in names):
            out.setdefault(r["name"], []).append(r)
    return out


def _evidence(nb: papers.Notebook, root: Path, shelf: Path) -> _Evidence:
    """The records ``nb`` reads: its own folder (archived vs current) and the shared runs of other folders."""
    wanted: dict[str, Optional[set[str]]] = {nb.folder: None}
    arms = {pair for pairs in _row_arms(nb).values() for pair in pairs}
    for experiment, name in (*((e, n) for e, n, _ in nb.shared), *arms):
        if experiment != nb.folder:
            current = wanted.setdefault(experiment, set())
            if current is not None:
                current.add(name)
    old, new, missing = {}, {}, []
    for folder, names in wanted.items():  # an arm's label may carry its lr ("<label>@<comparator>-lr")
        names = None if names is None else {n for n in names} | {f"{n}@" for n in names}
        archived = shelf / folder
        if not archived.is_dir():
            if folder == nb.folder:
                missing.append(folder)
                continue
            archived = root / folder  # not moved: the notebook read the same records before and now
        old[folder] = _group(_records(archived), names)
        new[folder] = _group(_records(root / folder), names)
    return _Evidence(old, new, missing)


def _protocol_labels(runs: Mapping[tuple[str, str], list[dict]]) -> set[str]:
    """The protocols (names) whose evaluations ``runs`` carry: extra evaluations and base-policy protocol runs."""
    found = set()
    for (_, name), recs in runs.items():
        labels = [name]
        for r in recs:
            labels += list((r["config"].get("extra_evals") or {}))
            labels += list(((r.get("extra") or {}).get("evals") or {}))
        for label in labels:
            m = _PROTOCOL_LABEL.match(str(label))
            if m:
                found.add(m.group(1))
    return found


def protocols_read(evidence: _Evidence) -> set[str]:
    """The protocols the new records carry an evaluation under and the archived ones do not."""
    return _protocol_labels(evidence.runs("new")) - _protocol_labels(evidence.runs("old"))


# --- which rows read what: the claims modules --------------------------------------------------------------------


def _module(nb: papers.Notebook):
    try:
        return importlib.import_module(f"rlvr_lib.study.claims.{nb.claims}")
    except ImportError:
        return None


def row_protocols(nb: papers.Notebook) -> dict[str, str]:
    """``{row id: protocol name}`` of the rows of ``nb``'s claims module that are read under a paper's protocol.

    Its ``PROTOCOL_ROWS`` where declared; else every claim whose registered text names pass@1, under
    `rlvr_lib.study.protocols.claim_protocol`, and every measurement naming pass@1 under the module's ``PROTOCOL``
    when that is one protocol (measurements have no source paper).
    """
    from rlvr_lib.study.protocols import BY_SOURCE, claim_protocol

    mod = _module(nb)
    reg = getattr(mod, "REGISTRY", None)
    if mod is None or reg is None or not hasattr(mod, "PROTOCOL"):
        return {}
    if hasattr(mod, "PROTOCOL_ROWS"):
        return {rid: claim_protocol(nb.claims, rid).name for rid in mod.PROTOCOL_ROWS}
    out = {c.id: claim_protocol(nb.claims, c.id).name for c in reg.claims if "pass@1" in c.text}
    if mod.PROTOCOL != BY_SOURCE:
        out.update({m.id: mod.PROTOCOL for m in reg.measurements if "pass@1" in m.text})
    return out


def _row_arms(nb: papers.Notebook) -> dict[str, list[tuple[str, str]]]:
    """``{row id: [(folder, run name), ...]}`` of the arms each row's pairs compare (the module's COMPARISONS)."""
    mod = _module(nb)
    out: dict[str, list[tuple[str, str]]] = {}
    for pair in (getattr(mod, "COMPARISONS", {}) or {}).values():
        arms = []
        for arm in (pair.method, pair.comparator):
            folder = f"{arm.experiment}_full" if arm.experiment else nb.folder
            arms.append((folder, arm.run_label))
        for rid in pair.claims:
            out.setdefault(rid, []).extend(arms)
    return out


def _row_note(nb: papers.Notebook, rid: Optional[str], claim: str, what: str) -> str:
    """The claims module's note on an added row (its ``changed``) or a removed one (``Registry.removed``, or a
    current row's note naming its id); empty when it has none."""
    reg = getattr(_module(nb), "REGISTRY", None)
    if reg is None:
        return ""
    rows = (*reg.claims, *reg.measurements)
    if what == "added":
        note = next((r.changed for r in rows if r.id == rid and r.changed), "")
        return note
    for text, why in reg.removed:
        if text == claim:
            return why
    if rid:
        return next((r.changed for r in rows if r.changed and f"'{rid}'" in r.changed), "")
    return ""


def _fidelity(evidence: _Evidence, wanted: Optional[list[tuple[str, str]]]) -> Optional[str]:
    old, new = evidence.runs("old", wanted), evidence.runs("new", wanted)
    keys: set[str] = set()
    for key in set(old) & set(new):
        keys.update(config_keys_changed([r["config"] for r in old[key]], [r["config"] for r in new[key]]))
    only_new = sorted(n for (_, n) in set(new) - set(old))
    only_old = sorted(n for (_, n) in set(old) - set(new))
    parts = []
    if keys:
        parts.append(", ".join(f"`{k}`" for k in sorted(keys)))
    if only_new:
        parts.append("new runs " + ", ".join(f"`{n}`" for n in only_new))
    if only_old:
        parts.append("runs gone " + ", ".join(f"`{n}`" for n in only_old))
    if not parts:
        return None
    scope = "" if wanted is not None else " (every record the notebook reads)"
    return f"fidelity: {'; '.join(parts)}{scope}"


def _regime(old: ClaimRow, new: ClaimRow) -> list[str]:
    if old.regime is None and new.regime is not None:
        return [f"regime: tagged {new.regime}, premise {new.premise_tag} (the old row had no regime tag)"]
    out = []
    if old.regime != new.regime:
        out.append(f"regime: {old.regime} -> {new.regime}")
    if old.premise_tag != new.premise_tag:
        out.append(f"regime: premise {old.premise_tag} -> {new.premise_tag}")
    elif old.premise_status != new.premise_status and new.premise_tag not in (None, "none"):
        out.append(f"regime: premise {new.premise_tag} {old.premise_status or 'not stated'} -> "
                   f"{new.premise_status or 'not stated'}")
    return out


REWORDED = (("numbers not restated in PAPERS.md", "numbers not restated from the paper"),
            ("not restated in PAPERS.md", "not restated from the paper"),
            ("no number in PAPERS.md", "no number restated from the paper"))
"""Wording changed in claims text since an archive was executed, ``(old, new)``: the rows' claims are the same (the
workspace's ``PAPERS.md``, which the old wording names, is not part of the repository)."""


def _reworded(claim: str) -> str:
    """``claim`` in today's wording (:data:`REWORDED`), for pairing an id-less archived row by its text."""
    for old, new in REWORDED:
        claim = claim.replace(old, new)
    return claim


def compare(old: Sequence[ClaimRow], new: Sequence[ClaimRow], nb: Optional[papers.Notebook] = None,
            evidence: Optional[_Evidence] = None) -> list[RowChange]:
    """One :class:`RowChange` per row id of either version (new rows in order, then the removed ones).

    ``nb`` and ``evidence`` (the records it reads, both versions) give the protocol and fidelity causes; without
    them only the regime cause is read. A row without an id takes the id of the other version's row with the same
    claim text when exactly one has it.
    """
    def keyed(rows: Sequence[ClaimRow], other: Sequence[ClaimRow]) -> list[tuple[str, ClaimRow, str]]:
        out = []
        for i, r in enumerate(rows):
            if r.id is not None:
                out.append((r.id, r, "id"))
                continue
            same = [o.id for o in other if o.id is not None and _reworded(o.claim) == _reworded(r.claim)]
            out.append((same[0], r, "claim text") if len(same) == 1 else (f"#text:{r.claim}", r, "none"))
        return out

    old_k, new_k = keyed(old, new), keyed(new, old)
    olds = {}
    for key, row, how in old_k:
        check(key not in olds, "archived rows: id", key, "each id once (rows matched by claim text included)")
        olds[key] = (row, how)
    news = {}
    for key, row, how in new_k:
        check(key not in news, "new rows: id", key, "each id once (rows matched by claim text included)")
        news[key] = (row, how)
    protocols = protocols_read(evidence) if evidence is not None else set()
    reads = row_protocols(nb) if nb is not None and protocols else {}
    arms = _row_arms(nb) if nb is not None and evidence is not None else {}
    whole = _fidelity(evidence, None) if evidence is not None and not evidence.missing else None
    out = []
    for key, (row, how) in news.items():
        rid = None if key.startswith("#text:") else key
        if key not in olds:
            note = _row_note(nb, rid, row.claim, "added") if nb is not None else ""
            out.append(RowChange(rid, row.claim, None, row.verdict, ("added",) + ((note,) if note else ()), how))
            continue
        prev, how_old = olds[key]
        causes = _regime(prev, row)
        if rid is not None and reads.get(rid) in protocols:
            from rlvr_lib.study.protocols import PROTOCOLS

            causes.append(f"protocol: {PROTOCOLS[reads[rid]].describe()}")
        if evidence is not None:
            if evidence.missing:
                causes.append(f"fidelity: not compared (the archive holds no {', '.join(evidence.missing)})")
            else:
                wanted = arms.get(rid) if rid is not None else None
                found = wanted and (evidence.runs("old", wanted) or evidence.runs("new", wanted))
                fid = _fidelity(evidence, wanted) if found else whole
                if fid:
                    causes.append(fid)
        matched = "claim text" if "claim text" in (how, how_old) else "id"
        out.append(RowChange(rid, row.claim, prev.verdict, row.verdict, tuple(causes) or ("none",), matched))
    for key, (row, how) in olds.items():
        if key not in news:
            rid = None if key.startswith("#text:") else key
            note = _row_note(nb, rid, row.claim, "removed") if nb is not None else ""
            out.append(RowChange(rid, row.claim, row.verdict, None, ("removed",) + ((note,) if note else ()), how))
    covered = {c.id if c.id is not None else f"#text:{c.claim}" for c in out}
    check(covered == set(olds) | set(news), "what-changed rows", sorted(covered ^ (set(olds) | set(news))),
          "every row of both versions once")
    return out


# --- notebooks and the page ---------------------------------------------------------------------------------------


def _archive(root: Path, archive: str) -> Path:
    check(isinstance(archive, str) and archive and "/" not in archive and archive not in (".", ".."), "archive",
          archive, "a folder name under results/archive/")
    shelf = root / "archive" / archive
    if not shelf.is_dir():
        present = sorted(p.name for p in (root / "archive").glob("*") if p.is_dir())
        raise invalid("archive", archive, f"an archive under {root / 'archive'} (present: {present or 'none'})")
    return shelf


def _profile(path: Path) -> Optional[str]:
    try:
        return ((_load_notebook(path).get("metadata") or {}).get("papermill") or {}).get("parameters", {}).get("profile")
    except ValueError:
        return None


def executed_notebooks(stem: str, archive: str, root: str | Path | None = None,
                       notebooks: str | Path | None = None) -> tuple[Optional[Path], Optional[Path]]:
    """``(archived executed copy, new executed copy)`` of notebook ``stem``, each None when not there.

    Archived: ``archive/<archive>/notebooks/full/<stem>.ipynb``, then ``archive/<archive>/notebooks/<stem>.ipynb``.
    New: ``<notebooks>/<stem>.ipynb`` when papermill executed it at the full profile (``notebooks`` defaults to the
    ``notebooks/`` beside the results root), else ``<root>/notebooks/full/<stem>.ipynb``. A new copy identical to
    the archived one (archived by copying, not executed again yet) is None.

    Raises:
        ValueError: on an archive that does not exist.
    """
    root = results_root(root)
    shelf = _archive(root, archive)
    notebooks = Path(notebooks) if notebooks is not None else root.parent / "notebooks"
    old = next((p for p in (shelf / "notebooks" / "full" / f"{stem}.ipynb", shelf / "notebooks" / f"{stem}.ipynb")
                if p.is_file()), None)
    new: Optional[Path] = notebooks / f"{stem}.ipynb"
    if not (new.is_file() and _profile(new) == "full"):
        new = root / "notebooks" / "full" / f"{stem}.ipynb"
        new = new if new.is_file() else None
    if old is not None and new is not None and old.read_bytes() == new.read_bytes():
        new = None
    return old, new


def notebook_changes(stem: str, archive: str, root: str | Path | None = None,
                     notebooks: str | Path | None = None) -> Optional[dict]:
    """The comparison of one notebook: ``{"notebook", "old", "new", "rows", "old_commits", "new_commits"}``, or
    None when it is not recomputed yet (no archived copy, or no new execution).

    Raises:
        ValueError: on an unknown notebook, a missing archive, or an executed copy without a claims table.
    """
    root = results_root(root)
    nb = papers.notebook(stem)
    old, new = executed_notebooks(nb.notebook, archive, root, notebooks)
    if old is None or new is None:
        return None
    evidence = _evidence(nb, root, _archive(root, archive))
    rows = compare(claims_rows(old), claims_rows(new), nb, evidence)
    return {"notebook": nb.notebook, "title": nb.title, "old": old, "new": new, "rows": rows,
            "old_commits": evidence.commits("old"), "new_commits": evidence.commits("new")}


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _short(text: str, width: int = 90) -> str:
    return text if len(text) <= width else text[: width - 3].rstrip() + "..."


def _rel(path: Path, root: Path) -> str:
    for base in (root.parent, root):
        try:
            return str(path.relative_to(base))
        except ValueError:
            continue
    return str(path)


def render(archive: str, root: str | Path | None = None, notebooks: str | Path | None = None) -> str:
    """The Markdown of every notebook's what-changed table against ``archive`` (the text between the markers).

    Raises:
        ValueError: on a missing archive or an executed copy without a claims table.
    """
    root = results_root(root)
    shelf = _archive(root, archive)
    lines = [f"## Against the archive `{archive}`", "",
             f"Compared: the archive `{_rel(shelf, root)}` (the previous executed notebooks and the records they "
             "read) against the executed notebooks and records committed now. Per notebook, the commits the records "
             "of each version were made at.", ""]
    pending = []
    for nb in papers.NOTEBOOKS:
        found = notebook_changes(nb.notebook, archive, root, notebooks)
        if found is None:
            old, new = executed_notebooks(nb.notebook, archive, root, notebooks)
            why = "no archived executed copy" if old is None else "the new execution is not there yet"
            pending.append(f"- `{nb.notebook}` ({nb.title}): not recomputed yet ({why})")
            continue
        rows = found["rows"]
        moved = sum(r.status == "kept" and r.old_verdict != r.new_verdict for r in rows)
        added = sum(r.status == "added" for r in rows)
        removed = sum(r.status == "removed" for r in rows)
        lines += [f"### {nb.notebook} ({nb.title})", "",
                  f"Old: `{_rel(found['old'], root)}`, records at {', '.join(f'`{c}`' for c in found['old_commits']) or 'none'}; "
                  f"new: `{_rel(found['new'], root)}`, records at {', '.join(f'`{c}`' for c in found['new_commits']) or 'none'}. "
                  f"{len(rows)} rows: {moved} verdicts moved, {added} added, {removed} removed"
                  + (f", {sum(r.matched_by == 'claim text' for r in rows)} paired by claim text (the old table "
                     "carried no ids)" if any(r.matched_by == "claim text" for r in rows) else "") + ".", "",
                  "| id | claim | old verdict | new verdict | cause |", "|---|---|---|---|---|"]
        for r in rows:
            lines.append("| " + " | ".join(_cell(v) for v in (
                f"`{r.id}`" if r.id else "(no id)", _short(r.claim), r.old_verdict or "-", r.new_verdict or "-",
                "; ".join(r.causes))) + " |")
        lines.append("")
    if pending:
        lines += ["### Not recomputed yet", "", *pending, ""]
    return "\n".join(lines).rstrip() + "\n"


def write_page(archive: str, root: str | Path | None = None, page: str | Path | None = None,
               notebooks: str | Path | None = None) -> bool:
    """Write :func:`render` between ``archive``'s markers of ``page`` (default ``docs/what-changed.md`` beside the
    results root): replaced where the page has them, else inserted before the other archives' parts (the page is
    created with its introduction when missing). Returns whether the file changed.

    Raises:
        ValueError: on a missing archive, or a page whose markers of ``archive`` are not one pair in order.
    """
    root = results_root(root)
    page = Path(page) if page is not None else root.parent / PAGE
    body = render(archive, root, notebooks)
    begin, end = BEGIN.format(archive=archive), END.format(archive=archive)
    text = page.read_text() if page.is_file() else _INTRO
    block = f"{begin}\n{body}{end}"
    if begin in text or end in text:
        check(text.count(begin) == 1 and text.count(end) == 1 and text.index(begin) < text.index(end), "page",
              str(page), f"a page with one {begin} marker followed by one {end} marker")
        head, rest = text.split(begin)
        updated = f"{head}{block}{rest.split(end, 1)[1]}"
    else:
        first = text.find(BEGIN.split("{")[0])
        updated = (text.rstrip("\n") + "\n\n" + block + "\n" if first < 0
                   else f"{text[:first]}{block}\n\n{text[first:]}")
    if updated == text:
        return False
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(updated)
    return True


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m rlvr_lib.study.what_changed --archive NAME [--write]``."""
    from rlvr_lib.cli_checks import OneLineParser

    parser = OneLineParser(prog="python -m rlvr_lib.study what-changed", description=__doc__.splitlines()[0])
    parser.add_argument("--archive", required=True, help="the archive's name under results/archive/")
    parser.add_argument("--root", default=None, help="results root (default: this checkout's results/)")
    parser.add_argument("--notebooks", default=None,
                        help="folder of the executed notebooks when not under <root>/notebooks/full (default: "
                             "notebooks/ beside the results root)")
    parser.add_argument("--write", action="store_true", help=f"write the tables into {PAGE} between its markers")
    parser.add_argument("--page", default=None, help=f"the page --write writes (default: {PAGE})")
    args = parser.parse_args(argv)
    try:
        if args.write:
            changed = write_page(args.archive, args.root, args.page, args.notebooks)
            print(f"{args.page or PAGE} {'updated' if changed else 'already up to date'}")
        else:
            print(render(args.archive, args.root, args.notebooks), end="")
    except ValueError as err:
        parser.error(str(err))
    return 0


if __name__ == "__main__":
    sys.exit(main())
