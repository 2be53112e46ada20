"""Hostile programs (``code_sandbox_cases.py``) against `CodeTask`: the verdict, the host, the time.

For each case: the reward is 0 with the expected sandbox status, the canary file (root-owned, 0644, with an
extended attribute, in a 0755 folder any user can reach) keeps its mode, owner, timestamps, xattrs and content,
nothing new is in its folder or in /tmp (by the run's marker, or owned by the sandbox's user and not another
run's sandbox working folder), no process of either child's group or session and no new process of this
process's tree (a child subreaper during the test, so escaped processes stay in it) is left, the sandbox root
is empty, and the run stays under a time bound. The checks count only what this run made (``conftest.py``,
`OwnRun`): another test run on the same machine passes them too (``test_two_runs_at_once_both_pass``).

The metadata cases also run with one layer at a time (the uid drop, seccomp, the audit hook), each alone
stopping them; a control run with every layer off shows that the same program does change the canary, so the
canary check is real.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import stat
import subprocess
import sys
import tempfile
import time

import pytest

from rlvr_lib.tasks import CodeTask
from rlvr_lib.tasks.code_task import code_problem
from rlvr_lib.tasks.sandbox import UNPRIVILEGED_UID, SandboxConfig, probe_layers, wait_for_removals

from code_sandbox_cases import CASES, RIGHT, TESTS, WRONG

pytestmark = pytest.mark.hostile_class("sandbox", host=True)  # + each case's kind

LIMITS = dict(wall_s=3.0, cpu_s=1, memory_mb=256, max_output_bytes=1 << 15)
TIME_BOUND_S = LIMITS["wall_s"] + 10  # startup and cleanup on a loaded 2-core machine
REMOVAL_WAIT_S = 120  # the longest a host check waits for a working directory removed out of band
PROBLEM = code_problem({"prompt": "def add(a, b):\n", "entry_point": "add", "task_id": "hostile/add",
                        "tests": list(TESTS)})
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


class Host:
    """The canary, the listener, and the snapshots the checks compare with."""

    def __init__(self, tmp_path, run):
        self.run = run  # conftest.OwnRun: this run's processes; /tmp is run.shared_tmp
        self.root = tmp_path / "sandboxes"
        self.root.mkdir()
        self.dir = tempfile.mkdtemp(prefix="rlvr-canary-", dir=run.shared_tmp)  # reachable by any user
        os.chmod(self.dir, 0o755)
        self.canary = os.path.join(self.dir, "canary.txt")
        with open(self.canary, "w") as handle:
            handle.write("canary")
        os.chmod(self.canary, 0o644)
        try:
            os.setxattr(self.canary, "user.rlvr", b"canary")
        except OSError:  # a file system without user xattrs: the xattr checks then compare empty lists
            pass
        os.utime(self.canary, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
        self.marker = f"rlvr-hostile-{os.getpid()}-{time.monotonic_ns()}"
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.listener.setblocking(False)
        self.state = self.snapshot()
        self.tmp = set(os.listdir(run.shared_tmp))

    def close(self):
        self.listener.close()
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)

    def program(self, case):
        return (case.program.replace("@CANARY@", self.canary).replace("@DIR@", self.dir)
                .replace("@PORT@", str(self.listener.getsockname()[1])).replace("@MARKER@", self.marker))

    def snapshot(self):
        info = os.lstat(self.canary) if os.path.lexists(self.canary) else None
        xattrs = {n: os.getxattr(self.canary, n) for n in os.listxattr(self.canary)} if info else None
        content = open(self.canary).read() if info else None
        folder = os.stat(self.dir)
        return {"canary": None if info is None else (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid,
                                                     info.st_mtime_ns, info.st_ctime_ns, info.st_nlink),
                "xattrs": xattrs, "content": content, "listing": sorted(os.listdir(self.dir)),
                "folder": (stat.S_IMODE(folder.st_mode), folder.st_uid, folder.st_mtime_ns)}

    def changes(self, result):
        """What the run changed on the host (empty when nothing)."""
        found = [f"{key}: {before!r} -> {after!r}" for (key, before), after in
                 zip(self.state.items(), self.snapshot().values()) if before != after]
        new_tmp = set(os.listdir(self.run.shared_tmp)) - self.tmp
        for name in new_tmp:
            path = os.path.join(self.run.shared_tmp, name)
            try:
                owner = os.lstat(path).st_uid
            except OSError:
                continue
            # another run's working folder is the sandbox user's too; this run puts its own under run.tmp
            if self.marker in name or (owner == UNPRIVILEGED_UID and not self.run.foreign_sandbox_folder(path)):
                found.append(f"{path} was left behind")
        # A tree too deep to remove in the time limit (deep_tree) is removed out of band: wait for that first.
        if not wait_for_removals(REMOVAL_WAIT_S):
            found.append(f"the working directory's out-of-band removal did not finish in {REMOVAL_WAIT_S} s")
        elif os.listdir(self.root) or (result.workdir and os.path.exists(result.workdir)):
            found.append("a working directory was left behind")
        ids = (result.pid, result.judge_pid)
        for pid, (_, group, session, _) in self.run.new_processes(ids).items():
            if {group, session} & set(ids):
                found.append(f"process {pid} of the sandbox survived")
            else:
                found.append(f"process {pid} started in this test survived")
        try:
            self.listener.accept()[0].close()
            found.append("something connected to the listener")
        except BlockingIOError:
            pass
        return found

    def restore(self):
        for name in os.listdir(self.dir):
            if name != "canary.txt":
                os.unlink(os.path.join(self.dir, name))
        os.chmod(self.dir, 0o755)
        os.chown(self.canary, 0, 0)
        os.chmod(self.canary, 0o644)


@pytest.fixture
def host(tmp_path, own_run):
    machine = Host(tmp_path, own_run)
    yield machine
    machine.close()


def _task(host, **overrides) -> CodeTask:
    config = SandboxConfig(tmp_root=str(host.root), **{**LIMITS, **overrides})
    return CodeTask("hostile_code", [PROBLEM], sandbox=config)


def _run(host, case, **overrides):
    task = _task(host, **overrides)
    start = time.monotonic()
    result = task.run(PROBLEM, host.program(case))
    verdict = task.verdict(result)
    return result, verdict, time.monotonic() - start


def test_there_are_enough_cases_of_every_kind():
    kinds = [case.kind for case in CASES]
    assert len(CASES) >= 40 and len({case.name for case in CASES}) == len(CASES)
    assert {k: kinds.count(k) for k in set(kinds)}.keys() == {"escape", "forgery", "resource", "cleanup"}
    assert all(kinds.count(k) >= 5 for k in set(kinds))


def test_the_right_and_the_wrong_add_score_as_they_should(host):
    """The baseline the cases are measured against: 1.0 for the right add, 0 on every test for the wrong one."""
    task = _task(host)
    right, wrong = task.run(PROBLEM, RIGHT), task.run(PROBLEM, WRONG)
    assert task.verdict(right).reward == 1.0 and right.status == "ok", right
    assert (wrong.status, wrong.passed, task.verdict(wrong).reward) == ("ok", 0, 0.0), wrong
    assert host.changes(right) == [] and host.changes(wrong) == []


@pytest.mark.parametrize("case", CASES, ids=[f"{c.kind}-{c.name}" for c in CASES])
def test_hostile_program(host, case):
    result, verdict, seconds = _run(host, case)
    assert verdict.reward == case.reward, (verdict, result)
    assert result.passed == 0 or case.reward == 1.0, result
    assert result.status in case.statuses, result
    assert host.changes(result) == [], result
    assert seconds < TIME_BOUND_S
    assert host.marker not in result.output or case.kind != "escape"


# --------------------------------------------------------------------------- one layer at a time

ALONE = [(case, layer) for case in CASES for layer in case.alone]
ALL_OFF = dict(audit_hook=False, seccomp=False, landlock=False, drop_privileges=False)
SWITCH = {"uid": "drop_privileges", "seccomp": "seccomp", "audit": "audit_hook", "landlock": "landlock"}


def _machine_has(layer):
    return layer in probe_layers()[0]


@pytest.mark.parametrize(("case", "layer"), ALONE, ids=[f"{c.name}-{layer}" for c, layer in ALONE])
def test_each_layer_alone_keeps_the_canary(host, case, layer):
    """Every layer off but ``layer``: the canary is still unchanged."""
    if layer == "uid" and not ROOT:
        pytest.skip("the uid drop applies only when the caller is root")
    if layer in ("seccomp", "landlock") and not _machine_has("seccomp" if layer == "seccomp" else "landlock-fs"):
        pytest.skip(f"no {layer} here")
    result, verdict, seconds = _run(host, case, **{**ALL_OFF, SWITCH[layer]: True})
    assert host.changes(result) == [], result
    assert (layer if layer != "landlock" else "landlock-fs") in result.layers
    assert seconds < TIME_BOUND_S


@pytest.mark.skipif(not ROOT, reason="as root every layer off lets a program change a root-owned canary")
@pytest.mark.parametrize("name", ["fchmod_setuid", "fchownat_empty_path", "fsetxattr", "futimens"])
def test_control_with_every_layer_off_the_canary_does_change(host, name):
    """The check is real: with no layer at all, the same program changes the canary (restored afterwards)."""
    case = next(c for c in CASES if c.name == name)
    try:
        result, _, _ = _run(host, case, **ALL_OFF)
        changed = host.changes(result)
        assert any(line.startswith(("canary:", "xattrs:")) for line in changed), (changed, result)
    finally:
        host.restore()


def test_forgery_cases_use_a_wrong_add():
    """Any reward a forgery case gets is forged: its add is wrong on every test (or returns no plain value)."""
    for case in (c for c in CASES if c.kind == "forgery"):
        assert "return a + b" not in case.program, case.name


def test_config_drop_privileges_is_validated():
    with pytest.raises(ValueError, match="drop_privileges"):
        SandboxConfig(drop_privileges=1)
    with pytest.raises(ValueError, match="max_message_bytes"):
        SandboxConfig(max_message_bytes=0)
    assert dataclasses.replace(SandboxConfig(), drop_privileges=False).drop_privileges is False


# --------------------------------------------------------------------------- only this run's leftovers


def test_the_host_checks_see_this_runs_escaped_process_and_not_other_runs_folders(host, tmp_path):
    """A process of this test that left its session and parent (as an escaped daemon would) is found, re-parented
    to this process; in /tmp, a folder named as another run's sandbox working folder and owned by the sandbox's
    user is not this run's leftover, but any other new entry of that user is."""
    result, verdict, _ = _run(host, next(c for c in CASES if c.name == "deep_tree"))
    assert verdict.reward == 1.0 and host.changes(result) == [], result
    pid_file = tmp_path / "daemon.pid"
    daemon = ("import os, sys, time\nif os.fork():\n    os._exit(0)\nos.setsid()\n"
              "open(sys.argv[1], 'w').write(str(os.getpid()))\ntime.sleep(60)\n")
    subprocess.run([sys.executable, "-c", daemon, str(pid_file)], check=True, timeout=30)
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()):
        assert time.monotonic() < deadline, "the daemon never wrote its pid"
        time.sleep(0.05)
    escaped = int(pid_file.read_text())
    assert f"process {escaped} started in this test survived" in host.changes(result)
    host.run.kill_new()
    assert host.changes(result) == []

    foreign = tempfile.mkdtemp(prefix="rlvr-sandbox-", dir=host.run.shared_tmp)  # as run_tests names it
    planted = tempfile.mkdtemp(prefix="rlvr-planted-", dir=host.run.shared_tmp)
    try:
        if ROOT:
            for path in (foreign, planted):
                os.chown(path, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
            assert host.changes(result) == [f"{planted} was left behind"]
        else:  # not the sandbox user's: neither counts
            assert host.changes(result) == []
    finally:
        os.rmdir(foreign)
        os.rmdir(planted)


def test_this_runs_sandbox_folders_are_under_its_own_temporary_folder(own_run):
    """The per-run prefix: a sandbox with the default root (``tmp_root=None``) works in this run's folder, and a
    subprocess inherits it; /tmp itself gets no working folder of this run."""
    from rlvr_lib.tasks.sandbox import run_tests

    assert own_run.tmp != own_run.shared_tmp and os.path.basename(own_run.tmp) == "rlvr-run-tmp"
    assert tempfile.gettempdir() == own_run.tmp == os.environ["TMPDIR"]
    child = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
                           capture_output=True, text=True, check=True, timeout=30)
    assert child.stdout.strip() == own_run.tmp
    result = run_tests("pass", config=SandboxConfig(wall_s=5.0, cpu_s=2))
    assert result.status == "ok" and os.path.dirname(result.workdir) == own_run.tmp, result
    assert not own_run.foreign_sandbox_folder(result.workdir) and not os.path.exists(result.workdir)


