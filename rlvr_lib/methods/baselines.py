"""The GRPO-family baselines the four papers compare against, each a registered method.

Each is a `Method` subclass overriding only the hooks its paper changes, with a `TrainerConfig` preset
(registered at the bottom) and its settings in ``method_options``, parsed by its ``Options`` dataclass.

=================  ==========================================================  =================
name               what changes against GRPO (``grpo``: reverse-KL anchor)      compared in
=================  ==========================================================  =================
grpo_no_kl         no KL anchor                                                SAGE, 3PO, NudgeRL
grpo_forward_kl    forward-KL anchor                                           SAGE
grpo_k1, grpo_k2   k1 / k2 KL estimators                                       (anchor ablation)
dapo               clip-higher, token-mean loss, overlong shaping, dynamic     (shared)
                   sampling, no KL
dr_grpo            no std normalisation, constant length normaliser, no KL     (shared)
bnpo_loss          SAGE's "BNPO": token-mean loss, no KL                       SAGE
bnpo_beta          the BNPO paper: Beta-normalised advantages                  (shared)
entropy_reg        loss - alpha * mean token entropy                           3PO
polaris            temperature latch 1.0 -> 1.2 when entropy halves            3PO
polaris_fixed      temperature 1.2 from the start                              3PO (ablation)
kl_cov, clip_cov   covariance-selected token penalty / gradient detach         3PO
pope               oracle-prefix hints on half of the prompts                  NudgeRL
intuitor           reward = self-certainty, no verifier                        VIGOR
=================  ==========================================================  =================

Departures from the papers (details in docs/papers/baselines.md and each paper's page under docs/papers/):

1. ``pope`` runs at NudgeRL's settings and ``intuitor`` at VIGOR's, as those papers' comparisons run
   them; INTUITOR's authors use beta 0.005 and a constant lr.
2. On the testbed POPE's 15% oracle prefix is the oracle strategy's name: "hint the right strategy".

Settings of each comparator and the testbed's measurements: docs/methods/baselines.md.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import torch

from rlvr_lib.algos import (
    clip_cov_loss,
    dynamic_sampling_keep_mask,
    entropy_bonus,
    kl_cov_loss,
    overlong_reward_shaping,
)
from rlvr_lib.config import ConfigBase
from rlvr_lib.methods.base import SAGE_KL_COEF, SAGE_LR, Method, StepBatch
from rlvr_lib.methods.nudgerl import NUDGERL_LR, NUDGERL_SETTINGS
from rlvr_lib.methods.registry import register_method
from rlvr_lib.methods.vigor import VIGOR_LR, VIGOR_SETTINGS
from rlvr_lib.rewards import completion_logits, self_certainty_rewards
from rlvr_lib.rollout.logprobs import sequence_logprobs
from rlvr_lib.tasks import CORRECT

logger = logging.getLogger(__name__)

__all__ = [
    "ActorOldLogprobs",
    "BASELINES",
    "ClipCov",
    "DAPO",
    "EntropyReg",
    "Intuitor",
    "KLCov",
    "POPE",
    "Polaris",
    "PolarisFixed",
    "completion_logits",
    "oracle_prefix",
]


# ------------------------------------------------------------------------------ KL anchors
# ------------------------------------------------------------------------------ DAPO
@dataclass(frozen=True)
class DAPOOptions(ConfigBase):
    """`DAPO`'s settings (see its docstring)."""

    overlong_cache: int = 8
    max_refill_rounds: int = 3
    dynamic_sampling: bool = True

    def validate(self) -> None:
        self.check_nonnegative_int("overlong_cache", self.overlong_cache)
        self.check_nonnegative_int("max_refill_rounds", self.max_refill_rounds)


