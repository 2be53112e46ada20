"""Hostile programs against the sandbox's own guard (issue 60, item 2): the audit hook's state cannot be changed
from inside, extension modules cannot be loaded by path, and seccomp refuses what reaches beyond the sandbox
(System V IPC, POSIX message queues, other processes' priority, scheduling and affinity, sync).

Host checks see only what this test made: System V IPC objects under keys derived from this run (``/proc/sysvipc``)
and a witness process this test started (its nice value, scheduling policy and CPU affinity).
"""

from __future__ import annotations

import ctypes
import dis
import importlib.util
import os
import subprocess
import types

import pytest

from rlvr_lib.tasks.sandbox import RUNNER, SandboxConfig, run_tests

pytestmark = pytest.mark.hostile_class("sandbox guard state", host=True)

TESTS = ("assert add(2, 3) == 5",)
RIGHT = "\ndef add(a, b):\n    return a + b\n"
LIMITS = dict(wall_s=6.0, cpu_s=3, memory_mb=256)
ROOT = os.geteuid() == 0
AUDIT_OFF = dict(audit_hook=False)  # ctypes reaches the kernel: seccomp alone decides
ALL_OFF = dict(audit_hook=False, seccomp=False, landlock=False, drop_privileges=False)


def _run(program, tmp_path, **overrides):
    root = tmp_path / "sandboxes"
    root.mkdir(exist_ok=True)
    return run_tests(program, TESTS, config=SandboxConfig(tmp_root=str(root), **{**LIMITS, **overrides}))


