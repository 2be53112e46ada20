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
   raising, identity changes or file-metadata syscalls;
6. a Python audit hook denying the same, reporting the first denial as ``violation``;
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
}
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_ALLOW, _RET_ERRNO, _RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
_OFF_NR, _OFF_ARCH = 0, 4


def _arg_low(i):
    return 16 + 8 * i  # low 32 bits of argument i (little-endian seccomp_data)


def _seccomp_program(pid):
    """The BPF filter as (code, jt, jf, k) tuples; jump targets are labels resolved here."""
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
    prog += [(_JEQ, "eperm", None, nr) for nr in sorted(_DENIED_SYSCALLS.values())]
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


def _seccomp():
    """Install the filter (x86_64); returns the active layer names."""
    if platform.machine() != "x86_64":
        raise OSError(_ENOSYS, f"the seccomp filter is written for x86_64, not {platform.machine()}")
    import struct

    ctypes, libc = _libc()
    code = _seccomp_program(os.getpid())
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
})
# Events whose path arguments (by position) must lie in the working directory.
_WRITE_PATH_EVENTS = {
    "os.remove": (0,), "os.rename": (0, 1), "os.rmdir": (0,), "os.mkdir": (0,), "os.link": (0, 1),
    "os.symlink": (1,), "os.truncate": (0,), "os.chdir": (0,), "os.mkfifo": (0,), "os.mknod": (0,),
    "shutil.rmtree": (0,),
}
# Events that read a directory or metadata: allowed in the working directory and the read roots.
_READ_PATH_EVENTS = {"os.listdir": (0,), "os.scandir": (0,), "os.listxattr": (0,), "os.getxattr": (0,)}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class _Policy:
    """Which paths the program may read and write (checked after resolving symlinks)."""

    def __init__(self, workdir, read_roots, max_files_written):
        self.workdir = os.path.realpath(workdir)
        self.read_roots = tuple(os.path.realpath(r) for r in read_roots)
        self.read_files = frozenset(_DEVICES_RW + _DEVICES_R)
        self.write_files = frozenset(_DEVICES_RW)
        self.writes_left = max_files_written

    @staticmethod
    def resolve(path):
        """The real path of a str/bytes/PathLike path; ``None`` for a file descriptor or ``None``."""
        if path is None or isinstance(path, int):
            return None
        return os.path.realpath(os.fsdecode(path))

    @staticmethod
    def _under(path, root):
        return path == root or path.startswith(root.rstrip(os.sep) + os.sep)

    def may_write(self, real):
        return real in self.write_files or self._under(real, self.workdir)

    def may_read(self, real):
        return (real in self.read_files or self._under(real, self.workdir)
                or any(self._under(real, r) for r in self.read_roots))


def _opens_for_writing(mode, flags):
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _make_audit_hook(policy, emit, denied_modules=_DENIED_MODULES):
    """The hook: raises PermissionError on a denied event, reporting the first one as a violation."""
    reported = []

    def deny(event, detail):
        if not reported:
            reported.append(event)
            emit({"event": "violation", "what": f"{event} {detail}".strip()[:_REASON_CHARS]})
        raise PermissionError(f"sandbox: {event} is not allowed ({detail})"[:_REASON_CHARS])

    def check_paths(event, args, positions, allowed):
        for pos in positions:
            if pos < len(args):
                real = policy.resolve(args[pos])
                if real is not None and not allowed(real):
                    deny(event, real)

    def check_open(args):
        real = policy.resolve(args[0])
        if real is None:
            return
        if _opens_for_writing(args[1] if len(args) > 1 else None, args[2] if len(args) > 2 else None):
            if not policy.may_write(real):
                deny("open", f"{real} for writing")
            if real not in policy.write_files:
                policy.writes_left -= 1
                if policy.writes_left < 0:
                    deny("open", "too many files opened for writing")
        elif not policy.may_read(real):
            deny("open", real)

    def hook(event, args):
        if event == "open":
            check_open(args)
        elif event in _DENIED_EVENTS or event.startswith(_DENIED_PREFIXES):
            deny(event, "")
        elif event == "import":
            if args and isinstance(args[0], str) and args[0].split(".")[0] in denied_modules:
                deny("import", args[0])
        elif event in _WRITE_PATH_EVENTS:
            check_paths(event, args, _WRITE_PATH_EVENTS[event], policy.may_write)
        elif event in _READ_PATH_EVENTS:
            check_paths(event, args, _READ_PATH_EVENTS[event], policy.may_read)
        elif event == "sqlite3.connect" and args and args[0] not in (":memory:", "", b":memory:"):
            check_paths(event, args, (0,), policy.may_write)

    return hook


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
    for name, wanted, apply in (("landlock", job["landlock"], lambda: _landlock(job["workdir"], roots)),
                                ("seccomp", job["seccomp"], _seccomp)):
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
        policy = _Policy(job["workdir"], roots, job["limits"]["files_written"])
        sys.addaudithook(_make_audit_hook(policy, emit, denied_modules))
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


if __name__ == "__main__":
    main()