class DAPO(Method):
    """DAPO (arXiv 2503.14476): clip-higher, token-level loss, overlong shaping, dynamic sampling.

    * Clip-higher: rho clipped to [1 - 0.2, 1 + 0.28]; token-level aggregation sum_it m_it L_it / sum_it m_it; no KL.
    * Overlong shaping added to the verifier reward, L_max = ``max_new_tokens``, L_cache = ``overlong_cache``:
      R_len(L) = 0 for L <= L_max - L_cache, (L_max - L_cache - L) / L_cache on the last L_cache tokens.
    * Dynamic sampling: groups all correct or all incorrect are dropped and refilled from fresh prompts, for at
      most ``max_refill_rounds`` rounds.

    Options: ``overlong_cache`` (default 8), ``max_refill_rounds`` (default 3), ``dynamic_sampling`` (default True).
    """

    Options = DAPOOptions

    def __init__(self, config):
        super().__init__(config)
        limit = config.max_new_tokens
        DAPOOptions.check(self.options.overlong_cache <= limit, "overlong_cache", self.options.overlong_cache,
                          f"an integer in [0, max_new_tokens={limit}]")

    def rewards(self, batch: StepBatch, model) -> torch.Tensor:
        verifier = super().rewards(batch, model)
        lengths = batch.rollouts.completion_mask.sum(1).float()
        return verifier + overlong_reward_shaping(lengths, self.config.max_new_tokens, self.options.overlong_cache)

    def keep_groups(self, batch: StepBatch) -> torch.Tensor | None:
        if not self.options.dynamic_sampling:
            return None
        correct = torch.tensor([v.status == CORRECT for v in batch.verdicts], dtype=torch.float32)
        keep_rows = dynamic_sampling_keep_mask(correct, batch.group_index)
        keep = torch.zeros(len(batch.problems), dtype=torch.bool)
        keep[batch.group_index[keep_rows]] = True
        return keep

    def refill_rounds(self) -> int:
        return self.options.max_refill_rounds if self.options.dynamic_sampling else 0


# ------------------------------------------------------------------------------ Dr.GRPO, BNPO
# ------------------------------------------------------------------------------ 3PO baselines
@dataclass(frozen=True)
class EntropyRegOptions(ConfigBase):
    """`EntropyReg`'s settings: the bonus weight ``alpha`` >= 0."""

    alpha: float = 1e-3

    def validate(self) -> None:
        self.check_nonnegative("alpha", self.alpha)


class EntropyReg(Method):
    """Entropy regularisation (the 3PO baseline, arXiv 2608.09805): loss = L_PG - alpha * H, no KL.

    H = aggregate_loss(entropy, mask, loss_agg), logged as ``entropy_bonus``. Option ``alpha`` (>= 0, default 1e-3).
    """

    Options = EntropyRegOptions

    def extra_loss(self, batch: StepBatch, model, logp, entropy, mask) -> tuple[torch.Tensor, dict]:
        cfg = self.config
        normalizer = None  # aggregated exactly as the trainer aggregates the policy loss
        if cfg.loss_agg == "seq_mean_token_sum_norm":
            normalizer = cfg.loss_normalizer or float(cfg.max_new_tokens)
        bonus = entropy_bonus(entropy, mask, cfg.loss_agg, normalizer=normalizer)
        return -self.options.alpha * bonus, {"entropy_bonus": bonus.detach()}


@dataclass(frozen=True)
class PolarisOptions(ConfigBase):
    """`Polaris`'s settings (see its docstring)."""

    mode: str = "latch"
    t_high: float = 1.2
    entropy_fraction: float = 0.5

    def validate(self) -> None:
        self.check_choice("mode", self.mode, ("latch", "fixed"))
        self.check_positive("t_high", self.t_high)
        self.check_range("entropy_fraction", self.entropy_fraction, 0, 1, lo_open=True, hi_open=True)


@dataclass(frozen=True)
class PolarisFixedOptions(PolarisOptions):
    """`PolarisFixed`'s settings: `PolarisOptions` with ``mode`` defaulting to "fixed"."""

    mode: str = "fixed"


class Polaris(Method):
    """"Polaris" as 3PO ran it (arXiv 2608.09805): a one-way sampling-temperature latch.

    T_step = T_base until the step's mean token entropy H_t < ``entropy_fraction`` x H_0 (H_0: the first step's);
    from the next step on T = ``t_high``, for good. H_0 and the latch step are checkpointed; logs ``polaris_latched``.

    Options: ``mode`` ("latch" or "fixed"), ``t_high`` (default 1.2), ``entropy_fraction`` (default 0.5).
    """

    Options = PolarisOptions

    def __init__(self, config):
        super().__init__(config)
        self.initial_entropy: float | None = None
        self.latched_at: int | None = None

    @property
    def latched(self) -> bool:
        return self.options.mode == "fixed" or self.latched_at is not None

    def sampling_temperature(self, step: int) -> float:
        return float(self.options.t_high) if self.latched else self.config.temperature

    def on_step_end(self, step: int, metrics: dict) -> None:
        sampled_high = self.latched  # this step's temperature, before the latch can fire below
        if self.options.mode == "latch" and self.latched_at is None:
            entropy = float(metrics["entropy"])
            if self.initial_entropy is None:
                self.initial_entropy = entropy
            elif entropy < self.options.entropy_fraction * self.initial_entropy:
                self.latched_at = step
                logger.info(
                    "polaris: step %d entropy %.4f < %g x initial %.4f; sampling temperature %g -> %g from step %d on",
                    step, entropy, self.options.entropy_fraction, self.initial_entropy,
                    self.config.temperature, self.options.t_high, step + 1,
                )
        metrics["polaris_latched"] = float(sampled_high)

    def state_dict(self) -> dict:
        return {"initial_entropy": self.initial_entropy, "latched_at": self.latched_at}

    def load_state_dict(self, state: dict) -> None:
        self.initial_entropy, self.latched_at = state["initial_entropy"], state["latched_at"]


