"""The child side of `rlvr_lib.tasks.sandbox`: confine this process, then run a program and its tests.

This file is run as a script by a fresh interpreter (``python -s -S -P -B -u
_sandbox_runner.py``), never imported by the library, and uses the standard
library only (``-S`` leaves ``rlvr_lib`` off ``sys.path``). It plays one of two
roles (``job["role"]``): ``program`` runs the untrusted program and answers calls
into it; ``judge`` runs the trusted setup and tests, reaching the program only
through plain data over a pipe pair (`_Channel`, `_encode`/`_decode`).

In order, before any untrusted code runs:

1. read the job (JSON) from stdin, then point fd 0 at /dev/null;
2. set resource limits and enter the working directory;
3. (program, parent root) drop to an unprivileged uid/gid (`_drop_privileges`);
4. Landlock: read only under the working directory, the standard library and
   the shared libraries; write only under the working directory; no TCP; no
   signals outside the sandbox;
5. seccomp (x86_64): no new processes, execve, sockets, signals, ptrace, limit
   raising, identity changes, file-metadata syscalls, System V IPC, other
   processes' priority/scheduling/affinity, sync; (program) the standard
   extension modules are mapped first, then no new executable memory;
6. a Python audit hook denying the same, reporting each denial as ``violation``;
   its state is captured at install (`_make_audit_hook`).

``_sandbox_runner.py --remove PATH`` instead removes a working directory (the
caller's out-of-band clean-up, `remove_tree`).
7. program: run it and answer calls; judge: run setup and tests, report each.

A layer that could not be applied is listed in ``notes``; a failed privilege
drop exits 70. The process ends with ``os._exit``.

Each step in full: docs/tasks/sandbox.md.
"""

import builtins
import json
import os
import platform
import resource
import sys

# --------------------------------------------------------------------------- reporting

_REASON_CHARS = 300
_BALLAST_BYTES = 4 << 20  # freed on MemoryError so that the runner can still report


def _emitter(fd, nonce):
    """A function ``emit(dict)`` writing one JSON line with the nonce to ``fd``."""
    write, dumps = os.write, json.dumps  # bound now: the program cannot swap them

    def emit(message):
        message["nonce"] = nonce
        data = (dumps(message) + "\n").encode("utf-8", "backslashreplace")
        while data:
            try:
                data = data[write(fd, data):]
            except InterruptedError:
                continue
            except OSError:
                return

    return emit


def _describe(exc):
    """``"Type: message"``, cut short; never raises (the message may be the program's code)."""
    name = type(exc).__name__
    try:
        text = str(exc)
    except BaseException:  # noqa: BLE001 - a hostile __str__
        text = "<unprintable>"
    return f"{name}: {text}"[:_REASON_CHARS] if text else name


# --------------------------------------------------------------------------- resource limits


def _set_limits(limits):
    """Apply the job's rlimits (hard limits too, so the program cannot raise them unprivileged)."""
    cpu = int(limits["cpu_s"])
    pairs = [
        (resource.RLIMIT_AS, limits["memory_bytes"], limits["memory_bytes"]),
        (resource.RLIMIT_CPU, cpu, cpu + 1),  # SIGXCPU at cpu, SIGKILL one second later
        (resource.RLIMIT_FSIZE, limits["file_size_bytes"], limits["file_size_bytes"]),
        (resource.RLIMIT_NOFILE, limits["open_files"], limits["open_files"]),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if limits.get("user_processes") is not None:
        pairs.append((resource.RLIMIT_NPROC, limits["user_processes"], limits["user_processes"]))
    for which, soft, hard in pairs:
        resource.setrlimit(which, (soft, hard))


# --------------------------------------------------------------------------- Landlock

_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LL_EXECUTE, _LL_WRITE_FILE, _LL_READ_FILE, _LL_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_LL_FS_ABI1 = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
_LL_REFER, _LL_TRUNCATE, _LL_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_LL_FILE_RIGHTS = _LL_EXECUTE | _LL_WRITE_FILE | _LL_READ_FILE | _LL_TRUNCATE | _LL_IOCTL_DEV
_LL_NET_TCP = (1 << 0) | (1 << 1)  # BIND_TCP | CONNECT_TCP
_LL_SCOPE = (1 << 0) | (1 << 1)  # ABSTRACT_UNIX_SOCKET | SIGNAL
_PR_SET_NO_NEW_PRIVS = 38
_DEVICES_RW = ("/dev/null",)
_DEVICES_R = ("/dev/urandom", "/dev/zero")


def _libc():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return ctypes, libc


def _no_new_privs(ctypes, libc):
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0),
                  ctypes.c_ulong(0)) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")


def _landlock_rights(abi):
    """(handled fs rights, handled net rights, scopes, size of the ruleset attribute) for a Landlock ABI."""
    fs = _LL_FS_ABI1 | (_LL_REFER if abi >= 2 else 0) | (_LL_TRUNCATE if abi >= 3 else 0)
    fs |= _LL_IOCTL_DEV if abi >= 5 else 0
    net = _LL_NET_TCP if abi >= 4 else 0
    scoped = _LL_SCOPE if abi >= 6 else 0
    size = 8 if abi < 4 else (16 if abi < 6 else 24)
    return fs, net, scoped, size


def _landlock(workdir, read_roots):
    """Confine file access, TCP and signals with Landlock; returns the active layer names."""
    ctypes, libc = _libc()
    abi = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        raise OSError(ctypes.get_errno(), "Landlock is not available")
    fs, net, scoped, size = _landlock_rights(abi)

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed", ctypes.c_uint64), ("fd", ctypes.c_int32)]

    attr = RulesetAttr(fs, net, scoped)
    ruleset = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    rules = [(workdir, fs)] + [(root, _LL_EXECUTE | _LL_READ_FILE | _LL_READ_DIR) for root in read_roots]
    rules += [(dev, _LL_FILE_RIGHTS) for dev in _DEVICES_RW] + [(dev, _LL_READ_FILE) for dev in _DEVICES_R]
    try:
        for path, allowed in rules:
            _landlock_rule(ctypes, libc, ruleset, PathBeneath, path, allowed & fs)
        _no_new_privs(ctypes, libc)
        if libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return ["landlock-fs"] + (["landlock-tcp"] if net else []) + (["landlock-signal"] if scoped else [])


