"""Hostile programs against the sandbox's file cap, with the program's own guards off (issue 60, item 3).

The audit hook's caps (``max_files_written`` files opened for writing, `MAX_ENTRIES_MADE` other entries) are
counted inside the program's process, which a program that gets around the hook (SQLite's ``ATTACH`` made 60 files
past the 32-file cap) escapes. The cap that holds whatever the program does is `entries_cap`, enforced outside it:

* ``tmpfs`` (root with CAP_SYS_ADMIN): the working directory is a tmpfs of ``entries_cap + 2`` inodes, so the
  kernel refuses the entry past the cap (ENOSPC; a hard link takes an inode reservation too), and the parent
  reads the kernel's count (``statvfs``) after the run;
* without a mount (not root, a container without CAP_SYS_ADMIN): the parent counts the tree after both children
  are dead, through directory descriptors, stopping past the cap.

Either way a run past the cap is a ``violation`` with nothing passed. Every flood here runs with the audit hook
and seccomp off (so SQLite loads, FIFOs and sockets can be made): only the cap outside the program stands.
"""

from __future__ import annotations

import os
import time

import pytest

from bounded_runs import WALL_S, bounded_run
from rlvr_lib.tasks import sandbox
from rlvr_lib.tasks.sandbox import MAX_ENTRIES_MADE, SandboxConfig, entries_cap, run_tests

pytestmark = pytest.mark.hostile_class("sandbox file cap (kernel)", host=True)

RIGHT = "\ndef add(a, b):\n    return a + b\n"
UNGUARDED = {"audit_hook": False, "seccomp": False}

# Each flood goes on past the cap (catching a refusal, so the program itself ends "ok" when it can): its verdict
# must still be a violation.
_GO_ON = "    try:\n{body}\n    except OSError:\n        break\n"
FLOODS = {
    "sqlite_attach": ("import sqlite3\ncon = sqlite3.connect(':memory:')\nfor i in range(2000):\n"
                      "    try:\n        con.execute(f\"ATTACH DATABASE 'db{i}.sqlite' AS d{i}\")\n"
                      "        con.execute(f'PRAGMA d{i}.journal_mode=OFF')\n"
                      "        con.execute(f'PRAGMA d{i}.synchronous=OFF')\n"  # fast: the cap, not the disk, stops it
                      "        con.execute(f'CREATE TABLE d{i}.t (x)')\n        con.execute(f'DETACH DATABASE d{i}')\n"
                      "    except sqlite3.Error:\n        break\n"),
    "sqlite_vacuum_into": ("import sqlite3\ncon = sqlite3.connect(':memory:')\ncon.execute('PRAGMA synchronous=OFF')\n"
                           "con.execute('CREATE TABLE t (x)')\n"
                           "for i in range(2000):\n    try:\n        con.execute(f\"VACUUM INTO 'v{i}.sqlite'\")\n"
                           "    except sqlite3.Error:\n        break\n"),
    "os_open_loop": ("import os\nfor i in range(100000):\n"
                     + _GO_ON.format(body="        os.close(os.open(f'f{i}', os.O_CREAT | os.O_WRONLY))")),
    "hard_links": ("import os\nopen('f', 'w').close()\nfor i in range(100000):\n"
                   + _GO_ON.format(body="        os.link('f', f'h{i}')")),
    "mkfifo": "import os\nfor i in range(100000):\n" + _GO_ON.format(body="        os.mkfifo(f'p{i}')"),
    # variations: regular files by mknod, unix sockets bound to names, links spread over nested directories,
    # and a mix of every kind of entry
    "mknod_regular": ("import os, stat\nfor i in range(100000):\n"
                      + _GO_ON.format(body="        os.mknod(f'n{i}', stat.S_IFREG | 0o600)")),
    "unix_sockets": ("import os, socket\nfor i in range(100000):\n"
                     + _GO_ON.format(body="        socket.socket(socket.AF_UNIX).bind(f's{i}')")),
    "links_in_nested_dirs": ("import os\nopen('f', 'w').close()\nfor i in range(100000):\n"
                             + _GO_ON.format(body="        os.makedirs(f'a{i % 5}/b{i % 3}', exist_ok=True)\n"
                                                  "        os.link('f', f'a{i % 5}/b{i % 3}/h{i}')")),
    "mixed_kinds": ("import os\nfor i in range(100000):\n"
                    + _GO_ON.format(body="        [lambda: os.mkdir(f'd{i}'), lambda: os.symlink('x' * 3000, f'l{i}'),"
                                         " lambda: os.mkfifo(f'p{i}'), lambda: open(f'f{i}', 'w').close()][i % 4]()")),
}


SLOW = {"sqlite_vacuum_into": 15.0}
"""Floods that need longer than `WALL_S` to pass the cap when nothing refuses them (VACUUM INTO syncs each copy:
about 100 files a second on a loaded 2-core machine)."""


def _run(tmp_path, program, **overrides):
    """:func:`bounded_run` with the hook and seccomp off unless ``overrides`` turn them on."""
    return bounded_run(tmp_path, program, **{**UNGUARDED, **overrides})


def _kernel_cap_here() -> bool:
    return "tmpfs" in run_tests("pass").layers