class PolarisFixed(Polaris):
    """Polaris's plain alternative (arXiv 2608.09805): temperature ``t_high`` (1.2) from the first step."""

    Options = PolarisFixedOptions


class ActorOldLogprobs:
    """Mixin: the old log-probs of the policy loss are the training policy's own, as verl's actor computes them.

    Until the step's first ``optimizer.step()``, old_logp = ``logp.detach()`` (log-ratio exactly 0); after it, the
    pre-update policy's log-probs from one no-grad forward in ``before_update`` (``batch.extras["old_logprobs"]``).
    Put it first among the bases.
    """

    EXTRA = "old_logprobs"

    def make_optimizer(self, model):
        optimizer = super().make_optimizer(model)
        self._stepped = False
        optimizer.register_step_post_hook(lambda *_: setattr(self, "_stepped", True))
        return optimizer

    def before_update(self, batch: StepBatch, model) -> None:
        super().before_update(batch, model)
        self._stepped = False
        if self.config.inner_epochs * self.config.minibatches == 1:
            return  # every loss call of the step is on-policy
        ro, rows = batch.rollouts, torch.arange(len(batch))
        parts = []
        with torch.no_grad():
            for chunk in rows.split(self.config.rollout_batch_size):  # memory only
                lp, _ = sequence_logprobs(model, ro.prompt_ids[chunk], ro.prompt_mask[chunk],
                                          ro.completion_ids[chunk], ro.completion_mask[chunk],
                                          temperature=self.sampling_temperature(self.step))
                parts.append(lp)
        batch.extras[self.EXTRA] = torch.cat(parts).detach()

    def old_logprobs(self, batch: StepBatch, logp: torch.Tensor) -> torch.Tensor:
        """The minibatch's old log-probs (see the class docstring)."""
        if not getattr(self, "_stepped", False):
            return logp.detach()
        return batch.extras[self.EXTRA].to(device=logp.device, dtype=logp.dtype)


@dataclass(frozen=True)
class KLCovOptions(ConfigBase):
    """`KLCov`'s settings: token fraction ``k_frac`` in (0, 1], penalty weight ``kl_cov_coef`` >= 0."""

    k_frac: float = 2e-4
    kl_cov_coef: float = 1.0

    def validate(self) -> None:
        self.check_range("k_frac", self.k_frac, 0, 1, lo_open=True)
        self.check_nonnegative("kl_cov_coef", self.kl_cov_coef)


class KLCov(ActorOldLogprobs, Method):
    """KL-Cov (arXiv 2505.22617, "The Entropy Mechanism of RL for Reasoning LMs").

    cov_t = (logp_t - mean logp) * (A_t - mean A) over the batch's tokens; loss_t = -rho_t A_t +
    ``kl_cov_coef`` * |logp_t - old_logp_t| on the k = max(1, floor(``k_frac`` x n_tokens)) tokens of largest cov_t
    (no PPO clip). No KL anchor. Logged: ``kl_cov_frac``, ``abs_log_ratio``.

    Options: ``k_frac`` (in (0, 1], default 2e-4), ``kl_cov_coef`` (>= 0, default 1).
    """

    Options = KLCovOptions

    def policy_loss(self, batch: StepBatch, logp, entropy, mask) -> tuple[torch.Tensor, dict]:
        return kl_cov_loss(logp, self.old_logprobs(batch, logp), batch.advantages, mask,
                           k_frac=self.options.k_frac, kl_coef=self.options.kl_cov_coef)


