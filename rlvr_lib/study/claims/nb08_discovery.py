"""Notebook 08's pre-registered rows (the discovery regime): the exploration methods against GRPO on the
held-out targets, every arm's share of the oracle's headroom and of ``round``, and the gate as instrument checks.

Written before any run on the discovery regime. GRPO here is the oracle arm's comparator (the testbed's ``grpo``
preset), not each paper's GRPO at the paper's settings; the effects are T1's, as in notebooks 03 and 04.
"""

from rlvr_lib.study.comparisons import Arm, Pair
from . import Check, Claim, Measurement, Registry
from .nb03_nudgerl import _GRPO_T1, _NUDGERL
from .nb04_3po import _T1, _t1

_DISCOVERY = {"regime": "discovery", "premise": "discovery"}
_NONE = {"regime": "discovery", "premise": "none"}
# The rows come from several papers (NudgeRL's and 3PO's T1 and others), so each claim is
# measured under its source paper's protocol (rlvr_lib.study.protocols), as in notebooks 03-06.
PROTOCOL = "by source"
EXPLORERS = ("nudgerl", "b3po", "m3po", "c3po")
"""The arms whose papers need the discovery premise; SAGE's and VIGOR's rows need none (the claims package rule)."""
ARMS = (*EXPLORERS, "sage", "vigor")
_TARGETS = "the held-out targets (first factor ending in 9, only round solves them)"

REGISTRY = Registry(
    notebook="08_discovery",
    experiment="discovery",
    limits=(
        "The discovery regime is one designed instance (a strategy tied to one digit of the prompt, on a policy "
        "pretrained so the strategy is rare there); its GRPO is the oracle's comparator (the testbed's KL-anchored "
        "preset), not each paper's GRPO at the paper's settings, so a gain mixes the method with its settings."),
    claims=(
        Claim("nudgerl-beats-grpo", f"NudgeRL@8 beats GRPO@8 on {_TARGETS} (pass@1)", "NudgeRL", "T1",
              ("pass@1", _GRPO_T1[8], _NUDGERL), ">", "grpo", **_DISCOVERY),
        Claim("c3po-beats-grpo", f"C3PO beats GRPO on {_TARGETS} (pass@1)", "3PO", _t1("c3po", "grpo"),
              ("pass@1", _T1["grpo"], _T1["c3po"]), ">", "grpo", **_DISCOVERY),
        Claim("m3po-beats-grpo", f"M3PO beats GRPO on {_TARGETS} (pass@1)", "3PO", _t1("m3po", "grpo"),
              ("pass@1", _T1["grpo"], _T1["m3po"]), ">", "grpo", **_DISCOVERY),
        Claim("b3po-matches-grpo", f"B3PO matches GRPO on {_TARGETS}: pass@1 difference within +-0.01", "3PO",
              _t1("b3po", "grpo"), ("pass@1", _T1["grpo"], _T1["b3po"]), "within", "grpo", margin=0.01,
              **_DISCOVERY),  # the margin of every 'matches' row of notebooks 04 and 05
    ),
    measurements=(
        *(Measurement(f"{arm}-headroom", f"{arm} captures part of the oracle's headroom on the held-out targets: "
                                         "(arm - GRPO) / (oracle - GRPO) of pass@1 above 0", ">",
                      **(_DISCOVERY if arm in EXPLORERS else _NONE)) for arm in ARMS),
        *(Measurement(f"{arm}-round-share", f"{arm} samples round more than GRPO on the held-out targets "
                                            "(share of samples, per problem)", ">",
                      **(_DISCOVERY if arm in EXPLORERS else _NONE)) for arm in ARMS),
    ),
    checks=(
        Check("gate-oracle-beats-grpo", "Gate: the oracle arm beats GRPO on the held-out targets' pass@1 by at least "
                                        "+0.05 with its interval above 0", "measurement"),
        Check("gate-grpo-misses-most", "Gate: GRPO's gain over the base there is at most half of the oracle's",
              "measurement"),
        Check("gate-rare-earns-reward", "Gate: hinted round earns reward on at least 5% of fresh samples of the "
                                        "training targets", "measurement"),
    ),
)

_PRESET = ("not a one-difference comparison: the method at its preset and tuned lr against the testbed's grpo "
           "preset, the oracle arm's comparator; every setting its preset sets differs too")
_SETTINGS = {
    "nudgerl": ("method", "advantage", "kl_coef", "top_p", "minibatches", "lr_schedule", "lr_warmup_ratio"),
    **{v: ("method", "kl_coef", "lr_warmup_ratio") for v in ("b3po", "m3po", "c3po")},
    "sage": ("method", "kl_estimator"),
    "vigor": ("method", "advantage", "kl_coef", "kl_estimator", "lr", "lr_schedule", "lr_warmup_ratio"),
}
_CLAIMS = {"nudgerl": ("nudgerl-beats-grpo",), "c3po": ("c3po-beats-grpo",), "m3po": ("m3po-beats-grpo",),
           "b3po": ("b3po-matches-grpo",)}
COMPARISONS = {
    f"{arm}-vs-grpo": Pair(Arm(arm), Arm("grpo"), _SETTINGS[arm], _PRESET,
                           (*_CLAIMS.get(arm, ()), f"{arm}-headroom", f"{arm}-round-share"), match_lr=False)
    for arm in ARMS
}
"""Notebook 08's paired comparisons (`rlvr_lib.study.comparisons`); every arm also sets the discovery task and
policy (`rlvr_lib.study.regimes.arm_overrides`), shared by both sides."""
