"""The environment lock (issue 37): the test environment is the locked one, and run records say what ran.

``make test`` names its lock in ``RLVR_LOCK`` (locks/gpu.txt when EXTRAS names gpu); run without it,
the CPU set is checked.
"""

import os
import re
import tomllib
from pathlib import Path

from rlvr_lib import lockfile
from rlvr_lib.study.runs import cached_run

ROOT = Path(__file__).resolve().parent.parent
LOCK = Path(os.environ.get("RLVR_LOCK", ROOT / "locks" / "cpu.txt"))
if not LOCK.is_absolute():
    LOCK = ROOT / LOCK


def test_installed_versions_match_the_lock():
    lock = lockfile.read_lock(LOCK)
    # The libraries the numbers depend on must be locked and installed, so the check below is never empty.
    for name in lockfile.KEY_PACKAGES:
        assert name in lock, f"{name} is not in {LOCK}"
        assert lockfile.installed_version(name) is not None, f"{name} is not installed"
    # Entries not installed here (another platform, an extra not installed) are left out by mismatches().
    assert lockfile.mismatches(lock) == {}, f"installed versions differ from {LOCK}: run `make install`"
    assert "rlvr-lib" not in lock  # the project itself is installed editable from the checkout, never pinned


def test_every_declared_dependency_is_locked():
    """A dependency added to pyproject.toml without `make lock` would install unpinned."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for path, extras in (("cpu.txt", ("dev", "notebooks")), ("gpu.txt", ("dev", "notebooks", "gpu"))):
        declared = project["dependencies"] + [r for e in extras for r in project["optional-dependencies"][e]]
        names = {lockfile._normalize(re.match(r"[A-Za-z0-9._-]+", r).group()) for r in declared}
        lock = lockfile.read_lock(ROOT / "locks" / path)
        assert names - lock.keys() == set(), path
        assert lockfile.lock_python(ROOT / "locks" / path) is not None  # the lock states its Python


def test_locked_torch_is_the_release_the_makefile_installs():
    # The lock pins the release (no +cpu): TORCH_SPEC picks the build, and a CUDA build must satisfy it too.
    version = re.search(r"^TORCH_VERSION\s*:=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    for path in ("cpu.txt", "gpu.txt"):
        assert lockfile.read_lock(ROOT / "locks" / path)["torch"] == version


def test_run_record_carries_the_library_versions(tmp_path):
    rec = cached_run("exp", "versions", {"a": 1}, 0, lambda: ([], {}), root=tmp_path)
    packages = rec.extra["machine"]["packages"]
    assert set(packages) == set(lockfile.KEY_PACKAGES)
    for name, version in packages.items():
        assert version == lockfile.installed_version(name) and version is not None
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", rec.extra["machine"]["python"])