@pytest.fixture(params=["tmpfs", "counted"])
def where(request, monkeypatch):
    """The cap from the kernel (a per-run tmpfs, when this machine allows the mount) or counted after the run."""
    if request.param == "tmpfs":
        if not _kernel_cap_here():
            pytest.skip(f"no per-run tmpfs here: {run_tests('pass').notes}")
    else:
        monkeypatch.setattr(sandbox, "_mount_workdir", lambda *a: (False, "tmpfs: off for this test"))
    return request.param


@pytest.mark.parametrize("name", sorted(FLOODS))
def test_a_flood_past_the_cap_is_a_violation_whatever_the_program_does(tmp_path, where, name):
    result = _run(tmp_path, FLOODS[name] + RIGHT, **({"wall_s": SLOW[name]} if name in SLOW and where == "counted"
                                                      else {}))
    assert result.status == "violation" and result.passed == 0 and result.score == 0.0, result
    assert result.reason.startswith("file cap: the working directory holds more than"), result
    assert "audit" not in result.layers and "seccomp" not in result.layers, result  # only the outside cap stood
    if where == "tmpfs":
        assert "tmpfs" in result.layers and "the kernel's cap reached" in result.reason, result
    else:
        assert "tmpfs: off for this test" in result.notes, result


def test_the_kernel_refuses_the_entry_past_the_cap_at_once(tmp_path, where):
    """On the tmpfs the program sees ENOSPC at exactly the entry past the cap (a hard link counts), long before
    the wall clock; counted after the run, the flood runs until the wall clock and is caught then."""
    program = ("import os\nopen('f', 'w').close()\nmade = 1\nwhile True:\n    try:\n"
               "        os.link('f', f'h{made}')\n    except OSError as e:\n"
               "        print('REFUSED', made, e.errno)\n        break\n    made += 1\n" + RIGHT)
    start = time.monotonic()
    result = _run(tmp_path, program)
    assert result.status == "violation" and result.passed == 0, result
    if where == "tmpfs":
        cap = entries_cap(SandboxConfig())
        assert f"REFUSED {cap + 1} 28" in result.output, result.output  # ENOSPC, after cap + 1 entries
        assert time.monotonic() - start < WALL_S, "the kernel should have stopped the flood before the wall clock"


def test_exactly_the_cap_passes_and_one_more_is_a_violation(tmp_path, where):
    cap = entries_cap(SandboxConfig())
    make = "import os\nfor i in range({n}):\n    os.mkfifo(f'p{{i}}') if i % 2 else os.mkdir(f'd{{i}}')\n"
    ok = _run(tmp_path, make.format(n=cap) + RIGHT)
    assert ok.status == "ok" and ok.passed == 1, ok
    over = _run(tmp_path, make.format(n=cap + 1) + RIGHT)
    assert over.status == "violation" and over.passed == 0, over
    assert f"more than {cap} entries ({cap + 1} counted" in over.reason, over


def test_the_cap_is_the_sum_of_the_hooks_caps_and_follows_the_config(tmp_path, where):
    assert entries_cap(SandboxConfig()) == 32 + MAX_ENTRIES_MADE
    small = SandboxConfig(max_files_written=3)
    assert entries_cap(small) == 3 + MAX_ENTRIES_MADE
    program = "import os\nfor i in range({n}):\n    os.mkdir(f'd{{i}}')\n" + RIGHT
    assert _run(tmp_path, program.format(n=entries_cap(small)), max_files_written=3).status == "ok"
    over = _run(tmp_path, program.format(n=entries_cap(small) + 1), max_files_written=3)
    assert over.status == "violation" and over.passed == 0, over


def test_with_the_hook_on_its_own_violation_keeps_its_reason(tmp_path, where):
    result = _run(tmp_path, FLOODS["hard_links"] + RIGHT, audit_hook=True, seccomp=True)
    assert result.status == "violation" and "too many directories and links made" in result.reason, result


def test_the_count_after_the_run_is_bounded_and_follows_no_link(tmp_path):
    """`_count_entries` stops past its limit (a huge directory costs the limit's work), counts each hard link and
    symlink once without following it, and descends through descriptors (a chain deeper than PATH_MAX)."""
    wide = tmp_path / "wide"
    wide.mkdir()
    for i in range(5000):
        os.close(os.open(wide / f"f{i}", os.O_CREAT | os.O_WRONLY))
    start = time.monotonic()
    assert sandbox._count_entries(str(wide), 100) == 101
    assert time.monotonic() - start < 1.0
    links = tmp_path / "links"
    links.mkdir()
    (links / "f").write_text("x")
    os.link(links / "f", links / "h")
    os.symlink("/usr", links / "to_usr")  # not followed: one entry
    os.symlink(".", links / "loop")
    assert sandbox._count_entries(str(links), 10**6) == 4
    deep = tmp_path / "deep"
    deep.mkdir()
    fd = os.open(deep, os.O_RDONLY)
    for _ in range(40):  # 40 levels of 200-character names: 8000 characters, past PATH_MAX
        os.mkdir("d" * 200, dir_fd=fd)
        child = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
    assert sandbox._count_entries(str(deep), 10**6) == 40
