"""Hostile programs for `CodeTask.verify`, as data (used by ``test_code_sandbox.py``).

Each case is a program submitted for the problem ``add(a, b)`` (tests in `TESTS`). Placeholders replaced
before the run: ``@CANARY@`` a root-owned 0644 file with an extended attribute, in ``@DIR@`` (0755, outside
every sandbox directory); ``@PORT@`` a listening TCP port of the test process; ``@MARKER@`` a name unique to
the run (used for files a program tries to leave in /tmp).

Classes: ``escape`` (change or read the host: file metadata, files outside the working directory, network,
processes, signals), ``forgery`` (make a wrong ``add`` score 1.0), ``resource`` (exhaust the machine) and
``cleanup`` (leave something behind). ``statuses``: what `run_tests` may report with every layer on.
Escape programs define the right ``add`` after the attack: only the sandbox stands between them and 1.0.
Forgery programs define a wrong one (wrong on every test), so any reward above 0 is a forgery that worked.
"""

from __future__ import annotations

from dataclasses import dataclass

TESTS = (
    "assert add(2, 3) == 5",
    "assert abs(add(0.5, 0.25) - 0.75) < 1e-9",
    "assert isinstance(add(1, 1), int) and len(str(add(10, 5))) == 2",
)
RIGHT = "\ndef add(a, b):\n    return a + b\n"
WRONG = "\ndef add(a, b):\n    return a - b - 1\n"


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # escape, forgery, resource, cleanup
    program: str
    statuses: tuple[str, ...]
    alone: tuple[str, ...] = ()  # layers each of which, on its own, keeps the canary (tested one at a time)
    reward: float = 0.0  # 1.0 only for cleanup cases whose program is right and does nothing denied


V, E, T, C, M, O, OK = "violation", "error", "timeout", "crashed", "memory", "output_limit", "ok"

META = ("uid", "seccomp", "audit")  # Landlock has no right for metadata: alone, it stops only the opens
FILES = ("uid", "landlock", "audit")  # seccomp has no say on what a write or a rename names
_FD = "import os\nfd = os.open('@CANARY@', os.O_RDONLY)\n"
_CTYPES = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
           "fd = os.open('@CANARY@', os.O_PATH)\n")

