"""SAGE: shaped KL anchors for guided exploration (arXiv 2605.18864; authors' code tally0818/SAGE).

SAGE keeps the KL anchor to pi_ref but shapes its reference to q * pi_ref, so the KL-regularised optimum
becomes pi ∝ q pi_ref exp(r / beta). All in the ``anchor`` hook, per completion token t, ``(n, T)`` tensors:

    q_t          = guide(logp, entropy, mask)          detached, in [q_min, q_max]
    shaped_ref_t = ref_logp_t + log q_t
    anchor_t     = kl_penalty(logp_t, shaped_ref_t, config.kl_estimator)     (k3: :data:`SAGE_ANCHOR`)
    loss_t      += kl_coef * anchor_t                  (the trainer adds it, beta = kl_coef)

Guides (`rlvr_lib.algos.guides`), q from the current policy's forward of the same minibatch:

* ``sage`` (branch): q_t = clamp(1 + gamma * max(H_t - tau, 0), q_min, q_max), H_t the token entropy
  (nats) at the sampling temperature; gamma 0.3, [q_min, q_max] = [0.6, 1.4].
* ``sage_token``: q rises with the per-sequence min-max normalised surprisal of the sampled token, plus
  noise; alpha 0.3 -> 0.1, sigma 0.25 -> 0.1 (cosine restarts, `guide_schedule`).
* ``sage_random``: q_t = 1 + sigma * xi_t on a Bernoulli(eps) subset; eps 0.1 -> 0, sigma 0.15 -> 0.05.

Presets: ``sage``, ``sage_token``, ``sage_random``, and the "+Branch" loss-aggregation rows ``dapo_branch``
(:data:`SAGE_DAPO`, TRL's ``loss_type="dapo"``) and ``bnpo_loss_branch``; GRPO comparator ``grpo_k3``.
Where q = 1 the anchor equals GRPO's bit for bit, so SAGE and ``grpo_k3`` differ only by q.

The presets are the paper's: beta 0.05, k3, lr 5e-6, tau 1.2 nats (:data:`AUTHORS_TAU`), gamma 0.3. The testbed
calibrates beta and tau (`rlvr_lib.study.testbed`; tau by :func:`calibrate_tau`).

Departures from the paper (details in docs/papers/sage.md, "Departures"):

1. On one process ``dapo_branch`` trains exactly as ``bnpo_loss_branch`` (TRL's "dapo" and "bnpo" differ
   only across processes).

Derivations and measurements (why k3, tau's calibration, diagnostics): docs/methods/sage.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from rlvr_lib.algos import KL_ESTIMATORS, kl_penalty
from rlvr_lib.algos.guides import get_guide, guide_schedule, shaped_anchor
from rlvr_lib.config import ConfigBase
from rlvr_lib.methods.base import SAGE_KL_COEF, SAGE_LR, Method, StepBatch
from rlvr_lib.methods.baselines import DAPO, DAPOOptions
from rlvr_lib.methods.registry import METHODS, register_method
from rlvr_lib.validation import check, check_int, check_range

__all__ = [
    "BNPOLossBranch",
    "BranchOptions",
    "DAPOBranch",
    "DAPOBranchOptions",
    "FULL_DAPO_BRANCH",
    "RandomGuideOptions",
    "SAGE",
    "SAGE_ANCHOR",
    "SAGE_DAPO",
    "SAGERandom",
    "SAGEToken",
    "ShapedAnchor",
    "AUTHORS_TAU",
    "TokenGuideOptions",
    "base_token_entropies",
    "calibrate_tau",
    "guide_stats",
]

AUTHORS_TAU = 1.2
"""The branch guide's threshold tau (nats) in the authors' code: the default (a small model calibrates its own,
:func:`calibrate_tau`)."""


# ------------------------------------------------------------------------------ options
@dataclass(frozen=True)
class GuideBounds(ConfigBase):
    """The clamp of every guide: q in [``q_min``, ``q_max``], 0 < q_min <= 1 <= q_max."""

    GUIDE: ClassVar[str] = ""

    q_min: float = 0.6
    q_max: float = 1.4

    def validate(self) -> None:
        super().validate()  # cooperative: a combined options class (DAPOBranchOptions) validates every part
        self.check_range("q_min", self.q_min, 0, 1, lo_open=True)
        self.check_range("q_max", self.q_max, 1, None)

    def guide_kwargs(self, step: int, max_steps: int) -> dict:
        """Keyword options of ``GUIDES[GUIDE]`` at ``step`` of a ``max_steps`` run."""
        return {"q_min": self.q_min, "q_max": self.q_max}


@dataclass(frozen=True)
class BranchOptions(GuideBounds):
    """The branch guide's settings: ``tau`` (nats, >= 0), ``gamma`` (>= 0), the clamp."""

    GUIDE: ClassVar[str] = "branch"

    tau: float = AUTHORS_TAU
    gamma: float = 0.3

    def validate(self) -> None:
        super().validate()
        self.check_nonnegative("tau", self.tau)
        self.check_nonnegative("gamma", self.gamma)

    def guide_kwargs(self, step: int, max_steps: int) -> dict:
        return {**super().guide_kwargs(step, max_steps), "tau": self.tau, "gamma": self.gamma}


