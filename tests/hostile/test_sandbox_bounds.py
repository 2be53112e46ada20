"""Hostile programs against the sandbox's time bound and file cap (issue 60, item 3).

Whatever tree a program builds (wide, deep, symlink floods with long targets, hard links, files past the cap by
SQLite or by descriptor), `run_tests` returns within its wall-clock limit, the two interpreters' start and
`CLEANUP_WAIT_S`, plus a small margin; what is left is removed out of band and is gone soon after
(`wait_for_removals`). With the audit hook on, the caps on files opened for writing and on entries made stop
the flood at once; with it off, the kernel's limits (seccomp: no new executable mapping, so SQLite's C code
cannot even load; the per-run tmpfs's inode count, `entries_cap`) and the out-of-band removal bound it.
"""

from __future__ import annotations

import os
import time

import pytest

from bounded_runs import bounded_run
from rlvr_lib.tasks.sandbox import wait_for_removals

pytestmark = pytest.mark.hostile_class("sandbox time bound and file cap", host=True)

RIGHT = "\ndef add(a, b):\n    return a + b\n"

FLOODS = {
    "wide_directories": "import os\ni = 0\nwhile True:\n    os.mkdir(f'd{i}')\n    i += 1\n",
    "deep_chain": "import os\nwhile True:\n    os.mkdir('d')\n    os.chdir('d')\n",
    "deep_chain_by_descriptor": ("import os\nfd = os.open('.', os.O_RDONLY)\nwhile True:\n"
                                 "    os.mkdir('d', dir_fd=fd)\n    child = os.open('d', os.O_RDONLY, dir_fd=fd)\n"
                                 "    os.close(fd)\n    fd = child\n"),
    "long_symlinks": "import os\ni = 0\nwhile True:\n    os.symlink('x' * 4000, f'l{i}')\n    i += 1\n",
    "symlinks_in_deep_dirs": ("import os\ni = 0\nwhile True:\n    os.makedirs(f'a{i % 7}/b{i % 11}', exist_ok=True)\n"
                              "    os.symlink('/' + 'y' * 3000, f'a{i % 7}/b{i % 11}/s{i}')\n    i += 1\n"),
    "hard_links": "import os\nopen('f', 'w').close()\ni = 0\nwhile True:\n    os.link('f', f'h{i}')\n    i += 1\n",
    "files_by_descriptor": ("import os\ni = 0\nwhile True:\n    os.close(os.open(f'f{i}', os.O_CREAT | os.O_WRONLY))\n"
                            "    i += 1\n"),
    "sqlite_attach": ("import sqlite3\ncon = sqlite3.connect(':memory:')\nfor i in range(200):\n"
                      "    con.execute(f\"ATTACH DATABASE 'db{i}.sqlite' AS d{i}\")\n"
                      "    con.execute(f'CREATE TABLE d{i}.t (x)')\n    con.execute(f'DETACH DATABASE d{i}')\n"),
    "sqlite_vacuum_into": ("import sqlite3\ncon = sqlite3.connect(':memory:')\ncon.execute('CREATE TABLE t (x)')\n"
                           "for i in range(200):\n    con.execute(f\"VACUUM INTO 'v{i}.sqlite'\")\n"),
}


@pytest.mark.parametrize("name", sorted(FLOODS))
def test_a_flood_is_stopped_by_the_caps(tmp_path, name):
    result = bounded_run(tmp_path, FLOODS[name] + RIGHT)
    assert result.status == "violation" and result.passed == 0, result


@pytest.mark.parametrize("name", sorted(FLOODS))
def test_without_the_hook_the_run_and_its_cleanup_stay_bounded(tmp_path, name):
    result = bounded_run(tmp_path, FLOODS[name] + RIGHT, audit_hook=False)
    assert result.passed == 0 and result.status in ("timeout", "error", "output_limit", "violation"), result
    if name.startswith("sqlite"):  # _sqlite3 is never mapped into the program's process: no file made at all
        assert result.status == "error" and "sqlite" in result.reason.lower(), result
    elif "tmpfs" in result.layers:  # the kernel stopped the flood at the file cap (tests/hostile/test_file_cap.py)
        assert result.status == "violation" and result.reason.startswith("file cap:"), result


def test_a_program_within_the_caps_still_passes(tmp_path):
    program = ("import os\nfor i in range(20):\n    os.mkdir(f'd{i}')\n    os.symlink('x' * 100, f'd{i}/l')\n"
               "    open(f'd{i}/f', 'w').write('x')\n" + RIGHT)
    result = bounded_run(tmp_path, program)
    assert result.status == "ok" and result.passed == 1, result


def test_removal_is_out_of_band_and_bounded(tmp_path):
    """The removal itself: a tree that takes longer than the wait is left to a background process, which
    removes it (the caller returns after the wait)."""
    from rlvr_lib.tasks import sandbox

    work = tmp_path / "work"
    work.mkdir()
    fd = os.open(work, os.O_RDONLY)
    for level in range(3000):
        os.mkdir("d", dir_fd=fd)
        os.symlink("z" * 2000, "s", dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
    start = time.monotonic()
    finished = sandbox._remove_tree(str(work), 0.05)
    assert time.monotonic() - start < 0.05 + 1.0
    assert finished or sandbox._BACKGROUND
    assert wait_for_removals(300) and not work.exists()