def _landlock_rule(ctypes, libc, ruleset, PathBeneath, path, allowed):
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a missing read root is simply not allowed
    try:
        if not os.path.isdir(path):
            allowed &= _LL_FILE_RIGHTS
        rule = PathBeneath(allowed, fd)
        if libc.syscall(_SYS_LANDLOCK_ADD_RULE, ruleset, 1, ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule({path})")
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- seccomp (x86_64)

_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000
_EPERM, _ENOSYS = 1, 38
_CLONE_THREAD = 0x00010000
_NR = dict(ioctl=16, clone=56, kill=62, tgkill=234, prlimit64=302, clone3=435)
# ioctl commands that set inode flags: an immutable file could not be removed with the working directory.
_DENIED_IOCTLS = (0x40086602, 0x40046602, 0x401C5820)  # FS_IOC_SETFLAGS (64/32-bit), FS_IOC_FSSETXATTR
# Syscalls that fail with EPERM (x86_64 numbers, checked against asm/unistd_64.h).
_DENIED_SYSCALLS = {
    "socket": 41, "socketpair": 53, "fork": 57, "vfork": 58, "execve": 59, "execveat": 322,
    "ptrace": 101, "setrlimit": 160, "setsid": 112, "setpgid": 109, "tkill": 200,
    "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_open": 434, "pidfd_send_signal": 424,
    "pidfd_getfd": 438, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "mount": 165, "umount2": 166, "unshare": 272, "setns": 308, "chroot": 161, "pivot_root": 155,
    "reboot": 169, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
    "delete_module": 176, "swapon": 167, "swapoff": 168, "sethostname": 170, "setdomainname": 171,
    "settimeofday": 164, "clock_settime": 227, "adjtimex": 159, "clock_adjtime": 305, "bpf": 321,
    "perf_event_open": 298, "keyctl": 250, "add_key": 248, "request_key": 249, "setuid": 105,
    "setgid": 106, "setreuid": 113, "setregid": 114, "setresuid": 117, "setresgid": 119,
    "setgroups": 116, "setfsuid": 122, "setfsgid": 123, "capset": 126, "userfaultfd": 323,
    "mknod": 133, "mknodat": 259, "open_by_handle_at": 304, "name_to_handle_at": 303, "iopl": 172,
    "ioperm": 173, "syslog": 103, "acct": 163, "quotactl": 179, "fanotify_init": 300, "kcmp": 312,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442,
    # File metadata, by path or by descriptor (fchmodat/fchownat/utimensat with AT_EMPTY_PATH included): Landlock
    # has no right for these, so a file the program may read (a shared library, the standard library) could
    # otherwise get a new mode (setuid), owner, timestamps or extended attributes.
    "chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452, "chown": 92, "fchown": 93, "lchown": 94,
    "fchownat": 260, "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "removexattr": 197,
    "lremovexattr": 198, "fremovexattr": 199, "setxattrat": 463, "removexattrat": 466, "utime": 132,
    "utimes": 235, "futimesat": 261, "utimensat": 280, "file_setattr": 469,
    # Objects that outlive the process or reach other processes. System V IPC (shared memory, message queues,
    # semaphores) and POSIX message queues live in the kernel until removed; priority, scheduling, affinity and
    # I/O priority can be set on any process of the same user (other sandboxes run as that user too); signals
    # queued to another pid; another process's pages and robust futexes; sync/syncfs flush every file system.
    "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65, "semctl": 66,
    "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "mq_open": 240, "mq_unlink": 241,
    "mq_timedsend": 242, "mq_timedreceive": 243, "mq_notify": 244, "mq_getsetattr": 245,
    "setpriority": 141, "sched_setparam": 142, "sched_setscheduler": 144, "sched_setaffinity": 203,
    "sched_setattr": 314, "ioprio_set": 251, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
    "migrate_pages": 256, "move_pages": 279, "process_madvise": 440, "process_mrelease": 448,
    "get_robust_list": 274, "sync": 162, "syncfs": 306, "flock": 73,
    # Memory and resources the limits do not count (memfd pages are not in RLIMIT_AS; AIO contexts and inotify
    # instances are counted host-wide or per user), a.out loading, and personality(READ_IMPLIES_EXEC), which would
    # make later readable mappings executable behind the filter's back.
    "memfd_create": 319, "memfd_secret": 447, "io_setup": 206, "inotify_init": 253, "inotify_init1": 294,
    "uselib": 134, "personality": 135, "vhangup": 153, "lookup_dcookie": 212, "quotactl_fd": 443, "cachestat": 451,
}
# The program's process maps no new executable memory (no extension module, no shared library, no code written
# to memory) once the filter is on: mmap/mprotect/pkey_mprotect asking for PROT_EXEC fail with EPERM.
_EXEC_MAPPING_SYSCALLS = (9, 10, 329)  # mmap, mprotect, pkey_mprotect: prot is argument 2
_PROT_EXEC = 0x4
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_ALLOW, _RET_ERRNO, _RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
_OFF_NR, _OFF_ARCH = 0, 4


def _arg_low(i):
    return 16 + 8 * i  # low 32 bits of argument i (little-endian seccomp_data)


def _seccomp_program(pid, exec_mappings=True):
    """The BPF filter as (code, jt, jf, k) tuples; jump targets are labels resolved here.

    ``exec_mappings=False``: mmap/mprotect/pkey_mprotect with PROT_EXEC fail too (the program's process).
    """
    me, minus_me = pid & 0xFFFFFFFF, (-pid) & 0xFFFFFFFF
    prog = [
        (_LD_W_ABS, None, None, _OFF_ARCH),
        (_JEQ, None, "kill", _AUDIT_ARCH_X86_64),
        (_LD_W_ABS, None, None, _OFF_NR),
        (_JGE, "enosys", None, _X32_SYSCALL_BIT),
        (_JEQ, "enosys", None, _NR["clone3"]),  # glibc then falls back to clone(), checked below
        (_JEQ, "clone", None, _NR["clone"]),
        (_JEQ, "kill_", None, _NR["kill"]),
        (_JEQ, "tgkill", None, _NR["tgkill"]),
        (_JEQ, "prlimit", None, _NR["prlimit64"]),
        (_JEQ, "ioctl", None, _NR["ioctl"]),
    ]
    if not exec_mappings:
        prog += [(_JEQ, "prot", None, nr) for nr in _EXEC_MAPPING_SYSCALLS]
    prog += [(_JEQ, "eperm", None, nr) for nr in sorted(set(_DENIED_SYSCALLS.values()))]
    prog += [
        (_RET, None, None, _RET_ALLOW),
        "clone", (_LD_W_ABS, None, None, _arg_low(0)), (_JSET, "allow", "eperm", _CLONE_THREAD),
        "kill_", (_LD_W_ABS, None, None, _arg_low(0)), (_JEQ, "allow", None, me), (_JEQ, "allow", None, 0),
        (_JEQ, "allow", "eperm", minus_me),
        "tgkill", (_LD_W_ABS, None, None, _arg_low(0)), (_JEQ, "allow", "eperm", me),
        "prlimit", (_LD_W_ABS, None, None, _arg_low(2)), (_JEQ, None, "eperm", 0),
        (_LD_W_ABS, None, None, _arg_low(2) + 4), (_JEQ, "allow", "eperm", 0),
        "ioctl", (_LD_W_ABS, None, None, _arg_low(1)),
        *[(_JEQ, "eperm", None, cmd) for cmd in _DENIED_IOCTLS],
        (_RET, None, None, _RET_ALLOW),
        "prot", (_LD_W_ABS, None, None, _arg_low(2)), (_JSET, "eperm", "allow", _PROT_EXEC),
        "allow", (_RET, None, None, _RET_ALLOW),
        "eperm", (_RET, None, None, _RET_ERRNO | _EPERM),
        "enosys", (_RET, None, None, _RET_ERRNO | _ENOSYS),
        "kill", (_RET, None, None, _RET_KILL_PROCESS),
    ]
    return _assemble(prog)


def _assemble(prog):
    """Resolve label jumps to the relative offsets BPF uses (a ``None`` target: the next instruction)."""
    labels, code = {}, []
    for item in prog:
        if isinstance(item, str):
            labels[item] = len(code)
        else:
            code.append(item)
    out = []
    for i, (op, jt, jf, k) in enumerate(code):
        rel = [0 if t is None else labels[t] - i - 1 for t in (jt, jf)]
        if not all(0 <= r < 256 for r in rel):
            raise ValueError(f"seccomp jump out of range at instruction {i}")
        out.append((op, rel[0], rel[1], k))
    return out


def _seccomp(exec_mappings=True):
    """Install the filter (x86_64); returns the active layer names."""
    if platform.machine() != "x86_64":
        raise OSError(_ENOSYS, f"the seccomp filter is written for x86_64, not {platform.machine()}")
    import struct

    ctypes, libc = _libc()
    code = _seccomp_program(os.getpid(), exec_mappings)
    raw = b"".join(struct.pack("=HBBI", *ins) for ins in code)
    buf = ctypes.create_string_buffer(raw, len(raw))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = SockFprog(len(code), ctypes.addressof(buf))
    _no_new_privs(ctypes, libc)
    if libc.prctl(22, ctypes.c_ulong(2), ctypes.byref(prog), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")
    return ["seccomp"]


# --------------------------------------------------------------------------- audit hook

_DENIED_EVENTS = frozenset({
    "os.system", "os.fork", "os.forkpty", "os.kill", "os.killpg", "os.exec", "os.posix_spawn", "os.spawn",
    "os.startfile", "os.unshare", "os.setns", "subprocess.Popen", "pty.spawn", "resource.setrlimit",
    "resource.prlimit", "signal.pthread_kill", "webbrowser.open", "sqlite3.enable_load_extension",
    "sqlite3.load_extension",
    # Heap walks reach the runner's objects (its reporting closure); no test-passing code needs them.
    "gc.get_objects", "gc.get_referrers", "gc.get_referents",
    "fcntl.ioctl",  # e.g. FS_IOC_SETFLAGS: an immutable file would outlive the working directory
    # File metadata, by path or descriptor, anywhere (the working directory too: a mode-000 tree, a setuid file).
    "os.chmod", "os.chown", "os.utime", "os.setxattr", "os.removexattr", "os.chflags",
})
_DENIED_PREFIXES = ("socket.", "ctypes.", "http.client.", "urllib.", "ftplib.", "smtplib.", "poplib.", "imaplib.",
                    "nntplib.", "telnetlib.", "_winapi.", "winreg.")
# Modules that would bypass the hook: raw memory access, process spawning without an event,
# subinterpreters (which do not inherit Python-level audit hooks), test helpers that poke memory,
# shared memory outside the directory. (Importing socket is allowed; creating or using one is not.)
_DENIED_MODULES = frozenset({
    "ctypes", "_ctypes", "_posixsubprocess", "_xxsubinterpreters", "_xxinterpchannels", "_interpreters",
    "_interpqueues", "_interpchannels", "_testcapi", "_testinternalcapi", "_testmultiphase", "_posixshmem",
    # C code that makes files or kernel objects with no audit event past the cap on files made: SQLite (ATTACH,
    # VACUUM INTO), dbm, readline's history, POSIX semaphores (sem_open), OpenSSL's key log.
    "_sqlite3", "_dbm", "_gdbm", "readline", "_multiprocessing", "_ssl",
})
# Events whose path arguments (by position) must lie in the working directory; the second field: the event makes
# a new directory entry (counted against the cap on entries made).
_WRITE_PATH_EVENTS = (
    ("os.remove", (0,), False), ("os.rename", (0, 1), False), ("os.rmdir", (0,), False), ("os.mkdir", (0,), True),
    ("os.link", (0, 1), True), ("os.symlink", (1,), True), ("os.truncate", (0,), False), ("os.chdir", (0,), False),
    ("os.mkfifo", (0,), True), ("os.mknod", (0,), True), ("shutil.rmtree", (0,), False),
)
# Events that read a directory or metadata: allowed in the working directory and the read roots.
_READ_PATH_EVENTS = (("os.listdir", (0,)), ("os.scandir", (0,)), ("os.listxattr", (0,)), ("os.getxattr", (0,)))
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_MAX_SYMLINKS = 40  # as the kernel's ELOOP


def _make_audit_hook(workdir, read_roots, max_files_written, max_entries_made, report_fd, nonce,
                     denied_modules=_DENIED_MODULES):
    """The hook: raises PermissionError on a denied event, reporting each denial as a violation.

    Its guard state is captured here, once, and nothing the program can reach can change it: the hook reads no
    global name (not the deny lists, not a built-in, not ``os.path``); its free variables are immutable values
    (str, int, tuples, frozensets) and C functions, and its two counters are ``itertools.count`` objects, which
    only go up. A traceback through the hook shows the program that frame and its free variables, so the hook
    calls no Python function (a function's ``__code__`` and closure cells can be rebound): it resolves paths
    itself, with ``os.lstat``/``os.readlink``, and writes its report with ``os.write``.
    """
    import itertools
    from _json import encode_basestring_ascii as quote  # C

    workdir = os.path.realpath(workdir)
    roots = tuple(os.path.realpath(r).rstrip(os.sep) + os.sep for r in read_roots)
    work_prefix = workdir.rstrip(os.sep) + os.sep
    devices_rw, devices_all = frozenset(_DEVICES_RW), frozenset(_DEVICES_RW + _DEVICES_R)
    denied_events, denied_prefixes = frozenset(_DENIED_EVENTS), tuple(_DENIED_PREFIXES)
    denied_modules = frozenset(denied_modules)
    write_events = tuple(_WRITE_PATH_EVENTS)
    write_names = frozenset(name for name, _, _ in write_events)
    read_events = tuple(_READ_PATH_EVENTS)
    read_names = frozenset(name for name, _ in read_events)
    write_flags, max_links, limit = _WRITE_FLAGS, _MAX_SYMLINKS, _REASON_CHARS
    writes, entries = itertools.count(), itertools.count()
    head, tail = '{"event": "violation", "what": ', ', "nonce": ' + quote(str(nonce)) + "}\n"
    lstat, readlink, getcwd, fspath, is_link = os.lstat, os.readlink, os.getcwd, os.fspath, _stat_is_link()
    write, fsencoding = os.write, sys.getfilesystemencoding()
    str_, bytes_, int_, tuple_, type_, len_, next_ = str, bytes, int, tuple, type, len, next
    PermissionError_, OSError_, BaseException_ = PermissionError, OSError, BaseException
    del itertools

    def hook(event, args):
        if type_(event) is not str_:
            return
        denial, checks = "", ()  # checks: (path, "write" / "read" / "make")
        if event == "open":
            if not args or args[0] is None or type_(args[0]) is int_:
                return
            mode = args[1] if len_(args) > 1 else None
            flags = args[2] if len_(args) > 2 else None
            if type_(mode) is str_:
                writing = "w" in mode or "a" in mode or "x" in mode or "+" in mode
            else:
                writing = type_(flags) is int_ and (flags & write_flags) != 0
            checks = ((args[0], "open" if writing else "read"),)
        elif event in denied_events or event.startswith(denied_prefixes):
            denial = event
        elif event == "import":
            if args and type_(args[0]) is str_ and args[0].split(".")[0] in denied_modules:
                denial = "import " + args[0]
        elif event in write_names:
            for name, positions, makes in write_events:
                if name == event:
                    found = []
                    for pos in positions:
                        if pos < len_(args):
                            found.append((args[pos], "make" if makes and pos == positions[-1] else "write"))
                    checks = tuple_(found)
        elif event in read_names:
            checks = ((args[0], "read"),) if args else ()
        elif event == "sqlite3.connect":
            denial = event  # SQLite makes files (ATTACH, VACUUM INTO, journals) with no event of its own
        for path, need in checks:
            if denial:
                break
            if path is None or type_(path) is int_:
                continue
            # The real path: symbolic links resolved by lstat/readlink, ".." taken on what is resolved.
            try:
                path = fspath(path)
                if type_(path) is bytes_:
                    path = path.decode(fsencoding, "surrogateescape")
                if type_(path) is not str_:
                    denial = "a path that is not str or bytes"
                    break
                # getcwd() is already a real path: a relative path resolves from it, component by component.
                pending, real, hops = path.split("/"), ("" if path.startswith("/") else getcwd().rstrip("/")), 0
                pending.reverse()
                while pending:
                    part = pending.pop()
                    if part == "" or part == ".":
                        continue
                    if part == "..":
                        real = real[:real.rfind("/")] if "/" in real else ""
                        continue
                    candidate = real + "/" + part
                    try:
                        is_symlink = is_link(lstat(candidate).st_mode)
                    except OSError_:
                        is_symlink = False
                    if not is_symlink:
                        real = candidate
                        continue
                    hops += 1
                    if hops > max_links:
                        raise OSError_(40, "too many levels of symbolic links")
                    target = readlink(candidate).split("/")
                    if target and target[0] == "":
                        real = ""
                    target.reverse()
                    pending.extend(target)
                real = real or "/"
            except BaseException_ as exc:  # noqa: BLE001 - a hostile __fspath__, a loop of links
                denial = event + " (the path cannot be resolved: " + type_(exc).__name__ + ")"
                break
            inside = real == workdir or real.startswith(work_prefix)
            if need == "read":
                if not (inside or real in devices_all or real.startswith(roots)
                        or (real + "/").startswith(roots)):
                    denial = event + " " + real
            elif not (inside or real in devices_rw):
                denial = event + " " + real + (" for writing" if need == "open" else "")
            elif need == "open" and real not in devices_rw and next_(writes) >= max_files_written:
                denial = "open: too many files opened for writing"
            elif need == "make" and next_(entries) >= max_entries_made:
                denial = event + ": too many directories and links made"
        if denial:
            what = denial[:limit]
            try:
                write(report_fd, (head + quote(what) + tail).encode("ascii"))
            except OSError_:
                pass
            raise PermissionError_("sandbox: " + what + " is not allowed")

    return hook


def _stat_is_link():
    """``stat.S_ISLNK``, the C function of ``_stat``."""
    import _stat

    return _stat.S_ISLNK


# --------------------------------------------------------------------------- plain data between the two processes

_MAX_DEPTH = 64  # nesting of one value
_MAX_NAMES = 1000  # names of the program's namespace the judge takes


def _encode(value, depth=0):
    """``value`` as JSON-ready plain data; raises TypeError for anything but the basic built-in types.

    None, bool, int, float, str and lists are themselves; tuple, set, frozenset, dict, bytes and complex are
    one-key objects (``{"t": [...]}``, ``{"s": ...}``, ``{"f": ...}``, ``{"d": [[key, value], ...]}``,
    ``{"b": hex}``, ``{"c": [re, im]}``). Subclasses (a namedtuple, a defaultdict) travel as their base type.
    """
    if depth > _MAX_DEPTH:
        raise TypeError("a value nested too deeply")
    if value is None or value is True or value is False:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, list):
        return [_encode(v, depth + 1) for v in value]
    if isinstance(value, tuple):
        return {"t": [_encode(v, depth + 1) for v in value]}
    if isinstance(value, (set, frozenset)):
        return {"f" if isinstance(value, frozenset) else "s": [_encode(v, depth + 1) for v in value]}
    if isinstance(value, dict):
        return {"d": [[_encode(k, depth + 1), _encode(v, depth + 1)] for k, v in value.items()]}
    if isinstance(value, (bytes, bytearray)):
        return {"b": bytes(value).hex()}
    if isinstance(value, complex):
        return {"c": [value.real, value.imag]}
    raise TypeError(f"a {type(value).__name__} is not plain data")


def _decode(obj, depth=0):
    """The value `_encode` made ``obj`` from; only built-in types come out. Raises ValueError/TypeError else."""
    if depth > _MAX_DEPTH:
        raise ValueError("a value nested too deeply")
    kind = type(obj)
    if obj is None or obj is True or obj is False or kind is int or kind is float or kind is str:
        return obj
    if kind is list:
        return [_decode(v, depth + 1) for v in obj]
    if kind is dict and len(obj) == 1:
        (tag, body), = obj.items()
        if tag in ("t", "s", "f") and type(body) is list:
            items = [_decode(v, depth + 1) for v in body]
            return tuple(items) if tag == "t" else (set(items) if tag == "s" else frozenset(items))
        if tag == "d" and type(body) is list:
            pairs = [(_decode(p[0], depth + 1), _decode(p[1], depth + 1)) for p in body
                     if type(p) is list and len(p) == 2]
            if len(pairs) != len(body):
                raise ValueError("a dict entry is not a [key, value] pair")
            return dict(pairs)
        if tag == "b" and type(body) is str:
            return bytes.fromhex(body)
        if tag == "c" and type(body) is list and len(body) == 2 and all(type(x) in (int, float) for x in body):
            return complex(body[0], body[1])
    raise ValueError(f"not plain data: {kind.__name__}")


class _Channel:
    """One JSON object per line over a pipe pair; a line longer than ``cap`` bytes breaks the channel."""

    def __init__(self, read_fd, write_fd, cap):
        self.read_fd, self.write_fd, self.cap = read_fd, write_fd, cap
        self.buffer = b""
        self.read, self.write, self.dumps, self.loads = os.read, os.write, json.dumps, json.loads

    def send(self, message):
        data = (self.dumps(message) + "\n").encode("utf-8", "surrogatepass")
        while data:
            data = data[self.write(self.write_fd, data):]

    def receive(self):
        """The next message, or raises EOFError (the other side ended) / ValueError (a broken line)."""
        while b"\n" not in self.buffer:
            if len(self.buffer) > self.cap:
                raise ValueError(f"a message longer than {self.cap} bytes")
            chunk = self.read(self.read_fd, 1 << 16)
            if not chunk:
                raise EOFError("the other process ended")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        if len(line) > self.cap:
            raise ValueError(f"a message longer than {self.cap} bytes")
        message = self.loads(line.decode("utf-8", "surrogatepass"))
        if type(message) is not dict:
            raise ValueError("a message that is not a JSON object")
        return message


# --------------------------------------------------------------------------- running the job


class _Memory:
    """Ballast freed on MemoryError, so that reporting still has room."""

    def __init__(self):
        self.ballast = [bytearray(_BALLAST_BYTES)]

    def release(self):
        self.ballast.clear()


def _make_executor(memory):
    """``(execute, compile_)`` bound to the real ``exec`` and ``compile``.

    ``execute(code, namespace)`` returns ``None`` on success, else ``(kind,
    reason)`` with kind ``"memory"`` or ``"error"``; ``compile_(source, name)``
    returns ``(code, None)`` or ``(None, reason)`` (a syntax error, null bytes,
    bad surrogates, nesting too deep, ...).
    """
    run, build, describe = builtins.exec, builtins.compile, _describe

    def execute(code, namespace):
        try:
            run(code, namespace)
        except MemoryError:
            memory.release()
            return "memory", "MemoryError"
        except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt: all count as failures
            return "error", describe(exc)
        return None

    def compile_(source, name):
        try:
            return build(source, name, "exec", dont_inherit=True), None
        except BaseException as exc:  # noqa: BLE001 - SyntaxError, ValueError, RecursionError, MemoryError
            return None, describe(exc)

    return execute, compile_


def _manifest(namespace):
    """What the judge may bind of the program's top-level names: callables, modules and plain-data values."""
    names = {}
    for name, value in list(namespace.items())[:_MAX_NAMES]:
        if not isinstance(name, str) or name.startswith("__"):
            continue
        if type(value) is type(os):
            names[name] = {"module": str(getattr(value, "__name__", ""))}
        elif callable(value):
            names[name] = {"callable": True}
        else:
            try:
                names[name] = {"data": _encode(value)}
            except (TypeError, ValueError, RecursionError):
                continue
    return names


def _serve_program(job, emit, memory, channel):
    """The program's side: run it, tell the judge its names, then answer calls until the judge hangs up.

    Everything this process sends is untrusted by the judge (the program may have patched any of it).
    """
    execute, compile_ = _make_executor(memory)
    namespace = {"__name__": "__candidate__", "__builtins__": builtins}
    code, why = compile_(job["program"], "<candidate>")
    if code is None:
        channel.send({"program": "syntax_error", "reason": why})
        return
    failure = execute(code, namespace)
    if failure is not None:
        if failure[0] == "memory":
            emit({"event": "memory", "reason": "the program: MemoryError"})
        channel.send({"program": failure[0], "reason": failure[1]})
        return
    channel.send({"program": "ran", "names": _manifest(namespace)})
    while True:
        try:
            request = channel.receive()
        except (EOFError, ValueError):
            return
        answer = _answer(request, namespace, memory, emit)
        channel.send(answer)
        if answer.get("error") == "MemoryError":
            return  # the run's status is "memory" whatever follows; the judge's later calls fail at once


def _answer(request, namespace, memory, emit):
    try:
        function = namespace[request["call"]]
        args = [_decode(a) for a in request["args"]]
        kwargs = {str(k): _decode(v) for k, v in request["kwargs"]}
    except BaseException as exc:  # noqa: BLE001
        return {"error": f"bad call: {_describe(exc)}"}
    try:
        value = function(*args, **kwargs)
    except MemoryError:
        memory.release()
        emit({"event": "memory", "reason": f"{request['call']}(): MemoryError"})
        return {"error": "MemoryError"}
    except BaseException as exc:  # noqa: BLE001 - SystemExit too: the call failed
        kind = next((base.__name__ for base in (StopIteration, StopAsyncIteration, GeneratorExit)
                     if isinstance(exc, base)), type(exc).__name__)  # a subclass is named by its protocol
        return {"raise": kind, "reason": _describe(exc)}
    try:
        return {"ok": _encode(value)}
    except BaseException as exc:  # noqa: BLE001
        return {"error": f"{request['call']}() returned something that is not plain data ({_describe(exc)})"}


class CandidateError(Exception):
    """Raised in the judge when a call into the program failed in a way that maps to no built-in exception."""


# Exceptions that drive the judge's own control flow: raised by a proxy inside ``map``, ``filter``, ``zip``,
# ``iter(f, sentinel)``, a ``for`` loop or a generator, they would end the test's iteration early (``all(...)`` of
# an empty rest is True) instead of failing the test. A call into the program that raised one (by that name,
# whatever its class) raises CandidateError, and the test it ran in fails even if the test caught that.
_PROTOCOL_EXCEPTIONS = frozenset({"StopIteration", "StopAsyncIteration", "GeneratorExit"})
# Exceptions a call into the program may raise in the judge: the built-in Exception subclasses, by name, less the
# iteration protocol's.
_EXCEPTIONS = {name: value for name, value in vars(builtins).items()
               if isinstance(value, type) and issubclass(value, Exception) and name not in _PROTOCOL_EXCEPTIONS
               and not issubclass(value, (StopIteration, StopAsyncIteration))}
# Standard-library modules the judge imports itself when the program's namespace names them (the tests may use
# a module the prompt imported); any other module name is left unbound.
_JUDGE_MODULES = frozenset({
    "abc", "array", "bisect", "calendar", "cmath", "collections", "copy", "dataclasses", "datetime", "decimal",
    "enum", "fractions", "functools", "hashlib", "heapq", "itertools", "json", "math", "numbers", "operator",
    "random", "re", "statistics", "string", "struct", "textwrap", "typing", "unicodedata",
})


class _Remote:
    """The judge's handle on the program's process: calls go out as plain data, answers come back as plain data."""

    def __init__(self, channel, emit):
        self.channel, self.emit, self.broken = channel, emit, ""
        self.protocol = ""  # why the current test fails whatever it catches: the program raised StopIteration...

    def fail(self, why):
        if not self.broken:
            self.broken = why
            self.emit({"event": "crashed", "reason": why[:_REASON_CHARS]})
        raise CandidateError(why)

    def call(self, name, args, kwargs):
        if self.broken:
            raise CandidateError(self.broken)
        try:
            request = {"call": name, "args": [_encode(a) for a in args],
                       "kwargs": [[k, _encode(v)] for k, v in kwargs.items()]}
        except (TypeError, ValueError, RecursionError) as exc:
            raise TypeError(f"the tests pass {name}() an argument that cannot travel: {exc}") from None
        try:
            self.channel.send(request)
            answer = self.channel.receive()
        except EOFError:
            self.fail("the program's process ended before the tests finished")
        except (OSError, ValueError, RecursionError) as exc:
            self.fail(f"the program's process broke the channel: {_describe(exc)}")
        if "ok" in answer:
            try:
                return _decode(answer["ok"])
            except (TypeError, ValueError, RecursionError, MemoryError) as exc:
                raise CandidateError(f"{name}() returned something that is not plain data: {_describe(exc)}") \
                    from None
        if "raise" in answer:
            kind, reason = str(answer["raise"])[:_REASON_CHARS], str(answer.get("reason", ""))[:_REASON_CHARS]
            if kind in _PROTOCOL_EXCEPTIONS:
                why = f"{name}() raised {kind} (an iteration-protocol exception: a failure, never a loop's end)"
                self.protocol = self.protocol or why
                raise CandidateError(why)
            try:
                error = _EXCEPTIONS.get(kind, CandidateError)(reason)
            except Exception:  # noqa: BLE001 - e.g. UnicodeDecodeError takes five arguments
                error = CandidateError(f"{kind}: {reason}"[:_REASON_CHARS])
            raise error
        raise CandidateError(str(answer.get("error", "a malformed answer"))[:_REASON_CHARS])

    def proxy(self, name):
        call = self.call

        def remote(*args, **kwargs):
            return call(name, args, kwargs)

        remote.__name__ = remote.__qualname__ = name
        return remote


def _judge_namespace(names, remote, allowed=None):
    """The tests' namespace: the program's names as proxies, module imports or copies of plain data.

    Names of built-ins are never taken from the program (it could rebind ``abs`` or ``len`` for the tests), nor,
    when ``allowed`` is a list, any name outside it (the task's helpers then come from the setup, run here).
    """
    import importlib
    import keyword

    namespace = {"__name__": "__tests__", "__builtins__": builtins}
    if type(names) is not dict:
        return namespace
    reserved = set(dir(builtins))
    allowed = None if allowed is None else frozenset(str(n) for n in allowed)
    for name, entry in list(names.items())[:_MAX_NAMES]:
        if (not name.isidentifier() or keyword.iskeyword(name) or name.startswith("__") or name in reserved
                or type(entry) is not dict or (allowed is not None and name not in allowed)):
            continue
        if entry.get("callable") is True:
            namespace[name] = remote.proxy(name)
        elif "module" in entry and entry["module"] in _JUDGE_MODULES:
            namespace[name] = importlib.import_module(entry["module"])
        elif "data" in entry:
            try:
                namespace[name] = _decode(entry["data"])
            except (TypeError, ValueError, RecursionError):
                continue
    return namespace


def _judge(job, emit, memory, channel):
    """The judge's side: run the setup and each test here, calling the program only through plain data.

    This process never runs the program's code nor holds an object the program made, so the comparisons in the
    tests (``==``, ``abs``, ``json``, ``AssertionError``) are the real ones whatever the program patched.
    """
    remote = _Remote(channel, emit)
    try:
        first = channel.receive()
    except EOFError:
        emit({"event": "crashed", "reason": "the program's process ended before it ran"})
        return
    except (OSError, ValueError, RecursionError) as exc:
        emit({"event": "crashed", "reason": f"the program's process broke the channel: {_describe(exc)}"})
        return
    outcome = first.get("program")
    if outcome in ("syntax_error", "error", "memory"):
        emit({"event": outcome, "reason": str(first.get("reason", ""))[:_REASON_CHARS]})
        return
    if outcome != "ran":
        emit({"event": "crashed", "reason": "the program's process sent no report of the program"})
        return
    execute, compile_ = _make_executor(memory)
    namespace = _judge_namespace(first.get("names"), remote, job.get("program_names"))
    setup, tests = job["setup"], list(job["tests"])

    def run(code):
        remote.protocol = ""
        failure = execute(code, namespace)
        return ("error", remote.protocol) if failure is None and remote.protocol else failure

    failure = None
    if setup:
        code, why = compile_(setup, "<setup>")
        failure = ("error", f"does not compile: {why}") if code is None else run(code)
        if failure is not None:
            emit({"event": failure[0], "reason": f"setup: {failure[1]}"})
            return
    for index, test in enumerate(tests):
        code, why = compile_(test, f"<test {index}>")
        failure = ("error", f"does not compile: {why}") if code is None else run(code)
        if failure is not None and failure[0] == "memory":
            emit({"event": "memory", "reason": f"test {index}: MemoryError"})
        emit({"event": "test", "index": index, "passed": failure is None,
              "reason": "" if failure is None else failure[1]})
    emit({"event": "done"})


# --------------------------------------------------------------------------- confinement

# Shared libraries that standard-library extension modules link to (zlib, OpenSSL, libffi, ...).
_LIBRARY_ROOTS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/etc/ld.so.cache")
_PR_SET_KEEPCAPS, _CAP_DAC_READ_SEARCH, _LINUX_CAPABILITY_VERSION_3 = 8, 2, 0x20080522


def _read_roots():
    """What imports must be able to read: the standard library, the interpreter's and the system's libraries."""
    roots = [r for r in _LIBRARY_ROOTS + (os.path.join(sys.base_prefix, "lib"),) if os.path.exists(r)]
    for entry in sys.path:
        if entry and os.path.exists(entry):
            real = os.path.realpath(entry)
            roots.append(real if os.path.isdir(real) else os.path.dirname(real))
    return sorted({os.path.realpath(r) for r in roots})


def _drop_privileges(identity):
    """Become ``identity["uid"]``/``["gid"]`` with no supplementary groups (the caller is root).

    With ``identity["keep_read"]`` the process keeps one capability, CAP_DAC_READ_SEARCH (read and search any
    file), and no other: set where that user could not read the interpreter's standard library. It gives no
    right to write, chmod, chown or touch a file it does not own.
    """
    uid, gid, keep_read = int(identity["uid"]), int(identity["gid"]), bool(identity["keep_read"])
    ctypes, libc = _libc()
    if keep_read and libc.prctl(_PR_SET_KEEPCAPS, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0),
                                ctypes.c_ulong(0)) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_KEEPCAPS)")
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if keep_read:
        header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
        data = (ctypes.c_uint32 * 6)(1 << _CAP_DAC_READ_SEARCH, 1 << _CAP_DAC_READ_SEARCH, 0, 0, 0, 0)
        if libc.syscall(126, ctypes.byref(header), ctypes.byref(data)) != 0:  # capset
            raise OSError(ctypes.get_errno(), "capset")
        libc.prctl(_PR_SET_KEEPCAPS, ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or os.getgroups():
        raise OSError(1, "the identity did not change")
    try:
        os.setresuid(0, 0, 0)
    except PermissionError:
        pass
    else:
        raise OSError(1, "the process could become root again")
    return ["uid"], ([f"uid: kept CAP_DAC_READ_SEARCH only (uid {uid} cannot read the interpreter's library)"]
                     if keep_read else [])


# Extension modules of the standard library the program's process never maps: memory access (ctypes), test
# helpers, subinterpreters, C code that makes files or kernel objects without an audit event, terminals and
# system databases. The rest are mapped before seccomp forbids new executable memory, so `import` finds them.
_NEVER_MAPPED = ("_ctypes", "_test", "xxlimited", "_xx", "_posixshmem", "_multiprocessing", "_sqlite3", "_dbm",
                 "_gdbm", "readline", "_ssl", "_curses", "_tkinter", "nis", "spwd", "ossaudiodev", "_crypt", "syslog")


def _preload_extensions():
    """Map the standard library's extension modules (``lib-dynload``) without running them; returns notes.

    After seccomp forbids PROT_EXEC mappings in the program's process, a later ``import math`` finds its shared
    object already mapped (dlopen returns the same handle, nothing new is mapped); any other shared object (one
    the program wrote, one in `_NEVER_MAPPED`, a copy of an allowed one under another name) cannot be loaded.
    """
    import importlib.machinery

    ctypes, _ = _libc()
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    notes = []
    for folder in [p for p in sys.path if p.endswith("lib-dynload") and os.path.isdir(p)]:
        for name in sorted(os.listdir(folder)):
            if not name.endswith(suffixes) or name.startswith(_NEVER_MAPPED):
                continue
            try:
                ctypes.CDLL(os.path.join(folder, name), mode=os.RTLD_NOW | os.RTLD_LOCAL)
            except OSError as exc:  # e.g. a module whose system library is missing: it cannot be imported anyway
                notes.append(f"preload {name}: {_describe(exc)}"[:_REASON_CHARS])
    return notes[:3]


def _confine(job):
    """Apply every requested layer; returns (active layers, notes on layers that could not be applied, roots)."""
    layers, notes = ["rlimits", "session"], []
    roots = _read_roots()
    if job.get("identity"):
        try:
            dropped, why = _drop_privileges(job["identity"])
            layers += dropped
            notes += why
        except (OSError, AttributeError, ValueError) as exc:
            # Running the program as root is not an option: end here, the parent reports a crash with this.
            os.write(2, f"sandbox: could not drop privileges: {_describe(exc)}\n".encode())
            os._exit(70)
    program = job.get("role") == "program"
    if program and job["seccomp"]:
        notes += _preload_extensions()
    for name, wanted, apply in (("landlock", job["landlock"], lambda: _landlock(job["workdir"], roots)),
                                ("seccomp", job["seccomp"], lambda: _seccomp(exec_mappings=not program))):
        if not wanted:
            continue
        try:
            layers += apply()
        except (OSError, AttributeError, ValueError) as exc:
            notes.append(f"{name}: {_describe(exc)}")
    for module in [m for m in sys.modules if m == "ctypes" or m.startswith(("ctypes.", "_ctypes"))]:
        del sys.modules[module]  # a later `import ctypes` then raises the audit event again
    return layers, notes, roots


def main():
    job = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    emit = _emitter(job["report_fd"], job["nonce"])
    channel = _Channel(job["channel_in"], job["channel_out"], job["max_message_bytes"])
    _set_limits(job["limits"])
    os.chdir(job["workdir"])
    import importlib  # noqa: F401 - loaded before any privilege drop (the judge's module imports use it)
    import keyword  # noqa: F401

    layers, notes, roots = _confine(job)
    memory = _Memory()
    if job["audit"]:
        # With seccomp, _posixsubprocess cannot fork or exec anyway: importing subprocess (asyncio does) is fine.
        denied_modules = _DENIED_MODULES - ({"_posixsubprocess"} if "seccomp" in layers else set())
        sys.addaudithook(_make_audit_hook(job["workdir"], roots, job["limits"]["files_written"],
                                          job["limits"]["entries_made"], job["report_fd"],
                                          job["nonce"], denied_modules))
        del denied_modules  # the hook holds its own copy; nothing of its state stays in this frame
        layers.append("audit")
    emit({"event": "ready", "layers": layers, "notes": notes})
    role = _judge if job["role"] == "judge" else _serve_program
    write, end, describe = os.write, os._exit, _describe  # bound now: the program may replace the module's names
    try:
        role(job, emit, memory, channel)
    except BaseException as exc:  # noqa: BLE001 - e.g. EPIPE once the judge hung up, or a runner the program broke
        # No traceback: printing one reads this file's source, outside what the audit hook lets the program read.
        try:
            write(2, f"sandbox runner ({job['role']}): {describe(exc)}\n".encode("utf-8", "replace"))
        finally:
            end(1)
    os._exit(0)  # stdout/stderr are unbuffered (-u): nothing to flush


# --------------------------------------------------------------------------- removing a working directory

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _empty_directory(fd):
    """Unlink everything but the subdirectories in the open directory ``fd``; returns the subdirectories' names."""
    import stat

    try:
        os.fchmod(fd, stat.S_IRWXU)  # the program may have made it read-only (or unreadable)
    except OSError:
        pass
    with os.scandir(fd) as entries:
        listed = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
    for name, _ in (item for item in listed if not item[1]):
        os.unlink(name, dir_fd=fd)
    return [name for name, is_dir in listed if is_dir]


def _open_subdirectory(name, parent_fd):
    import stat

    try:
        os.chmod(name, stat.S_IRWXU, dir_fd=parent_fd)  # a directory the program made mode 000 cannot be opened
    except OSError:
        pass
    return os.open(name, _DIRECTORY_FLAGS, dir_fd=parent_fd)


def remove_tree(path):
    """Remove ``path`` and whatever tree a program built in it; raises OSError if something stays.

    Iterative, through directory descriptors: a tree of any depth (thousands of nested directories, paths far
    beyond PATH_MAX) needs neither recursion nor long paths, and at most two descriptors are open at a time.
    Directories made read-only or unreadable are made writable first; symbolic links are removed, never followed.
    """
    import stat

    fd = None  # the one descriptor held between steps; closed on any failure too
    try:
        if not os.path.isdir(path) or os.path.islink(path):
            return
        os.chmod(path, stat.S_IRWXU)
        fd = os.open(path, _DIRECTORY_FLAGS)
        here, pending, above = "", _empty_directory(fd), []  # above: (name, pending) of each ancestor
        while pending or above:
            if pending:
                name = pending.pop()
                child = _open_subdirectory(name, fd)
                os.close(fd)
                above.append((here, pending))
                fd, here, pending = child, name, _empty_directory(child)
                continue
            parent = os.open("..", _DIRECTORY_FLAGS, dir_fd=fd)  # no symlink was followed: ".." is where we came from
            os.close(fd)
            fd = parent
            os.rmdir(here, dir_fd=fd)
            here, pending = above.pop()
        os.close(fd)
        fd = None
        os.rmdir(path)
    finally:
        if fd is not None:
            os.close(fd)


def _remove_main(path):
    """``_sandbox_runner.py --remove PATH``: the caller's out-of-band clean-up (run as the caller, unconfined)."""
    try:
        remove_tree(path)
    except OSError as exc:
        os.write(2, f"could not remove {path}: {_describe(exc)}\n".encode("utf-8", "replace"))
        os._exit(1)
    os._exit(0)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--remove"] and len(sys.argv) == 3:
        _remove_main(sys.argv[2])
    main()