@dataclass(frozen=True)
class _Scheduled(GuideBounds):
    """The schedule shared by the token and random guides (`guide_schedule`)."""

    num_cycles: int = 8
    decay_rate: float = 0.9

    def validate(self) -> None:
        super().validate()
        self.check_positive_int("num_cycles", self.num_cycles)
        self.check_probability("decay_rate", self.decay_rate)

    def _scheduled(self, step: int, max_steps: int, start: float, end: float) -> float:
        return guide_schedule(step, max_steps=max_steps, start=start, end=end, num_cycles=self.num_cycles,
                              decay_rate=self.decay_rate)


@dataclass(frozen=True)
class TokenGuideOptions(_Scheduled):
    """The token guide's settings: alpha and sigma schedules (start -> end, >= 0), the outlier quantile."""

    GUIDE: ClassVar[str] = "token"

    alpha_start: float = 0.3
    alpha_end: float = 0.1
    sigma_start: float = 0.25
    sigma_end: float = 0.1
    quantile: float = 0.05

    def validate(self) -> None:
        super().validate()
        for name in ("alpha_start", "alpha_end", "sigma_start", "sigma_end"):
            self.check_nonnegative(name, getattr(self, name))
        self.check_range("quantile", self.quantile, 0, 0.5, hi_open=True)

    def guide_kwargs(self, step: int, max_steps: int) -> dict:
        return {**super().guide_kwargs(step, max_steps), "quantile": self.quantile,
                "alpha": self._scheduled(step, max_steps, self.alpha_start, self.alpha_end),
                "sigma": self._scheduled(step, max_steps, self.sigma_start, self.sigma_end)}


@dataclass(frozen=True)
class RandomGuideOptions(_Scheduled):
    """The random guide's settings: eps (in [0, 1]) and sigma (>= 0) schedules, start -> end."""

    GUIDE: ClassVar[str] = "random"

    eps_start: float = 0.1
    eps_end: float = 0.0
    sigma_start: float = 0.15
    sigma_end: float = 0.05

    def validate(self) -> None:
        super().validate()
        self.check_probability("eps_start", self.eps_start)
        self.check_probability("eps_end", self.eps_end)
        self.check_nonnegative("sigma_start", self.sigma_start)
        self.check_nonnegative("sigma_end", self.sigma_end)

    def guide_kwargs(self, step: int, max_steps: int) -> dict:
        return {**super().guide_kwargs(step, max_steps),
                "eps": self._scheduled(step, max_steps, self.eps_start, self.eps_end),
                "sigma": self._scheduled(step, max_steps, self.sigma_start, self.sigma_end)}


