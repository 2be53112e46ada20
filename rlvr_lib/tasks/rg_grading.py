"""The worker process that scores `ReasoningGymTask` answers with reasoning-gym's ``score_answer``.

Scorers parse model output arbitrarily (``sympy.parse_expr`` on ``7**7**9``), so scoring runs in
`rlvr_lib.tasks.worker_pool.WorkerPool` processes with their own interval timer. A request names the data set,
its config (``repr``, read with ``ast.literal_eval``), seed and size (the scorer is rebuilt and cached) and
carries the item pickled by the parent (never model output). Reply ``{"status", "score", "reason"}``, status
``correct``, ``wrong``, ``timeout`` or ``error`` (scorer not rebuilt). Run as a plain script, importing nothing
from ``rlvr_lib``; framing and time limit come from the sibling ``math_grading.py``. More: docs/tasks/reasoning_gym.md."""

from __future__ import annotations

import ast
import base64
import importlib.util
import logging
import os
import pickle
from functools import lru_cache
from pathlib import Path

CORRECT, WRONG, TIMEOUT, ERROR = "correct", "wrong", "timeout", "error"
WORKER_MEMORY_BYTES = 4 << 30
"""Address-space limit of a scoring worker: a huge expansion fails with MemoryError, not host swap."""


def pack_entry(entry: dict) -> str:
    """A data-set item as a request carries it (pickled, base64 text)."""
    return base64.b64encode(pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii")


@lru_cache(maxsize=64)
def _dataset(name: str, config: str, seed: int, size: int):
    import reasoning_gym

    return reasoning_gym.create_dataset(name, seed=seed, size=size, **ast.literal_eval(config))


def score_within(request: dict) -> dict:
    """The reply to one request, ``score_answer`` stopped after ``request["budget_s"]``; a raising scorer gives ``wrong``."""
    scorer = _dataset(request["dataset"], request["config"], int(request["seed"]), int(request["size"])).score_answer
    entry = pickle.loads(base64.b64decode(request["entry"]))
    budget_s = float(request["budget_s"])
    grading = _math_grading()
    try:
        with grading.wall_clock_limit(budget_s):
            score = float(scorer(request["answer"], entry))
    except grading._Deadline:
        return {"status": TIMEOUT, "score": 0.0, "reason": f"score_answer ran past its {budget_s:g} s budget"}
    except Exception as exc:  # noqa: BLE001 - model output (RecursionError, MemoryError too) never stops the worker
        return {"status": WRONG, "score": 0.0, "reason": f"score_answer failed: {type(exc).__name__}"}
    if score >= 1.0:
        return {"status": CORRECT, "score": score, "reason": ""}
    return {"status": WRONG, "score": score, "reason": f"score_answer gave {score:.3g}"}


@lru_cache(maxsize=1)
def _math_grading():
    """The sibling ``math_grading`` module (framing and the wall-clock limit), loaded by path (module docstring)."""
    spec = importlib.util.spec_from_file_location("_rlvr_math_grading", Path(__file__).with_name("math_grading.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def serve() -> None:
    """The worker loop: ``{"ready": true}`` once reasoning-gym is imported, then one reply per request; exits at end of input."""
    import resource

    read_frame, write_frame = _math_grading().read_frame, _math_grading().write_frame
    replies = os.dup(1)
    os.dup2(2, 1)  # anything a scorer prints goes to stderr, never into the reply pipe
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one BLAS thread: small address space, no oversubscription
    import reasoning_gym  # noqa: F401 - imported before "ready", so start-up never counts against a budget

    logging.getLogger().setLevel(logging.ERROR)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    except (ValueError, OSError):  # a lower hard limit already: keep it
        pass
    write_frame(replies, {"ready": True})
    while True:
        request = read_frame(0)
        if request is None:
            return
        try:
            reply = score_within(request)
        except Exception as exc:  # noqa: BLE001 - rebuilding the scorer failed: report it, keep serving
            reply = {"status": ERROR, "score": 0.0,
                     "reason": f"the scoring worker could not rebuild the data set: {type(exc).__name__}: {exc}"}
        write_frame(replies, reply)


if __name__ == "__main__":
    serve()
