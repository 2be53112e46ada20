"""Run untrusted Python (a model's program) against trusted tests, in two confined child processes.

`run_tests` writes nothing but a throw-away working directory, starts two fresh
interpreters (the *program's child*, which runs only the program, and the
*judge*, which runs the setup and the tests), and returns a `SandboxResult`:
tests passed, a status and a short reason. It never raises because of what the
program does. The judge never runs the program's code: the program's functions
reach it as proxies whose arguments and answers cross as plain data (JSON), so
every comparison a test makes is the judge's own and a reward cannot be forged.

Layers of the program's child (``SandboxResult.layers``; `probe_layers` reports
them for this machine): ``session`` (process group killed at the end), wall-clock
timeout and output caps, ``rlimits``, ``uid`` (drop to nobody when root),
``landlock-fs``/``landlock-tcp``/``landlock-signal``, ``seccomp`` (x86_64) and
the ``audit`` hook (status ``violation``); and the parent's ``tmpfs`` (the working
directory is a tmpfs of `entries_cap` inodes, so the kernel counts what the program
makes; where no mount is allowed the parent counts the tree after the run instead:
`file_cap`). Entries past the cap are a ``violation`` either way.

Statuses (`STATUSES`): ``ok``, ``syntax_error``, ``error``, ``timeout``,
``memory``, ``output_limit``, ``violation`` (``passed`` is then 0), ``crashed``.

Not a security boundary like a VM, gVisor or nsjail: the children share the kernel.

Threat model, the two processes, each layer and what it stops, statuses: docs/tasks/sandbox.md.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import json
import logging
import os
import secrets
import selectors
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from rlvr_lib.config import ConfigBase
from rlvr_lib.validation import check, is_int

__all__ = [
    "CRASHED", "ERROR", "MEMORY", "OK", "OUTPUT_LIMIT", "STATUSES", "SYNTAX_ERROR", "TIMEOUT", "VIOLATION",
    "UNPRIVILEGED_GID", "UNPRIVILEGED_UID", "CLEANUP_WAIT_S", "MAX_ENTRIES_MADE", "SandboxConfig", "SandboxResult",
    "entries_cap", "probe_layers", "run_tests", "wait_for_removals",
]

OK, SYNTAX_ERROR, ERROR, TIMEOUT = "ok", "syntax_error", "error", "timeout"
MEMORY, OUTPUT_LIMIT, VIOLATION, CRASHED = "memory", "output_limit", "violation", "crashed"
STATUSES = (OK, SYNTAX_ERROR, ERROR, TIMEOUT, MEMORY, OUTPUT_LIMIT, VIOLATION, CRASHED)

RUNNER = Path(__file__).with_name("_sandbox_runner.py")
OUTPUT_KEPT_CHARS = 4000  # of the captured stdout+stderr, kept in SandboxResult.output
_RESULT_BYTES_PER_TEST = 1024  # the runner cuts reasons to 300 characters
_POLL_S = 0.05

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SandboxConfig(ConfigBase):
    """Limits and layers of one sandboxed run.

    Attributes:
        wall_s: Wall-clock limit of the whole run (startup, program, tests), seconds.
        cpu_s: CPU-time limit (RLIMIT_CPU), whole seconds.
        memory_mb: Address-space limit (RLIMIT_AS), MiB; the interpreter itself needs ~20.
        file_size_kb: Largest file the program may write (RLIMIT_FSIZE), KiB.
        max_output_bytes: Captured stdout+stderr beyond which the run is killed.
        max_open_files: RLIMIT_NOFILE.
        max_files_written: Files the program may open for writing (audit layer).
        max_user_processes: RLIMIT_NPROC, or ``None`` to leave it alone (it counts all
            of the user's processes and threads, and is not enforced for root).
        audit_hook, seccomp, landlock: Apply that layer when the platform offers it
            (turning one off is for testing the others).
        drop_privileges: When the caller is root, run the program as `UNPRIVILEGED_UID` /
            `UNPRIVILEGED_GID` with no supplementary groups (turning it off is for testing).
        max_message_bytes: Largest message (one encoded return value) the program's process
            may send the judge; a longer one breaks the channel (status ``crashed``).
        tmp_root: Directory for the throw-away working directories (``None``: the
            system temporary directory).
    """

    wall_s: float = 10.0
    cpu_s: int = 5
    memory_mb: int = 1024
    file_size_kb: int = 1024
    max_output_bytes: int = 1 << 16
    max_open_files: int = 64
    max_files_written: int = 32
    max_user_processes: int | None = None
    audit_hook: bool = True
    seccomp: bool = True
    landlock: bool = True
    drop_privileges: bool = True
    max_message_bytes: int = 1 << 20
    tmp_root: str | None = None

    def validate(self) -> None:
        self.check_range("wall_s", self.wall_s, 0, 3600, lo_open=True)
        self.check_positive_int("cpu_s", self.cpu_s)
        self.check(_is_int_at_least(self.memory_mb, 64), "memory_mb", self.memory_mb, "an integer >= 64")
        self.check_positive_int("file_size_kb", self.file_size_kb)
        self.check_positive_int("max_output_bytes", self.max_output_bytes)
        self.check(_is_int_at_least(self.max_open_files, 16), "max_open_files", self.max_open_files,
                   "an integer >= 16")
        self.check_nonnegative_int("max_files_written", self.max_files_written)
        if self.max_user_processes is not None:
            self.check_positive_int("max_user_processes", self.max_user_processes)
        self.check_positive_int("max_message_bytes", self.max_message_bytes)
        for name in ("audit_hook", "seccomp", "landlock", "drop_privileges"):
            self.check(isinstance(getattr(self, name), bool), name, getattr(self, name), "a bool")
        self.check(self.tmp_root is None or os.path.isdir(self.tmp_root), "tmp_root", self.tmp_root,
                   "None or an existing directory")


def _is_int_at_least(value, lo: int) -> bool:
    return is_int(value) and value >= lo


@dataclass(frozen=True)
class SandboxResult:
    """What one sandboxed run did.

    Attributes:
        status: One of `STATUSES`.
        passed: Tests that passed (0 for ``violation``).
        total: Tests given.
        reason: Short explanation for a status other than ``ok`` (or the first failing test's).
        outcomes: Per test that ran, whether it passed, in order.
        test_reasons: Per test that ran, ``""`` or why it failed.
        output: The first `OUTPUT_KEPT_CHARS` characters of the program's stdout+stderr.
        layers: The containment layers active in the child (see docs/tasks/sandbox.md).
        notes: Layers that were asked for but could not be applied, with the reason.
        exit_code: The child's exit status (negative: killed by that signal); ``None`` if unknown.
        seconds: Wall-clock duration of the run.
        pid: The pid of the child that ran the program (also its process-group and session id).
        workdir: The working directory it ran in (removed when the run returns).
        judge_pid: The pid of the child that ran the setup and the tests (its own group and session).
    """

    status: str
    passed: int
    total: int
    reason: str = ""
    outcomes: tuple[bool, ...] = ()
    test_reasons: tuple[str, ...] = ()
    output: str = ""
    layers: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    exit_code: int | None = None
    seconds: float = 0.0
    pid: int = 0
    workdir: str = ""
    judge_pid: int = 0

    @property
    def score(self) -> float:
        """``passed / total`` (0.0 when there are no tests)."""
        return self.passed / self.total if self.total else 0.0

    @property
    def all_passed(self) -> bool:
        """Every test ran and passed (and there was at least one)."""
        return self.status == OK and self.total > 0 and self.passed == self.total


def run_tests(program: str, tests: Sequence[str] = (), setup: str = "",
              config: SandboxConfig | None = None, program_names: Sequence[str] | None = None) -> SandboxResult:
    """Run ``program`` in one confined child, then ``setup`` and each test in a confined judge.

    A test is Python source (statements) that passes when it runs without
    raising, e.g. ``"assert add(2, 3) == 5"``. The program is untrusted; the
    setup and the tests are trusted (they come from the task) and run in the
    judge, where the program's names are proxies and plain-data copies (see
    docs/tasks/sandbox.md); they run one after another in one namespace.

    Args:
        program: The candidate source.
        tests: Test snippets, each counted once.
        setup: Source run after the program and before the tests (e.g. the
            HumanEval ``check`` function and ``candidate = <entry point>``).
        config: Limits and layers; defaults to ``SandboxConfig()``.
        program_names: The program's top-level names the judge binds for the setup and the tests (e.g. the
            entry point only: every helper the tests call then comes from the trusted setup); ``None``: all.

    Returns:
        The `SandboxResult`; nothing the program does makes this raise.

    Raises:
        ValueError: ``program`` or ``setup`` is not a str, a test is not a str, or ``program_names`` is not
            ``None`` or a sequence of identifiers.
        OSError: the child could not be started (no interpreter, no fds, no disk).
    """
    check(isinstance(program, str), "program", type(program).__name__, "a str")
    check(isinstance(setup, str), "setup", type(setup).__name__, "a str")
    tests = tuple(tests) if not isinstance(tests, str) else (tests,)
    check(all(isinstance(t, str) for t in tests), "tests", tests, "a sequence of str")
    if program_names is not None:
        check(not isinstance(program_names, (str, bytes)), "program_names", program_names,
              "None or a sequence of identifiers (not one str)")
        program_names = list(program_names)
        check(all(isinstance(n, str) and n.isidentifier() for n in program_names), "program_names", program_names,
              "None or a sequence of identifiers")
    config = SandboxConfig() if config is None else config
    workdir = tempfile.mkdtemp(prefix="rlvr-sandbox-", dir=config.tmp_root)
    mounted = False
    try:
        identity = _identity(config)
        if identity is not None:
            os.chown(workdir, identity["uid"], identity["gid"])
        mounted, note = _mount_workdir(workdir, config, identity)
        result = _supervise(program, tests, setup, config, workdir, identity, program_names)
        return _file_cap(result, workdir, config, mounted, note)
    finally:
        if not (mounted and _unmount(workdir)):
            _remove_tree(workdir, CLEANUP_WAIT_S)


# --------------------------------------------------------------------------- the file cap

MAX_ENTRIES_MADE = 512
"""Directories, links and FIFOs the program may make (the audit hook's cap; files: ``max_files_written``)."""
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MNT_DETACH = 2, 4, 8, 2
_SYMLINK_PAGE_KB = 4  # a long symlink's target takes a page of a tmpfs


def entries_cap(config: SandboxConfig) -> int:
    """Entries (files, directories, symlinks, FIFOs, hard links) the working directory may hold besides itself:
    ``max_files_written + MAX_ENTRIES_MADE``, the sum of the audit hook's two caps. The kernel (a tmpfs of that
    many inodes plus one spare) or, without a mount, the parent's count after the run enforces it whatever the
    program's process does; one entry more is a ``violation``."""
    return config.max_files_written + MAX_ENTRIES_MADE


def _mount_workdir(workdir: str, config: SandboxConfig, identity: dict | None) -> tuple[bool, str]:
    """Mount a tmpfs over the (empty) working directory: ``nr_inodes`` = itself + `entries_cap` + one spare (a hard
    link takes an inode's reservation too), ``size`` = every file the hook lets the program write at its largest
    plus a page per other entry; nosuid, nodev, noexec, mode 0700, owned by whoever runs the program.

    Returns ``(mounted, note)``; the mount needs root with CAP_SYS_ADMIN (refused in most containers): the note
    says why there is none, and the cap is then counted after the run (`_file_cap`).
    """
    if not sys.platform.startswith("linux"):
        return False, f"tmpfs: not Linux ({sys.platform}); the file cap is counted after the run"
    if os.geteuid() != 0:
        return False, "tmpfs: not root (no mount); the file cap is counted after the run"
    uid, gid = (identity["uid"], identity["gid"]) if identity is not None else (os.getuid(), os.getgid())
    size_kb = max(config.max_files_written, 1) * config.file_size_kb + MAX_ENTRIES_MADE * _SYMLINK_PAGE_KB + 1024
    options = f"size={size_kb}k,nr_inodes={entries_cap(config) + 2},mode=0700,uid={uid},gid={gid}"
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        done = libc.mount(b"rlvr-sandbox", os.fsencode(workdir), b"tmpfs", ctypes.c_ulong(
            _MS_NOSUID | _MS_NODEV | _MS_NOEXEC), options.encode("ascii")) == 0
        why = "" if done else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
    except (OSError, AttributeError) as exc:  # no libc mount symbol
        done, why = False, f"{type(exc).__name__}: {exc}"
    if not done:
        return False, f"tmpfs: mount refused ({why}); the file cap is counted after the run"
    return True, ""


def _unmount(workdir: str) -> bool:
    """Detach the run's tmpfs (the kernel frees all it holds at once) and remove the empty folder under it."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(os.fsencode(workdir), _MNT_DETACH) != 0:
        logger.warning("sandbox: could not unmount %s (%s); removing its content instead", workdir,
                       errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()))
        return False
    try:
        os.rmdir(workdir)
    except OSError as exc:
        logger.warning("sandbox: could not remove %s after its unmount: %s", workdir, exc)
    return True


def _count_entries(workdir: str, limit: int) -> int:
    """Entries under ``workdir`` (every name: files, directories, symlinks, FIFOs, each hard link), counted through
    directory descriptors without following a link, stopping once past ``limit`` (so the count takes at most
    ``limit + 1`` entries' work, whatever the tree). Raises OSError when the tree cannot be read."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    count, stack = 0, [os.open(workdir, flags)]
    try:
        while stack:
            fd = stack.pop()
            try:
                with os.scandir(fd) as entries:
                    for entry in entries:
                        count += 1
                        if count > limit:
                            return count
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(os.open(entry.name, flags, dir_fd=fd))
            finally:
                os.close(fd)
    finally:
        for fd in stack:
            os.close(fd)
    return count


def _file_cap(result: SandboxResult, workdir: str, config: SandboxConfig, mounted: bool,
              note: str) -> SandboxResult:
    """The run's verdict with the file cap applied, out of the program's reach (both children are dead).

    On the run's tmpfs the kernel has counted: its inodes all taken means the program made past `entries_cap`
    (the kernel refused the next with ENOSPC). Without one, the tree is counted here, bounded. Past the cap, or a
    tree that cannot be counted: status ``violation``, nothing passed.
    """
    cap = entries_cap(config)
    if mounted:
        layers, notes = result.layers + ("tmpfs",), result.notes
        st = os.statvfs(workdir)
        made = st.f_files - st.f_ffree - 1  # the root is one inode
        over = st.f_ffree == 0
    else:
        layers, notes = result.layers, result.notes + (note,)
        try:
            made = _count_entries(workdir, cap)
            over = made > cap
        except OSError as exc:
            made, over = None, True
            note = f"the working directory could not be counted ({type(exc).__name__}: {exc})"
    fields = dict(layers=layers, notes=notes)
    if over and result.status != VIOLATION:  # a violation the hook saw keeps its own reason
        why = note if made is None else f"the working directory holds more than {cap} entries ({made} counted" + (
            ", the kernel's cap reached)" if mounted else ")")
        fields.update(status=VIOLATION, passed=0, reason=f"file cap: {why}")
    elif over:
        fields.update(passed=0)
    return dataclasses.replace(result, **fields)


def probe_layers(config: SandboxConfig | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(active layers, notes)`` of a trivial run on this machine (see docs/tasks/sandbox.md)."""
    result = run_tests("pass", config=config)
    return result.layers, result.notes


# --------------------------------------------------------------------------- the child


def _child_env(workdir: str) -> dict[str, str]:
    """A minimal environment: no inherited secrets, a fixed hash seed (reproducible set order)."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONIOENCODING": "utf-8",
        "OMP_NUM_THREADS": "1",
    }


UNPRIVILEGED_UID = UNPRIVILEGED_GID = 65534  # nobody / nogroup on Debian-like systems


def _readable_by_others(path: str) -> bool:
    """Every directory from / down to ``path`` is searchable, and ``path`` readable, by any user."""
    path = os.path.realpath(path)
    try:
        if not os.stat(path).st_mode & stat.S_IROTH:
            return False
        while True:
            if not os.stat(path).st_mode & stat.S_IXOTH:
                return False
            parent = os.path.dirname(path)
            if parent == path:
                return True
            path = parent
    except OSError:
        return False


def _identity(config: SandboxConfig) -> dict | None:
    """Who the program runs as: ``None`` (the caller) unless the caller is root and the drop is asked for."""
    if not config.drop_privileges or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    stdlib = os.path.dirname(os.__file__)
    libraries = [p for p in (stdlib, os.path.join(stdlib, "lib-dynload")) if os.path.isdir(p)]
    return {"uid": UNPRIVILEGED_UID, "gid": UNPRIVILEGED_GID,
            "keep_read": not all(_readable_by_others(p) for p in libraries)}


def _job(role: str, config: SandboxConfig, workdir: str, report_fd: int, channel: tuple[int, int], nonce: str,
         identity: dict | None, **fields) -> bytes:
    limits = {
        "cpu_s": config.cpu_s,
        "memory_bytes": config.memory_mb << 20,
        "file_size_bytes": config.file_size_kb << 10,
        "open_files": config.max_open_files,
        "files_written": config.max_files_written,
        "entries_made": MAX_ENTRIES_MADE,
        "user_processes": config.max_user_processes,
    }
    job = dict(role=role, workdir=workdir, report_fd=report_fd, channel_in=channel[0], channel_out=channel[1],
               nonce=nonce, limits=limits, audit=config.audit_hook, seccomp=config.seccomp,
               landlock=config.landlock, identity=identity, max_message_bytes=config.max_message_bytes, **fields)
    return json.dumps(job).encode("utf-8")  # ensure_ascii: lone surrogates travel as escapes


def _start(workdir: str, fds: tuple[int, ...]) -> subprocess.Popen:
    command = [sys.executable, "-s", "-S", "-P", "-B", "-u", str(RUNNER)]
    return subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=workdir,
        env=_child_env(workdir), pass_fds=fds, close_fds=True, start_new_session=True,
    )


@dataclass
class _Streams:
    """What the parent read from the two children, and why it stopped reading."""

    output: bytearray = field(default_factory=bytearray)  # the program's child: stdout+stderr
    events: bytearray = field(default_factory=bytearray)  # the program's child: its report pipe
    judge_output: bytearray = field(default_factory=bytearray)
    results: bytearray = field(default_factory=bytearray)  # the judge's report pipe
    stopped: str = ""  # "", TIMEOUT, OUTPUT_LIMIT or "flood"


_EVENTS_CAP = 1 << 16  # the program's child reports "ready" and at most a few events


def _supervise(program, tests, setup, config, workdir, identity, program_names=None) -> SandboxResult:
    """Start the program's child and the judge, joined by two pipes that the parent does not keep."""
    start = time.monotonic()
    nonce = secrets.token_hex(16)
    pipes = [os.pipe() for _ in range(4)]  # program report, judge report, judge -> program, program -> judge
    (events_r, events_w), (results_r, results_w), (calls_r, calls_w), (answers_r, answers_w) = pipes
    procs: list[subprocess.Popen] = []
    try:
        procs.append(_start(workdir, (events_w, calls_r, answers_w)))
        procs.append(_start(workdir, (results_w, answers_r, calls_w)))
    except BaseException:
        for proc in procs:
            _kill_group(proc)
            _reap(proc)
        os.close(events_r)
        os.close(results_r)
        raise
    finally:
        for fd in (events_w, results_w, calls_r, calls_w, answers_r, answers_w):
            os.close(fd)
    candidate, judge = procs
    try:
        _send_job(candidate, _job("program", config, workdir, events_w, (calls_r, answers_w), nonce, identity,
                                  program=program))
        _send_job(judge, _job("judge", config, workdir, results_w, (answers_r, calls_w), nonce, None,
                              setup=setup, tests=list(tests), program_names=program_names))
        streams = _pump(candidate, judge, events_r, results_r, start + config.wall_s, config.max_output_bytes,
                        4096 + _RESULT_BYTES_PER_TEST * len(tests))
    finally:
        cpu = []
        for proc in procs:
            _kill_group(proc)
            cpu.append(_reap(proc))
            proc.stdout.close()
        os.close(events_r)
        os.close(results_r)
    cpu_limited = [seconds >= config.cpu_s - 0.05 for seconds in cpu]
    return _result(streams, nonce, len(tests), candidate, judge, time.monotonic() - start, workdir, cpu_limited)


def _send_job(proc: subprocess.Popen, job: bytes) -> None:
    """Write the job to the child's stdin (the runner reads it before anything else) and close it."""
    try:
        proc.stdin.write(job)
    except (BrokenPipeError, OSError):
        pass  # the child died at once; the result says so
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass


def _exited(pid: int) -> bool:
    """The child has exited (it stays a zombie: its pid, hence its group id, cannot be reused yet)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _pump(candidate: subprocess.Popen, judge: subprocess.Popen, events_fd: int, results_fd: int, deadline: float,
          max_output: int, max_results: int) -> _Streams:
    """Read both children's output and report pipes until the judge exits, a cap is passed or the deadline.

    The judge's exit ends the run (the program's child is then killed): its report is the verdict.
    """
    streams = _Streams()
    caps = {candidate.stdout.fileno(): (streams.output, max_output, OUTPUT_LIMIT),
            judge.stdout.fileno(): (streams.judge_output, max_output, OUTPUT_LIMIT),
            events_fd: (streams.events, _EVENTS_CAP, "flood"),
            results_fd: (streams.results, max_results, "flood")}
    with selectors.DefaultSelector() as selector:
        for fd in caps:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                streams.stopped = TIMEOUT
                return streams
            ready = selector.select(timeout=min(_POLL_S, left)) if selector.get_map() else ()
            for key, _ in ready:
                buffer, cap, why = caps[key.fd]
                if _read_into(selector, key.fd, buffer) and len(buffer) > cap:
                    streams.stopped = why
                    return streams
            if not ready and _exited(judge.pid):
                break
            if not selector.get_map():
                time.sleep(min(_POLL_S, max(left, 0)))
        for fd in list(selector.get_map()):  # what was written just before the judge exited
            buffer, cap, _ = caps[fd]
            while len(buffer) <= cap and _read_into(selector, fd, buffer):
                pass
    return streams


def _read_into(selector: selectors.BaseSelector, fd: int, buffer: bytearray) -> bool:
    """Append one read from ``fd``; on EOF unregister it. Returns whether bytes were read."""
    try:
        chunk = os.read(fd, 1 << 16)
    except BlockingIOError:
        return False
    if not chunk:
        selector.unregister(fd)
        return False
    buffer += chunk
    return True


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group (it is the leader, still unreaped)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(proc: subprocess.Popen) -> float:
    """Wait for the (killed) child, set ``proc.returncode``; returns the CPU seconds it used."""
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except ChildProcessError:  # already reaped
        proc.wait()
        return 0.0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


CLEANUP_WAIT_S = 3.0
"""How long `run_tests` waits for its working directory's removal; what is left is removed in the background
(`wait_for_removals`). A run takes at most its ``wall_s``, the two interpreters' start, and this."""
_BACKGROUND: list[subprocess.Popen] = []  # removals still running after their wait