def _runner():
    spec = importlib.util.spec_from_file_location("_sandbox_runner_under_test", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- the hook's state


def test_the_hook_reads_no_global_and_holds_only_immutable_state():
    runner = _runner()
    hook = runner._make_audit_hook("/tmp", ["/usr/lib"], 3, 3, 1, "nonce")
    assert not [i for i in dis.get_instructions(hook) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")]
    allowed = (str, int, bool, tuple, frozenset, bytes, type(None), type, types.BuiltinFunctionType)
    cells = dict(zip(hook.__code__.co_freevars, (c.cell_contents for c in hook.__closure__)))
    mutable = {name: type(v).__name__ for name, v in cells.items()
               if not isinstance(v, allowed) and type(v).__name__ != "count"}
    assert mutable == {}, "the hook's free variables must be immutable or C functions"
    assert not [c for c in hook.__code__.co_consts if isinstance(c, types.CodeType)], "no nested function"


HOOK_ATTACKS = {
    "rebind_runner_globals": (
        "import sys\nm = sys.modules['__main__']\nfor name in list(vars(m)):\n    if name.startswith('_DENIED'):\n"
        "        setattr(m, name, type(getattr(m, name))())\nm._WRITE_PATH_EVENTS = ()\nm._MAX_ENTRIES_MADE = 10**9\n"),
    "frame_walk_globals": (
        "import sys\nf = sys._getframe()\nwhile f is not None:\n    for name in list(f.f_globals):\n"
        "        if name.startswith('_DENIED'):\n            f.f_globals[name] = frozenset()\n"
        "    for value in list(f.f_locals.values()):\n        if isinstance(value, (set, list)):\n"
        "            value.clear()\n    f = f.f_back\n"),
    "patch_path_resolution": (
        "import os, posixpath, builtins\nhere = os.getcwd()\nposixpath.realpath = lambda p, **k: here\n"
        "os.path.realpath = posixpath.realpath\nos.lstat = lambda p, **k: os.stat(here)\n"
        "builtins.isinstance = lambda *a: False\nbuiltins.len = lambda x: 0\n"),
    "tamper_through_the_hooks_traceback": (
        "import sys, os\ntry:\n    os.system('true')\nexcept PermissionError as e:\n    tb = e.__traceback__\n"
        "    while tb is not None:\n        f = tb.tb_frame\n        for name, value in list(f.f_locals.items()):\n"
        "            if callable(value) and hasattr(value, '__code__'):\n"
        "                value.__code__ = (lambda *a, **k: None).__code__\n"
        "            if hasattr(value, '__closure__') and value.__closure__:\n"
        "                for cell in value.__closure__:\n                    try:\n"
        "                        cell.cell_contents = frozenset()\n                    except Exception:\n"
        "                        pass\n"
        "            try:\n                next(value)  # a counter: pushed up, never down\n"
        "            except Exception:\n                pass\n        for name in list(f.f_globals):\n"
        "            if name.startswith('_DENIED'):\n                f.f_globals[name] = frozenset()\n"
        "        tb = tb.tb_next\n"),
}
# What each attack then tries: every one is still refused (the program reports each refusal on stdout).
PROBES = (
    "import os\nfor probe in ('os.system', 'import ctypes', 'read /etc/passwd', 'write outside'):\n    try:\n"
    "        if probe == 'os.system':\n            os.system('true')\n"
    "        elif probe == 'import ctypes':\n            import ctypes\n"
    "        elif probe == 'read /etc/passwd':\n            open('/etc/passwd').read()\n"
    "        else:\n            open('/tmp/../tmp/rlvr-guard-probe-' + str(os.getpid()), 'w')\n"
    "        print('ALLOWED', probe)\n    except (PermissionError, ImportError, OSError) as exc:\n"
    "        print('REFUSED', probe, type(exc).__name__)\n")


@pytest.mark.parametrize("attack", sorted(HOOK_ATTACKS))
def test_the_hook_cannot_be_switched_off_from_inside(tmp_path, attack):
    # Landlock and seccomp off: only the hook stands between the probes and the host.
    result = _run(HOOK_ATTACKS[attack] + PROBES + RIGHT, tmp_path, landlock=False, seccomp=False)
    assert result.status == "violation" and result.passed == 0, result
    assert "ALLOWED" not in result.output, result.output
    assert result.output.count("REFUSED") == 4 or "Error" in result.reason, result


# --------------------------------------------------------------------------- extension modules by path

_LOAD = ("import importlib.util, importlib.machinery, os, sys\n"
         "dyn = [p for p in sys.path if p.endswith('lib-dynload')][0]\n"
         "def path_of(name):\n    return next(os.path.join(dyn, f) for f in os.listdir(dyn) if f.startswith(name + '.'))\n"
         "def load(name, path):\n    spec = importlib.util.spec_from_file_location(name, path)\n"
         "    module = importlib.util.module_from_spec(spec)\n    return module\n")
EXTENSION_ATTACKS = {
    # the runner's own _ctypes (already mapped): it loads, but any use is a ctypes.* event
    "runners_ctypes_by_path": _LOAD + "m = load('_ctypes', path_of('_ctypes'))\nprint('LOADED')\nm.dlopen(None)\n",
    "ctypes_via_imp": _LOAD + "imp = sys.modules['_imp']\n"
                      "m = imp.create_dynamic(importlib.machinery.ModuleSpec('_ctypes', None, origin=path_of('_ctypes')))\n"
                      "print('LOADED')\nm.dlopen(None)\n",
    "copy_of_allowed_module": _LOAD + "open('copy.so', 'wb').write(open(path_of('_json'), 'rb').read())\n"
                              "m = load('_json', os.path.abspath('copy.so'))\nprint('LOADED', m)\n",
    "copy_of_ctypes": _LOAD + "open('c.so', 'wb').write(open(path_of('_ctypes'), 'rb').read())\n"
                      "m = load('_ctypes', os.path.abspath('c.so'))\nprint('LOADED', m)\n",
    "never_mapped_module_by_path": _LOAD + "m = load('_posixshmem', path_of('_posixshmem'))\nprint('LOADED', m)\n",
    "sqlite_by_path": _LOAD + "m = load('_sqlite3', path_of('_sqlite3'))\nprint('LOADED', m)\n",
}


@pytest.mark.parametrize("attack", sorted(EXTENSION_ATTACKS))
def test_no_extension_module_is_usable_by_path(tmp_path, attack):
    result = _run(EXTENSION_ATTACKS[attack] + RIGHT, tmp_path)
    assert result.passed == 0 and result.status in ("violation", "error"), result
    if attack.startswith("runners_ctypes") or attack == "ctypes_via_imp":
        assert result.status == "violation", result
    else:  # nothing new is mapped: dlopen fails under seccomp even with the hook off
        assert "LOADED" not in result.output, result
        off = _run(EXTENSION_ATTACKS[attack] + RIGHT, tmp_path, audit_hook=False)
        assert "LOADED" not in off.output and off.passed == 0, off


def test_control_without_seccomp_a_copied_extension_module_does_load(tmp_path, monkeypatch):
    """Control: with seccomp (and the hook) off, a program-written shared object is mapped; on the per-run tmpfs
    (mounted noexec) it is not even then, so the control runs without the mount."""
    from rlvr_lib.tasks import sandbox

    program = EXTENSION_ATTACKS["copy_of_allowed_module"] + RIGHT
    if "tmpfs" in run_tests("pass").layers:
        on_tmpfs = _run(program, tmp_path, audit_hook=False, seccomp=False)
        assert "LOADED" not in on_tmpfs.output and on_tmpfs.passed == 0, on_tmpfs
        assert "failed to map segment" in on_tmpfs.reason, on_tmpfs  # noexec: no PROT_EXEC mapping of its files
    monkeypatch.setattr(sandbox, "_mount_workdir", lambda *a: (False, "tmpfs: off for this test"))
    result = _run(program, tmp_path, audit_hook=False, seccomp=False)
    assert "LOADED" in result.output, result


def test_allowed_extension_modules_still_import(tmp_path):
    program = ("import math, json, decimal, datetime, random, hashlib, bisect, heapq, array, struct, statistics, "
               "unicodedata, zlib, fractions, collections, itertools, threading, select, fcntl, mmap\n"
               "t = threading.Thread(target=print, args=('thread',))\nt.start()\nt.join()\n" + RIGHT)
    result = _run(program, tmp_path)
    assert result.status == "ok" and result.passed == 1, result


# --------------------------------------------------------------------------- System V IPC

IPC_KEY = (os.getpid() << 8) & 0x7FFFFF00 | 0x5A  # this test run's keys: IPC_KEY + 0..2


def _ipc_objects(key_base):
    """(kind, key) of System V IPC objects under this run's keys."""
    found = []
    for kind in ("shm", "msg", "sem"):
        try:
            with open(f"/proc/sysvipc/{kind}") as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            key = int(row.split()[0]) & 0xFFFFFFFF
            if key_base <= key < key_base + 3:
                found.append((kind, key, int(row.split()[1])))
    return found


def _remove_ipc(found):
    libc = ctypes.CDLL(None, use_errno=True)
    for kind, _, ident in found:
        {"shm": lambda i: libc.shmctl(i, 0, None), "msg": lambda i: libc.msgctl(i, 0, None),
         "sem": lambda i: libc.semctl(i, 0, 0)}[kind](ident)


IPC_PROGRAMS = {
    "libc_calls": ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nK = @KEY@\n"
                   "print('shm', libc.shmget(K, 4096, 0o1600))\nprint('msg', libc.msgget(K + 1, 0o1600))\n"
                   "print('sem', libc.semget(K + 2, 1, 0o1600))\n"),
    "raw_syscalls": ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nK = @KEY@\n"
                     "print('shm', libc.syscall(29, K, 4096, 0o1600))\nprint('msg', libc.syscall(68, K + 1, 0o1600))\n"
                     "print('sem', libc.syscall(64, K + 2, 1, 0o1600))\n"),
    "private_then_use": ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nK = @KEY@\n"
                         "i = libc.shmget(K, 4096, 0o1600)\nprint('shmat', libc.shmat(i, None, 0))\n"
                         "print('msgsnd', libc.msgsnd(libc.msgget(K + 1, 0o1600), b'xxxxxxxxx', 1, 0))\n"
                         "print('semop', libc.semop(libc.semget(K + 2, 1, 0o1600), None, 0))\n"),
    "posix_mqueue": ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                     "print('mq_open', libc.syscall(240, b'rlvr-@KEY@', 0o100 | 2, 0o600, None))\n"),
}


