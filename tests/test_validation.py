"""Tests for rlvr_lib.validation: the one scalar-check helper and its message format."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import numpy as np
import pytest

from rlvr_lib import validation
from rlvr_lib.config import ConfigBase
from rlvr_lib.validation import check, check_choice, check_int, check_range, invalid


# ------------------------------------------------------------------ invalid / check
def test_invalid_builds_the_one_message():
    err = invalid("top_p", 0, "a number in (0, 1]")
    assert isinstance(err, ValueError)
    assert str(err) == "top_p=0 is invalid: must be a number in (0, 1]"
    assert str(invalid("kind", "x", "one of ['a']")) == "kind='x' is invalid: must be one of ['a']"


def test_check_raises_only_when_condition_fails():
    check(True, "n", 3, "odd")
    with pytest.raises(ValueError, match=r"^n=4 is invalid: must be odd$"):
        check(False, "n", 4, "odd")


def test_module_does_not_import_torch():
    code = "import sys, rlvr_lib.validation; print('torch' in sys.modules, 'numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


# ------------------------------------------------------------------ check_range
@pytest.mark.parametrize(
    "kwargs, text",
    [
        (dict(lo=0, hi=1), "[0, 1]"),
        (dict(lo=0, hi=1, lo_open=True), "(0, 1]"),
        (dict(lo=0, hi=1, hi_open=True), "[0, 1)"),
        (dict(lo=0, hi=1, lo_open=True, hi_open=True), "(0, 1)"),
        (dict(lo=0), "[0, inf)"),
        (dict(lo=0.0, lo_open=True), "(0, inf)"),
        (dict(hi=5), "(-inf, 5]"),
        (dict(), "(-inf, inf)"),
        (dict(lo=0.0, hi=0.5, hi_open=True), "[0, 0.5)"),
        (dict(lo=1e-3, hi=2.0), "[0.001, 2]"),
        (dict(lo=0, hi=math.inf), "[0, inf]"),
    ],
)
def test_check_range_interval_text(kwargs, text):
    with pytest.raises(ValueError) as exc:
        check_range("x", "not a number", **kwargs)
    assert str(exc.value) == f"x='not a number' is invalid: must be a number in {text}"


@pytest.mark.parametrize(
    "value, kwargs, ok",
    [
        (0, dict(lo=0, hi=1), True),
        (1, dict(lo=0, hi=1), True),
        (0, dict(lo=0, hi=1, lo_open=True), False),
        (1e-12, dict(lo=0, hi=1, lo_open=True), True),
        (1, dict(lo=0, hi=1, hi_open=True), False),
        (0.999, dict(lo=0, hi=1, hi_open=True), True),
        (-1e-12, dict(lo=0, hi=1), False),
        (1 + 1e-12, dict(lo=0, hi=1), False),
        (1e300, dict(lo=0), True),
        (-1e300, dict(hi=5), True),
        (6, dict(hi=5), False),
        (-7.5, dict(), True),
    ],
)
def test_check_range_boundaries(value, kwargs, ok):
    if ok:
        assert check_range("x", value, **kwargs) == float(value)
    else:
        with pytest.raises(ValueError, match=r"^x=.* is invalid: must be a number in "):
            check_range("x", value, **kwargs)


def test_check_range_none_bounds_reject_infinity_unless_it_is_a_closed_bound():
    for bad in (math.inf, -math.inf):
        with pytest.raises(ValueError, match=r"must be a number in \(-inf, inf\)"):
            check_range("x", bad)
    with pytest.raises(ValueError, match=r"^x=inf is invalid: must be a number in \[0, inf\)$"):
        check_range("x", math.inf, 0)
    assert check_range("x", math.inf, 0, math.inf) == math.inf
    with pytest.raises(ValueError):
        check_range("x", math.inf, 0, math.inf, hi_open=True)


@pytest.mark.parametrize("bad", [True, False, math.nan, np.float64("nan"), "0.5", None, [0.5], np.array([0.5]),
                                 np.bool_(True), 1 + 0j])
def test_check_range_rejects_non_real_values(bad):
    with pytest.raises(ValueError, match=r"is invalid: must be a number in \[0, 1\]"):
        check_range("x", bad, 0, 1)


@pytest.mark.parametrize("good", [np.float32(0.5), np.float64(0.5), np.int64(1), np.uint8(0), np.array(0.25)])
def test_check_range_accepts_numpy_scalars_and_returns_a_float(good):
    out = check_range("x", good, 0, 1)
    assert type(out) is float and out == float(good)


def test_check_range_returns_float_of_an_int():
    out = check_range("x", 3, 0)
    assert type(out) is float and out == 3.0


def test_check_range_rejects_a_torch_scalar_without_crashing():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match=r"must be a number in \[0, 1\]"):
        check_range("x", torch.tensor(0.5), 0, 1)


# ------------------------------------------------------------------ check_int
@pytest.mark.parametrize(
    "value, lo, hi, ok",
    [
        (1, 1, None, True),
        (0, 1, None, False),
        (0, 0, None, True),
        (-1, 0, None, False),
        (5, 1, 5, True),
        (6, 1, 5, False),
        (1, 1, 5, True),
        (-10**9, None, 3, True),
        (4, None, 3, False),
        (-3, None, None, True),
        (np.int64(2), 1, None, True),
        (np.uint16(2), 1, None, True),
    ],
)
def test_check_int_boundaries(value, lo, hi, ok):
    if ok:
        out = check_int("n", value, lo, hi)
        assert type(out) is int and out == int(value)
    else:
        with pytest.raises(ValueError, match=r"^n=.* is invalid: must be an integer"):
            check_int("n", value, lo, hi)


@pytest.mark.parametrize("bad", [True, False, 2.0, 2.5, "2", None, math.nan, np.float64(2.0), np.bool_(True)])
def test_check_int_rejects_non_integers(bad):
    with pytest.raises(ValueError, match=r"is invalid: must be an integer >= 1$"):
        check_int("n", bad, 1)


@pytest.mark.parametrize(
    "value, lo, hi, message",
    [
        (0, 1, None, "n=0 is invalid: must be an integer >= 1"),
        (-1, 0, None, "n=-1 is invalid: must be an integer >= 0"),
        (9, 1, 8, "n=9 is invalid: must be an integer in [1, 8]"),
        (4, None, 3, "n=4 is invalid: must be an integer <= 3"),
        (1.5, None, None, "n=1.5 is invalid: must be an integer"),
    ],
)
def test_check_int_message(value, lo, hi, message):
    with pytest.raises(ValueError) as exc:
        check_int("n", value, lo, hi)
    assert str(exc.value) == message


# ------------------------------------------------------------------ check_choice
def test_check_choice_accepts_and_returns_the_value():
    assert check_choice("kernel", "torch", ("torch", "triton")) == "torch"
    assert check_choice("k", 2, range(1, 4)) == 2
    assert check_choice("x", None, [None, "a"]) is None


def test_check_choice_message():
    with pytest.raises(ValueError) as exc:
        check_choice("kernel", "fast", ("torch", "triton"))
    assert str(exc.value) == "kernel='fast' is invalid: must be one of ['torch', 'triton']"


def test_check_choice_rejects_unhashable_and_array_values():
    with pytest.raises(ValueError, match=r"must be one of \['a'\]"):
        check_choice("x", ["a"], ["a"])
    with pytest.raises(ValueError, match=r"must be one of \[1, 2\]"):
        check_choice("x", np.array([1, 2]), [1, 2])


def test_check_choice_accepts_a_generator_of_choices():
    assert check_choice("x", "b", (c for c in "abc")) == "b"
    with pytest.raises(ValueError, match=r"must be one of \['a', 'b', 'c'\]"):
        check_choice("x", "d", (c for c in "abc"))


# ------------------------------------------------------------------ ConfigBase delegates
class _Cfg(ConfigBase):
    pass


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: _Cfg.check_range("lr", -1, 0, 1, lo_open=True), "_Cfg.lr=-1 is invalid: must be a number in (0, 1]"),
        (lambda: _Cfg.check_positive("lr", 0.0), "_Cfg.lr=0.0 is invalid: must be a number in (0, inf)"),
        (lambda: _Cfg.check_nonnegative("wd", -1), "_Cfg.wd=-1 is invalid: must be a number in [0, inf)"),
        (lambda: _Cfg.check_probability("p", 2), "_Cfg.p=2 is invalid: must be a number in [0, 1]"),
        (lambda: _Cfg.check_positive_int("g", 0), "_Cfg.g=0 is invalid: must be an integer >= 1"),
        (lambda: _Cfg.check_nonnegative_int("s", -1), "_Cfg.s=-1 is invalid: must be an integer >= 0"),
        (lambda: _Cfg.check_choice("kl", "k2", ["k1", "k3"]), "_Cfg.kl='k2' is invalid: must be one of ['k1', 'k3']"),
        (lambda: _Cfg.check(False, "x", 3, "even"), "_Cfg.x=3 is invalid: must be even"),
    ],
)
def test_config_base_checks_use_the_one_format(call, message):
    with pytest.raises(ValueError) as exc:
        call()
    assert str(exc.value) == message
    assert str(_Cfg.invalid("x", 3, "even")) == str(validation.invalid("_Cfg.x", 3, "even"))


# ------------------------------------------------------------------ call sites
ONE_FORMAT = re.compile(r"^(?P<name>[\w.\[\]']+)=(?P<value>.+) is invalid: must be (?P<must>.+)$")


def _sampling_params(**kw):
    from rlvr_lib.rollout import SamplingParams

    return SamplingParams(**kw)


def _branch_guide(**kw):
    import torch

    from rlvr_lib.algos.guides import branch_guide

    return branch_guide(torch.zeros(2, 3), **kw)


def _aggregate_loss(mode):
    import torch

    from rlvr_lib.algos import aggregate_loss

    return aggregate_loss(torch.zeros(2, 3), torch.ones(2, 3), mode)


def _ppo_clip(**kw):
    import torch

    from rlvr_lib.algos import ppo_clip_loss

    z = torch.zeros(2, 3)
    return ppo_clip_loss(z, z, torch.zeros(2), torch.ones(2, 3), **kw)


def _grpo_advantages(**kw):
    import torch

    from rlvr_lib.algos import grpo_advantages

    return grpo_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), **kw)


def _mode_counts(**kw):
    from rlvr_lib.eval.diversity import mode_counts_per_problem

    return mode_counts_per_problem([["direct: #1"]], **kw)


def _pass_at_k(*args):
    from rlvr_lib.eval.passk import pass_at_k

    return pass_at_k(*args)


def _dead_groups(**kw):
    from rlvr_lib.eval.diagnostics import dead_group_mask

    return dead_group_mask([[0.0, 1.0]], **kw)


def _hint_pool(**kw):
    from rlvr_lib.tasks import TaskHintPool

    return TaskHintPool(**kw)


def _aggregate_seeds(**kw):
    from rlvr_lib.study.stats import aggregate_seeds

    return aggregate_seeds([1.0, 2.0], **kw)


def _logprob_backend(backend):
    import torch

    from rlvr_lib.kernels import logprob_entropy

    return logprob_entropy(torch.zeros(2, 4), torch.zeros(5, 4), torch.zeros(2, dtype=torch.long), backend=backend)


def _guide_schedule(step):
    from rlvr_lib.algos.guides import guide_schedule

    return guide_schedule(step, max_steps=10, start=1.0, end=0.0)


CALL_SITES = [
    # (call, name, value repr, what is allowed)
    (lambda: _sampling_params(top_p=0), "SamplingParams.top_p", "0", "a number in (0, 1]"),
    (lambda: _sampling_params(n=0), "SamplingParams.n", "0", "an integer >= 1"),
    (lambda: _branch_guide(q_min=1.5, q_max=1.4), "q_min", "1.5", "a number in (0, 1.4]"),
    (lambda: _branch_guide(q_max=0.0), "q_max", "0.0", "a number in (0, inf)"),
    (lambda: _aggregate_loss("sum"), "mode", "'sum'",
     "one of ['seq_mean_token_mean', 'token_mean', 'seq_mean_token_sum_norm']"),
    (lambda: _ppo_clip(eps_low=1.0), "eps_low", "1.0", "a number in [0, 1)"),
    (lambda: _ppo_clip(eps_high=math.inf), "eps_high", "inf", "a number in [0, inf)"),
    (lambda: _grpo_advantages(eps=-1e-3), "eps", "-0.001", "a number in [0, inf)"),
    (lambda: _guide_schedule(-1), "step", "-1", "an integer >= 0"),
    (lambda: _mode_counts(min_share=1.5), "min_share", "1.5", "a number in [0, 1]"),
    (lambda: _pass_at_k(4, 2, 5), "k", "5", "an integer in [1, 4]"),
    (lambda: _dead_groups(criterion="dead"), "criterion", "'dead'", "one of ['zero_advantage', 'all_zero']"),
    (lambda: _hint_pool(unhelpful_share=-0.1), "unhelpful_share", "-0.1", "a number in [0, 1]"),
    (lambda: _aggregate_seeds(confidence=1.0), "confidence", "1.0", "a number in (0, 1)"),
    (lambda: _logprob_backend("cuda"), "backend", "'cuda'", "one of ['auto', 'torch', 'triton', 'naive']"),
]


@pytest.mark.parametrize("call, name, value, must", CALL_SITES, ids=[f"{c[1]}={c[2]}" for c in CALL_SITES])
def test_call_sites_raise_the_one_format(call, name, value, must):
    with pytest.raises(ValueError) as exc:
        call()
    message = str(exc.value)
    assert message == f"{name}={value} is invalid: must be {must}"
    assert ONE_FORMAT.match(message)
