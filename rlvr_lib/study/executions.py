"""Where a notebook's executed copies live: the full profile on the committed results root in place (the notebook a
reader opens), any other profile or root under ``<root>/notebooks/<profile>/``; which one a reader is shown.

Kept apart from :mod:`rlvr_lib.study.reproduce` (which executes them) so that the report can read the same rule
without importing the executor.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from rlvr_lib.validation import check_choice

__all__ = ["INJECTED_TAG", "PROFILES", "executed_copy", "executed_dir", "full_execution", "stored_profile"]

PROFILES = ("quick", "full")
"""The notebooks' profiles: a smoke run that trains a few steps, and the study's."""
INJECTED_TAG = "injected-parameters"
"""Tag of the cell papermill adds to an executed notebook with the parameters it was given."""
_PACKAGE_PARENT = Path(__file__).resolve().parents[2]


def _default_notebooks_dir() -> Path:
    """``<repo>/notebooks`` when running from a checkout, else ``./notebooks``."""
    if (_PACKAGE_PARENT / "pyproject.toml").exists():
        return _PACKAGE_PARENT / "notebooks"
    return Path.cwd() / "notebooks"


def _committed_results_root() -> Path:
    """The results root the committed records live in: ``<repo>/results`` in a checkout, else ``./results``
    (`rlvr_lib.study.runs.results_root` without ``RLVR_RESULTS_DIR``)."""
    if (_PACKAGE_PARENT / "pyproject.toml").exists():
        return _PACKAGE_PARENT / "results"
    return Path.cwd() / "results"


def executed_dir(profile: str, root: str | Path | None = None, notebooks_dir: str | Path | None = None) -> Path:
    """The folder of the executed copies at ``profile`` for the results root ``root``.

    The full profile on the committed results root is executed in place: the folder is ``notebooks_dir``
    (default ``<repo>/notebooks``), so the notebook a reader opens shows the committed records. Any other profile
    or root (a recompute's staging root, ``RLVR_RESULTS_DIR``) keeps its copies under ``<root>/notebooks/<profile>/``.

    Args:
        profile: ``"quick"`` or ``"full"``.
        root: The results root (default: `rlvr_lib.study.runs.results_root`).
        notebooks_dir: The source notebooks' folder (default ``<repo>/notebooks``).

    Raises:
        ValueError: an unknown ``profile``.
    """
    from rlvr_lib.study.runs import results_root

    check_choice("profile", profile, PROFILES)
    root = results_root(root)
    if profile == "full" and root.resolve() == _committed_results_root().resolve():
        return Path(notebooks_dir) if notebooks_dir is not None else _default_notebooks_dir()
    return root / "notebooks" / profile


def stored_profile(path: str | Path) -> str:
    """The profile a stored notebook was executed at: papermill's ``profile`` parameter, ``"quick"`` (the
    notebooks' default) when papermill injected none.

    Raises:
        ValueError: ``path`` is not a notebook papermill executed (no ``papermill`` metadata).
    """
    import nbformat

    meta = nbformat.read(str(path), as_version=4).metadata.get("papermill")
    if meta is None:
        raise ValueError(f"{path}: not executed by papermill (no papermill metadata); execute it with "
                         f"`python -m rlvr_lib.study.reproduce --profile full --only {Path(path).stem}`")
    return meta.get("parameters", {}).get("profile", "quick")


def full_execution(name: str, root: str | Path | None = None) -> Path | None:
    """The full-profile execution of notebook ``name`` that a reader is shown, or None.

    :func:`executed_copy` when it is one (``notebooks/<name>.ipynb`` at the committed results root). A notebook
    whose code reads records a recompute has not delivered yet keeps its quick execution in ``notebooks/``; its
    earlier full execution then stays at ``<root>/notebooks/full/<name>.ipynb`` until the records land and the
    notebook is executed in place (`python -m rlvr_lib.study.reproduce --only NAME --force`).
    """
    from rlvr_lib.study.runs import results_root

    executed = executed_copy(name, root)
    earlier = results_root(root) / "notebooks" / "full" / executed.name
    if executed != earlier and executed.exists():
        with contextlib.suppress(ValueError):  # a notebook no papermill run wrote is no execution
            if stored_profile(executed) == "full":
                return executed
    return earlier if earlier.exists() else None


def executed_copy(name: str, root: str | Path | None = None, profile: str = "full") -> Path:
    """The executed copy of notebook ``name`` (a stem, e.g. ``"03_nudgerl"``) at ``profile`` for results root
    ``root``: ``notebooks/<name>.ipynb`` for the committed full profile, else under ``<root>/notebooks/<profile>/``
    (:func:`executed_dir`)."""
    return executed_dir(profile, root) / f"{Path(name).stem}.ipynb"