ESCAPE = [
    # ---- the canary's metadata, through a descriptor and through its path
    Case("fchmod_setuid", "escape", _FD + "os.fchmod(fd, 0o4777)\n" + RIGHT, (V,), META),
    Case("chmod_path", "escape", "import os\nos.chmod('@CANARY@', 0o777)\n" + RIGHT, (V,), META),
    Case("chmod_dir", "escape", "import os\nos.chmod('@DIR@', 0o777)\n" + RIGHT, (V,), META),
    Case("fchown", "escape", _FD + "os.fchown(fd, 65534, 65534)\n" + RIGHT, (V,), META),
    Case("chown_path", "escape", "import os\nos.chown('@CANARY@', 1, 1)\n" + RIGHT, (V,), META),
    Case("lchown_path", "escape", "import os\nos.lchown('@CANARY@', 1, 1)\n" + RIGHT, (V,), META),
    Case("futimens", "escape", _FD + "os.utime(fd, (0, 0))\n" + RIGHT, (V,), META),
    Case("utime_path", "escape", "import os\nos.utime('@CANARY@', (1, 1))\n" + RIGHT, (V,), META),
    Case("fsetxattr", "escape", _FD + "os.setxattr(fd, 'user.evil', b'1')\n" + RIGHT, (V,), META),
    Case("fremovexattr", "escape", _FD + "os.removexattr(fd, 'user.rlvr')\n" + RIGHT, (V,), META),
    Case("setxattr_path", "escape", "import os\nos.setxattr('@CANARY@', 'user.evil', b'1')\n" + RIGHT, (V,), META),
    Case("pathlib_chmod", "escape", "import pathlib\npathlib.Path('@CANARY@').chmod(0o4755)\n" + RIGHT, (V,), META),
    Case("shutil_copystat", "escape",
         "import os, shutil\nopen('src', 'w').close()\nshutil.copystat('src', '@CANARY@')\n" + RIGHT, (V,), META),
    Case("fchmodat2_empty_path", "escape",
         _CTYPES + "r = libc.syscall(452, fd, b'', 0o4777, 0x1000)\nprint('fchmodat2', r, ctypes.get_errno())\n"
         + RIGHT, (V,), META),
    Case("fchownat_empty_path", "escape",
         _CTYPES + "r = libc.syscall(260, fd, b'', 65534, 65534, 0x1000)\nprint('fchownat', r)\n" + RIGHT, (V,), META),
    Case("utimensat_o_path", "escape",
         _CTYPES + "r = libc.syscall(280, fd, None, None, 0)\nprint('utimensat', r)\n" + RIGHT, (V,), META),
    Case("libc_chmod", "escape",
         "import ctypes\nctypes.CDLL(None).chmod(b'@CANARY@', 0o4777)\n" + RIGHT, (V,), META),
    # ---- host files
    Case("read_host_file", "escape", "print(open('@CANARY@').read())\n" + RIGHT, (V,)),
    Case("read_etc_passwd", "escape", "print(open('/etc/passwd').read())\n" + RIGHT, (V,)),
    Case("list_root_home", "escape", "import os\nprint(os.listdir('/root'))\n" + RIGHT, (V,)),
    Case("overwrite_host_file", "escape", "open('@CANARY@', 'w').write('owned')\n" + RIGHT, (V,), FILES),
    Case("plant_file_beside", "escape", "open('@DIR@/planted', 'w').write('x')\n" + RIGHT, (V,)),
    Case("rename_host_file", "escape", "import os\nos.rename('@CANARY@', '@CANARY@.moved')\n" + RIGHT, (V,), FILES),
    Case("unlink_host_file", "escape", "import os\nos.remove('@CANARY@')\n" + RIGHT, (V,), FILES),
    Case("write_through_symlink", "escape",
         "import os\nos.symlink('@CANARY@', 'link')\nopen('link', 'a').write('owned')\n" + RIGHT, (V,), FILES),
    Case("hardlink_then_chmod", "escape",
         "import os\nos.link('@CANARY@', 'hard')\nos.chmod('hard', 0o4777)\n" + RIGHT, (V,), FILES),
    # ---- network, processes, signals
    Case("tcp_connect", "escape",
         "import socket\nsocket.create_connection(('127.0.0.1', @PORT@), timeout=1)\n" + RIGHT, (V,)),
    Case("udp_send", "escape",
         "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', @PORT@))\n"
         + RIGHT, (V,)),
    Case("tcp_listen", "escape",
         "import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\ns.listen()\n" + RIGHT, (V,)),
    Case("subprocess_shell", "escape",
         "import subprocess\nsubprocess.run(['/bin/sh', '-c', 'touch /tmp/@MARKER@'])\n" + RIGHT, (V,)),
    Case("os_system", "escape", "import os\nos.system('touch /tmp/@MARKER@')\n" + RIGHT, (V,)),
    Case("os_execv", "escape", "import os\nos.execv('/bin/sh', ['sh', '-c', 'touch /tmp/@MARKER@'])\n" + RIGHT, (V,)),
    Case("posix_spawn", "escape",
         "import os\nos.posix_spawn('/bin/touch', ['touch', '/tmp/@MARKER@'], {})\n" + RIGHT, (V,)),
    Case("multiprocessing", "escape",
         "import multiprocessing\np = multiprocessing.Process(target=print)\np.start()\n" + RIGHT, (V, E)),
    Case("kill_parent", "escape", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + RIGHT, (V,)),
    Case("killpg_parent", "escape",
         "import os, signal\nos.killpg(os.getpgid(os.getppid()), signal.SIGTERM)\n" + RIGHT, (V,)),
    Case("kill_the_judge", "escape",
         "import os, signal\nfor pid in range(os.getpid() + 1, os.getpid() + 4):\n    try:\n"
         "        os.kill(pid, signal.SIGKILL)\n    except ProcessLookupError:\n        pass\n" + RIGHT, (V,)),
]