@dataclass(frozen=True)
class ClipCovOptions(ConfigBase):
    """`ClipCov`'s settings: token fraction ``clip_frac`` in (0, 1], covariance band ``lb`` < ``ub``."""

    clip_frac: float = 2e-4
    lb: float = 1.0
    ub: float = 5.0

    def validate(self) -> None:
        self.check_range("clip_frac", self.clip_frac, 0, 1, lo_open=True)
        self.check_range("lb", self.lb, None, None)
        self.check_range("ub", self.ub, self.lb, None, lo_open=True)


class ClipCov(ActorOldLogprobs, Method):
    """Clip-Cov (arXiv 2505.22617): PPO-clip with the gradient of a few high-covariance tokens detached.

    Among tokens with ``lb`` < cov_t < ``ub`` not already clipped, a random max(1, floor(``clip_frac`` x n_tokens))
    keep their loss value but no gradient; the generator is reseeded from (seed, step). No KL. Logged:
    ``clip_cov_frac``.

    Options: ``clip_frac`` (in (0, 1], default 2e-4), ``lb`` (default 1.0), ``ub`` (> lb, default 5.0).
    """

    Options = ClipCovOptions
    _STREAM = 0xC11C  # keeps this generator's seeds apart from the trainer's streams

    def __init__(self, config):
        super().__init__(config)
        self.on_step_start(0)

    def on_step_start(self, step: int) -> None:
        super().on_step_start(step)
        self.clip_generator = self.generator(step, self._STREAM)

    def policy_loss(self, batch: StepBatch, logp, entropy, mask) -> tuple[torch.Tensor, dict]:
        return clip_cov_loss(
            logp, self.old_logprobs(batch, logp), batch.advantages, mask, eps_low=self.config.eps_low,
            eps_high=self.config.eps_high, clip_frac=self.options.clip_frac, lb=self.options.lb, ub=self.options.ub,
            generator=self.clip_generator,
        )


# ------------------------------------------------------------------------------ POPE
_NO_ATTRIBUTE = object()


def oracle_prefix(trace: str, ratio: float, max_tokens: int) -> str:
    """The first ``min(max_tokens, max(1, ceil(ratio * len(trace))))`` characters of ``trace`` ("" for "").

    ``ratio * len`` is rounded to 9 decimals before ``ceil`` (0.15 x 40 gives 6).
    """
    if not trace:
        return ""
    n = max(1, math.ceil(round(ratio * len(trace), 9)))
    return trace[: min(n, max_tokens)]


@dataclass(frozen=True)
class POPEOptions(ConfigBase):
    """`POPE`'s settings (see its docstring)."""

    share: float = 0.5
    ratio: float = 0.15
    max_prefix_tokens: int = 512
    label: str = ""

    def validate(self) -> None:
        self.check_probability("share", self.share)
        self.check_range("ratio", self.ratio, 0, 1, lo_open=True)
        self.check_positive_int("max_prefix_tokens", self.max_prefix_tokens)


class POPE(Method):
    """POPE, privileged oracle-prefix rollouts, as NudgeRL's comparison ran it (arXiv 2605.15726).

    For round(share x M) of the step's M prompts, the first ``ratio`` of the oracle solution (at most
    ``max_prefix_tokens``, `oracle_prefix`) goes in the prompt as a hint seen by all G rollouts. Preset: NudgeRL's
    configuration, :data:`rlvr_lib.methods.nudgerl.NUDGERL_SETTINGS`.

    Options: ``share`` (default 0.5), ``ratio`` (default 0.15), ``max_prefix_tokens`` (default 512), ``label`` ("").
    """

    Options = POPEOptions

    def check_task(self, task) -> None:
        """Refuse a task without oracle solutions: a `MathTask` without ``solution_field`` (its oracle trace is
        only the boxed gold answer), or a task without that attribute whose first training problems have an empty
        ``oracle_trace`` (`sample_problems`; a `MathTask` with one is trusted without loading its data)."""
        from rlvr_lib.methods.base import sample_problems

        solution_field = getattr(task, "solution_field", _NO_ATTRIBUTE)
        if solution_field is None:
            lacking = "has no solution column (solution_field=None: its oracle trace is only the boxed answer)"
        elif solution_field is _NO_ATTRIBUTE and not any(p.oracle_trace for p in
                                                         sample_problems(task, self.config.train_family)):
            lacking = f"has no oracle solution for its {self.config.train_family!r} problems (empty oracle_trace)"
        else:
            return
        raise ValueError(f"{self.name}: task {task.name!r} {lacking}: POPE's hint is a prefix of the oracle "
                         "solution; give the task solutions (e.g. MathTask(..., solution_field=...)) or use another "
                         "method")

    def hint(self, problem) -> str:
        """The partial-solution hint of ``problem`` (label, then the oracle prefix)."""
        prefix = oracle_prefix(problem.oracle_trace, self.options.ratio, self.options.max_prefix_tokens)
        label = self.options.label.strip()
        return f"{label} {prefix}" if label else prefix

    def hints(self, problems: list, group_size: int, rng: np.random.Generator) -> list[list[tuple[int, str | None]]]:
        n_prefixed = int(math.floor(self.options.share * len(problems) + 0.5))
        chosen = set(rng.choice(len(problems), n_prefixed, replace=False).tolist())
        return [
            [(0, self.hint(p))] * group_size if i in chosen else [(-1, None)] * group_size
            for i, p in enumerate(problems)
        ]


