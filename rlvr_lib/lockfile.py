"""The environment lock (``locks/*.txt``, written by ``make lock``) and the library versions a run records.

The committed results and the stored notebook outputs depend on the numerics of torch, transformers and TRL
(and on IVON's and math-verify's behaviour), so the versions that made them are locked for reproduction
(README, "The environment lock"), while ``pyproject.toml`` keeps the ranges the code supports.
``python -m rlvr_lib.lockfile [LOCK]`` prints the lock in use and the installed versions of
:data:`KEY_PACKAGES` (``make test`` starts with it).
"""

from __future__ import annotations

import importlib.metadata
import platform
import re
import sys
from pathlib import Path

__all__ = ["DEFAULT_LOCK", "KEY_PACKAGES", "installed_version", "lock_python", "mismatches", "package_versions",
           "read_lock"]

# The libraries whose versions a run record stores: the numbers depend on them.
KEY_PACKAGES = ("torch", "transformers", "trl", "ivon-opt", "math-verify")
DEFAULT_LOCK = Path(__file__).resolve().parent.parent / "locks" / "cpu.txt"


def _normalize(name: str) -> str:
    """PEP 503 name: ``Jinja2``, ``typing_extensions`` and ``ivon.opt`` compare as pip compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: str | Path = DEFAULT_LOCK) -> dict[str, str]:
    """``{normalized name: version}`` of a lock's ``name==version`` lines (comments and options skipped)."""
    pins = {}
    for line in Path(path).read_text().splitlines():
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if m:
            pins[_normalize(m.group(1))] = m.group(2)
    return pins


def lock_python(path: str | Path = DEFAULT_LOCK) -> str | None:
    """The Python version the lock was resolved for, as its header states it (``# Python X.Y.Z ...``)."""
    m = re.search(r"^# Python (\d+\.\d+(?:\.\d+)?)", Path(path).read_text(), re.M)
    return m.group(1) if m else None


def installed_version(name: str) -> str | None:
    """The installed distribution's version, or ``None`` when it is not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def package_versions(names=KEY_PACKAGES) -> dict[str, str | None]:
    """Installed versions of ``names`` (``None``: not installed), e.g. ``{"torch": "2.13.0+cpu", ...}``."""
    return {name: installed_version(name) for name in names}


def _matches(installed: str, locked: str) -> bool:
    # PEP 440 ``==``: a local build label (+cpu, +cu128) is ignored unless the lock names one, so the
    # lock pins torch's release and TORCH_SPEC picks its build.
    from packaging.specifiers import SpecifierSet

    return SpecifierSet(f"=={locked}").contains(installed, prereleases=True)


def mismatches(lock: dict[str, str]) -> dict[str, tuple[str, str]]:
    """``{name: (locked, installed)}`` for the lock's packages installed at another version.

    Packages of the lock that are not installed are left out: a lock entry for another platform or an
    extra not installed here says nothing about this environment.
    """
    out = {}
    for name, locked in lock.items():
        have = installed_version(name)
        if have is not None and not _matches(have, locked):
            out[name] = (locked, have)
    return out


def main(argv: list[str] | None = None) -> int:
    """Prints the lock in use, the installed versions of :data:`KEY_PACKAGES` and any mismatch."""
    argv = sys.argv[1:] if argv is None else argv
    path = Path(argv[0]) if argv else DEFAULT_LOCK
    lock = read_lock(path)
    print(f"lock in use: {path} (made for Python {lock_python(path)}; this is Python {platform.python_version()})")
    for name, have in package_versions().items():
        print(f"  {name:<13} {have or 'not installed':<12} locked {lock.get(_normalize(name), 'not in lock')}")
    bad = mismatches(lock)
    installed = sum(installed_version(name) is not None for name in lock)
    print(f"  {installed - len(bad)} of {len(lock)} locked packages installed at the locked version"
          + "".join(f"\n  MISMATCH {n}: locked {lv}, installed {iv}" for n, (lv, iv) in sorted(bad.items())))
    return 0  # informative only: tests/test_lockfile.py fails on a mismatch


if __name__ == "__main__":
    sys.exit(main())