FORGERY = [
    Case("patch_builtins_abs", "forgery", "import builtins\nbuiltins.abs = lambda x: 0\n"
         "builtins.isinstance = lambda *a: True\nbuiltins.len = lambda x: 2\n" + WRONG, (OK, C)),
    Case("shadow_builtins_in_module", "forgery",
         "def abs(x):\n    return 0\ndef len(x):\n    return 2\ndef isinstance(*a):\n    return True\n"
         "class AssertionError(Exception):\n    pass\n" + WRONG, (OK,)),
    Case("patch_exec_compile", "forgery",
         "import builtins\nbuiltins.exec = lambda *a, **k: None\nbuiltins.compile = lambda *a, **k: None\n" + WRONG,
         (OK,)),
    Case("patch_json_dumps", "forgery",
         "import json\njson.dumps = lambda *a, **k: '{\"event\": \"test\", \"passed\": true}'\n"
         "json.loads = lambda *a, **k: {'ok': 5}\n" + WRONG, (OK,)),
    Case("replace_json_module", "forgery",
         "import sys, types\nfake = types.ModuleType('json')\nfake.dumps = lambda *a, **k: '{\"ok\": 5}'\n"
         "fake.loads = lambda *a, **k: {'ok': 5}\nsys.modules['json'] = fake\n" + WRONG, (OK,)),
    Case("patch_pickle_and_stdout", "forgery",
         "import pickle, sys, io\npickle.dumps = lambda *a, **k: b'passed'\nsys.stdout = io.StringIO()\n"
         "sys.__stdout__ = sys.stdout\n" + WRONG, (OK,)),
    Case("always_true_eq", "forgery",
         "class Anything:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
         "    def __sub__(self, other):\n        return self\n    def __abs__(self):\n        return 0\n"
         "    def __lt__(self, other):\n        return True\n"
         "def add(a, b):\n    return Anything()\n", (OK,)),
    Case("int_subclass_eq", "forgery",
         "class Int(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
         "    def __sub__(self, other):\n        return Int(0)\n    def __abs__(self):\n        return 0\n"
         "    def __str__(self):\n        return '15'\n"
         "def add(a, b):\n    return Int(a - b - 1)\n", (OK,)),
    Case("str_subclass_eq", "forgery",
         "class Str(str):\n    def __eq__(self, other):\n        return True\n    __hash__ = str.__hash__\n"
         "def add(a, b):\n    return Str('nope')\n", (OK,)),
    Case("patch_operator_eq", "forgery",
         "import operator\noperator.eq = lambda a, b: True\noperator.lt = lambda a, b: True\n" + WRONG, (OK,)),
    Case("sys_exit_early", "forgery", "import sys\nsys.exit(0)\n" + WRONG, (E,)),
    Case("os_exit_early", "forgery", "import os\nos._exit(0)\n" + WRONG, (C,)),
    Case("os_exit_in_call", "forgery", "import os\ndef add(a, b):\n    os._exit(0)\n", (C,)),
    Case("sys_exit_in_call", "forgery", "import sys\ndef add(a, b):\n    sys.exit(0)\n", (OK,)),
    Case("print_fake_verdict", "forgery",
         "print('{\"event\": \"done\"}')\nprint('{\"ok\": 5}')\nprint('status: ok, 3/3 tests passed, reward 1.0')\n"
         + WRONG, (OK,)),
    Case("write_forged_lines_to_every_fd", "forgery",
         "import os\nlines = [b'{\"event\": \"test\", \"index\": %d, \"passed\": true}\\n' % i for i in range(3)]\n"
         "lines += [b'{\"event\": \"done\"}\\n', b'{\"ok\": 5}\\n', b'{\"ok\": 0.75}\\n']\n"
         "for fd in range(3, 64):\n    for line in lines:\n        try:\n            os.write(fd, line)\n"
         "        except OSError:\n            pass\n" + WRONG, (OK, C)),
    Case("systemexit_in_del", "forgery",
         "class Bomb:\n    def __del__(self):\n        raise SystemExit(0)\n"
         "def add(a, b):\n    return Bomb()\n", (OK,)),
    Case("frame_walk_patch_reporter", "forgery",
         "import sys\ndef add(a, b):\n    frame = sys._getframe(1)\n    while frame is not None:\n"
         "        g = frame.f_globals\n        for name in ('_encode', '_answer', '_describe'):\n"
         "            if name in g:\n                g[name] = lambda *x, **k: {'event': 'test', 'passed': True}\n"
         "        for value in list(frame.f_locals.values()):\n            if hasattr(value, 'send'):\n"
         "                try:\n                    value.send({'event': 'done'})\n"
         "                except Exception:\n                    pass\n        frame = frame.f_back\n"
         "    return a - b - 1\n", (OK, C)),
    Case("traceback_frame_walk", "forgery",
         "def add(a, b):\n    try:\n        raise ValueError\n    except ValueError as e:\n"
         "        f = e.__traceback__.tb_frame\n    while f is not None:\n"
         "        for k in list(f.f_globals):\n            if k.startswith('_') and callable(f.f_globals[k]):\n"
         "                f.f_globals[k] = lambda *x, **y: True\n        f = f.f_back\n"
         "    return 0\n", (OK, C)),
    Case("raise_assertion_pass", "forgery",
         "class Pass(BaseException):\n    pass\ndef add(a, b):\n    raise Pass()\n", (OK,)),
    Case("thread_floods_channel", "forgery",
         "import os, threading\ndef flood():\n    while True:\n        for fd in range(3, 16):\n"
         "            try:\n                os.write(fd, b'{\"ok\": 5}\\n')\n            except OSError:\n"
         "                pass\nthreading.Thread(target=flood, daemon=True).start()\n" + WRONG, (OK, C, T, O)),
    Case("deeply_nested_answer", "forgery",
         "def add(a, b):\n    x = []\n    for _ in range(100000):\n        x = [x]\n    return x\n", (OK,)),
    Case("oversized_answer", "forgery", "def add(a, b):\n    return 'x' * (4 << 20)\n", (OK, C)),
    Case("generator_answer", "forgery", "def add(a, b):\n    yield a + b\n", (OK,)),
]

