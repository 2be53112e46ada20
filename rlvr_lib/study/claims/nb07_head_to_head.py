"""Notebook 07's pre-registered rows (the four methods and the best baselines at equal compute).

Claims: each method's headline claim against GRPO, tested here at the equal-compute budget
(`rlvr_lib.study.head_to_head.Budget`) against notebook 02's GRPO (the KL-anchored one every arm shares), with
the paper's own effect; notebooks 03-06 test the same claims against GRPO at each method's own settings, so the
scorecard counts them as further tests of those papers' claims, at another setting. Measurements (no paper
states them): the other methods against GRPO on ``rare_mix`` at pass@256 (the wide evaluation), each composable
pair against its better component (`rlvr_lib.study.head_to_head.better_component`, by mean in-distribution
pass@1), and where each method helps (its gain over GRPO in the lowest quartile of the base policy's
per-problem pass@1, `rlvr_lib.study.head_to_head.gain_map`), and whether each method's gain over GRPO grows
with model size (its per-seed pass@1 gain over GRPO on the second policy minus on the tiny one,
Welch, `rlvr_lib.study.head_to_head.gain_growth`; an interval wholly below 0 reads as "shrinks": contradicted).
Each method also stands beside its own paper's comparator, the method's arm with its mechanism
undone and every other setting (the lr included) kept (`rlvr_lib.study.head_to_head.own_comparators`): GRPO at
NudgeRL's settings, ``grpo_k3`` for SAGE (its k3 anchor without the guide), the 3PO variant without weight noise and
GRPO at 3PO's settings, GRPO with the verifier at VIGOR's settings and lr. The rows ``*-beats-own`` test each
paper's headline claim against that comparator (the paper's own GRPO row), and the measurements ``*-rare-wide-own``
and ``threepo-beats-no-noise`` read the mechanism alone; a difference shown against GRPO and not against the own
comparator is what the method's settings do, not the method (README's guide says which of the two each statement
reads). The eight pass@1 claims (``*-beats-grpo``, ``*-beats-own``) are each measured under their
source paper's evaluation protocol (``PROTOCOL = "by source"``, :data:`PROTOCOL_ROWS`); ``nudgerl-rare-wide`` and
every measurement stay on the temperature-1.0 evaluations. Thresholds are 0 and the minimum-effect rule of
`rlvr_lib.study.claims.tables.min_effect` applies as in every notebook (no paper effect here is large).

These rows were fixed before notebook 07's first full-profile record; a change since is listed by
`Registry.changed_rows`, as for every notebook.
"""

from rlvr_lib.study.comparisons import Arm, Pair
from rlvr_lib.study.testbed import key_train, calibrated_config
from . import TAGGED, Claim, Measurement, Registry

# Every row is measured on the retention regime (the testbed's RL pool); its premise follows the rule in
# docs/study/claims.md: NudgeRL's and 3PO's rows against GRPO, and every pair with one of them, need
# the discovery premise; SAGE's and VIGOR's rare_mix rows the retention premise; their plain pass@1 rows none.
_DISCOVERY, _RETENTION, _NONE = ({"regime": "retention", "premise": p} for p in ("discovery", "retention", "none"))
# Each claim is a paper's headline claim against GRPO, so each is measured under its
# source paper's protocol (rlvr_lib.study.protocols), the quantity notebooks 03-06 test; the measurements
# (no paper states them) stay on the temperature-1.0 evaluations.
PROTOCOL = "by source"
PROTOCOL_ROWS = {
    **{f"{m}-beats-grpo": (m, "grpo") for m in ("nudgerl", "threepo", "sage", "vigor")},
    **{f"{m}-beats-own": (m, "own") for m in ("nudgerl", "threepo", "sage", "vigor")},
}
"""The pass@1 claims, each read under its source paper's protocol (`rlvr_lib.study.protocols.claim_protocol`:
NudgeRL's mean@k at temperature 0.7, 3PO's mean@8 at temperature 0.6, SAGE's main evaluation, VIGOR's greedy
pass@1), and the two arms each reads: ``(method key, "grpo" | "own")``, the method's arm against notebook 02's
GRPO config or against its paper's own comparator (`rlvr_lib.study.head_to_head.paper_comparator`).
`rlvr_lib.study.head_to_head.protocol_plan` gives each of those arms the protocol evaluations. The one other
claim, ``nudgerl-rare-wide``, is a pass@256 row: it stays on the temperature-1.0 wide evaluation, as every
measurement does."""
EXPLORERS = ("nudgerl", "threepo")
"""The methods whose claimed effect comes through exploration reaching reward GRPO's sampling misses."""