@dataclass(frozen=True)
class DAPOBranchOptions(BranchOptions, DAPOOptions):
    """`DAPO`'s options and the branch guide's (both validated)."""


# ------------------------------------------------------------------------------ the anchor
def guide_stats(q: torch.Tensor, entropy: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """The guide's diagnostics over the completion tokens (``mask``), as 0-d tensors (never NaN).

    ``sage_q_mean``, ``sage_q_shaped_frac`` (q != 1), ``sage_q_raised_frac`` (q > 1), ``sage_entropy_raised``.
    """
    m = mask.bool()
    n = m.sum().clamp(min=1)
    raised = m & (q > 1)
    zero = torch.zeros((), dtype=q.dtype, device=q.device)
    return {
        "sage_q_mean": torch.where(m, q, zero).sum() / n,
        "sage_q_shaped_frac": (m & (q != 1)).sum() / n,
        "sage_q_raised_frac": raised.sum() / n,
        "sage_entropy_raised": torch.where(raised, entropy.detach().to(q.dtype), zero).sum()
        / raised.sum().clamp(min=1),
    }


class ShapedAnchor:
    """Mixin that gives a `Method` SAGE's anchor hook, guide ``Options.GUIDE``; put it first among the bases."""

    _STREAM = 0x5A6E  # keeps the guide's seeds apart from the trainer's streams
    token_mean_stats = frozenset({"sage_kl_unshaped", "sage_q_mean", "sage_q_shaped_frac", "sage_q_raised_frac"})

    def __init__(self, config):
        super().__init__(config)
        # Without an anchor the trainer never calls the hook and the guide would be silently ignored.
        check(config.kl_coef > 0, f"{self.name}: kl_coef", config.kl_coef,
              "> 0 (the guide acts only through the KL anchor; without it use the method without the guide)")
        check(config.kl_estimator != "none", f"{self.name}: kl_estimator", config.kl_estimator,
              f"one of {sorted(set(KL_ESTIMATORS) - {'none'})} (the guide acts only through the KL anchor)")
        self.on_step_start(0)

    def on_step_start(self, step: int) -> None:
        super().on_step_start(step)
        self.guide_generator = self.generator(step, self._STREAM)

    def guide(self, logp: torch.Tensor, entropy: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """q ``(n, T)`` for the minibatch, detached."""
        fn = get_guide(self.options.GUIDE)
        kwargs = self.options.guide_kwargs(self.step, self.config.steps)
        with torch.no_grad():
            return fn(logp.detach(), entropy.detach(), mask, generator=self.guide_generator, **kwargs).detach()

    def anchor(self, batch: StepBatch, logp: torch.Tensor, entropy: torch.Tensor,
               mask: torch.Tensor) -> tuple[torch.Tensor, dict]:
        q = self.guide(logp, entropy, mask)
        per_token = shaped_anchor(logp, batch.ref_logprobs, q, self.config.kl_estimator)
        stats = guide_stats(q, entropy, mask)
        with torch.no_grad():
            unshaped = kl_penalty(logp.detach(), batch.ref_logprobs, self.config.kl_estimator)
            stats["sage_kl_unshaped"] = (unshaped * mask).sum() / mask.sum().clamp(min=1)
        return per_token, stats


class SAGE(ShapedAnchor, Method):
    """SAGE with the branch guide (arXiv 2605.18864): GRPO whose anchor reference is q * pi_ref.

    q_t = clamp(1 + gamma * max(H_t - tau, 0), q_min, q_max); anchor_t = kl_penalty(logp_t, ref_logp_t + log q_t,
    kl_estimator). Options: ``tau`` (default 1.2, :data:`AUTHORS_TAU`), ``gamma`` (0.3), ``q_min`` (0.6), ``q_max`` (1.4).
    """

    Options = BranchOptions


class SAGEToken(ShapedAnchor, Method):
    """SAGE with the token guide (arXiv 2605.18864): q from the sampled token's normalised surprisal.

    Per sequence, w_t = minmax-normalised -log p_t (quantile-clipped),
    q_t = clamp(1 + alpha * w_t + sigma * w_t * xi_t, q_min, q_max), xi ~ N(0, 1); alpha, sigma follow
    `guide_schedule`. Options: ``alpha_start`` 0.3, ``alpha_end`` 0.1, ``sigma_start`` 0.25, ``sigma_end`` 0.1,
    ``quantile`` 0.05, ``num_cycles`` 8, ``decay_rate`` 0.9, ``q_min``, ``q_max`` (0.6, 1.4).
    """

    Options = TokenGuideOptions


class SAGERandom(ShapedAnchor, Method):
    """SAGE with the random guide (arXiv 2605.18864): the control with no signal in q.

    q_t = clamp(1 + sigma * xi_t, q_min, q_max) on a Bernoulli(eps) subset of tokens, else 1. Options:
    ``eps_start`` 0.1, ``eps_end`` 0.0, ``sigma_start`` 0.15, ``sigma_end`` 0.05, ``num_cycles`` 8,
    ``decay_rate`` 0.9, ``q_min``, ``q_max`` (0.6, 1.4).
    """

    Options = RandomGuideOptions


class DAPOBranch(ShapedAnchor, DAPO):
    """SAGE's "DAPO + Branch" (arXiv 2605.18864): `DAPO`'s hooks with the branch-guided anchor.

    Preset (:data:`SAGE_DAPO` + :data:`SAGE_ANCHOR`): TRL's ``loss_type="dapo"``, token-level mean loss
    sum_it m_it L_it / sum_it m_it, clip 0.2/0.2, plus beta * shaped anchor; the full DAPO recipe is
    :data:`FULL_DAPO_BRANCH`'s overrides.
    """

    Options = DAPOBranchOptions


class BNPOLossBranch(ShapedAnchor, Method):
    """SAGE's "BNPO + Branch" (arXiv 2605.18864): ``bnpo_loss`` (token-mean loss) with the branch-guided anchor."""

    Options = BranchOptions


# ------------------------------------------------------------------------------ tau calibration
def base_token_entropies(model, tokenizer, *, problems: int = 600, samples: int = 32, seed: int = 0,
                         family: str = "train", task: str = "arith", temperature: float = 1.0,
                         max_new_tokens: int = 48, batch_size: int = 512) -> torch.Tensor:
    """A policy's token entropies (nats) over the completion tokens of its own rollouts, 1-D float64 on CPU.

    ``samples`` completions of each of the first ``problems`` of ``family`` at ``temperature``;
    H_t = -sum_v p_v log p_v teacher-forced on them, EOS included, in rollout order.
    """
    from rlvr_lib.rollout import KVCacheEngine, SamplingParams, sequence_logprobs
    from rlvr_lib.tasks import get_task

    check_int("problems", problems, 1)
    check_int("samples", samples, 1)
    check_int("seed", seed, 0)
    check_int("batch_size", batch_size, 1)
    task_ = get_task(task)
    pool = task_.family_problems(family, min(problems, task_.family_capacity(family)), seed=0)
    engine = KVCacheEngine(model, tokenizer, batch_size=batch_size)
    params = SamplingParams(n=samples, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    was_training = model.training
    model.eval()
    try:
        ro = engine.generate([p.prompt for p in pool], params)
        entropies = []
        with torch.no_grad():
            for rows in torch.arange(len(ro)).split(batch_size):
                _, ent = sequence_logprobs(model, ro.prompt_ids[rows], ro.prompt_mask[rows],
                                           ro.completion_ids[rows], ro.completion_mask[rows],
                                           temperature=temperature, with_entropy=True)
                entropies.append(ent[ro.completion_mask[rows].to(ent.device).bool()].double().cpu())
    finally:
        model.train(was_training)
    return torch.cat(entropies)


def calibrate_tau(model, tokenizer, *, quantile: float = 0.9, **sample) -> float:
    """tau by the rule of docs/methods/sage.md: the ``quantile`` (default 0.9) of :func:`base_token_entropies`, in nats."""
    check_range("quantile", quantile, 0.0, 1.0)
    return float(torch.quantile(base_token_entropies(model, tokenizer, **sample), quantile))


# ------------------------------------------------------------------------------ registry
SAGE_ANCHOR = {"kl_coef": SAGE_KL_COEF, "kl_estimator": "k3"}
"""The authors' anchor (k3 on the shaped reference, beta 0.05): every SAGE preset's and ``grpo_k3``'s (with the
authors' lr, :data:`rlvr_lib.methods.base.SAGE_LR`)."""

_GRPO_K3 = {**METHODS["grpo"].preset, **SAGE_ANCHOR, "lr": SAGE_LR}

register_method("grpo_k3", Method, f"SAGE's GRPO: the authors' k3 anchor (forward KL's gradient as used), beta {SAGE_KL_COEF}",
                doc="""SAGE's GRPO comparator (arXiv 2605.18864, code tally0818/SAGE): GRPO with the authors' k3 anchor.

                beta * (r - log r - 1) per token, r = pi_ref / pi_theta, differentiated as
                is (its gradient as used is the forward KL's, `rlvr_lib.algos.kl`), at the authors' beta
                (:data:`SAGE_ANCHOR`): the ``sage*`` presets with q = 1.
                """,
                **_GRPO_K3)
register_method("sage", SAGE, "SAGE branch guide: GRPO anchored to q*pi_ref, q = 1 + 0.3 (H - tau)_+ in [0.6, 1.4]",
                **_GRPO_K3)
register_method("sage_token", SAGEToken, "SAGE token guide: q from normalised surprisal (+ noise), scheduled",
                **_GRPO_K3)
register_method("sage_random", SAGERandom, "SAGE random guide: q = 1 + sigma xi on a random eps of tokens",
                **_GRPO_K3)
SAGE_DAPO = {"loss_agg": "token_mean", "eps_low": 0.2, "eps_high": 0.2, "kl_coef": 0.0,
             "method_options": {"dynamic_sampling": False, "overlong_cache": 0}}
"""SAGE's "DAPO" as its authors run it (TRL's ``loss_type="dapo"``; see docs/methods/sage.md): `TrainerConfig`
fields over the ``dapo`` hooks. With :data:`SAGE_ANCHOR` it is ``dapo_branch``'s preset and, on the ``dapo``
method, its matched comparator's settings."""

FULL_DAPO_BRANCH = {"eps_high": METHODS["dapo"].preset["eps_high"], "method_options": None}
"""Overrides that turn ``dapo_branch`` into the full DAPO recipe with the anchor (clip-higher 0.28, `DAPO`'s
option defaults: overlong shaping, dynamic sampling): the ``dapo`` preset + :data:`SAGE_ANCHOR`, the
``dapo_branch`` preset of earlier versions. An extra row, not SAGE's."""

register_method("dapo_branch", DAPOBranch,
                f"SAGE's DAPO (TRL loss_type='dapo': token-mean, clip 0.2/0.2, no dynamic sampling) + branch-guided "
                f"anchor (k3, beta {SAGE_KL_COEF})",
                **{**SAGE_DAPO, **SAGE_ANCHOR, "lr": SAGE_LR})
register_method("bnpo_loss_branch", BNPOLossBranch,
                f"SAGE's BNPO (token-mean loss) + branch-guided anchor (k3, beta {SAGE_KL_COEF})",
                **{**METHODS["bnpo_loss"].preset, **SAGE_ANCHOR, "lr": SAGE_LR})
