"""Hostile programs (``code_sandbox_cases.py``) against `CodeTask`: the verdict, the host, the time.

For each case: the reward is 0 with the expected sandbox status, the canary file (root-owned, 0644, with an
extended attribute, in a 0755 folder any user can reach) keeps its mode, owner, timestamps, xattrs and content,
nothing new is in its folder or in /tmp (by the run's marker, or owned by the sandbox's user), no process of
either child's group or session and no new child of this process is left, the sandbox root is empty, and the
run stays under a time bound.

The metadata cases also run with one layer at a time (the uid drop, seccomp, the audit hook), each alone
stopping them; a control run with every layer off shows that the same program does change the canary, so the
canary check is real.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import stat
import tempfile
import time

import pytest

from rlvr_lib.tasks import CodeTask
from rlvr_lib.tasks.code_task import code_problem
from rlvr_lib.tasks.sandbox import UNPRIVILEGED_UID, SandboxConfig, probe_layers

from code_sandbox_cases import CASES, RIGHT, TESTS, WRONG

pytestmark = pytest.mark.hostile_class("sandbox", host=True)  # + each case's kind

LIMITS = dict(wall_s=3.0, cpu_s=1, memory_mb=256, max_output_bytes=1 << 15)
TIME_BOUND_S = LIMITS["wall_s"] + 10  # startup and cleanup on a loaded 2-core machine
PROBLEM = code_problem({"prompt": "def add(a, b):\n", "entry_point": "add", "task_id": "hostile/add",
                        "tests": list(TESTS)})
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _processes() -> dict[int, tuple[int, int, int, int]]:
    """pid -> (ppid, process group, session, uid) of every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                uid = os.stat(f"/proc/{entry}").st_uid
            except OSError:
                continue
            table[int(entry)] = (int(fields[1]), int(fields[2]), int(fields[3]), uid)
    return table


class Host:
    """The canary, the listener, and the snapshots the checks compare with."""

    def __init__(self, tmp_path):
        self.root = tmp_path / "sandboxes"
        self.root.mkdir()
        self.dir = tempfile.mkdtemp(prefix="rlvr-canary-")  # under /tmp: reachable by any user
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
        self.tmp = set(os.listdir("/tmp"))
        self.pids = set(_processes())
        self.children = {pid for pid, row in _processes().items() if row[0] == os.getpid()}

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
        new_tmp = set(os.listdir("/tmp")) - self.tmp
        for name in new_tmp:
            try:
                owner = os.lstat(os.path.join("/tmp", name)).st_uid
            except OSError:
                continue
            if self.marker in name or owner == UNPRIVILEGED_UID:
                found.append(f"/tmp/{name} was left behind")
        if os.listdir(self.root) or (result.workdir and os.path.exists(result.workdir)):
            found.append("a working directory was left behind")
        table = _processes()
        for pid, (ppid, group, session, uid) in table.items():
            if {group, session} & {result.pid, result.judge_pid}:
                found.append(f"process {pid} of the sandbox survived")
            elif ppid == os.getpid() and pid not in self.children:
                found.append(f"child {pid} survived")
            elif uid == UNPRIVILEGED_UID and pid not in self.pids:
                found.append(f"process {pid} of uid {uid} appeared")
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
def host(tmp_path):
    machine = Host(tmp_path)
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