def wait_for_removals(timeout: float | None = None) -> bool:
    """Wait until the working directories still being removed in the background are gone; returns whether they are."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for proc in list(_BACKGROUND):
        try:
            proc.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return False
    _reap_background()
    return not _BACKGROUND


def _reap_background() -> None:
    for proc in list(_BACKGROUND):
        if proc.poll() is not None:
            _BACKGROUND.remove(proc)
            _log_removal(proc)


def _log_removal(proc: subprocess.Popen) -> None:
    why = proc.stderr.read().decode("utf-8", "replace").strip() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode:
        logger.warning("sandbox: could not remove a working directory (exit code %s): %s", proc.returncode, why)


def _remove_tree(path: str, wait_s: float | None = None) -> bool:
    """Remove the working directory and whatever tree the program built in it, out of band.

    A separate process (``_sandbox_runner.py --remove``, as the caller, unconfined) removes it, iteratively and
    through directory descriptors (any depth, no symlink followed, read-only and mode-000 levels made writable
    first). The caller waits at most ``wait_s`` seconds (``None``: until done): a tree too large to remove in
    time (a flood of directories or long symlinks) goes on being removed in the background, and the verdict is
    not held up. A failure is logged, not raised: a verifier must not fail on what a program did.

    Returns whether the removal finished within the wait.
    """
    _reap_background()
    if not os.path.lexists(path):
        return True
    proc = subprocess.Popen([sys.executable, "-s", "-S", "-P", "-B", str(RUNNER), "--remove", path],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=_child_env(os.path.dirname(path) or "/"), close_fds=True, start_new_session=True)
    try:
        proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        logger.warning("sandbox: %s is still being removed after %.1f s; process %d goes on in the background",
                       path, wait_s, proc.pid)
        _BACKGROUND.append(proc)
        return False
    _log_removal(proc)
    return True


# --------------------------------------------------------------------------- the verdict


@dataclass
class _Report:
    """The judge's messages (checked against the nonce and the expected test order), and the program child's."""

    layers: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    outcomes: list[bool] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    events: dict[str, str] = field(default_factory=dict)  # first reason per event kind
    done: bool = False
    broken: str = ""  # why the stream cannot be trusted


def _parse(results: bytes, nonce: str, total: int) -> _Report:
    """The judge's report. The judge runs no code of the program's, so its stream is trusted as written."""
    report = _Report()
    for line in results.decode("utf-8", "replace").splitlines():
        try:
            message = json.loads(line)
            ok = isinstance(message, dict) and message.get("nonce") == nonce
        except ValueError:
            ok = False
        if not ok or report.done:
            report.broken = report.broken or "the judge's result stream holds lines the judge did not write"
            continue
        _take(report, message, total)
    if report.done and len(report.outcomes) != total:
        report.broken = report.broken or f"the judge reported {len(report.outcomes)} of {total} tests"
    return report


def _take(report: _Report, message: dict, total: int) -> None:
    event = str(message.get("event"))
    if event == "ready":
        report.layers = tuple(map(str, message.get("layers", ())))
        report.notes = tuple(map(str, message.get("notes", ())))
    elif event == "test":
        if message.get("index") != len(report.outcomes) or len(report.outcomes) >= total:
            report.broken = report.broken or "test results out of order"
            return
        report.outcomes.append(message.get("passed") is True)
        report.reasons.append(str(message.get("reason", ""))[:300])
    elif event == "done":
        report.done = True
    else:
        report.events.setdefault(event, str(message.get("reason", message.get("what", "")))[:300])


_PROGRAM_EVENTS = (VIOLATION, MEMORY)  # all the parent takes from the program's child after its first line


def _parse_program(events: bytes) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, str]]:
    """``(layers, notes, events)`` from the program child's report pipe.

    Its first line is written before the program runs (the layers it applied); whatever follows may be the
    program's own writing, so only events that can lower the verdict (a violation, a MemoryError) are read.
    """
    layers, notes, found = (), (), {}
    for number, line in enumerate(events.decode("utf-8", "replace").splitlines()):
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict):
            continue
        event = message.get("event")
        if number == 0 and event == "ready":
            layers = tuple(map(str, message.get("layers", ())))
            notes = tuple(map(str, message.get("notes", ())))
        elif event in _PROGRAM_EVENTS:
            found.setdefault(event, str(message.get("reason", message.get("what", "")))[:300])
    return layers, notes, found


_SIGNAL_STATUS = {signal.SIGXCPU: (TIMEOUT, "CPU time limit"), signal.SIGXFSZ: (OUTPUT_LIMIT, "file size limit")}


def _how(exit_code: int | None) -> str:
    return f"killed by signal {-exit_code}" if exit_code is not None and exit_code < 0 else f"exit code {exit_code}"


def _signal_status(exit_code: int | None, cpu_limited: bool) -> tuple[str, str] | None:
    signalled = -exit_code if exit_code is not None and exit_code < 0 else None
    if signalled in _SIGNAL_STATUS:
        return _SIGNAL_STATUS[signalled]
    if signalled == signal.SIGKILL and cpu_limited:
        return TIMEOUT, "CPU time limit (SIGKILL)"
    return None


def _status(streams: _Streams, report: _Report, exit_codes: tuple, cpu_limited: list[bool]) -> tuple[str, str]:
    """The status and its reason, most telling first (``exit_codes``: the program's child's, the judge's)."""
    if VIOLATION in report.events:
        return VIOLATION, report.events[VIOLATION]
    if streams.stopped == OUTPUT_LIMIT:
        return OUTPUT_LIMIT, "stdout+stderr over the cap"
    if streams.stopped == TIMEOUT:
        return TIMEOUT, "wall-clock limit"
    for exit_code, limited in zip(exit_codes, cpu_limited):
        found = _signal_status(exit_code, limited)
        if found:
            return found
    if streams.stopped == "flood":
        return CRASHED, "a report stream overflowed"
    for event in (MEMORY, SYNTAX_ERROR, ERROR):
        if event in report.events:
            return event, report.events[event]
    if report.broken:
        return CRASHED, report.broken
    if CRASHED in report.events:
        return CRASHED, f"{report.events[CRASHED]} ({_how(exit_codes[0])})"
    if not report.done:
        tail = bytes(streams.judge_output[-300:]).decode("utf-8", "replace").strip()
        return CRASHED, f"the judge ended before the tests finished ({_how(exit_codes[1])}){': ' + tail if tail else ''}"
    return OK, ""


def _result(streams: _Streams, nonce: str, total: int, candidate: subprocess.Popen, judge: subprocess.Popen,
            seconds: float, workdir: str, cpu_limited: list[bool]) -> SandboxResult:
    report = _parse(bytes(streams.results), nonce, total)
    layers, notes, program_events = _parse_program(bytes(streams.events))
    for event, reason in program_events.items():
        report.events.setdefault(event, reason)
    if report.layers:
        layers += ("judge",)
    notes += tuple(f"judge {note}" for note in report.notes)
    exit_codes = (candidate.returncode, judge.returncode)
    status, reason = _status(streams, report, exit_codes, cpu_limited)
    passed = 0 if status == VIOLATION else sum(report.outcomes)
    if status == OK and passed < total:
        reason = next(r for r, ok in zip(report.reasons, report.outcomes) if not ok)
    return SandboxResult(
        status=status, passed=passed, total=total, reason=reason, outcomes=tuple(report.outcomes),
        test_reasons=tuple(report.reasons), output=bytes(streams.output[: 4 * OUTPUT_KEPT_CHARS]).decode(
            "utf-8", "replace")[:OUTPUT_KEPT_CHARS],
        layers=layers, notes=notes, exit_code=candidate.returncode, seconds=seconds, pid=candidate.pid,
        workdir=workdir, judge_pid=judge.pid,
    )
