"""Hostile programs against `CodeTask.verify`'s cleanup: whatever tree a program builds, verify returns a
verdict (never raises) and its working directory is gone from the host's temp folder."""

import os
import time

import pytest

from rlvr_lib.tasks import STATUSES, CodeTask
from rlvr_lib.tasks.code_task import code_problem
from rlvr_lib.tasks.sandbox import SandboxConfig, wait_for_removals

pytestmark = pytest.mark.hostile_class("sandbox cleanup", host=True)

DEPTH = 1500
"""Nested directories a program builds: past Python's default recursion limit (1000), which a recursive
removal (shutil.rmtree) hits."""

ADD = code_problem({"prompt": "def add(a, b):\n", "entry_point": "add", "task_id": "hostile/add",
                    "tests": ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]})

SOLUTION = "\ndef add(a, b):\n    return a + b\n"

DEEP_BY_CHDIR = f"""
import os
for _ in range({DEPTH}):
    os.mkdir("d")
    os.chdir("d")
""" + SOLUTION

DEEP_BY_DESCRIPTOR = f"""
import os
fd = os.open(".", os.O_RDONLY)
for level in range({DEPTH}):
    os.mkdir("d", dir_fd=fd)
    if level % 100 == 0:
        with open(os.open("f", os.O_WRONLY | os.O_CREAT, dir_fd=fd), "w") as handle:
            handle.write("x")
    child = os.open("d", os.O_RDONLY, dir_fd=fd)
    try:
        os.fchmod(fd, 0o500 if level % 2 else 0)  # read-only and unreadable levels, if the sandbox lets it
    except OSError:
        pass
    os.close(fd)
    fd = child
""" + SOLUTION


@pytest.fixture()
def sandbox_root(tmp_path):
    root = tmp_path / "sandboxes"
    root.mkdir()
    return root


@pytest.mark.parametrize("program", [DEEP_BY_CHDIR, DEEP_BY_DESCRIPTOR], ids=["chdir", "descriptor"])
def test_a_deep_tree_is_removed_and_verify_does_not_raise(sandbox_root, program):
    task = CodeTask("hostile_code", [ADD], sandbox=SandboxConfig(wall_s=10, cpu_s=5, tmp_root=str(sandbox_root)))
    start = time.monotonic()
    verdict = task.verify(ADD, program)
    assert verdict.status in STATUSES and verdict.reward in (0.0, 1.0), verdict
    assert wait_for_removals(60), "the working directory's removal did not finish"
    assert list(sandbox_root.iterdir()) == [], "the program's working directory was left on the host"
    assert time.monotonic() - start < 120


def test_cleanup_removes_a_deep_tree_with_locked_levels_and_follows_no_link(tmp_path):
    """The removal itself, on a tree no sandbox layer stopped: deep, mode-000 and read-only levels, a symlink
    to a folder outside that must survive."""
    from rlvr_lib.tasks.sandbox import _remove_tree

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("host file")
    work = tmp_path / "work"
    work.mkdir()
    fd = os.open(work, os.O_RDONLY)
    for level in range(DEPTH):
        os.mkdir("d", dir_fd=fd)
        if level % 250 == 0:
            os.symlink(outside, "link", dir_fd=fd)
            os.mkdir("locked", dir_fd=fd)
            os.chmod("locked", 0, dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.fchmod(fd, 0o500)
        os.close(fd)
        fd = child
    os.close(fd)
    _remove_tree(str(work))
    assert not work.exists()
    assert [p.name for p in outside.iterdir()] == ["keep.txt"] and (outside / "keep.txt").read_text() == "host file"