def _needs(*methods: str, otherwise: dict) -> dict:
    """The discovery premise when one of ``methods`` explores (:data:`EXPLORERS`), else ``otherwise``."""
    return _DISCOVERY if any(m in EXPLORERS for m in methods) else otherwise

LABELS = {"nudgerl": "NudgeRL", "sage": "SAGE", "threepo": "{threepo}", "vigor": "VIGOR"}
"""How a row names each method (``{threepo}``: the selected 3PO variant, filled by the notebook)."""
PAIRS = (("nudgerl", "sage"), ("nudgerl", "threepo"), ("sage", "threepo"), ("sage", "vigor"), ("threepo", "vigor"))
"""Every pair of the four methods that can compose (NudgeRL + VIGOR never does: one advantage estimate per
rollout); with M3PO, NudgeRL + M3PO and M3PO + VIGOR do not either, and their rows are left out."""
_EQ = "at equal compute"
OWN = {"nudgerl": "GRPO at NudgeRL's settings", "sage": "grpo_k3 (GRPO with SAGE's k3 anchor, no guide)",
       "threepo": "GRPO at 3PO's settings", "vigor": "GRPO with the verifier at VIGOR's settings and lr"}
"""Each method's own paper's comparator, as a row names it (`rlvr_lib.study.head_to_head.own_comparators`; for 3PO
the GRPO one: its paper's T1 row; the noise-free control has its own row)."""
_ADDED = "added (issue 56, item 7: each method beside its own paper's comparator as well as GRPO)"