# ------------------------------------------------------------------------------ INTUITOR
@dataclass(frozen=True)
class IntuitorOptions(ConfigBase):
    """`Intuitor`'s settings: rows per no-grad forward (memory only)."""

    forward_batch_size: int = 64

    def validate(self) -> None:
        self.check_positive_int("forward_batch_size", self.forward_batch_size)


class Intuitor(Method):
    """INTUITOR (arXiv 2505.19590): the reward is the policy's own self-certainty; no verifier.

    r_i = SC(y_i) = (1/|y_i|) sum_t KL(U || pi_theta(. | x, y_<t))
        = (1/|y_i|) sum_t [logsumexp(z_t) - mean_v z_t - log V],

    z_t the current policy's logits (temperature 1) predicting completion token t, EOS included, under ``no_grad``.
    GRPO's group advantages of r; the verifier only logs ``accuracy``. Preset: VIGOR's configuration,
    :data:`rlvr_lib.methods.vigor.VIGOR_SETTINGS`. Option ``forward_batch_size`` (default 64; memory only).
    """

    Options = IntuitorOptions
    uses_verifier_reward = False  # a verifier that raises leaves an "unverified" verdict, training goes on

    def rewards(self, batch: StepBatch, model) -> torch.Tensor:
        return self_certainty_rewards(model, batch.rollouts, self.options.forward_batch_size)


# ------------------------------------------------------------------------------ registry
BASELINES: list[str] = []
"""Names registered by this module, in registration order (notebook 02 trains ``grpo`` and these)."""


def _register(name: str, cls: type, description: str, *, doc: str | None = None, **preset) -> None:
    register_method(name, cls, description, doc=doc, **preset)
    BASELINES.append(name)


_register("grpo_no_kl", Method, "GRPO without a KL anchor (the 3PO/NudgeRL GRPO; SAGE's 'no KL')",
          doc="""GRPO without a KL anchor (preset ``kl_coef=0``; no reference model is loaded).

          Loss: PPO-clip surrogate only, A_i = (r_i - mean_g r) / (std_g r + eps)
          (DeepSeekMath, arXiv 2402.03300). The GRPO of 3PO (arXiv 2608.09805) and
          NudgeRL (arXiv 2605.15726), and SAGE's (arXiv 2605.18864) "no KL" anchor.
          """,
          kl_coef=0.0)
_register("grpo_forward_kl", Method, f"GRPO with a forward-KL anchor KL(pi_ref||pi), beta {SAGE_KL_COEF}",
          doc="""GRPO with a forward-KL anchor: beta * KL(pi_ref || pi_theta), at SAGE's beta and lr.

          Per sampled token, w = pi_ref / pi_theta: w log w - (w - 1) (unbiased for
          the forward KL on samples of pi_theta; ``rlvr_lib.algos.forward_kl_penalty``).
          The anchor alternative SAGE (arXiv 2605.18864) argues against.
          """,
          kl_coef=SAGE_KL_COEF, kl_estimator="forward", lr=SAGE_LR)
_register("grpo_k1", Method, f"GRPO with the k1 KL estimator (log-ratio), beta {SAGE_KL_COEF}",
          doc="""GRPO with the k1 KL estimator: beta * (log pi_theta - log pi_ref) per token, at SAGE's beta and lr.

          Schulman's k1 (unbiased, high variance) in place of GRPO's k3 (arXiv 2402.03300).
          """,
          kl_coef=SAGE_KL_COEF, kl_estimator="k1", lr=SAGE_LR)
