"""A recompute's staging folder: runs land there, and a notebook's complete folder replaces the committed one.

A recompute of committed notebooks writes every run under a staging results root (``RLVR_RESULTS_DIR``, e.g.
``results/recompute-58``), so no new run reads a previous record and no table reads a new one before its notebook is
complete. :func:`promote` then moves the notebook's experiment folders into ``results/`` (the previous ones to
``results/archive/<archive>/``, never read again) and archives the previous executed copy of the notebook there too
(``notebooks/NAME.ipynb``, the committed full-profile execution, is copied: it is also the notebook's source), and
leaves a link in the staging root in its place (``STAGING/NAME -> ../NAME``), so later notebooks of the same recompute
go on reading and training into the one folder (notebook 02's base policy and GRPO are read by 03-07); the
notebook is then executed in place from the cache with the Makefile's CPU settings (``make notebooks``, or
``RLVR_CACHE_ONLY=1`` and ``NB_ENV`` before ``python -m rlvr_lib.study.reproduce --only NAME --force``), so nbval's
re-execution in ``make test`` matches it, and README rendered again.

``python -m rlvr_lib.study.staging promote --staging STAGING_ROOT --archive NAME EXPERIMENT...``
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from rlvr_lib.study.executions import full_execution
from rlvr_lib.study.runs import results_root
from rlvr_lib.validation import check, invalid

__all__ = ["promote", "staged_experiments"]


def staged_experiments(staging: str | Path) -> list[str]:
    """The experiment folders (``*_full``) a staging root holds, each with at least one record; a promoted folder's
    link is not one."""
    staging = Path(staging)
    return sorted(p.name for p in staging.glob("*_full")
                  if p.is_dir() and not p.is_symlink() and any(p.glob("*.json")))


def promote(experiments: Sequence[str], staging: str | Path, archive: str, *, notebooks: Sequence[str] = (),
            root: str | Path | None = None) -> list[tuple[Path, Path]]:
    """Move each staged experiment folder into the results root; the committed one first to the archive.

    Args:
        experiments: Folder names under ``staging`` (e.g. ``"grpo_baseline_full"``).
        staging: The staging results root the recompute wrote to.
        archive: Name of the archive under ``<root>/archive/`` that receives the previous folders.
        notebooks: Notebook stems whose executed full-profile copies go to the archive too, as
            ``<archive>/notebooks/full/<stem>.ipynb`` (the notebook is then executed again on the promoted records).
            The copy is `rlvr_lib.study.executions.full_execution`'s: ``notebooks/<stem>.ipynb`` at the committed
            results root, copied, as it is the notebook's source too; else the one under ``<root>/notebooks/full/``
            (any other root, or a notebook still stored at the quick profile), moved.
        root: The results root (default: `results_root`).

    Returns:
        Every ``(source, destination)`` move (or copy, for an executed copy kept in place), in order. Each staged
        folder, once moved, is replaced by a relative link to where it went.

    Raises:
        ValueError: a folder name that is not a plain name, a staged folder that is missing or empty, or an archive
            that already holds that folder (nothing is moved then).
    """
    root, staging = results_root(root), Path(staging)
    check(bool(archive) and "/" not in archive and archive not in (".", ".."), "archive", archive, "a folder name")
    shelf = root / "archive" / archive
    plan: list[tuple[Path, Path]] = []
    for name in experiments:
        if not name or "/" in name or name in (".", ".."):
            raise invalid("experiment", name, "a folder name under the staging root")
        staged = staging / name
        check(staged.is_dir() and not staged.is_symlink() and any(staged.glob("*.json")), "experiment", name,
              f"a folder of records under {staging} (not one promoted already)")
        current = root / name
        if current.exists():
            check(not (shelf / name).exists(), "archive", archive, f"an archive without {name} yet")
            plan.append((current, shelf / name))
        plan.append((staged, current))
    copies = set()  # executed copies that are also their notebook's source: copied, never moved
    for stem in notebooks:
        if not stem or "/" in stem or stem in (".", ".."):
            raise invalid("notebook", stem, "a notebook stem, e.g. 03_nudgerl")
        executed = full_execution(stem, root)
        if executed is not None:
            target = shelf / "notebooks" / "full" / f"{stem}.ipynb"
            check(not target.exists(), "archive", archive, f"an archive without notebook {stem} yet")
            plan.append((executed, target))
            if executed.parent != root / "notebooks" / "full":
                copies.add(executed)
    for source, destination in plan:
        destination.parent.mkdir(parents=True, exist_ok=True)
        if source in copies:
            shutil.copy2(source, destination)
        else:
            shutil.move(str(source), str(destination))
            if source.parent == staging:  # a staged folder: runs still to come find it where they left it
                source.symlink_to(os.path.relpath(destination, staging), target_is_directory=True)
    return plan


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlvr_lib.study.staging", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("promote", help="move staged experiment folders into results/, archiving the previous ones")
    p.add_argument("experiments", nargs="+")
    p.add_argument("--staging", required=True, help="the staging results root")
    p.add_argument("--archive", required=True, help="the archive's name under results/archive/")
    p.add_argument("--notebooks", nargs="*", default=(),
                   help="notebook stems whose executed full-profile copies are archived (notebooks/STEM.ipynb is copied)")
    args = parser.parse_args(argv)
    try:
        moves = promote(args.experiments, args.staging, args.archive, notebooks=args.notebooks)
    except ValueError as err:
        parser.error(str(err))
    for source, destination in moves:
        print(f"{source} -> {destination}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
