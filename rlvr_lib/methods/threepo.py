"""3PO: perturbed-parameter policy optimisation with IVON (arXiv 2608.09805; code insait-institute/C3PO).

Rollouts AND gradients are taken at IVON posterior samples (``ivon.IVON.sampled_params``), per weight::

    theta_hat = m + sigma * z,   z ~ N(0, I),   sigma = 1 / sqrt(ess * (h + wd))
    m <- m - lr_eff * clip((mom / debias + wd * m) / (h + wd), -c, c),   lr_eff = lr * (hess_init + wd)

with ``c`` = ``clip_radius`` (``lr_eff = lr`` without ``rescale_lr``); IVON records the gradient and
``noise * grad`` (the "price" Hessian estimate) and steps.

* ``b3po``: one weight sample per step (k = 0) for the whole batch.
* ``m3po``: ``samples`` = M weight samples; slice k (G/M rollouts of every group) is rolled out at sample k
  and its advantage computed on that slice alone (group id ``(group_index, weight_index)``); one IVON step.
* ``c3po``: ``samples`` = N weight samples, slices of G/N rollouts; the advantage over the pooled group of G,
  the gradient at one fresh training draw, a sequence importance weight truncated at 2 (:class:`C3PO`).

``_SummedIVON`` sums the weight samples' recorded gradients, so IVON steps on the minibatch gradient.
``noise_scale`` is 1 (IVON's noise) or 0 (IVON's mean update, the primary control of every 3PO claim).

The options' defaults are the authors' (ESS 1e9, clip radius 1e-3, IVON lr 1.0, hess_init 1e-3); the testbed
calibrates ESS, clip radius and IVON lr (`rlvr_lib.study.testbed`, by :func:`calibrate_clip_and_lr`).

Departures from the paper (details in docs/papers/3po.md, "Departures"):

1. ``lr=None`` matches IVON's largest per-weight step to the trainer's lr (:func:`matched_ivon_lr`).
2. ``hess_init_steps > 0`` learns the Hessian init on the policy's own SFT data (the Fig 5 ablation's
   other arm).
3. ``scheme="per_chunk"`` keeps the form of the committed records beside the authors' scheme.
4. ``noise_scale=0`` (IVON without noise) is a control the paper does not run.

Derivations and measurements (calibration rules, diagnostics, Hessian warm-up): docs/methods/threepo.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

import ivon
import torch

from rlvr_lib.algos import get_advantage_estimator
from rlvr_lib.config import ConfigBase
from rlvr_lib.methods import sharded_ivon
from rlvr_lib.methods.base import Method, StepBatch
from rlvr_lib.methods.registry import register_method
from rlvr_lib.rollout.logprobs import sequence_logprobs
from rlvr_lib.schedules import paper_schedule
from rlvr_lib.seeding import forked_torch_rng
from rlvr_lib.tasks import CORRECT, MALFORMED
from rlvr_lib.validation import check, check_int, check_range

__all__ = ["AUTHORS_CLIP_RADIUS", "AUTHORS_ESS", "B3PO", "C3PO", "C3PO_SCHEMES", "C3POOptions", "calibrate_clip_and_lr", "calibrate_ess",
           "calibrated_ess", "HESS_INIT_STREAM", "initial_sigma",
           "learn_hessian_init", "M3PO", "matched_ivon_lr",
           "MAX_CLIPPED_SHARE", "mean_step_matched_ivon_lr", "NOISE_RATIO_ESS", "NOISE_SCALES",
           "noise_to_weight_ratio", "REFERENCE_WEIGHT_STD", "RegimeCalibration", "AUTHORS_IVON_LR",
           "THREEPO_SETTINGS", "ThreePOOptions", "truncated_is_weights", "update_ratio",
           "weight_matrix_std"]

AUTHORS_ESS = 1e9
"""The authors' effective sample size (7B models; pass it for a real model: ``method_options={"ess": 1e9}``)."""
REFERENCE_WEIGHT_STD = 0.02
"""Assumed std of the authors' 7B weight matrices: the ``initializer_range`` of the Qwen2.5 and OLMo configs."""
AUTHORS_IVON_LR = 1.0
"""The authors' IVON lr (with ``rescale_lr``: about 1e-3 effective): the options' default."""
AUTHORS_CLIP_RADIUS = 1e-3
"""The authors' clip radius (a real model passes it); `calibrate_threepo`'s first round starts from it."""
NOISE_RATIO_ESS = 1.6e8
"""The noise-ratio rule's ESS (:func:`calibrate_ess`: the authors' noise / weight-std ratio)."""
NOISE_SCALES = (0.0, 1.0)
"""The allowed ``noise_scale`` values: 1 (IVON's posterior noise) or 0 (none: IVON's mean update, for tests)."""
_NOISE_SCALE_MUST = ("0.0 (no noise: IVON's mean update, for tests) or 1.0 (IVON's posterior noise); "
                     "any other scale s biases IVON's Hessian estimate by s**2 (its 'price' estimator assumes "
                     "noise of std 1 / sqrt(ess * (h + wd)))")


def initial_sigma(ess: float, hess_init: float, weight_decay: float) -> float:
    """IVON's initial per-weight noise std ``1 / sqrt(ess * (hess_init + wd))``."""
    return 1.0 / math.sqrt(ess * (hess_init + weight_decay))


