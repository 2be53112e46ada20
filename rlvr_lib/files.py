"""Atomic file writes: a reader sees the old file or the whole new one, never a part.

Used by the trainer (checkpoints) and by the study harness (run records, reports); it sits at the
bottom of the package so both can.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator

from rlvr_lib.validation import check_choice

__all__ = ["atomic_file", "file_lock", "write_json_atomic"]


@contextlib.contextmanager
def atomic_file(path: str | Path, mode: str = "w", *, permissions: int | None = None) -> Iterator[IO]:
    """Open ``path`` for writing so that readers see the old file or the whole new one, never a part.

    Writes go to a temp file in the same folder (created with its parents),
    which is flushed, fsynced and ``os.replace``-d onto ``path`` when the block
    exits; on an exception the temp file is removed and ``path`` is untouched.

    Args:
        path: Destination.
        mode: ``"w"`` (text) or ``"wb"`` (bytes).
        permissions: ``chmod`` applied to the file (``mkstemp`` makes it owner-only), or ``None``.

    Raises:
        OSError: writing failed (disk full ``ENOSPC``, file size limit ``EFBIG``, ...): the same errno,
            with a message naming ``path`` (left as it was; the temp file is removed).
    """
    check_choice("mode", mode, ("w", "wb"))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        if permissions is not None:
            os.chmod(tmp, permissions)
        os.replace(tmp, path)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(err, OSError):  # ENOSPC, EFBIG... name no file: say which one, and that it is intact
            raise _write_error(err, path) from err
        raise


def _write_error(err: OSError, path: Path) -> OSError:
    """``err`` (same errno, so the same ``OSError`` subclass) with a message naming ``path``, left unchanged."""
    what = f"{err.strerror or err} while writing {path} ({path.name} is left as it was, the temp file removed)"
    return OSError(err.errno, what) if err.errno is not None else OSError(what)


def write_json_atomic(path: Path, data: Any) -> None:
    """Writes ``data`` as JSON to ``path`` atomically (:func:`atomic_file`)."""
    text = json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n"
    with atomic_file(path) as f:
        f.write(text)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[bool]:
    """Holds an exclusive ``flock`` on ``path`` (created if missing); yields whether it had to wait for it."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            waited = False
        except BlockingIOError:
            fcntl.flock(handle, fcntl.LOCK_EX)
            waited = True
        try:
            yield waited
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
