"""Records the hostile suite's outcomes per class; writes `results/hostile/suite.json` (docs/reliability.md's table).

A pytest plugin registered by ``tests/conftest.py`` (``tests/hostile/conftest.py`` holds only the host checks' own-run
fixtures, and puts ``tests/conftest.py`` back as the module ``conftest`` that test modules import from).

Every test under ``tests/hostile/`` belongs to one class, taken from (first that applies):

1. a ``hostile_class`` marker on the test function itself;
2. its module's ``hostile_class`` marker plus the ``kind`` of a ``case`` parameter
   (``code_sandbox_cases.Case``: ``"sandbox"`` + ``"escape"`` -> ``"sandbox escape"``);
3. its module's ``hostile_class`` marker;
4. the module's name (a module without a marker still counts, under its own name).

``@pytest.mark.hostile_class(name, host=True)``: ``host`` says the class's tests also check that the host is
unchanged or nothing is lost (a tree compared before and after, a canary file, a bit-identical resume);
``host=False`` (grading only) renders as "n/a" in that column. The nearest marker's ``host`` counts.

A test is ``passed`` when its setup, call and teardown pass, ``failed`` when any of them fails, ``skipped``
otherwise; ``tried`` is passed + failed (a skipped test ran no input).

Write rule, kept simple so the file always describes one whole run: the JSON is written (atomically) only
when the session collected every ``test_*.py`` module of this folder, deselected none of its tests, and
every collected hostile test reported an outcome (no ``-k``, no single file, no ``-x`` stop, no Ctrl-C).
Otherwise the terminal summary says why nothing was written. Under pytest-xdist nothing is written
(collection happens in the workers). The file records the date, the git commit and whether the worktree had
uncommitted changes outside ``results/``.
"""

from __future__ import annotations

import datetime as _dt
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from rlvr_lib.files import write_json_atomic
from rlvr_lib.study.runs import git_commit

HERE = Path(__file__).resolve().parent / "hostile"
REPO = HERE.parents[1]
SUITE_JSON = REPO / "results" / "hostile" / "suite.json"
MARKER = "hostile_class"


class _Recorder:
    """Collects ``{nodeid: (class, host)}`` at collection and one outcome per test as reports arrive."""

    def __init__(self):
        self.classes: dict[str, tuple[str, bool]] = {}
        self.modules: set[str] = set()
        self.outcomes: dict[str, str] = {}
        self.deselected = 0
        self.started = time.monotonic()
        self.written: Path | None = None
        self.not_written = ""


def _is_hostile(item) -> bool:
    return HERE in Path(str(item.fspath)).resolve().parents


def _classify(item) -> tuple[str, bool]:
    """``(class, host checked)`` of one hostile test (rules in the module docstring)."""
    own = [m for m in item.own_markers if m.name == MARKER]
    module = item.module.pytestmark if hasattr(item.module, "pytestmark") else []
    module = [m for m in (module if isinstance(module, list) else [module]) if m.name == MARKER]
    nearest = (own or module or [None])[0]
    host = bool(nearest.kwargs.get("host", True)) if nearest is not None else True
    if own:
        return str(own[0].args[0]), host
    base = str(module[0].args[0]) if module else item.module.__name__.rsplit(".", 1)[-1]
    case = getattr(item, "callspec", None) and item.callspec.params.get("case")
    kind = getattr(case, "kind", None)
    return (f"{base} {kind}" if kind else base), host


def pytest_configure(config):
    config.addinivalue_line("markers", f"{MARKER}(name, host=True): the hostile-suite class of a test "
                                       "(tests/hostile/conftest.py)")
    if not hasattr(config, "workerinput"):  # an xdist worker: the controller gets the reports
        config.pluginmanager.register(_Recorder(), "hostile_recorder")


def _recorder(config) -> _Recorder | None:
    return config.pluginmanager.get_plugin("hostile_recorder")


def pytest_collection_modifyitems(session, config, items):
    recorder = _recorder(config)
    if recorder is None:
        return
    for item in items:
        if _is_hostile(item):
            recorder.classes[item.nodeid] = _classify(item)
            recorder.modules.add(Path(str(item.fspath)).name)


def pytest_deselected(items):
    for item in items:
        if _is_hostile(item):
            recorder = _recorder(item.config)
            if recorder is not None:
                recorder.deselected += 1


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    recorder = _recorder(item.config)  # a conftest hook sees every test: keep the ones collected from here
    if recorder is None or item.nodeid not in recorder.classes:
        return
    report = outcome.get_result()
    previous = recorder.outcomes.get(item.nodeid)
    if report.failed:
        recorder.outcomes[item.nodeid] = "failed"
    elif report.skipped and previous != "failed":
        recorder.outcomes[item.nodeid] = "skipped"
    elif report.when == "call" and previous is None:
        recorder.outcomes[item.nodeid] = "passed"
    elif report.when == "teardown" and previous is None:  # a skip in setup has no call phase
        recorder.outcomes[item.nodeid] = "passed"


def _worktree_clean() -> bool | None:
    """Whether tracked files outside ``results/`` match the commit; ``None`` without git."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!results"],
                             cwd=REPO, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() == "" if out.returncode == 0 else None


def suite_summary(classes: dict[str, tuple[str, bool]], outcomes: dict[str, str]) -> dict:
    """``{class: {"tried", "passed", "failed", "skipped", "host_checked"}}`` from the per-test records."""
    counts: dict[str, Counter] = {}
    host: dict[str, bool] = {}
    for nodeid, (name, checks_host) in classes.items():
        counts.setdefault(name, Counter())[outcomes.get(nodeid, "missing")] += 1
        host[name] = host.get(name, False) or checks_host
    return {name: {"tried": c["passed"] + c["failed"], "passed": c["passed"], "failed": c["failed"],
                   "skipped": c["skipped"], "host_checked": host[name]} for name, c in sorted(counts.items())}


def pytest_sessionfinish(session, exitstatus):
    recorder = _recorder(session.config)
    if recorder is None or not recorder.classes:
        return
    modules = {p.name for p in HERE.glob("test_*.py")}
    missing = sorted(set(recorder.classes) - set(recorder.outcomes))
    if recorder.modules != modules:
        recorder.not_written = f"only {len(recorder.modules)} of the {len(modules)} hostile modules ran"
    elif recorder.deselected:
        recorder.not_written = f"{recorder.deselected} hostile tests were deselected"
    elif missing:
        recorder.not_written = f"{len(missing)} hostile tests did not run to the end (e.g. {missing[0]})"
    if recorder.not_written:
        return
    write_json_atomic(SUITE_JSON, {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "worktree_clean": _worktree_clean(),
        "duration_s": round(time.monotonic() - recorder.started, 1),
        "command": "pytest tests/hostile",
        "classes": suite_summary(recorder.classes, recorder.outcomes),
    })
    recorder.written = SUITE_JSON


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    recorder = _recorder(config)
    if recorder is None or not recorder.classes:
        return
    if recorder.written is not None:
        terminalreporter.write_line(f"hostile suite: wrote {recorder.written.relative_to(REPO)} "
                                    "(then `python -m rlvr_lib.study report` renders docs/reliability.md's table)")
    else:
        terminalreporter.write_line(f"hostile suite: {SUITE_JSON.relative_to(REPO)} not written: "
                                    f"{recorder.not_written} (it is written only after the whole folder ran)")
