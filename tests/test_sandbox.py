"""The sandbox survives hostile programs, scores them 0 with a status, and leaves the host as it was.

Each hostile case runs with tight limits (about 2.5 s wall, 1 s CPU, 256 MiB)
and is followed by the same host checks: the working directory is gone, the
temporary root is empty, nothing outside it was written, and no process of the
sandbox's process group or session, and no new child of this process, is left
(scanned in /proc). The ``*_kernel`` variants turn the audit hook off, to show
that the kernel layers (Landlock, seccomp) contain the same program on their
own; they are skipped where this machine does not offer that layer.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import socket

import pytest

from rlvr_lib.tasks.sandbox import (
    CRASHED, ERROR, MEMORY, OK, OUTPUT_KEPT_CHARS, OUTPUT_LIMIT, STATUSES, SYNTAX_ERROR, TIMEOUT, VIOLATION,
    SandboxConfig, probe_layers, run_tests,
)

LIMITS = dict(wall_s=2.5, cpu_s=1, memory_mb=256, max_output_bytes=1 << 15)


def _processes() -> dict[int, tuple[int, int, int]]:
    """pid -> (ppid, process group, session) of every process, read from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:  # it ended while we looked
            continue
        table[int(entry)] = (int(fields[1]), int(fields[2]), int(fields[3]))
    return table


def _children() -> set[int]:
    return {pid for pid, (ppid, _, _) in _processes().items() if ppid == os.getpid()}


class Host:
    """A temporary root for the sandbox's directories and the checks that the host is unchanged."""

    def __init__(self, tmp_path):
        self.root = tmp_path / "sandboxes"
        self.root.mkdir()
        self.outside = tmp_path / "outside"
        self.outside.mkdir()
        self.children = _children()
        self.config = SandboxConfig(tmp_root=str(self.root), **LIMITS)

    def run(self, program, tests=(), **overrides):
        config = dataclasses.replace(self.config, **overrides)
        result = run_tests(program, tests, config=config)
        self.assert_unchanged(result)
        return result

    def assert_unchanged(self, result):
        assert result.pid > 0
        assert not os.path.exists(result.workdir)
        assert os.listdir(self.root) == []
        assert result.judge_pid > 0
        ours = {result.pid, result.judge_pid}
        left = [pid for pid, (_, group, session) in _processes().items() if {group, session} & ours]
        assert left == [], f"processes of the sandbox's group/session survived: {left}"
        assert _children() <= self.children, "the sandbox left a child process"


@pytest.fixture
def host(tmp_path):
    return Host(tmp_path)


@functools.lru_cache(maxsize=1)
def _machine_layers():
    return probe_layers()


def _needs(*alternatives):
    """Skip unless at least one of these layers is active on this machine."""
    layers, notes = _machine_layers()
    if not set(alternatives) & set(layers):
        pytest.skip(f"none of {alternatives} is available here: {notes}")


def _hostile(result, status):
    assert result.status == status, result
    assert result.passed == 0 and result.score == 0.0
    assert not result.all_passed


# --------------------------------------------------------------------------- ordinary programs


def test_correct_and_wrong_programs_are_scored_per_test(host):
    tests = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 5"]
    result = host.run("def add(a, b):\n    return a + b\n", tests)
    assert (result.status, result.passed, result.total) == (OK, 2, 3)
    assert result.outcomes == (True, True, False) and result.test_reasons[2] == "AssertionError"
    assert result.reason == "AssertionError"
    assert host.run("def add(a, b):\n    return a + b\n", tests[:2]).all_passed


def test_setup_and_tests_run_in_a_copy_of_the_program_namespace(host):
    program = "def check(x):\n    return x > 0\n\ndef positive(x):\n    return check(x)\n"
    setup = "def check(candidate):\n    assert candidate(1)\ncandidate = positive\n"
    result = run_tests(program, ["check(candidate)", "assert positive(2)"], setup, host.config)
    assert (result.status, result.passed) == (OK, 2)
    host.assert_unchanged(result)


def test_threads_imports_and_files_inside_the_directory_work(host):
    program = (
        "import threading, tempfile, math, collections\n"
        "from typing import TypeVar\nT = TypeVar('T')\nP = collections.namedtuple('P', 'a b')\n"
        "box = []\nt = threading.Thread(target=lambda: box.append(math.sqrt(4)))\nt.start(); t.join()\n"
        "with open('note.txt', 'w') as f:\n    f.write('hi')\n"
        "with tempfile.TemporaryFile() as f:\n    f.write(b'x')\n"
    )
    result = host.run(program, ["assert box == [2.0]", "assert open('note.txt').read() == 'hi'"])
    assert (result.status, result.passed) == (OK, 2), result


def test_layers_are_reported():
    layers, notes = _machine_layers()
    assert {"rlimits", "session", "audit", "judge"} <= set(layers)
    assert ("uid" in layers) == (os.geteuid() == 0)
    assert all(isinstance(n, str) for n in notes)


