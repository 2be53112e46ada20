"""One sandboxed test run as the bounds and file-cap tests check every run: it ends within its wall-clock limit
plus the clean-up wait, and leaves nothing on the host (tests/hostile/test_sandbox_bounds.py, test_file_cap.py)."""

from __future__ import annotations

import time

from rlvr_lib.tasks.sandbox import CLEANUP_WAIT_S, SandboxConfig, run_tests, wait_for_removals

TESTS = ("assert add(2, 3) == 5",)
WALL_S = 3.0
MARGIN_S = 4.0  # the interpreters' start and the kill on a loaded 2-core machine


def sandbox_config(tmp_path, **overrides):
    """``(root, config)``: a sandbox of ``WALL_S`` seconds whose working directories go under ``tmp_path/sandboxes``."""
    root = tmp_path / "sandboxes"
    root.mkdir(exist_ok=True)
    return root, SandboxConfig(**{"wall_s": WALL_S, "cpu_s": 10, "memory_mb": 256, "tmp_root": str(root),
                                  **overrides})


def bounded_run(tmp_path, program, **overrides):
    """``run_tests(program, TESTS)`` in :func:`sandbox_config`, asserting its time bound and an empty sandbox root."""
    root, config = sandbox_config(tmp_path, **overrides)
    start = time.monotonic()
    result = run_tests(program, TESTS, config=config)
    seconds = time.monotonic() - start
    assert seconds < config.wall_s + CLEANUP_WAIT_S + MARGIN_S, (seconds, result)
    assert wait_for_removals(300), "the out-of-band removal did not finish"
    assert list(root.iterdir()) == [], "the working directory was left on the host"
    return result
