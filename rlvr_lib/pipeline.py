"""Train a method and evaluate it, as one cached, resumable run.

A notebook calls `evaluate_base` once and `train_and_evaluate` per (method,
seed); both go through `rlvr_lib.experiments.cached_run`, so a finished run is
read back from ``results/<experiment>/`` instead of recomputed, and an
interrupted training resumes from its last checkpoint (kept under
``results/.checkpoints/``, deleted once the run record is written).
"""

from __future__ import annotations

import shutil

from rlvr_lib.eval.policy_eval import EvalSpec, evaluate_policy
from rlvr_lib.config import hash_jsonable
from rlvr_lib.experiments import RunRecord, cached_run, results_root
from rlvr_lib.policy import load_policy
from rlvr_lib.policy.load import policy_fingerprint
from rlvr_lib.rollout import KVCacheEngine
from rlvr_lib.trainer import Trainer, TrainerConfig, nan_to_none


def evaluate_base(experiment: str, spec: EvalSpec, policy: str | None = None, *, root=None,
                  name: str = "base") -> RunRecord:
    """Evaluate the untrained policy (cached as run ``name``, one record per ``spec.seed``).

    The cache key holds the policy's content hash (`policy_fingerprint`), as
    does `train_and_evaluate`'s: a retrained checkpoint never hits an old record.
    """

    def run():
        model, tokenizer = load_policy(policy)
        return [], evaluate_policy(KVCacheEngine(model, tokenizer), spec)

    key = {"policy": policy, "policy_sha": policy_fingerprint(policy), "eval": spec.to_dict()}
    return cached_run(experiment, name, key, spec.seed, run, root=root)


def train_and_evaluate(
    experiment: str,
    name: str,
    config: TrainerConfig,
    spec: EvalSpec,
    *,
    root=None,
    checkpoint_every: int = 10,
    progress: bool = False,
) -> RunRecord:
    """Train ``config`` (its seed is the run's seed) and evaluate the result on ``spec``.

    Args:
        experiment: Results folder name.
        name: Run name (method label), e.g. ``"grpo-g8"``.
        config: The trainer config.
        spec: The evaluation after training.
        root: Results root (default ``results/``).
        checkpoint_every: Steps between resumable checkpoints.
        progress: Show a progress bar.
    """
    key = {"train": config.to_dict(), "policy_sha": policy_fingerprint(config.policy), "eval": spec.to_dict()}
    ckpt = results_root(root) / ".checkpoints" / experiment / f"{name}-{hash_jsonable(key)}-s{config.seed}"

    def run():
        trainer = Trainer(config.replace(checkpoint_every=checkpoint_every), checkpoint_dir=ckpt)
        history = trainer.train(progress=progress)
        final = evaluate_policy(KVCacheEngine(trainer.model, trainer.tokenizer), spec)
        return nan_to_none(history), final

    record = cached_run(experiment, name, key, config.seed, run, root=root)
    shutil.rmtree(ckpt, ignore_errors=True)
    return record