REGISTRY = Registry(
    notebook="07_head_to_head",
    limits=(
        "Equal compute is the testbed's budget (200 steps x 8 prompts x 8 completions, one optimizer step "
        "each); the methods' gains at the papers' budgets and sizes, and whether the pairs compose there, are "
        "not measured; the second size has 4x the parameters (2.41M), not the papers' 4B-7B."),
    experiment="head_to_head",
    tagged=TAGGED,
    claims=(
        Claim("nudgerl-beats-grpo", f"NudgeRL beats GRPO {_EQ} (pass@1)", "NudgeRL",
              "T1 (Qwen3-4B, at its own settings)", ("pass@1", 0.454, 0.489), ">", "grpo", **_DISCOVERY),
        Claim("threepo-beats-grpo", f"{{threepo}}, the best 3PO variant, beats GRPO {_EQ} (pass@1)", "3PO",
              "T1: C3PO 44.04 vs GRPO 42.99 (OLMo3-7B)", ("pass@1", 42.99, 44.04), ">", "grpo", **_DISCOVERY),
        Claim("sage-beats-grpo", f"SAGE beats GRPO {_EQ} (pass@1)", "SAGE", "T1", ("pass@1", 0.266, 0.284), ">",
              "grpo", **_NONE),
        Claim("vigor-beats-grpo", f"VIGOR beats GRPO {_EQ} (pass@1)", "VIGOR", "T main (7B)",
              ("Math avg", 67.14, 69.77), ">", "grpo", **_NONE),
        Claim("nudgerl-rare-wide", f"NudgeRL solves more {{rare}} problems than GRPO {_EQ} (pass@{{n_wide}}; only "
                                   "the rare strategy works)", "NudgeRL", "Fig 4 (case study)",
              ("correct samples of 32 on the case problem", 0, 6), ">", "grpo", **_DISCOVERY),
        Claim("nudgerl-beats-own", f"NudgeRL beats {OWN['nudgerl']}, its paper's comparator, {_EQ} (pass@1)",
              "NudgeRL", "T1 (Qwen3-4B): GRPO@8 .454, NudgeRL@8 .489", ("pass@1", 0.454, 0.489), ">", "grpo",
              changed=_ADDED, **_DISCOVERY),
        Claim("threepo-beats-own", f"{{threepo}} beats {OWN['threepo']}, its paper's comparator, {_EQ} (pass@1)",
              "3PO", "T1: C3PO 44.04 vs GRPO 42.99 (OLMo3-7B)", ("pass@1", 42.99, 44.04), ">", "grpo",
              changed=_ADDED, **_DISCOVERY),
        Claim("sage-beats-own", f"SAGE beats {OWN['sage']}, its paper's comparator, {_EQ} (pass@1)", "SAGE",
              "T1: GRPO .266, GRPO+Branch .284", ("pass@1", 0.266, 0.284), ">", "grpo", changed=_ADDED, **_NONE),
        Claim("vigor-beats-own", f"VIGOR beats {OWN['vigor']}, its paper's comparator, {_EQ} (pass@1)", "VIGOR",
              "T main (7B): GT-reward 67.14, VIGOR 69.77", ("Math avg", 67.14, 69.77), ">", "grpo",
              changed=_ADDED, **_NONE),
    ),
    measurements=(
        *(Measurement(f"{m}-rare-wide", f"{LABELS[m]} beats GRPO on {{rare}} {_EQ} (pass@{{n_wide}})", ">",
                      **_needs(m, otherwise=_RETENTION))
          for m in ("threepo", "sage", "vigor")),
        *(Measurement(f"pair-{a}-{b}", f"{LABELS[a]} + {LABELS[b]} beats the better of the two alone {_EQ} "
                                       "(pass@1)", ">",
                      **_needs(a, b, otherwise=_NONE)) for a, b in PAIRS),
        *(Measurement(f"{m}-helps-hardest", f"{LABELS[m]} gains over GRPO on the problems the base policy solves "
                                            "least (lowest quartile of its per-problem pass@1; pass@1)", ">",
                      **_needs(m, otherwise=_NONE))
          for m in ("nudgerl", "threepo", "sage", "vigor")),
        *(Measurement(f"{m}-gain-grows-with-size", f"{LABELS[m]}'s gain over GRPO {_EQ} (pass@1, per seed) is "
                                                   "larger on the {small} policy than on the tiny one (Welch)", ">",
                      **_needs(m, otherwise=_NONE))
          for m in ("nudgerl", "threepo", "sage", "vigor")),
        *(Measurement(f"{m}-rare-wide-own", f"{LABELS[m]} beats {OWN[m]}, its paper's comparator, on {{rare}} "
                                            f"{_EQ} (pass@{{n_wide}})", ">", changed=_ADDED,
                      **_needs(m, otherwise=_RETENTION))
          for m in ("nudgerl", "threepo", "sage", "vigor")),
        Measurement("threepo-beats-no-noise", f"{{threepo}} beats itself without weight noise (the same IVON step at "
                                              f"the mean weights) {_EQ} (pass@1)", ">", changed=_ADDED, **_DISCOVERY),
        Measurement("threepo-rare-wide-no-noise", f"{{threepo}} beats itself without weight noise on {{rare}} {_EQ} "
                                                  "(pass@{n_wide})", ">", changed=_ADDED, **_DISCOVERY),
    ),
)

_ONE_STEP = {"minibatches": 1, "inner_epochs": 1}
"""What `rlvr_lib.study.head_to_head.Budget.overrides` sets beside the shared sizes for these arms (one optimizer
step per batch; none of them refills)."""
_AT_BUDGET = ("not a one-difference comparison: the method at its own preset and tuned lr, at the equal-compute "
              "budget, against notebook 02's KL-anchored GRPO; every other setting its preset sets differs too")