def matched_ivon_lr(config_lr: float, hess_init: float, weight_decay: float, clip_radius: float,
                    rescale_lr: bool = True) -> float:
    """The IVON lr whose largest per-weight step ``lr_eff * c`` equals ``config_lr``::

        lr = config_lr / ((hess_init + wd) * c)     (rescale_lr)
        lr = config_lr / c                          (no rescale_lr)

    Raises ValueError on a non-positive ``config_lr``, ``hess_init`` or ``clip_radius`` or a negative ``weight_decay``.
    """
    check_range("config_lr", config_lr, 0.0, None, lo_open=True)
    check_range("hess_init", hess_init, 0.0, None, lo_open=True)
    check_range("weight_decay", weight_decay, 0.0, None)
    check_range("clip_radius", clip_radius, 0.0, None, lo_open=True)
    return config_lr / ((hess_init + weight_decay) * clip_radius) if rescale_lr else config_lr / clip_radius


def mean_step_matched_ivon_lr(ivon_lr: float, ivon_mean_step: float, adamw_mean_step: float,
                              digits: int = 3) -> float:
    """The IVON lr whose *mean* per-weight step equals AdamW's, from one measurement of both at ``ivon_lr``::

        lr_mean = ivon_lr * adamw_mean_step / ivon_mean_step

    rounded to ``digits`` significant figures (derivation: docs/methods/threepo.md). Raises ValueError on a
    non-positive lr or step, or ``digits < 1``.
    """
    check_range("ivon_lr", ivon_lr, 0.0, None, lo_open=True)
    check_range("ivon_mean_step", ivon_mean_step, 0.0, None, lo_open=True)
    check_range("adamw_mean_step", adamw_mean_step, 0.0, None, lo_open=True)
    check_int("digits", digits, 1)
    return float(f"{ivon_lr * adamw_mean_step / ivon_mean_step:.{digits}g}")


MAX_CLIPPED_SHARE = 0.2
"""The regime rule's bound: at most this share of weights clipped by IVON after the warm-up."""


def _round_up(x: float, digits: int) -> float:
    """``x`` rounded up to ``digits`` significant figures (never below ``x``)."""
    exponent = math.floor(math.log10(x)) - digits + 1
    out = float(f"{math.ceil(x / 10.0 ** exponent) * 10.0 ** exponent:.{digits}g}")
    return out if out >= x else float(f"{out + 10.0 ** exponent:.{digits}g}")


@dataclass(frozen=True)
class RegimeCalibration:
    """:func:`calibrate_clip_and_lr`'s picks (``clip_radius``, ``lr``) and its predictions on the measured |u|."""

    clip_radius: float
    lr: float
    clipped_share: float
    ivon_mean_step: float
    adamw_mean_step: float
    max_clipped: float
    samples: int


def calibrate_clip_and_lr(abs_update_ratio: torch.Tensor, adamw_mean_step: float, *,
                          max_clipped: float = MAX_CLIPPED_SHARE, hess_init: float = 1e-3, weight_decay: float = 1e-6,
                          rescale_lr: bool = True, digits: int = 3) -> RegimeCalibration:
    """3PO's regime rule: clip_radius from IVON's measured |u| (pooled, 1-D), then the IVON lr.

    With the n pooled values sorted, v_(1) <= ... <= v_(n)::

        clip_radius = v_(k) rounded UP to ``digits`` significant figures,
                      k = ceil((1 - max_clipped) n)     (so at most max_clipped of them exceed it)
        s           = mean_j min(|u_j|, clip_radius)    (IVON's mean step per unit lr_eff)
        lr_eff      = adamw_mean_step / s               (IVON's mean step = AdamW's)
        lr          = lr_eff / (hess_init + wd)         with ``rescale_lr`` (lr_eff without)
                      rounded to ``digits`` significant figures.

    Raises ValueError on an empty, non-1-D, negative or non-finite ``abs_update_ratio``, ``max_clipped`` outside
    (0, 1), a non-positive ``adamw_mean_step``, or ``digits < 1``.
    """
    check_range("max_clipped", max_clipped, 0.0, 1.0, lo_open=True, hi_open=True)
    check_range("adamw_mean_step", adamw_mean_step, 0.0, None, lo_open=True)
    check_range("hess_init", hess_init, 0.0, None, lo_open=True)
    check_range("weight_decay", weight_decay, 0.0, None)
    check_int("digits", digits, 1)
    u = torch.as_tensor(abs_update_ratio)
    check(u.ndim == 1 and u.numel() > 0, "abs_update_ratio.shape", tuple(u.shape), "(n,) with n >= 1")
    u = u.detach().double().cpu()
    bad = int((~torch.isfinite(u) | (u < 0)).sum())
    check(bad == 0, "abs_update_ratio", f"<{bad} entries non-finite or negative>",
          "finite and >= 0 everywhere (|u| of every weight)")
    values = torch.sort(u).values
    k = math.ceil(round((1.0 - max_clipped) * len(values), 9))
    top = float(values[max(k, 1) - 1])
    check(top > 0, "abs_update_ratio", f"<its {1 - max_clipped:g} quantile is 0>",
          "a distribution with a positive (1 - max_clipped) quantile")
    clip_radius = _round_up(top, digits)
    per_lr = float(values.clamp(max=clip_radius).mean())
    lr_eff = adamw_mean_step / per_lr
    lr = float(f"{(lr_eff / (hess_init + weight_decay) if rescale_lr else lr_eff):.{digits}g}")
    lr_eff_used = lr * (hess_init + weight_decay) if rescale_lr else lr
    return RegimeCalibration(clip_radius=clip_radius, lr=lr, clipped_share=float((values > clip_radius).double().mean()),
                             ivon_mean_step=lr_eff_used * per_lr, adamw_mean_step=adamw_mean_step,
                             max_clipped=max_clipped, samples=len(values))


