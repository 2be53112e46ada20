"""`counted_run`: a short training run whose completions are counted at the engine and optimizer steps at the
optimizer (the equal-compute tests: `rlvr_lib.trainer.compute_spent` and notebook 07's budget)."""

from __future__ import annotations

import copy

from rlvr_lib.methods import method_config
from rlvr_lib.tasks import CORRECT, WRONG, Verdict
from rlvr_lib.trainer import Trainer

SMALL = dict(steps=2, prompts_per_step=4, group_size=4, max_new_tokens=24, train_family="easy_mix",
             train_pool_size=32, lr=1e-3, seed=0)


def _counted(trainer):
    """Count the completions the engine returns and the optimizer's steps."""
    counts = {"completions": 0, "optimizer_steps": 0}
    generate = trainer.engine.generate

    def counting_generate(prompts, params):
        out = generate(prompts, params)
        counts["completions"] += len(out)
        return out

    def count_step(optimizer, args, kwargs):
        counts["optimizer_steps"] += 1

    trainer.engine.generate = counting_generate
    trainer.optimizer.register_step_post_hook(count_step)  # AdamW and IVON alike (torch's step hooks)
    return counts


def counted_run(policy, name, monkeypatch=None, correct_if=None, **kw):
    """Train ``name`` for ``SMALL`` (updated by ``kw``) on a copy of ``policy``; with ``correct_if(problem, call)``
    the verifier is scripted. Returns ``(config, history, {"completions", "optimizer_steps"})``."""
    model, tokenizer = policy
    trainer = Trainer(method_config(name, **{**SMALL, **kw}), copy.deepcopy(model), tokenizer)
    if correct_if is not None:  # a scripted verifier: which groups DAPO drops is known
        calls = iter(range(10**9))
        monkeypatch.setattr(trainer.task, "verify", lambda p, text: Verdict(1.0, CORRECT) if correct_if(p, next(calls))
                            else Verdict(0.0, WRONG))
    counts = _counted(trainer)
    history = trainer.train(progress=False)
    return trainer.config, history, counts
