"""Notebook 03's pre-registered rows (NudgeRL: T1, Figs 1, 3, 4, 5, ablations)."""

from rlvr_lib.methods.nudgerl import NUDGERL_SETTINGS
from rlvr_lib.study.comparisons import Arm, Pair
from rlvr_lib.tasks.arithmetic import EVAL_FAMILIES
from . import TAGGED, Claim, Measurement, Registry

# Every row is measured on the retention regime (the testbed's RL pool); its premise follows the rule in
# docs/study/claims.md.
_DISCOVERY, _RETENTION, _NONE = ({"regime": "retention", "premise": p} for p in ("discovery", "retention", "none"))
# The pass@1 rows are measured under NudgeRL's protocol (rlvr_lib.study.protocols: mean@128
# at temperature 0.7, scaled by the written rule); Fig 1's modes and Fig 4's pass@256 stay on temperature 1.0.
PROTOCOL = "nudgerl"

_GRPO_T1 = {8: 0.454, 16: 0.470, 32: 0.487, 64: 0.451}  # NudgeRL T1, Qwen3-4B (docs/papers/nudgerl.md)
_NUDGERL, _POPE = 0.489, 0.467
EPS_HIGH = (0.20, 0.28, 0.32, 0.40)
P_DROP = (0.0, 0.25, 0.75)
LAMBDA_DISTILL = (0.0, 0.5)
LAM = (0.0, 0.5, 2.0)
_MATCHED = ("issue 31: GRPO@G at NudgeRL's settings (no KL, top_p 0.95, two optimizer steps per batch, its schedule), "
            "as in the paper's table; 'beats-grpo-matched' (the same test at G = 8) was removed")

REGISTRY = Registry(
    notebook="03_nudgerl",
    limits=(
        "Its hints name one of the three strategies; the paper's are natural-language nudges on a 4B model's "
        "open-ended solutions, so how far a hint moves the policy, and what distillation keeps of it, can "
        "differ in size and in sign there; the mode counts of Fig 1 are of three known strategies, not of "
        "clustered solutions."),
    experiment="nudgerl",
    tagged=TAGGED,
    claims=(
        Claim("beats-base", "NudgeRL@8 raises pass@1 over the base policy", "NudgeRL", "T1",
              ("pass@1", 0.402, _NUDGERL), ">", "base",
              changed="items 3-4: GRPO@8's same test as reference; the paper's +22% sets a minimum effect", **_NONE),
        *(Claim(f"beats-grpo-g{G}", f"NudgeRL@8 beats GRPO@{G} (pass@1)", "NudgeRL", "T1",
                ("pass@1", _GRPO_T1[G], _NUDGERL), ">", "grpo", changed=_MATCHED, **_DISCOVERY)
          for G in (8, 16, 32, 64)),
        Claim("beats-pope", "NudgeRL@8 beats POPE@8 (pass@1)", "NudgeRL", "T1", ("pass@1", _POPE, _NUDGERL), ">",
              "baseline", changed="item 3: GRPO@8 against POPE@8 as reference (POPE may sit below GRPO)", **_DISCOVERY),
        *(Claim(f"beats-pope-{family}", f"NudgeRL@8 beats POPE@8 on {family} (pass@1)", "NudgeRL",
                "T1 per benchmark: NudgeRL above POPE on every benchmark (not restated from the paper)",
                "NudgeRL above POPE on each benchmark (numbers not restated from the paper)", ">", "baseline",
                changed="added (item 7): a paper claim no row tested; the per-family data were there", **_DISCOVERY)
          for family in EVAL_FAMILIES),
        Claim("fig4-rare-solved", "NudgeRL@8 solves more {rare_family} problems than GRPO@8 (pass@{n_wide}; only the "
                                  "rare strategy works)", "NudgeRL", "Fig 4 (case study)",
              ("correct samples of 32 on the case problem", 0, 6), ">", "grpo",
              changed="issue 31: pass@256 on the wide evaluation (was pass@32); " + _MATCHED, **_DISCOVERY),
        Claim("fig1-naive-one-mode", "Naive sampling from the base policy: over 75% of problems show one reasoning "
                                     "mode", "NudgeRL", "Fig 1", "> 75% of problems with one mode", ">",
              "threshold", than=0.75, **_NONE),
        Claim("fig1-nudged-more-modes", "Nudged sampling ({hints} hints) shows more modes per problem than naive "
                                        "sampling", "NudgeRL", "Fig 1", "2-5 modes vs 1", ">", "method", **_NONE),
        Claim("fig3-grpo32-declines", "GRPO@32 training accuracy falls from its peak more than NudgeRL's", "NudgeRL",
              "Fig 3", "GRPO@32 rises then declines; NudgeRL stable (no number restated from the paper)", ">", "grpo",
              changed=_MATCHED, **_DISCOVERY),
        *(Claim(f"fig5-eps-high-{e:.2f}", f"NudgeRL@8 beats GRPO@8 with eps_high = {e:.2f} (no KL, top_p 0.95, 2 "
                                          "optimizer steps per batch; pass@1)", "NudgeRL", "Fig 5",
                "no eps_high reaches NudgeRL (no number restated from the paper)", ">", "grpo", **_DISCOVERY) for e in EPS_HIGH),
        *(Claim(f"ablation-p-drop-{v}", f"p_drop 0.5 beats p_drop {v}", "NudgeRL", "ablations", "0.5 best", ">",
                "method", **_DISCOVERY) for v in P_DROP),
        Claim("ablation-hint-random", "Random hint selection beats the first two hints", "NudgeRL", "ablations",
              "random best", ">", "method", **_DISCOVERY),
        *(Claim(f"ablation-lambda-distill-{v}", f"lambda_distill 0.1 beats {v}", "NudgeRL", "ablations", "0.1 best",
                ">", "method", **_DISCOVERY) for v in LAMBDA_DISTILL),
        *(Claim(f"ablation-lam-{v}", f"lambda 1.1 beats {v}", "NudgeRL", "ablations", "1.1 best", ">", "method",
                **_DISCOVERY)
          for v in LAM),
    ),
    measurements=(
        Measurement("beats-grpo-rare", "NudgeRL@8 beats GRPO@8 on {rare_family} (pass@1)", ">",
                    changed="item 7: only T1's average is restated from the paper; moved from the claims", **_DISCOVERY),
        Measurement("beats-grpo-ood", "NudgeRL@8 beats GRPO@8 on {ood_family} (pass@1)", ">",
                    changed="item 7: no paper states an OOD result for NudgeRL; moved from the claims", **_DISCOVERY),
        Measurement("rescued-vs-lost", "NudgeRL@8 rescues more in-distribution problems than it loses against GRPO@8 "
                                       "(pass@{n}: rescued minus lost, per problem)", ">",
                    changed="item 7: the repository's own reading (issue 11); moved from the claims", **_DISCOVERY),
    ),
)