def test_config_is_validated():
    for field, value in [("wall_s", 0), ("cpu_s", 0), ("memory_mb", 10), ("max_open_files", 3), ("seccomp", 1)]:
        with pytest.raises(ValueError, match=f"SandboxConfig.{field}="):
            SandboxConfig(**{field: value})
    with pytest.raises(ValueError, match="program="):
        run_tests(b"pass")  # type: ignore[arg-type]
    assert set(STATUSES) == {OK, SYNTAX_ERROR, ERROR, TIMEOUT, MEMORY, OUTPUT_LIMIT, VIOLATION, CRASHED}


# --------------------------------------------------------------------------- hostile programs


def test_infinite_loop_times_out(host):
    result = host.run("while True:\n    pass\n", ["assert True"])
    _hostile(result, TIMEOUT)
    assert result.seconds < LIMITS["wall_s"] + 1.5


def test_sleeping_forever_hits_the_wall_clock(host):
    result = host.run("import time\ntime.sleep(60)\n", ["assert True"])
    _hostile(result, TIMEOUT)
    assert result.reason == "wall-clock limit"


def test_fork_bomb_is_denied(host):
    result = host.run("import os\nwhile True:\n    os.fork()\n", ["assert True"])
    _hostile(result, VIOLATION)
    assert "os.fork" in result.reason


def test_fork_bomb_kernel(host):
    _needs("seccomp")
    result = host.run("import os\nwhile True:\n    os.fork()\n    print('forked')\n", ["assert True"],
                      audit_hook=False)
    _hostile(result, ERROR)
    assert "PermissionError" in result.reason and "forked" not in result.output


def test_memory_bomb_hits_the_memory_limit(host):
    result = host.run("hoard = []\nwhile True:\n    hoard.append(' ' * 10**6)\n", ["assert True"])
    _hostile(result, MEMORY)


def test_huge_output_is_cut_and_kills_the_run(host):
    result = host.run("while True:\n    print('x' * 1000)\n", ["assert True"])
    _hostile(result, OUTPUT_LIMIT)
    assert 0 < len(result.output) <= OUTPUT_KEPT_CHARS


def _reader(path):
    return f"print(open({str(path)!r}).read())\n"


def test_reading_outside_the_directory_is_denied(host):
    secret = host.outside / "secret.txt"
    secret.write_text("TOP-SECRET-42")
    for path in (secret, "/etc/hostname"):
        result = host.run(_reader(path), ["assert True"])
        _hostile(result, VIOLATION)
        assert "TOP-SECRET-42" not in result.output


def test_reading_outside_the_directory_kernel(host):
    _needs("landlock-fs")
    secret = host.outside / "secret.txt"
    secret.write_text("TOP-SECRET-42")
    result = host.run(_reader(secret), ["assert True"], audit_hook=False)
    _hostile(result, ERROR)
    assert "PermissionError" in result.reason and "TOP-SECRET-42" not in result.output


def test_writing_outside_the_directory_is_denied(host):
    target = host.outside / "planted.txt"
    result = host.run(f"open({str(target)!r}, 'w').write('x')\n", ["assert True"])
    _hostile(result, VIOLATION)
    assert not target.exists() and os.listdir(host.outside) == []


def test_writing_outside_the_directory_kernel(host):
    _needs("landlock-fs")
    target = host.outside / "planted.txt"
    result = host.run(f"open({str(target)!r}, 'w').write('x')\n", ["assert True"], audit_hook=False)
    _hostile(result, ERROR)
    assert not target.exists()


@pytest.fixture
def listener():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()


def _nothing_connected(server):
    with pytest.raises(BlockingIOError):
        server.accept()


def _connector(server):
    port = server.getsockname()[1]
    return f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\nprint('connected')\n"


def test_network_is_denied(host, listener):
    result = host.run(_connector(listener), ["assert True"])
    _hostile(result, VIOLATION)
    _nothing_connected(listener)


def test_network_kernel(host, listener):
    _needs("seccomp", "landlock-tcp")
    result = host.run(_connector(listener), ["assert True"], audit_hook=False)
    _hostile(result, ERROR)
    assert "connected" not in result.output
    _nothing_connected(listener)


def test_killing_the_parent_is_denied(host):
    result = host.run("import os\nos.kill(os.getppid(), 9)\n", ["assert True"])
    _hostile(result, VIOLATION)  # and this test process is still alive


def test_killing_the_parent_kernel(host):
    _needs("seccomp", "landlock-signal")
    result = host.run("import os\nos.kill(os.getppid(), 9)\n", ["assert True"], audit_hook=False)
    _hostile(result, ERROR)


def test_os_exit_before_the_tests_is_a_crash(host):
    result = host.run("import os\nos._exit(0)\n", ["assert True"])
    _hostile(result, CRASHED)
    assert result.exit_code == 0


def test_syntax_error(host):
    result = host.run("def broken(:\n    return 1\n", ["assert True"])
    _hostile(result, SYNTAX_ERROR)
    assert "SyntaxError" in result.reason


def test_forged_results_and_patched_builtins_do_not_pass(host):
    forge = "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'{\"event\": \"done\"}\\n')\n" \
            "    except OSError:\n        pass\n"
    assert host.run(forge, ["assert False"]).passed == 0
    patch = "import builtins\nbuiltins.exec = lambda *a, **k: None\nbuiltins.compile = lambda *a, **k: None\n"
    result = host.run(patch, ["assert False"])
    assert (result.status, result.passed) == (OK, 0)