@pytest.mark.parametrize("name", sorted(IPC_PROGRAMS))
def test_system_v_ipc_is_refused_and_nothing_outlives_the_run(tmp_path, name):
    key = IPC_KEY + 16 * sorted(IPC_PROGRAMS).index(name) * 4
    program = IPC_PROGRAMS[name].replace("@KEY@", str(key)) + RIGHT
    assert _ipc_objects(key) == []
    result = _run(program, tmp_path, **AUDIT_OFF)
    assert "seccomp" in result.layers, result
    left = _ipc_objects(key)
    _remove_ipc(left)
    assert left == [], f"System V IPC objects outlived the run: {left}"
    assert result.output and all(line.split()[-1] == "-1" for line in result.output.split("\n") if line), result
    default = _run(program, tmp_path)  # every layer on: the hook refuses ctypes first
    assert default.status == "violation" and default.passed == 0 and _ipc_objects(key) == [], default


def test_control_without_seccomp_the_ipc_objects_do_outlive_the_run(tmp_path):
    key = IPC_KEY + 0x80
    result = _run(IPC_PROGRAMS["libc_calls"].replace("@KEY@", str(key)) + RIGHT, tmp_path, **ALL_OFF)
    left = _ipc_objects(key)
    _remove_ipc(left)
    assert len(left) == 3, (left, result.output)