_SETTINGS = {
    "nudgerl": ("method", "advantage", "kl_coef", "top_p", "lr_schedule", "lr_warmup_ratio"),
    "sage": ("method", "kl_estimator"),
    **{v: ("method", "kl_coef", "lr_warmup_ratio") for v in ("b3po", "m3po", "c3po")},
    "vigor": ("method", "advantage", "kl_coef", "kl_estimator", "lr", "lr_schedule", "lr_warmup_ratio"),
}
"""Per method, the fields in which its arm at the budget differs from GRPO's: its paper's settings come with it."""
_ROWS = {m: (f"{key}-beats-grpo", *(("nudgerl-rare-wide",) if m == "nudgerl" else (f"{key}-rare-wide",)),
             f"{key}-helps-hardest", f"{key}-gain-grows-with-size")
         for m, key in (("nudgerl", "nudgerl"), ("sage", "sage"), ("b3po", "threepo"), ("m3po", "threepo"),
                        ("c3po", "threepo"), ("vigor", "vigor"))}
_SIZES = ("steps", "prompts_per_step", "group_size", "seed", "method")


def _own(name: str, label: str, replace: dict) -> Arm:
    """The method arm's config at the budget with ``replace``'s fields changed (``method_options`` merged): its
    own paper's comparator as `rlvr_lib.study.head_to_head.own_comparators` builds it, the lr included."""
    arm = key_train(calibrated_config(name, **_ONE_STEP))  # as written: the calibration is the comparator's own
    kept = {k: v for k, v in arm.items() if k not in _SIZES}
    options = replace.get("method_options")
    if options is not None:
        replace = {**replace, "method_options": {**(arm["method_options"] or {}), **options}}
    fields = {**kept, **{k: v for k, v in replace.items() if k != "method"}}
    return Arm(replace.get("method", name), label=label, overrides=fields)


_NO_NOISE = {"method_options": {"noise_scale": 0.0}}
_OWN_ROWS = {key: (f"{key}-beats-own", f"{key}-rare-wide-own") for key in ("nudgerl", "sage", "threepo", "vigor")}
COMPARISONS = {
    **{f"{m}-vs-grpo": Pair(Arm(m, overrides=_ONE_STEP), Arm("grpo", overrides=_ONE_STEP), _SETTINGS[m], _AT_BUDGET,
                            _ROWS[m], match_lr=False)
       for m in _SETTINGS},
    # each method beside its own paper's comparator (one difference, every other setting kept)
    "nudgerl-vs-own": Pair(Arm("nudgerl", overrides=_ONE_STEP),
                           _own("nudgerl", "grpo-nudgerl-settings", {"method": "grpo", "advantage": "grpo"}),
                           ("method", "advantage"), "NudgeRL's hints, context dropout, credit and distillation",
                           _OWN_ROWS["nudgerl"]),
    "sage-vs-own": Pair(Arm("sage", overrides=_ONE_STEP), _own("sage", "grpo_k3", {"method": "grpo_k3"}),
                        ("method",), "SAGE's guide q alone", _OWN_ROWS["sage"]),
    "vigor-vs-own": Pair(Arm("vigor", overrides=_ONE_STEP),
                         _own("vigor", "grpo-vigor-settings", {"method": "grpo", "advantage": "grpo"}),
                         ("method", "advantage"), "VIGOR's gradient-norm rank reward in place of the verifier's",
                         _OWN_ROWS["vigor"]),
    **{f"{v}-vs-own-grpo": Pair(Arm(v, overrides=_ONE_STEP), _own(v, "grpo-3po-settings", {"method": "grpo_no_kl"}),
                                ("method",), "IVON with its weight noise in place of AdamW", _OWN_ROWS["threepo"])
       for v in ("b3po", "m3po", "c3po")},
    **{f"{v}-vs-no-noise": Pair(Arm(v, overrides=_ONE_STEP),
                                _own(v, "ivon-no-noise" if v == "b3po" else f"{v}-no-noise", _NO_NOISE),
                                ("method_options",), "the weight noise alone (the same IVON step at the mean weights)",
                                ("threepo-beats-no-noise", "threepo-rare-wide-no-noise"))
       for v in ("b3po", "m3po", "c3po")},
}
"""The head-to-head's paired comparisons (`rlvr_lib.study.comparisons`), one per method the notebook may select
(``threepo``'s rows read the selected 3PO variant's pair); the composite-against-better-component rows compare
arms chosen from the data and are not declared. These are not one-difference comparisons: ``differs`` lists what
each method's paper settings change (SAGE's: the k3 estimator beside its guide, issue 56 item 8)."""
