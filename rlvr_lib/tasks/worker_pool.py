"""Reusable worker processes answering one request at a time within a wall-clock limit.

A worker owns its main thread (so ``signal.alarm`` works) and can be killed, so a caller on any thread gets an
answer or a time-out. Protocol (`rlvr_lib.tasks.math_grading`): length-prefixed JSON over stdin/stdout;
``{"ready": true}`` first, one reply per request, exit at end of input. A `WorkerPool` reuses idle workers,
starts one per concurrent caller, and replaces a killed worker at once; a forked child starts its own."""

from __future__ import annotations

import atexit
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

from rlvr_lib.tasks.math_grading import read_frame, write_frame

__all__ = ["HARD_MARGIN_S", "WorkerDied", "WorkerPool", "WorkerTimeout", "shared_pool"]

HARD_MARGIN_S = 2.0
"""Seconds past ``timeout_s`` before an unanswering worker is killed (for work no signal interrupts, and load)."""
STARTUP_TIMEOUT_S = 120.0
"""How long a new worker may take to import and warm up (a loaded machine can be slow); not part of any limit."""


class WorkerTimeout(Exception):
    """The worker did not reply within the limit; it has been killed."""


class WorkerDied(Exception):
    """The worker exited (or closed its pipe) while handling a request."""


def _wait_readable(fd: int, deadline: float) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        try:
            return bool(poller.poll(remaining * 1000))
        except InterruptedError:  # pragma: no cover - PEP 475 retries, kept for old interpreters
            continue


class _Worker:
    def __init__(self, script: Path, needs: str = "math-verify"):
        self.needs = needs
        # runpy, not "python script.py", puts neither the script's folder nor (once '' is dropped) the caller's
        # working directory on sys.path: modules there would shadow the ones the worker imports
        code = (f"import sys; sys.path = [p for p in sys.path if p not in ('', '.')]; "
                f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')")
        self.process = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True,
            start_new_session=True)  # a terminal's Ctrl-C goes to the caller; the worker exits when its input closes
        self.ready = False

    def _receive(self, deadline: float) -> dict:
        fd = self.process.stdout.fileno()
        if not _wait_readable(fd, deadline):
            raise WorkerTimeout
        # A reply is a few dozen bytes written at once: once readable, the whole frame is there or follows at once.
        message = read_frame(fd)
        if message is None:
            raise WorkerDied(f"the worker exited with status {self.process.wait()}")
        return message

    def ensure_ready(self) -> None:
        if not self.ready:
            try:
                self._receive(time.monotonic() + STARTUP_TIMEOUT_S)
            except (WorkerTimeout, WorkerDied) as exc:
                self.kill()
                raise RuntimeError(f"a grading worker ({sys.executable}) did not start within {STARTUP_TIMEOUT_S:g} "
                                   f"s: {exc or 'no reply'}; is {self.needs} installed?") from None
            self.ready = True

    def request(self, message: dict, limit_s: float) -> dict:
        deadline = time.monotonic() + limit_s
        try:
            write_frame(self.process.stdin.fileno(), message)
        except OSError as exc:  # a dead worker's pipe
            raise WorkerDied(f"the worker's input is closed ({exc.strerror})") from None
        return self._receive(deadline)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                pipe.close()
            except OSError:
                pass

    def close(self) -> None:
        """End of input: the worker exits by itself; killed if it has not within a second."""
        try:
            self.process.stdin.close()
            self.process.wait(timeout=1.0)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


class WorkerPool:
    """Worker processes running ``script``'s request loop (thread-safe); ``max_idle`` kept; ``needs`` named on start failure."""

    def __init__(self, script: Path, max_idle: int = 8, needs: str = "math-verify"):
        self.script = Path(script)
        self.max_idle = max_idle
        self.needs = needs
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._pid = os.getpid()
        atexit.register(self.close)

    def _checkout(self) -> _Worker:
        with self._lock:
            if self._pid != os.getpid():  # forked: the inherited workers serve the parent
                self._idle, self._pid = [], os.getpid()
            if self._idle:
                return self._idle.pop()
        return _Worker(self.script, self.needs)

    def _checkin(self, worker: _Worker) -> None:
        with self._lock:
            if self._pid == os.getpid() and len(self._idle) < self.max_idle:
                self._idle.append(worker)
                return
        worker.close()

    def request(self, message: dict, limit_s: float) -> dict:
        """The reply to ``message`` within ``limit_s`` of sending it (start-up not counted).

        Raises WorkerTimeout (worker killed, replaced), WorkerDied, or RuntimeError when no worker can start."""
        worker = self._checkout()
        worker.ensure_ready()
        try:
            reply = worker.request(message, limit_s)
        except (WorkerTimeout, WorkerDied):
            worker.kill()
            try:
                self._checkin(_Worker(self.script, self.needs))  # starts importing now, while the caller goes on
            except OSError:  # no process to spare now: the next request starts one (and reports why not)
                pass
            raise
        except BaseException:  # e.g. KeyboardInterrupt mid-request: the worker's state is unknown
            worker.kill()
            raise
        self._checkin(worker)
        return reply

    def close(self) -> None:
        """Stop the idle workers (busy ones end when their callers' requests do)."""
        with self._lock:
            idle, self._idle = (self._idle, []) if self._pid == os.getpid() else ([], [])
        for worker in idle:
            worker.close()


_SHARED: dict[Path, WorkerPool] = {}
_SHARED_LOCK = threading.Lock()


def shared_pool(script: Path, needs: str = "math-verify") -> WorkerPool:
    """The process's one `WorkerPool` for ``script``, made on first use and shared by every caller."""
    script = Path(script).resolve()
    with _SHARED_LOCK:
        if script not in _SHARED:
            _SHARED[script] = WorkerPool(script, needs=needs)
        return _SHARED[script]