TWO_RUNS_SUBSET = [
    "test_the_right_and_the_wrong_add_score_as_they_should",
    *[f"test_hostile_program[{kind}-{name}]" for kind, name in [
        ("resource", "thread_bomb"), ("resource", "deep_recursion"), ("cleanup", "deep_tree"),
        ("cleanup", "chmod_000_tree"), ("cleanup", "read_only_file_and_dir"), ("cleanup", "file_in_tmp")]],
    "test_each_layer_alone_keeps_the_canary[fchmod_setuid-seccomp]",  # probe_layers(): the default root
    "test_control_with_every_layer_off_the_canary_does_change[fchmod_setuid]",  # the checks still see a change
]
"""The tests that failed when a second run shared the machine (issue 60), and a few that show the checks still
catch what they should."""

OTHER_JOB = """
import os, sys
from rlvr_lib.tasks.sandbox import SandboxConfig, run_tests
config = SandboxConfig(tmp_root="/tmp", wall_s=3.0, cpu_s=1, memory_mb=256)
runs = 0
while not os.path.exists(sys.argv[1]) or runs < 3:
    runs += run_tests("import time\\ntime.sleep(0.2)", config=config).status == "ok"
print(runs)
"""
"""Another job on the host (older code, or a training run with code tasks): sandboxes in /tmp itself."""


