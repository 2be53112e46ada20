"""Tests for rlvr_lib.study.provenance: the stale-record check (issue 35, item 2).

The unit tests build a small git repository in a temporary folder (a package ``rlvr_lib`` with an entry module,
a module it imports inside a function, a presentation module nothing on the path imports, a data file), make a
fake record at its first commit and change things after it. The last test runs the check on this checkout's
committed records: it fails when a record a committed table reads is stale without a declaration.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlvr_lib.study import provenance as prov

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="the stale-record check reads git's history")

ENTRIES = {"exp": ("rlvr_lib.runner",)}
DATA = ("rlvr_lib/data",)


def _git(cwd, *args) -> str:
    out = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args],
                         cwd=cwd, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _write(repo: Path, files: dict[str, str]) -> None:
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)


def _commit(repo: Path, files: dict[str, str], message: str = "change") -> str:
    _write(repo, files)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", message)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path):
    """A repository whose first commit (`_first`) holds the package."""
    _git(tmp_path, "init", "-q")
    first = _commit(tmp_path, {
        "README.md": "a study\n",
        "rlvr_lib/__init__.py": '"""The package."""\n',
        "rlvr_lib/runner.py": '"""Makes runs."""\n\ndef run():\n    from .core import step\n\n    return step(1)\n',
        "rlvr_lib/core.py": '"""The training loop."""\n\n\ndef step(x):\n    return x + 1\n',
        "rlvr_lib/report.py": "from rlvr_lib.runner import run\n\nTABLE = 'rows'\n",
        "rlvr_lib/data/problems.txt": "1+1\n",
    }, "first")
    assert first == _first(tmp_path)
    return tmp_path


def _first(repo: Path) -> str:
    """The repository's first commit (the fake record's)."""
    return _git(repo, "rev-list", "--max-parents=0", "HEAD")


def _check(repo: Path, commit, declarations: Path | None = None) -> dict:
    """The one fake record made at ``commit``, checked against HEAD."""
    record = SimpleNamespace(run_id="grpo-abc-s0", git_commit=commit)
    rows = prov.stale_records(repo=repo, records=[("01_nb", "exp", record)], entries=ENTRIES, data=DATA,
                              declarations=declarations or repo / "no_declarations.json")
    assert len(rows) == 1
    return rows[0]


def _declare(repo: Path, entries: list[dict]) -> Path:
    path = repo / "neutral.json"
    path.write_text(json.dumps({"about": "reviewed", "commits": entries}))
    return path


def test_the_code_path_is_the_import_closure_with_function_level_imports_and_parents(repo):
    files = prov.code_path_files(ENTRIES["exp"], repo, data=DATA)
    assert files == ["rlvr_lib/__init__.py", "rlvr_lib/core.py", "rlvr_lib/data", "rlvr_lib/runner.py"]
    # A presentation module the run's path imports is left out when named in `skip`.
    assert "rlvr_lib/core.py" not in prov.code_path_files(ENTRIES["exp"], repo, data=DATA, skip={"rlvr_lib.core"})
    with pytest.raises(ValueError, match="'rlvr_lib.nowhere'"):
        prov.code_path_files(("rlvr_lib.nowhere",), repo)


def test_a_record_at_head_is_current(repo):
    row = _check(repo, _first(repo))
    assert row["status"] == "current" and row["changed"] == [] and prov.failing([row]) == []


def test_a_code_change_on_a_records_path_makes_the_check_fail_until_declared(repo):
    change = _commit(repo, {"rlvr_lib/core.py": '"""The training loop."""\n\n\ndef step(x):\n    return x + 2\n'})
    row = _check(repo, _first(repo))
    assert row["status"] == "stale"
    assert row["undeclared"] == {"rlvr_lib/core.py": [change]}
    assert prov.failing([row]) == [row]
    neutral = _declare(repo, [{"commit": change, "paths": ["rlvr_lib/core.py"], "reason": "test: declared"}])
    row = _check(repo, _first(repo), neutral)
    assert row["status"] == "declared" and row["changed"] == ["rlvr_lib/core.py"] and prov.failing([row]) == []
    # A later change to the same file is a new undeclared commit.
    later = _commit(repo, {"rlvr_lib/core.py": '"""The training loop."""\n\n\ndef step(x):\n    return x + 3\n'})
    assert _check(repo, _first(repo), neutral)["undeclared"] == {"rlvr_lib/core.py": [later]}


def test_a_change_to_the_data_or_an_entry_module_is_stale(repo):
    change = _commit(repo, {"rlvr_lib/data/problems.txt": "1+2\n"})
    assert _check(repo, _first(repo))["undeclared"] == {"rlvr_lib/data/problems.txt": [change]}


def test_a_change_off_the_path_or_only_in_docstrings_and_comments_is_not_stale(repo):
    _commit(repo, {"README.md": "a study, changed\n", "rlvr_lib/report.py": "TABLE = 'other rows'\n",
                   "rlvr_lib/core.py": '"""The loop, reworded."""\n\ndef step(x):\n    # add one\n    return x + 1\n'})
    assert _check(repo, _first(repo))["status"] == "current"


def test_a_model_card_beside_the_data_is_documentation_not_a_change(repo):
    _commit(repo, {"rlvr_lib/data/README.md": "what the problems are\n"})
    _commit(repo, {"rlvr_lib/data/README.md": "what the problems are, reworded\n"})
    assert _check(repo, _first(repo))["status"] == "current"
    change = _commit(repo, {"rlvr_lib/data/problems.txt": "1+2\n", "rlvr_lib/data/README.md": "again\n"})
    assert _check(repo, _first(repo))["undeclared"] == {"rlvr_lib/data/problems.txt": [change]}


def test_a_rename_on_the_path_is_a_change(repo):
    _git(repo, "mv", "rlvr_lib/core.py", "rlvr_lib/loop.py")
    _commit(repo, {"rlvr_lib/runner.py": "def run():\n    from .loop import step\n\n    return step(1)\n"}, "rename")
    row = _check(repo, _first(repo))
    assert row["status"] == "stale" and row["changed"] == ["rlvr_lib/loop.py", "rlvr_lib/runner.py"]


def test_a_record_without_a_known_commit_has_unknown_provenance_and_fails(repo):
    for commit in (None, "f" * 40):
        row = _check(repo, commit)
        assert row["status"] == "unknown" and prov.failing([row]) == [row]


def test_a_supporting_experiment_is_reported_but_never_fails(repo):
    _commit(repo, {"rlvr_lib/core.py": "def step(x):\n    return x * 2\n"})
    record = SimpleNamespace(run_id="grpo-lr0.1-abc-s1000", git_commit=_first(repo))
    experiment = next(iter(prov.SUPPORTING))
    rows = prov.stale_records(repo=repo, records=[("lr", experiment, record)], entries={experiment: ENTRIES["exp"]},
                              data=DATA, declarations=repo / "none.json")
    assert rows[0]["status"] == "stale" and not rows[0]["gating"] and prov.failing(rows) == []
    assert "reported, not gating" in prov.format_report(rows)[0]


@pytest.mark.parametrize("entry, message", [
    ({"commit": "abc123", "paths": "all", "reason": "r"}, "'abc123' is not a full sha"),
    ({"commit": "A" * 40, "paths": "all", "reason": "r"}, "is not a full sha"),
    ({"commit": "e" * 40, "paths": "all", "reason": "r"}, "e" * 40 + " is not in the repository's history"),
    ({"commit": "FIRST", "paths": "all"}, "expected exactly the keys"),
    ({"commit": "FIRST", "paths": "all", "reason": "r", "by": "me"}, "expected exactly the keys"),
    ({"commit": "FIRST", "paths": "all", "reason": " "}, "non-empty 'reason'"),
    ({"commit": "FIRST", "paths": [], "reason": "r"}, "'paths' of"),
    ({"commit": "FIRST", "paths": ["rlvr_lib/trainer.py"], "reason": "r"}, r"did not touch \['rlvr_lib/trainer.py'\]"),
])
def test_the_declarations_file_is_validated(repo, entry, message):
    entry = {k: (_first(repo) if v == "FIRST" else v) for k, v in entry.items()}
    with pytest.raises(ValueError, match=message):
        prov.load_declarations(_declare(repo, [entry]), repo)


def test_the_declarations_file_refuses_unknown_keys_and_duplicates(repo):
    path = repo / "neutral.json"
    path.write_text(json.dumps({"commits": [], "extra": 1}))
    with pytest.raises(ValueError, match="expected an object with keys"):
        prov.load_declarations(path, repo)
    twice = {"commit": _first(repo), "paths": "all", "reason": "r"}
    with pytest.raises(ValueError, match="declared twice"):
        prov.load_declarations(_declare(repo, [twice, twice]), repo)
    assert prov.load_declarations(repo / "absent.json", repo) == {}


def _diverge(repo, side_files: dict[str, str], main_files: dict[str, str]) -> tuple[str, str]:
    """A commit on a branch ``side`` and one on the current branch after the fork: their shas."""
    base = _git(repo, "rev-parse", "--abbrev-ref", "HEAD")
    _git(repo, "checkout", "-qb", "side")
    side = _commit(repo, side_files)
    _git(repo, "checkout", "-q", base)
    return side, _commit(repo, main_files)


def test_a_merge_counts_only_where_it_resolved_a_conflict(repo):
    side, main = _diverge(repo, {"rlvr_lib/core.py": "def step(x):\n    return x + 1\n\n\ndef other():\n    return 0\n"},
                          {"rlvr_lib/runner.py": "def run():\n    from .core import step\n\n    return step(2)\n"})
    _git(repo, "merge", "-q", "--no-edit", "side")
    row = _check(repo, _first(repo))
    assert row["undeclared"] == {"rlvr_lib/core.py": [side], "rlvr_lib/runner.py": [main]}


def test_a_merge_that_resolves_a_conflict_with_its_own_code_counts(repo):
    side, main = _diverge(repo, {"rlvr_lib/core.py": "def step(x):\n    return x + 2\n"},
                          {"rlvr_lib/core.py": "def step(x):\n    return x + 3\n"})
    subprocess.run(["git", "merge", "-q", "side"], cwd=repo, capture_output=True)  # conflicts
    merge = _commit(repo, {"rlvr_lib/core.py": "def step(x):\n    return x + 4\n"}, "merge, resolved by hand")
    assert sorted(_check(repo, _first(repo))["undeclared"]["rlvr_lib/core.py"]) == sorted([side, main, merge])


def test_git_missing_is_a_clear_error(repo, monkeypatch):
    monkeypatch.setenv("PATH", str(repo / "no-bin"))
    with pytest.raises(RuntimeError, match="needs git on PATH"):
        prov.code_path_files(ENTRIES["exp"], repo, rev="HEAD~0")


def test_no_committed_table_record_is_stale_without_a_declaration():
    # This checkout's committed records against its HEAD: a record a committed table reads (report.SECTIONS) made
    # at a commit since which a file on its code path changed, and no declaration in
    # results/result_neutral_commits.json covers every commit that changed it, fails here (README, "Stale records").
    root = Path(__file__).resolve().parent.parent
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=root, capture_output=True, text=True)
    if shallow.stdout.strip() != "false":
        pytest.skip("needs a git checkout with its whole history")
    rows = prov.stale_records(root / "results", repo=root)
    bad = prov.failing(rows)
    assert not bad, "\n".join(prov.format_report(bad))


def test_every_table_experiment_has_the_entries_of_its_code_path():
    """A table added to the report is checked from its first record: its experiment names where its runs are made."""
    from rlvr_lib.study import papers
    from rlvr_lib.study.report import SECTIONS

    assert {experiment for experiment, *_ in SECTIONS} <= set(prov.RUN_ENTRIES)
    # Read from the manifest: each notebook's folder and each supporting experiment, with the modules it names.
    assert prov.RUN_ENTRIES == {**{nb.folder: nb.entries for nb in papers.NOTEBOOKS},
                                **{s.experiment: s.entries for s in papers.SUPPORTING}}
    assert prov.SUPPORTING == {s.experiment: s.label for s in papers.SUPPORTING}