RESOURCE = [
    Case("fork_bomb", "resource", "import os\nwhile True:\n    os.fork()\n" + RIGHT, (V,)),
    Case("memory_bomb", "resource", "hoard = []\nwhile True:\n    hoard.append(' ' * 10**6)\n" + RIGHT, (M,)),
    Case("memory_bomb_in_call", "resource",
         "def add(a, b):\n    hoard = []\n    while True:\n        hoard.append(' ' * 10**6)\n", (M,)),
    Case("cpu_loop", "resource", "while True:\n    pass\n" + RIGHT, (T,)),
    Case("cpu_loop_in_call", "resource", "def add(a, b):\n    while True:\n        pass\n", (T,)),
    Case("sleep_forever", "resource", "import time\ntime.sleep(3600)\n" + RIGHT, (T,)),
    Case("huge_output", "resource", "while True:\n    print('x' * 1000)\n" + RIGHT, (O,)),
    Case("huge_file", "resource", "f = open('big', 'wb')\nwhile True:\n    f.write(b'x' * 65536)\n" + RIGHT,
         (E, O)),  # Python ignores SIGXFSZ: the write past RLIMIT_FSIZE raises EFBIG
    Case("many_files", "resource",
         "for i in range(5000):\n    open(f'f{i}', 'w').close()\n" + RIGHT, (V,)),
    Case("thread_bomb", "resource",
         "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(60,)).start()\n" + RIGHT,
         (E, M, T)),
    Case("deep_recursion", "resource", "def f(n):\n    return f(n + 1)\nf(0)\n" + RIGHT, (E,)),
]

CLEANUP = [
    Case("deep_tree", "cleanup",
         "import os\nfor _ in range(400):\n    os.mkdir('d')\n    os.chdir('d')\n" + RIGHT, (OK,), reward=1.0),
    Case("chmod_000_tree", "cleanup",
         "import os\nos.makedirs('a/b/c')\nopen('a/b/c/f', 'w').close()\nos.chmod('a/b', 0)\nos.chmod('a', 0)\n"
         + RIGHT, (V,)),
    Case("read_only_file_and_dir", "cleanup",
         "import os\nos.mkdir('ro')\nopen('ro/f', 'w').close()\nos.chmod('ro/f', 0o400)\nos.chmod('ro', 0o500)\n"
         + RIGHT, (V,)),
    Case("file_in_tmp", "cleanup", "open('/tmp/@MARKER@', 'w').write('left behind')\n" + RIGHT, (V,)),
    Case("tempfile_outside_tmpdir", "cleanup",
         "import tempfile\ntempfile.mkstemp(dir='/tmp', prefix='@MARKER@')\n" + RIGHT, (V,)),
    Case("symlink_to_host_dir", "cleanup",
         "import os\nos.symlink('@DIR@', 'outside')\nos.symlink('/', 'root')\nos.symlink('loop', 'loop')\n" + RIGHT,
         (OK,), reward=1.0),
    Case("fifo", "cleanup", "import os\nos.mkfifo('pipe')\n" + RIGHT, (E,)),  # seccomp: mknod(at)
    Case("immutable_flag", "cleanup",
         "import fcntl, struct\nf = open('stuck', 'w')\nfcntl.ioctl(f, 0x40086602, struct.pack('l', 0x10))\n"
         + RIGHT, (V,)),
    Case("writer_thread_at_exit", "cleanup",
         "import threading, os\ndef spam():\n    i = 0\n    while True:\n        i += 1\n"
         "        with open(f'w{i % 20}', 'w') as f:\n            f.write('x')\n"
         # join: the writer reaches the audit hook's limit on files opened for writing before the program goes on,
         # however busy the machine (without it a loaded host could answer first and the verdict would be a race)
         "writer = threading.Thread(target=spam, daemon=True)\nwriter.start()\nwriter.join(20)\n" + RIGHT, (V,)),
]

CASES = ESCAPE + FORGERY + RESOURCE + CLEANUP
