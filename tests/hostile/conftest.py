"""What a test run made on the host, told apart from what other runs on the same machine make.

The hostile suite's host checks look at shared state (``/tmp``, the process table). A second test run on the
same machine (another checkout, another user's `make test`, a training job with code tasks) makes sandbox
working folders and sandbox processes of the same user (nobody) at the same time; these checks count only
what this run made:

* **A per-run temporary folder.** ``pytest_configure`` points ``TMPDIR`` and `tempfile.tempdir` at a folder
  of this run's own (``<pytest's base temp>/rlvr-run-tmp``, or ``rlvr-test-run-<pid>-*`` without pytest's
  tmpdir plugin), for the whole session: every sandbox working folder this run makes with the default root
  (``SandboxConfig(tmp_root=None)``, e.g. ``probe_layers()``) is ``<run folder>/rlvr-sandbox-*``, and
  subprocesses inherit it. A ``/tmp/rlvr-sandbox-*`` folder is therefore never this run's:
  `foreign_sandbox_folder` says so (what that gives up: an escaped program's folder named exactly like a
  working folder, directly in /tmp, is not counted; the cases that write to /tmp use the run's marker, which
  always counts). The hostile programs still target the shared ``/tmp`` itself (``SHARED_TMP``), where the
  canary lives.
* **The run's own process tree.** The fixture `own_run` (an `OwnRun`) makes this process a child subreaper
  (``PR_SET_CHILD_SUBREAPER``) for the test, so a process the sandbox leaves behind, even one that double-forked
  or left its session, is re-parented to this process instead of init and stays in this process's tree; the
  checks read that tree (and the sandbox's process group and session), never every process of a user.

This file is a second module named ``conftest`` next to ``tests/conftest.py``, whose helpers test modules
import with ``from conftest import ...``: pytest's import of this file replaces ``sys.modules["conftest"]``,
so ``pytest_configure`` puts ``tests/conftest.py`` back (tested by ``tests/test_distributed.py`` and the others
that import from it, collected after this folder).
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import stat
import sys
import tempfile
from pathlib import Path

import pytest

SHARED_TMP = "/tmp"
"""The host's shared temporary folder: the hostile programs' target (``/tmp/@MARKER@``) and the canary's home."""

RUN_TMP_NAME = "rlvr-run-tmp"
SANDBOX_FOLDER = re.compile(r"rlvr-sandbox-[A-Za-z0-9_]{8}")
"""The name `rlvr_lib.tasks.sandbox.run_tests` gives a working folder (``tempfile.mkdtemp``'s 8 characters)."""

_PR_SET_CHILD_SUBREAPER = 36
_ROOT_CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"
_saved: dict[str, object] = {}


def _restore_root_conftest(config) -> None:
    """``sys.modules["conftest"]`` is ``tests/conftest.py`` again (see module docstring)."""
    for plugin in config.pluginmanager.get_plugins():
        if getattr(plugin, "__file__", None) and Path(plugin.__file__).resolve() == _ROOT_CONFTEST:
            sys.modules["conftest"] = plugin
            return


@pytest.hookimpl(trylast=True)  # after the tmpdir plugin made config._tmp_path_factory
def pytest_configure(config):
    _restore_root_conftest(config)
    if "tempdir" in _saved:  # configured once per process
        return
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is not None:
        run_tmp = factory.getbasetemp() / RUN_TMP_NAME  # pytest's own base is fixed first, outside the run folder
        run_tmp.mkdir(mode=0o700, exist_ok=True)
        run_tmp = str(run_tmp)
    else:
        run_tmp = tempfile.mkdtemp(prefix=f"rlvr-test-run-{os.getpid()}-")
    _saved.update(tempdir=tempfile.tempdir, TMPDIR=os.environ.get("TMPDIR"), run_tmp=run_tmp)
    tempfile.tempdir = run_tmp
    os.environ["TMPDIR"] = run_tmp


def pytest_unconfigure(config):
    if "tempdir" not in _saved:
        return
    tempfile.tempdir = _saved.pop("tempdir")
    previous = _saved.pop("TMPDIR")
    if previous is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = previous
    _saved.pop("run_tmp")


def foreign_sandbox_folder(path: str) -> bool:
    """Whether ``path`` in `SHARED_TMP` is another run's sandbox working folder: a directory named as
    `run_tests` names one. This run makes none there (its default root is `run_tmp`)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return (os.path.dirname(path) == SHARED_TMP and stat.S_ISDIR(mode)
            and SANDBOX_FOLDER.fullmatch(os.path.basename(path)) is not None)


# --------------------------------------------------------------------------- the run's own processes


def process_table() -> dict[int, tuple[int, int, int, str]]:
    """pid -> (ppid, process group, session, state) of every process, read from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:  # it ended while we looked
                continue
            table[int(entry)] = (int(fields[1]), int(fields[2]), int(fields[3]), fields[0])
    return table


def descendants(root: int, table: dict[int, tuple[int, int, int, str]]) -> set[int]:
    """The pids below ``root`` in ``table`` (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for pid, row in table.items():
        children.setdefault(row[0], []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _set_subreaper(on: bool) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(int(on)), ctypes.c_ulong(0), ctypes.c_ulong(0),
                  ctypes.c_ulong(0)) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


class OwnRun:
    """This run's share of the host for one test: its temporary folder and the processes the test started, by
    this process's tree (this process is a child subreaper meanwhile)."""

    shared_tmp = SHARED_TMP

    def __init__(self):
        self.tmp = _saved.get("run_tmp") or tempfile.gettempdir()
        self.me = os.getpid()
        self.before = descendants(self.me, process_table())

    @staticmethod
    def foreign_sandbox_folder(path: str) -> bool:
        return foreign_sandbox_folder(path)

    def new_processes(self, sandbox_ids=()) -> dict[int, tuple[int, int, int, str]]:
        """pid -> row of every live process started during the test: a descendant of this process that was
        not there before, or a member of the process group or session of one of ``sandbox_ids`` (the
        sandbox's child and judge). Zombies re-parented to this process are reaped first: they ended."""
        self.reap()
        table = process_table()
        ids = {pid for pid in sandbox_ids if pid and pid > 0}
        mine = descendants(self.me, table) - self.before
        return {pid: row for pid, row in table.items()
                if row[3] != "Z" and (pid in mine or {row[1], row[2]} & ids)}

    def reap(self) -> None:
        """Reap the ended processes re-parented to this process (no `subprocess.Popen` owns them)."""
        for pid, row in process_table().items():
            if row[0] == self.me and row[3] == "Z" and pid not in self.before:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass

    def kill_new(self) -> None:
        """SIGKILL what the test left in this process's tree (its checks have already failed on it), then reap."""
        for pid in self.new_processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.reap()


@pytest.fixture
def own_run():
    """An `OwnRun` for the test; this process is a child subreaper until the test ends, when whatever the test
    left in its tree is killed (so a failed test leaves nothing for the next one)."""
    _set_subreaper(True)
    run = OwnRun()
    try:
        yield run
    finally:
        try:
            run.kill_new()
        finally:
            _set_subreaper(False)