# --------------------------------------------------------------------------- other processes


@pytest.fixture
def witness():
    """A process of this test's own (as the sandbox's user when root), whose priority and affinity are watched."""
    kwargs = dict(user=65534, group=65534) if ROOT else {}
    proc = subprocess.Popen(["sleep", "120"], **kwargs)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _state(pid):
    return (os.getpriority(os.PRIO_PROCESS, pid), sorted(os.sched_getaffinity(pid)), os.sched_getscheduler(pid))


PROCESS_ATTACKS = {
    "setpriority_user": "os.setpriority(os.PRIO_USER, @UID@, 19)",
    "setpriority_process": "os.setpriority(os.PRIO_PROCESS, @PID@, 19)",
    "setpriority_group": "os.setpriority(os.PRIO_PGRP, os.getpgid(@PID@), 19)",
    "sched_setaffinity": "os.sched_setaffinity(@PID@, {@CPU@})",
    "sched_setscheduler": "os.sched_setscheduler(@PID@, os.SCHED_IDLE, os.sched_param(0))",
    "sched_setparam": "os.sched_setparam(@PID@, os.sched_param(0))",
    # os.sync() returns nothing (glibc's sync() is void): the raw calls show the refusal
    "sync": "import ctypes; libc = ctypes.CDLL(None, use_errno=True)\n    if libc.syscall(162): raise OSError(ctypes.get_errno(), 'sync')",
    "syncfs": "import ctypes; libc = ctypes.CDLL(None, use_errno=True)\n    if libc.syscall(306, 0): raise OSError(ctypes.get_errno(), 'syncfs')",
}


@pytest.mark.parametrize("name", sorted(PROCESS_ATTACKS))
@pytest.mark.parametrize("layers", ["default", "audit_off"])
def test_other_processes_are_unchanged(tmp_path, witness, name, layers):
    before = _state(witness.pid)
    uid = 65534 if ROOT else os.geteuid()
    cpu = max(os.sched_getaffinity(witness.pid))
    attack = (PROCESS_ATTACKS[name].replace("@PID@", str(witness.pid)).replace("@UID@", str(uid))
              .replace("@CPU@", str(cpu)))
    program = (f"import os\ntry:\n    {attack}\n    print('DONE')\nexcept OSError as exc:\n"
               f"    print('REFUSED', exc.errno)\n" + RIGHT)
    result = _run(program, tmp_path, **({} if layers == "default" else AUDIT_OFF))
    assert _state(witness.pid) == before, result
    # EPERM from seccomp (with the hook on, a ctypes attack is refused by the hook first)
    assert "REFUSED 1" in result.output or ("ctypes" in attack and result.status == "violation"), result


@pytest.mark.skipif(not ROOT, reason="the control runs the program as root, which may change any process")
def test_control_without_seccomp_the_witness_does_change(tmp_path, witness):
    before = _state(witness.pid)
    program = f"import os\nos.setpriority(os.PRIO_PROCESS, {witness.pid}, 19)\n" + RIGHT
    _run(program, tmp_path, **ALL_OFF)
    assert _state(witness.pid) != before


def test_the_filter_lists_every_refused_syscall():
    runner = _runner()
    code = runner._seccomp_program(os.getpid(), exec_mappings=False)
    constants = {k for op, _, _, k in code if op == runner._JEQ}
    for name in ("shmget", "shmat", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop",
                 "semtimedop", "semctl", "setpriority", "sched_setaffinity", "sched_setscheduler", "sched_setparam",
                 "sync", "syncfs", "mq_open", "personality", "memfd_create", "rt_sigqueueinfo"):
        assert runner._DENIED_SYSCALLS[name] in constants, name
    assert {9, 10, 329} <= constants