def test_two_runs_at_once_both_pass(tmp_path):
    """This file twice at once, on the tests that failed when another run shared the machine, while a third
    process keeps making sandbox processes and /tmp/rlvr-sandbox-* folders as another job would: both runs pass,
    and neither left a file of its marker in /tmp."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ids = [f"tests/hostile/test_code_sandbox.py::{name}" for name in TWO_RUNS_SUBSET]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    env["OMP_NUM_THREADS"] = "1"
    stop = tmp_path / "stop"
    job = subprocess.Popen([sys.executable, "-c", OTHER_JOB, str(stop)], cwd=repo, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    runs = [subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                              "--basetemp", str(tmp_path / f"run{i}"), *ids],
                             cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for i in range(2)]
    try:
        outputs = [run.communicate(timeout=240)[0] for run in runs]
    finally:
        stop.touch()
        job_output = job.communicate(timeout=60)[0]
        for run in runs:
            if run.poll() is None:
                run.kill()
                run.wait()
    for run, output in zip(runs, outputs):
        assert run.returncode == 0, output[-4000:]
        counts = dict((word, int(n)) for n, word in re.findall(r"(\d+) (passed|skipped)", output.splitlines()[-1]))
        assert sum(counts.values()) == len(ids) and counts["passed"] >= 6, output[-2000:]  # skips: no root, no seccomp
    assert job.returncode == 0 and int(job_output.split()[-1]) >= 3, job_output[-2000:]
    markers = tuple(f"rlvr-hostile-{run.pid}-" for run in runs)  # Host.marker of each run
    assert [name for name in os.listdir("/tmp") if name.startswith(markers)] == []