def weight_matrix_std(model: torch.nn.Module) -> float:
    """Pooled std of ``model``'s trainable weight matrices (``ndim >= 2``, tied weights once).

    ``std_W = sqrt(sum_i (w_i - mean)^2 / (n - 1))``. Raises ValueError when there is no such parameter.
    """
    mats = [p.detach().flatten().double() for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    if not mats:
        raise ValueError(f"model={type(model).__name__} is invalid: must have a trainable weight matrix (ndim >= 2)")
    return float(torch.cat(mats).std())


def noise_to_weight_ratio(model: torch.nn.Module, ess: float, hess_init: float, weight_decay: float) -> float:
    """The initial noise relative to the weights: ``initial_sigma(ess, h0, wd) / weight_matrix_std(model)``."""
    return initial_sigma(ess, hess_init, weight_decay) / weight_matrix_std(model)


def calibrated_ess(model: torch.nn.Module, ratio: float, hess_init: float, weight_decay: float) -> float:
    """The ESS at which :func:`noise_to_weight_ratio` equals ``ratio``: ``1 / ((ratio * std_W)^2 (h0 + wd))``."""
    check_range("ratio", ratio, 0.0, None, lo_open=True)
    sigma = ratio * weight_matrix_std(model)
    return 1.0 / (sigma ** 2 * (hess_init + weight_decay))


def calibrate_ess(model: torch.nn.Module, *, reference_std: float = REFERENCE_WEIGHT_STD,
                  reference_ess: float = AUTHORS_ESS, hess_init: float = 1e-3, weight_decay: float = 1e-6) -> float:
    """The ESS by the noise-ratio rule: the authors' noise/weight-std ratio on ``model``.

    ``ratio = initial_sigma(reference_ess, h0, wd) / reference_std``, then :func:`calibrated_ess`; with equal ``h0``
    and ``wd``, ``reference_ess * (reference_std / std_W)^2``. Raises ValueError on a non-positive reference.
    """
    check_range("reference_std", reference_std, 0.0, None, lo_open=True)
    check_range("reference_ess", reference_ess, 0.0, None, lo_open=True)
    ratio = initial_sigma(reference_ess, hess_init, weight_decay) / reference_std
    return calibrated_ess(model, ratio, hess_init, weight_decay)


class _SummedIVON(ivon.IVON):
    """``ivon.IVON`` stepping on the sum (not the mean) of the gradients recorded since the last step.

    ``noise_scale`` (:data:`NOISE_SCALES`) scales the drawn noise. On FSDP2 shards IVON runs per process's blocks
    (`rlvr_lib.methods.sharded_ivon`); :meth:`gathered_state_dict` gives the one-process ``state_dict``.
    """

    def __init__(self, params, *, noise_scale: float = 1.0, keep_update_ratio: bool = False, **kw):
        check(noise_scale in NOISE_SCALES, "noise_scale", noise_scale, _NOISE_SCALE_MUST)
        super().__init__(params, **kw)
        self.noise_scale = noise_scale
        self.keep_update_ratio = keep_update_ratio
        self.update_stats: list[dict[str, float]] = []  # one entry per step(); the method empties it per RL step
        self.last_abs_update_ratio: torch.Tensor | None = None  # |u| of the last step (this process's weights)

    @staticmethod
    def _params(group) -> list[torch.Tensor]:
        return [p for p in group["params"] if p is not None]

    def _get_param_configs(self):
        self.sharded = sharded_ivon.is_sharded(p for g in self.param_groups for p in g["params"] if p is not None)
        total, device, dtype = super()._get_param_configs()
        if not self.sharded:
            return total, device, dtype
        for group in self.param_groups:  # the buffers hold this process's blocks only
            group["numel"] = sum(sharded_ivon.local(p).numel() for p in self._params(group))
        return sum(group["numel"] for group in self.param_groups), device, dtype

    def _sample_params(self):
        if self.sharded:
            return self._sample_local_params()
        param_avg, noise = super()._sample_params()
        if self.noise_scale != 1.0:
            noise = noise * self.noise_scale
            offset = 0
            for group in self.param_groups:
                for p in group["params"]:
                    if p is None:
                        continue
                    n = p.numel()
                    p.data = (param_avg[offset:offset + n] + noise[offset:offset + n]).view(p.shape)
                    offset += n
        return param_avg, noise

    @torch.no_grad()
    def _sample_local_params(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``ivon.IVON._sample_params`` on this process's blocks: the same noise values at the same weights."""
        averages, noises = [], []
        for group in self.param_groups:
            params = self._params(group)
            ranges, offset = [], 0
            for p in params:
                a, b = sharded_ivon.shard_range(p)
                ranges.append((offset + a, offset + b))
                offset += p.numel()
            z = sharded_ivon.streamed_noise(offset, ranges, device=self._device, dtype=self._dtype)
            noise = z / (group["ess"] * (group["hess"] + group["weight_decay"])).sqrt()
            if self.noise_scale != 1.0:
                noise = noise * self.noise_scale
            at = 0
            for p in params:
                block = sharded_ivon.local(p)
                average = block.flatten().clone()
                block.copy_((average + noise[at:at + block.numel()]).view(block.shape))
                averages.append(average)
                at += block.numel()
            noises.append(noise)
        return torch.cat(averages), torch.cat(noises)

    def _restore_param_average(self, train: bool, param_avg: torch.Tensor, noise: torch.Tensor):
        if not self.sharded:
            return super()._restore_param_average(train, param_avg, noise)
        grads, offset = [], 0
        with torch.no_grad():
            for group in self.param_groups:
                for p in self._params(group):
                    block = sharded_ivon.local(p)
                    block.copy_(param_avg[offset:offset + block.numel()].view(block.shape))
                    offset += block.numel()
                    if train:
                        grad = None if p.grad is None or not p.requires_grad else sharded_ivon.local(p.grad)
                        grads.append(grad.flatten() if grad is not None else torch.zeros_like(block).flatten())
        if train:  # ivon.IVON._restore_param_average's Welford means, on this process's elements
            grad_sample = torch.cat(grads)
            count = self.state["count"] + 1
            self.state["count"] = count
            self.state["avg_grad"] = ivon._ivon._welford_mean(self.state["avg_grad"], grad_sample, count)
            if self.hess_approx == "price":
                self.state["avg_nxg"] = ivon._ivon._welford_mean(self.state["avg_nxg"], noise * grad_sample, count)
            else:
                self.state["avg_gsq"] = ivon._ivon._welford_mean(self.state["avg_gsq"], grad_sample.square(), count)

    def _update(self):
        if not self.sharded:
            return super()._update()
        self.current_step += 1  # ivon.IVON._update on this process's elements, written into the blocks in place
        offset = 0
        for group in self.param_groups:
            pg_slice = slice(offset, offset + group["numel"])
            param_avg = self._flat(group)
            group["momentum"] = self._new_momentum(self.state["avg_grad"][pg_slice], group["momentum"],
                                                   group["beta1"])
            group["hess"] = self._new_hess(self.hess_approx, group["hess"], self.state["avg_nxg"],
                                           self.state["avg_gsq"], pg_slice, group["ess"], group["beta2"],
                                           group["weight_decay"])
            lr = group["lr"] * (group["hess_init"] + group["weight_decay"]) if self.rescale_lr else group["lr"]
            debias = 1.0 - pow(group["beta1"], float(self.current_step)) if self.debias else 1.0
            param_avg = self._new_param_averages(param_avg, group["hess"], group["momentum"], lr,
                                                 group["weight_decay"], group["clip_radius"], debias,
                                                 group["hess_init"])
            at = 0
            with torch.no_grad():
                for p in self._params(group):
                    block = sharded_ivon.local(p)
                    block.copy_(param_avg[at:at + block.numel()].view(block.shape))
                    at += block.numel()
            offset += group["numel"]

    @torch.no_grad()
    def step(self, closure=None):
        count = self.state["count"]
        if count > 1:
            for key in ("avg_grad", "avg_nxg", "avg_gsq"):
                if self.state[key] is not None:
                    self.state[key] = self.state[key] * count
        before = [self._flat(group) for group in self.param_groups]
        loss = super().step(closure)
        self._record_update(before)
        return loss

    @classmethod
    def _flat(cls, group) -> torch.Tensor:
        """The group's weights (this process's blocks, when sharded) as one detached vector."""
        return torch.cat([sharded_ivon.local(p).detach().flatten() for p in cls._params(group)])

    def _record_update(self, before: list[torch.Tensor]) -> None:
        """Appends the step's clipped share and mean |delta theta| to ``update_stats`` (formulas: `update_ratio`)."""
        n = clipped = 0
        moved = 0.0
        kept = []
        for group, old in zip(self.param_groups, before):
            u = update_ratio(group["momentum"], group["hess"], old, weight_decay=group["weight_decay"],
                             beta1=group["beta1"], step=self.current_step, debias=self.debias)
            clipped += int((u.abs() > group["clip_radius"]).sum())
            moved += float((self._flat(group) - old).abs().double().sum())
            n += u.numel()
            if self.keep_update_ratio:
                kept.append(u.abs().float())
        if self.sharded:
            clipped, moved, n = sharded_ivon.global_sums([clipped, moved, n])
        self.update_stats.append({"ivon_clipped_frac": clipped / max(n, 1), "ivon_mean_abs_step": moved / max(n, 1)})
        self.last_abs_update_ratio = torch.cat(kept) if kept else None

    def mean_sigma(self) -> float:
        """Mean over weights of the current posterior std (times ``noise_scale``)."""
        total, n = 0.0, 0
        for group in self.param_groups:
            sigma = 1.0 / (group["ess"] * (group["hess"] + group["weight_decay"])).sqrt()
            total += float(sigma.double().sum())
            n += sigma.numel()
        if self.sharded:
            total, n = sharded_ivon.global_sums([total, n])
        return self.noise_scale * total / max(n, 1)

    def mean_hess(self) -> float:
        """Mean over weights of IVON's Hessian estimate ``h``."""
        h = torch.cat([group["hess"].flatten() for group in self.param_groups]).double()
        if not self.sharded:
            return float(h.mean())
        total, n = sharded_ivon.global_sums([float(h.sum()), h.numel()])
        return total / max(n, 1)

    # ----------------------------------------------------------------- checkpoints
    def gathered_state_dict(self) -> dict:
        """``state_dict()`` in the one-process layout (each group's buffers over its whole parameters); on shards a
        collective (every process calls it) whose result every process gets, on the CPU."""
        state = self.state_dict()
        if not self.sharded:
            return state
        groups = [self._params(group) for group in self.param_groups]
        for saved, params in zip(state["param_groups"], groups):
            saved["momentum"] = sharded_ivon.gather_flat(saved["momentum"], params).cpu()
            saved["hess"] = sharded_ivon.gather_flat(saved["hess"], params).cpu()
            saved["numel"] = sum(p.numel() for p in params)
        for key in ("avg_grad", "avg_nxg", "avg_gsq"):  # between two steps: set only inside a step
            flat = state["state"].get(key)
            if flat is not None:
                parts = flat.split([group["numel"] for group in self.param_groups])
                state["state"][key] = torch.cat([sharded_ivon.gather_flat(part, params).cpu()
                                                 for part, params in zip(parts, groups)])
        return state

    def load_gathered_state_dict(self, state: dict) -> None:
        """Load a :meth:`gathered_state_dict` (every process passes the whole state)."""
        if not self.sharded:
            return self.load_state_dict(state)
        state = {"state": dict(state["state"]), "param_groups": [dict(g) for g in state["param_groups"]]}
        groups = [self._params(group) for group in self.param_groups]
        for saved, params in zip(state["param_groups"], groups):
            saved["momentum"] = sharded_ivon.local_flat(saved["momentum"], params)
            saved["hess"] = sharded_ivon.local_flat(saved["hess"], params)
            saved["numel"] = sum(sharded_ivon.local(p).numel() for p in params)
        for key in ("avg_grad", "avg_nxg", "avg_gsq"):
            flat = state["state"].get(key)
            if flat is not None:
                parts = flat.split([sum(p.numel() for p in params) for params in groups])
                state["state"][key] = torch.cat([sharded_ivon.local_flat(part, params)
                                                 for part, params in zip(parts, groups)])
        self.load_state_dict(state)


def update_ratio(momentum: torch.Tensor, hess: torch.Tensor, param_avg: torch.Tensor, *, weight_decay: float,
                 beta1: float, step: int, debias: bool = True) -> torch.Tensor:
    """IVON's per-weight update before the clip, u = (mom / debias + wd * m) / (h + wd) (``ivon.IVON._update``).

    IVON moves each mean weight by ``-lr_eff * clip(u, -c, c)``; ``debias = 1 - beta1**step``. A weight is
    *clipped* when ``|u| > c``.
    """
    scale = 1.0 - beta1 ** step if debias else 1.0
    return (momentum / scale + weight_decay * param_avg) / (hess + weight_decay)


@dataclass(frozen=True)
class ThreePOOptions(ConfigBase):
    """3PO settings; the defaults are the authors' (ESS 1e9, clip_radius 1e-3, lr 1.0, rescale_lr, hess_init 1e-3).

    ``lr=None``: :func:`matched_ivon_lr` of the trainer's lr. ``noise_scale`` is 1.0 or 0.0 (:data:`NOISE_SCALES`).
    """

    samples: int = 2            # M (m3po) / N (c3po); b3po always uses 1
    lr: float | None = AUTHORS_IVON_LR  # None: matched_ivon_lr(config.lr, ...)
    rescale_lr: bool = True
    ess: float = AUTHORS_ESS
    hess_init: float = 1e-3
    clip_radius: float = AUTHORS_CLIP_RADIUS
    beta1: float = 0.9
    beta2: float = 0.9999
    weight_decay: float = 1e-6
    noise_scale: float = 1.0
    seq_mis: bool = True        # c3po only
    seq_mis_threshold: float = 2.0
    hess_init_steps: int = 0    # 0: constant hess_init (authors' default); K > 0: learnt on the SFT data
    hess_init_batch: int | None = None  # None: the policy's pretraining batch size
    hess_init_beta2: float = 0.97  # IVON's beta2 during the Hessian warm-up only (RL keeps beta2)

    def ivon_lr(self, config_lr: float) -> float:
        """The IVON lr these options give with the trainer's ``config_lr``: ``lr``, or when it is ``None``
        :func:`matched_ivon_lr`."""
        if self.lr is not None:
            return self.lr
        return matched_ivon_lr(config_lr, self.hess_init, self.weight_decay, self.clip_radius, self.rescale_lr)

    def validate(self) -> None:
        self.check_positive_int("samples", self.samples)
        self.check_nonnegative_int("hess_init_steps", self.hess_init_steps)
        if self.hess_init_batch is not None:
            self.check_positive_int("hess_init_batch", self.hess_init_batch)
        self.check_range("hess_init_beta2", self.hess_init_beta2, 0.0, 1.0, hi_open=True)
        if self.lr is not None:
            self.check_positive("lr", self.lr)
        for name in ("ess", "hess_init", "clip_radius", "seq_mis_threshold"):
            self.check_positive(name, getattr(self, name))
        self.check_nonnegative("weight_decay", self.weight_decay)
        self.check(self.noise_scale in NOISE_SCALES and not isinstance(self.noise_scale, bool), "noise_scale",
                   self.noise_scale, _NOISE_SCALE_MUST)
        self.check_range("beta1", self.beta1, 0.0, 1.0)
        self.check_range("beta2", self.beta2, 0.0, 1.0)


class B3PO(Method):
    """B3PO (arXiv 2608.09805): one IVON posterior sample per step; rollouts and gradient at it.

    theta_hat = m + z / sqrt(ess (h + wd)), z ~ N(0, I); GRPO's loss (no KL) at theta_hat; IVON updates (m, h).
    """

    reads_parameters = True  # IVON samples and perturbs the weights

    Options: ClassVar[type[ConfigBase]] = ThreePOOptions
    STREAM = 0x3B0
    uses_seq_mis: ClassVar[bool] = False

    def __init__(self, config):
        super().__init__(config)
        if self.options.hess_init_steps > 0:
            self.sft_config()  # fail at construction, not at step 0, when the policy's SFT data are unknown
        self.optimizer: _SummedIVON | None = None
        self._model: torch.nn.Module | None = None
        self._diag: dict[str, float] = {}
        self.hess_warmup: dict[str, float] = {}  # learn_hessian_init's summary (step 0 of a learnt-init run)

    def weight_samples(self) -> int:
        return 1

    def sft_config(self):
        """The policy's SFT `PretrainConfig` (embedded or `pretrain`-written policy); else a clear ValueError."""
        return _sft_config(self.options.hess_init_steps, self.config.policy)

    def ivon_lr(self) -> float:
        """The IVON lr: ``options.lr``, or when it is ``None`` :func:`matched_ivon_lr` of ``config.lr``."""
        return self.options.ivon_lr(self.config.lr)

    @classmethod
    def tuning_lr(cls, config) -> float:
        """An lr grid scales IVON's lr (``method_options["lr"]``, or the rule's value when unset)."""
        return cls.Options.from_dict(config.method_options or {}).ivon_lr(config.lr)

    @classmethod
    def with_tuning_lr(cls, config, lr: float):
        return config.replace(method_options={**(config.method_options or {}), "lr": lr})

    def make_optimizer(self, model):
        o = self.options
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = _SummedIVON(
            params, noise_scale=o.noise_scale, lr=self.ivon_lr(), ess=o.ess, hess_init=o.hess_init, beta1=o.beta1,
            beta2=o.beta2, weight_decay=o.weight_decay, clip_radius=o.clip_radius, rescale_lr=o.rescale_lr)
        self._model = model
        return self.optimizer

    def on_step_start(self, step: int) -> None:
        super().on_step_start(step)
        # Step 0 of a fresh run only: a resumed run (step >= 1) has the learnt h in IVON's checkpointed state.
        if step == 0 and self.options.hess_init_steps > 0:
            o = self.options
            self.hess_warmup = learn_hessian_init(
                self.optimizer, self._model, steps=o.hess_init_steps, batch_size=o.hess_init_batch,
                beta2=o.hess_init_beta2, policy=self.config.policy, seed=self.config.seed)
        if self.optimizer is not None:  # this RL step's optimizer steps only (not the Hessian warm-up's)
            self.optimizer.update_stats.clear()

    @contextlib.contextmanager
    def perturbed(self, model, index, train=False):
        with forked_torch_rng(self.config.seed, self.step, self.STREAM, index):
            with self.optimizer.sampled_params(train=train):
                if train:  # IVON records each sample's gradient itself: each sample starts from zero
                    self.optimizer.zero_grad(set_to_none=True)
                yield

    # -- diagnostics ---------------------------------------------------------------
    def before_update(self, batch: StepBatch, model) -> None:
        # The IVON lr the options give (an lr schedule's base: "initial_lr"); the trainer logs the scheduled lr as "lr".
        group = self.optimizer.param_groups[0]
        self._diag = {"ivon_lr": float(group.get("initial_lr", group["lr"])),
                      "ivon_mean_sigma": self.optimizer.mean_sigma(),
                      "weight_sample_disagreement": sample_disagreement(batch),
                      # next to the trainer's accuracy and malformed_rate: well-formed but wrong answers
                      # (a grading time-out counts here too, as in train_outcome_rates' 1 - accuracy - malformed)
                      "incorrect_rate": sum(v.status not in (CORRECT, MALFORMED) for v in batch.verdicts)
                      / max(len(batch.verdicts), 1)}

    def on_step_end(self, step: int, metrics: dict) -> None:
        metrics.update(self._diag)
        stats = self.optimizer.update_stats  # the step's IVON updates: clipped share, mean |delta theta|
        for key in (stats[0] if stats else {}):
            metrics[key] = sum(s[key] for s in stats) / len(stats)
        if step == 0 and self.hess_warmup:
            metrics.update(self.hess_warmup)

    def state_dict(self) -> dict:
        return {"ivon_step": self.optimizer.current_step}  # IVON's debiasing count is not in its state_dict

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.current_step = state["ivon_step"]


HESS_INIT_STREAM = 0x3B1
"""RNG stream of the Hessian warm-up (its weight noise and its SFT data), keyed by ``(seed, stream, j)``."""


def _sft_config(steps: int, policy: str | None):
    from rlvr_lib.policy import resolve_policy_path
    from rlvr_lib.policy.pretrain import pretraining_config

    try:
        return pretraining_config(resolve_policy_path(policy))
    except (ValueError, FileNotFoundError) as err:
        raise ValueError(f"hess_init_steps={steps} needs the policy's SFT data: policy={policy!r} is invalid: must "
                         f"be None (the embedded tiny policy) or a checkpoint directory written by "
                         f"rlvr_lib.policy.pretrain.pretrain, whose pretrain_log.json names its SFT mixture; "
                         f"a model without known SFT data can only use the constant hess_init "
                         f"(hess_init_steps=0). ({err})") from None


def learn_hessian_init(optimizer: _SummedIVON, model: torch.nn.Module, *, steps: int, batch_size: int | None = None,
                       beta2: float = 0.97, policy: str | None = None, seed: int = 0) -> dict[str, float]:
    """Learn IVON's diagonal Hessian on the policy's own SFT objective, the mean weights left unchanged.

    ``steps`` IVON steps with ``lr = 0``: each a batch of the policy's pretraining mixture, one weight sample
    ``m + sigma z`` and the SFT loss's gradient at it; IVON updates ``h`` from ``f = ess * (h + wd) * noise * g``.
    Afterwards only ``h`` is kept (momentum zeroed, ``current_step`` 0).

    Returns ``{"hess_init_steps", "hess_init_sft_loss", "hess_init_mean_h", "hess_init_mean_sigma"}``.
    Raises ValueError when ``steps`` < 1 or the policy's SFT data are unknown.
    """
    import numpy as np

    from rlvr_lib.policy import build_char_tokenizer
    from rlvr_lib.policy.pretrain import PretrainingMixture, sft_loss

    check(isinstance(steps, int) and not isinstance(steps, bool) and steps >= 1, "steps", steps, "an int >= 1")
    sft = _sft_config(steps, policy)
    batch_size = sft.batch_size if batch_size is None else batch_size
    check(isinstance(batch_size, int) and not isinstance(batch_size, bool) and batch_size >= 1, "batch_size",
          batch_size, "an int >= 1")
    mixture = PretrainingMixture(sft, np.random.default_rng([seed, HESS_INIT_STREAM]))
    tokenizer = build_char_tokenizer()
    check_range("beta2", beta2, 0.0, 1.0, hi_open=True)
    saved = [(group["lr"], group["beta2"]) for group in optimizer.param_groups]
    was_training = model.training
    model.train()
    losses = []
    try:
        for group in optimizer.param_groups:
            group["lr"], group["beta2"] = 0.0, beta2
        for j in range(steps):
            pairs = mixture.batch(batch_size)
            with forked_torch_rng(seed, HESS_INIT_STREAM, j):
                with optimizer.sampled_params(train=True):
                    optimizer.zero_grad(set_to_none=True)
                    loss = sft_loss(model, pairs, tokenizer)
                    loss.backward()
            losses.append(float(loss.detach()))
            optimizer.step()
    finally:
        for group, (lr, b2) in zip(optimizer.param_groups, saved):
            group["lr"], group["beta2"] = lr, b2
        model.train(was_training)
    for group in optimizer.param_groups:
        group["momentum"].zero_()
    optimizer.current_step = 0
    optimizer.zero_grad(set_to_none=True)
    return {"hess_init_steps": steps, "hess_init_sft_loss": sum(losses) / len(losses),
            "hess_init_mean_h": optimizer.mean_hess(), "hess_init_mean_sigma": optimizer.mean_sigma()}


def sample_disagreement(batch: StepBatch) -> float:
    """Share of groups whose weight slices' majority strategies (``verdict.strategy``) differ (0.0 for one sample)."""
    slices: dict[int, dict[int, Counter]] = {}
    for g, k, v in zip(batch.group_index.tolist(), batch.weight_index.tolist(), batch.verdicts):
        slices.setdefault(g, {}).setdefault(k, Counter())[getattr(v, "strategy", None)] += 1
    if not slices:
        return 0.0
    differ = sum(len({c.most_common(1)[0][0] for c in by_k.values()}) > 1 for by_k in slices.values())
    return differ / len(slices)


class M3PO(B3PO):
    """M3PO (arXiv 2608.09805): M samples, each with its own G/M rollouts and its own group advantage; one update."""

    def weight_samples(self) -> int:
        return self.options.samples

    def advantages(self, batch: StepBatch) -> torch.Tensor:
        """The configured estimator with group id ``group_index * M + weight_index`` (each slice alone)."""
        estimator = get_advantage_estimator(self.config.advantage)
        groups = batch.group_index * self.weight_samples() + batch.weight_index
        return estimator(batch.rewards, groups, hint_index=batch.hint_index, **self.advantage_options())


C3PO_SCHEMES = ("authors", "per_chunk")
"""C3PO's importance-sampling schemes (:class:`C3POOptions` ``scheme``; :class:`C3PO` states both)."""


@dataclass(frozen=True)
class C3POOptions(ThreePOOptions):
    """:class:`ThreePOOptions` plus C3PO's ``scheme``: ``"authors"`` (the default: one training draw, the weight
    truncated at ``seq_mis_threshold``) or ``"per_chunk"`` (each chunk's gradient at its own draw, the weight
    pi_mean / pi_k masked above the threshold: the committed records' form). :class:`C3PO` gives both."""

    scheme: str = "authors"

    def validate(self) -> None:
        super().validate()
        self.check_choice("scheme", self.scheme, C3PO_SCHEMES)


class C3PO(B3PO):
    """C3PO (arXiv 2608.09805): N samples split each group, advantage over the pooled G, sequence importance weights.

    Slice k (G/N rollouts of every group) is rolled out at weight sample k; advantages over the pooled group of G.
    ``scheme="authors"``: one fresh training draw ``theta_t`` for the whole update, old log-probs at it, and::

        log rho_i = sum_t mask_it * (log pi_t(y_it) - log pi_k(y_it))
        w_i       = min(rho_i, C)                           (C = ``seq_mis_threshold``, 2; detached)
        loss_it   = w_i * ppo_clip_loss_it(r_it),   r_it = pi_theta(y_it) / pi_t(y_it)

    ``seq_mis=False`` drops ``w``. ``scheme="per_chunk"`` (the committed records' form): chunk k's gradient at draw
    k, ``log rho_i = sum_t mask_it * (log pi_m(y_it) - log pi_k(y_it))``, ``w_i = rho_i * 1[rho_i <= C]``.
    """

    Options: ClassVar[type[ConfigBase]] = C3POOptions
    TRAIN_STREAM = 0x3B2
    TRAINING_DRAW = -1
    """The ``index`` of :meth:`perturbed` that names the training draw (``scheme="authors"``)."""

    def weight_samples(self) -> int:
        return self.options.samples

    @contextlib.contextmanager
    def perturbed(self, model, index, train=False):
        if self.options.scheme == "per_chunk" or (index != self.TRAINING_DRAW and not train):
            with super().perturbed(model, index, train=train):
                yield
            return
        # the authors' scheme: every gradient scope, and the before_update forward, at the one training draw
        with forked_torch_rng(self.config.seed, self.step, self.TRAIN_STREAM):
            with self.optimizer.sampled_params(train=train):
                if train:
                    self.optimizer.zero_grad(set_to_none=True)
                yield

    def before_update(self, batch: StepBatch, model) -> None:
        super().before_update(batch, model)
        authors = self.options.scheme == "authors"
        if not (authors or self.options.seq_mis):
            return
        from rlvr_lib.distributed import visible_weights

        ro = batch.rollouts
        was_training = model.training
        model.eval()
        # authors: the training draw (made visible to a sharded model's forward); per_chunk: the mean weights
        scope = visible_weights(model, self.perturbed(model, self.TRAINING_DRAW)) if authors else contextlib.nullcontext()
        with torch.no_grad(), scope:
            logp, _ = sequence_logprobs(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
                                        temperature=self.sampling_temperature(self.step))
        model.train(was_training)
        if authors:
            batch.extras["train_logprobs"] = torch.where(ro.completion_mask.bool(), logp, torch.zeros_like(logp))
        else:
            batch.extras["mean_seq_logprob"] = seq_logprob(logp, ro.completion_mask)

    def policy_loss(self, batch, logp, entropy, mask):
        if self.options.scheme == "per_chunk":
            return self._per_chunk_loss(batch, logp, entropy, mask)
        train_logp = batch.extras["train_logprobs"].to(logp)
        at_draw = dataclasses.replace(batch, rollouts=dataclasses.replace(batch.rollouts, logprobs=train_logp))
        per_token, stats = super().policy_loss(at_draw, logp, entropy, mask)
        if not self.options.seq_mis:
            return per_token, stats
        weight, truncated = truncated_is_weights(seq_logprob(train_logp, mask), seq_logprob(batch.rollouts.logprobs, mask),
                                                 self.options.seq_mis_threshold)
        stats = dict(stats)
        stats["seq_is_truncated_frac"] = truncated.float().mean()
        stats["seq_is_weight_mean"] = weight.mean()
        return per_token * weight.to(per_token)[:, None], stats

    def _per_chunk_loss(self, batch, logp, entropy, mask):
        per_token, stats = super().policy_loss(batch, logp, entropy, mask)
        if not self.options.seq_mis:
            return per_token, stats
        weight, masked = seq_mis_weights(batch.extras["mean_seq_logprob"],
                                         seq_logprob(batch.rollouts.logprobs, mask),
                                         self.options.seq_mis_threshold)
        stats = dict(stats)
        stats["seq_mis_masked_frac"] = masked.float().mean()
        stats["seq_mis_ratio_mean"] = weight[~masked].mean() if (~masked).any() else torch.tensor(0.0)
        return per_token * weight.to(per_token)[:, None], stats


def seq_logprob(token_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(N,)`` sum of the completion tokens' log-probs (masked positions ignored, even if non-finite)."""
    m = mask.bool()
    return torch.where(m, token_logprobs.to(torch.float64), torch.zeros((), dtype=torch.float64)).sum(-1)


def truncated_is_weights(train_logprob: torch.Tensor, sample_logprob: torch.Tensor,
                         threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(w, truncated)``: ``rho = exp(train - sample)`` per sequence, ``w = min(rho, threshold)``, ``truncated = rho >
    threshold`` (verl's sequence-level truncated importance weight, C3PO's ``scheme="authors"``)."""
    rho = torch.exp(train_logprob.to(torch.float64) - sample_logprob.to(torch.float64).to(train_logprob.device))
    return rho.clamp(max=threshold).float(), rho > threshold


def seq_mis_weights(mean_logprob: torch.Tensor, sample_logprob: torch.Tensor,
                    threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(w, masked)``: ``rho = exp(mean - sample)``, ``masked = rho > threshold``, ``w = rho * ~masked``."""
    rho = torch.exp(mean_logprob.to(torch.float64) - sample_logprob.to(torch.float64).to(mean_logprob.device))
    masked = rho > threshold
    return torch.where(masked, torch.zeros_like(rho), rho).float(), masked


THREEPO_SETTINGS = {"kl_coef": 0.0, **paper_schedule("threepo")}
"""The `TrainerConfig` fields 3PO's runs share (the authors' ``run_rl.sh``): no KL, linear lr warm-up over
2.1% of the optimizer steps (34 of 1,629 there; `rlvr_lib.schedules`' one scaling rule), constant after.
Give them to 3PO's GRPO comparators too (``method_config("grpo_no_kl", **THREEPO_SETTINGS)``)."""

register_method("b3po", B3PO, "B3PO: rollouts and gradient at one IVON posterior sample per step (IVON, no KL)",
                **THREEPO_SETTINGS)
register_method("m3po", M3PO, "M3PO: M IVON samples, each with its own G/M rollouts and group advantage (no KL)",
                **THREEPO_SETTINGS)
register_method("c3po", C3PO, "C3PO: N IVON samples split each group, pooled advantage, one training draw, "
                "sequence IS weight truncated at 2 (no KL)",
                **THREEPO_SETTINGS)