_register("grpo_k2", Method, f"GRPO with the k2 KL estimator (half squared log-ratio), beta {SAGE_KL_COEF}",
          doc="""GRPO with the k2 KL estimator: beta * 0.5 (log pi_theta - log pi_ref)^2 per token, at SAGE's beta and lr.

          Schulman's k2 (biased, low variance) in place of GRPO's k3 (arXiv 2402.03300).
          """,
          kl_coef=SAGE_KL_COEF, kl_estimator="k2", lr=SAGE_LR)
_register("dapo", DAPO, "DAPO: clip-higher 0.28, token-mean loss, overlong shaping, dynamic sampling, no KL",
          eps_low=0.2, eps_high=0.28, loss_agg="token_mean", kl_coef=0.0)
_register("dr_grpo", Method, "Dr.GRPO: advantage r - mean (no std), constant length normaliser, no KL",
          doc="""Dr.GRPO (arXiv 2503.20783): GRPO without its two length/difficulty biases.

          A_i = r_i - mean_g r (no division by the group std; preset ``advantage="dr_grpo"``),
          loss = sum_it m_it L_it / (N * L_max) with the constant L_max =
          ``max_new_tokens`` (preset ``loss_agg="seq_mean_token_sum_norm"``; set
          ``loss_normalizer`` to change the constant), no KL.
          """,
          advantage="dr_grpo", loss_agg="seq_mean_token_sum_norm", kl_coef=0.0)
_register("bnpo_loss", Method, "SAGE's BNPO: GRPO with token-mean loss over the batch, no KL",
          doc="""SAGE's "BNPO" baseline (arXiv 2605.18864, code tally0818/SAGE): a loss-aggregation variant.

          GRPO advantages, loss token-normalised over the local batch:
          sum_it m_it L_it / sum_it m_it (preset ``loss_agg="token_mean"``), KL off.
          Not the BNPO paper's method: that is ``bnpo_beta``. SAGE's "DAPO" row, the
          same normalisation over the global batch, is this method too on one process.
          """,
          loss_agg="token_mean", kl_coef=0.0)
_register("bnpo_beta", Method, "BNPO paper: Beta-normalised advantages, clip-higher, seq-mean-token-sum",
          doc="""BNPO (arXiv 2506.02864, code changyi7231/BNPO): Beta-normalised advantages.

          A_i = (R_i - p_g) / f(p_g; alpha, beta), f the Beta density whose
          (alpha, beta) = (1 + a/3, 1 + b/3) come from a method-of-moments Beta fit
          (a, b) of the batch's group success rates p_g
          (``rlvr_lib.algos.bnpo_beta_advantages``; rewards must lie in [0, 1]).
          The rest follows the authors' ``recipe/bnpo/run.sh``: clip-higher
          [0.8, 1.28], ``loss_agg_mode=seq-mean-token-sum`` (our
          ``seq_mean_token_sum_norm`` with ``loss_normalizer=1``), no KL.
          """,
          advantage="bnpo", eps_high=0.28, loss_agg="seq_mean_token_sum_norm", loss_normalizer=1.0,
          kl_coef=0.0)
_register("entropy_reg", EntropyReg, "entropy regularisation: loss - alpha * mean token entropy, no KL",
          kl_coef=0.0)
_register("polaris", Polaris, "Polaris latch: temperature 1.0 -> 1.2 once entropy < 0.5 x initial, no KL",
          kl_coef=0.0)
_register("polaris_fixed", PolarisFixed, "sampling temperature 1.2 from the start, no KL", kl_coef=0.0)
_register("kl_cov", KLCov, "KL-Cov: |log-ratio| penalty on the top 0.02% tokens by covariance, no KL",
          kl_coef=0.0)
_register("clip_cov", ClipCov, "Clip-Cov: detach a random 0.02% of high-covariance tokens, no KL",
          kl_coef=0.0)
_register("pope", POPE, "POPE: first 15% of the oracle solution as a hint on half the prompts, at NudgeRL's "
          "settings (no KL, top_p 0.95, 2 optimizer steps per batch, cosine lr)", lr=NUDGERL_LR, **NUDGERL_SETTINGS)
_register("intuitor", Intuitor, "INTUITOR: reward = self-certainty KL(U||pi), no verifier, at VIGOR's settings "
          "(k3 KL 0.01, G = 8, cosine lr)", lr=VIGOR_LR, **VIGOR_SETTINGS)