_NUDGERL_ARM = Arm("nudgerl")
_HINTS = "the method: NudgeRL's hints, credit assignment and distillation (advantage 'hint')"
GRPO_ARMS = {G: Arm("grpo", label=f"grpo-g{G}-nudgerl-settings", overrides={**NUDGERL_SETTINGS, "group_size": G})
             for G in (8, 16, 32, 64)}
"""GRPO@G at every setting NudgeRL's runs share (notebook 03's labels)."""
EPS_ARMS = {e: GRPO_ARMS[8] if e == NUDGERL_SETTINGS["eps_high"] else
            Arm("grpo", label=f"grpo-mb2-eps-high-{e:.2f}", overrides={**NUDGERL_SETTINGS, "eps_high": e})
            for e in EPS_HIGH}
"""Fig 5's GRPO@8 at each eps_high (0.20 is GRPO@8 itself)."""
ABLATION_ARMS = {(option, v): Arm("nudgerl", label=f"nudgerl-{option}-{v}".replace("_", "-"),
                                  overrides={"method_options": {option: v}})
                 for option, values in (("p_drop", P_DROP), ("hint_selection", ("random",)),
                                        ("lambda_distill", LAMBDA_DISTILL), ("lam", LAM)) for v in values}
"""Each ablation changes one option of the preset (notebook 03's labels)."""
COMPARISONS = {
    "nudgerl-vs-grpo-g8": Pair(_NUDGERL_ARM, GRPO_ARMS[8], ("method", "advantage"), _HINTS,
                               ("beats-grpo-g8", "fig4-rare-solved", "beats-grpo-rare", "beats-grpo-ood",
                                "rescued-vs-lost")),
    **{f"nudgerl-vs-grpo-g{G}": Pair(_NUDGERL_ARM, GRPO_ARMS[G], ("method", "advantage", "group_size"),
                                     f"{_HINTS}, with G = 8 against GRPO's G = {G}",
                                     (f"beats-grpo-g{G}", *(("fig3-grpo32-declines",) if G == 32 else ())))
       for G in (16, 32, 64)},
    # POPE's preset is NudgeRL's configuration: notebook 02 trains it at that preset.
    "nudgerl-vs-pope": Pair(_NUDGERL_ARM, Arm("pope", experiment="baselines"), ("method", "advantage"),
                            "unverified strategy hints with NudgeRL's credit and distillation, against POPE's oracle "
                            "prefixes on half the prompts", ("beats-pope", *(f"beats-pope-{f}" for f in EVAL_FAMILIES))),
    **{f"nudgerl-vs-grpo-eps-high-{e:.2f}": Pair(_NUDGERL_ARM, EPS_ARMS[e],
                                                 ("method", "advantage", *(("eps_high",) if e != 0.2 else ())),
                                                 f"{_HINTS}, against GRPO@8 with eps_high {e:.2f}",
                                                 (f"fig5-eps-high-{e:.2f}",))
       for e in EPS_HIGH},
    **{f"ablation-{option}-{v}": Pair(*((ABLATION_ARMS[option, v], _NUDGERL_ARM) if option == "hint_selection" else
                                        (_NUDGERL_ARM, ABLATION_ARMS[option, v])),
                                      ("method_options",), f"the option {option}: {v} against the preset's",
                                      ("ablation-hint-random" if option == "hint_selection" else
                                       f"ablation-{option.replace('_', '-')}-{v}",))
       for option, v in ABLATION_ARMS},
}
"""The paired comparisons of the rows above (`rlvr_lib.study.comparisons`)."""
