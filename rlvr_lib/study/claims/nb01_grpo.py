"""Notebook 01's pre-registered rows: the papers' statements about GRPO itself.

GRPO raises pass@1; at large k its pass@k falls below the base's; strategy diversity falls (the dominant
pattern sharpens, the rare one does not grow); more rollouts help up to a point. Written before the
recompute on the testbed v4 policy and kept unchanged for v5 (the same policy, a smaller RL pool); ``changed`` says
where a row differs from the first full-profile table.
"""

from rlvr_lib.study.comparisons import Arm, Pair
from . import TAGGED, Check, Claim, Measurement, Registry

# Every row is measured on the retention regime (the testbed's RL pool); its premise follows the rule in
# docs/study/claims.md.
_DISCOVERY, _RETENTION, _NONE = ({"regime": "retention", "premise": p} for p in ("discovery", "retention", "none"))
# The evaluation protocol the pass@1 rows are measured under (rlvr_lib.study.protocols). The
# rows come from two papers, so each is measured under its source's: grpo-raises-pass1 under SAGE's (not stated
# there: its training sampling, temperature 1.0, i.e. the main evaluation), more-rollouts-help and up-to-a-point
# under NudgeRL's (mean@128 at temperature 0.7, scaled by the written rule). The pass@256 rows (SAGE's pass@k,
# the wide evaluation) and the strategy rows stay on the temperature-1.0 evaluations.
PROTOCOL = "by source"

REGISTRY = Registry(
    notebook="01_grpo_pass_at_k_modes_group_size",
    limits=(
        "Whether GRPO narrows a 4B-7B model's reasoning on competition math, and at which k its pass@k falls "
        "below the base's there, is the papers' measurement, not this one's: here the modes are three "
        "labelled strategies and pass@k is measured to k = 256 on 100 problems per family."),
    experiment="grpo_baseline",
    tagged=TAGGED,
    claims=(
        Claim("grpo-raises-pass1", "GRPO raises pass@1 (gain over base)", "SAGE", "T1 (base, GRPO rows)",
              ("pass@1", 0.227, 0.266), ">", "base", **_NONE),
        Claim("grpo-below-base-at-large-k", "At large k GRPO falls below the base: pass@{wide_k} of GRPO minus "
                                            "the base's, in-distribution average (< 0)", "SAGE",
              "mode collapse (pass@1 up, pass@k flat); T (DAPO row, pass@256)",
              ("pass@256", 0.708, 0.696), "<", "base", **_RETENTION,
              changed="issue 27: 'gain@n under half the pass@1 gain' became the papers' statement, at k = 256"),
        Claim("grpo-diversity-falls", "Strategy diversity falls: first-token strategy entropy per problem, "
                                      "GRPO minus base (< 0)", "NudgeRL", "motivation (naive sampling: one mode "
                                                                          "on > 75% of problems)",
              "no number for GRPO vs base", "<", "base", **_RETENTION,
              changed="added (issue 27: 'strategy diversity falls')"),
        Claim("grpo-sharpens-top", "GRPO sharpens the dominant pattern: share of its top strategy ({top_grpo}) "
                                   "over base's top ({top_base})", "SAGE", "T2 (constraint setup)",
              ("share of the top pattern", 0.458, 0.604), ">", "base", **_RETENTION,
              changed="item 4: the paper's +32% is large, so the threshold is the minimum effect, not 0"),
        Claim("grpo-rare-stays-rare", "GRPO leaves the rare strategy ({rare}) rare: its share changes by less "
                                      "than 0.01 either way", "SAGE", "T2 (proof by contradiction)",
              ("share of the rare pattern", 0.007, 0.008), "within", "base", margin=0.01, **_RETENTION,
              changed="item 2: 'rises by under 0.01' (one-sided: a fall passed) became within +-0.01"),
        Claim("more-rollouts-help", "More rollouts help: pass@1 of G=32 minus G=8", "NudgeRL", "T1 (GRPO rows)",
              ("pass@1", 0.454, 0.487), ">", "method", **_DISCOVERY),
        Claim("up-to-a-point", "...up to a point: pass@1 of G=64 minus G=32", "NudgeRL", "T1 (GRPO rows)",
              ("pass@1", 0.487, 0.451), "<", "method", **_NONE),
    ),
    measurements=(
        Measurement("grpo-narrows-rare", "GRPO narrows pass@{wide_k} where only the rare strategy works "
                                         "({rare_family}: change < 0)", "<", **_RETENTION,
                    changed="item 7: the papers' shared premise, not a stated claim: moved from the claims; "
                            "issue 27: at k = 256"),
    ),
    checks=(
        Check("ari", "Unsupervised modes recover strategy labels on base samples, tag removed "
                     "(min ARI over families >= 0.8)", "measurement",
              changed="item 5: a measurement check, moved out of the claims"),
    ),
)

_G = {G: Arm("grpo", label=f"grpo-g{G}", overrides={"group_size": G}) for G in (8, 32, 64)}
COMPARISONS = {
    "g32-vs-g8": Pair(_G[32], _G[8], ("group_size",), "the group size G (32 against 8)", ("more-rollouts-help",)),
    "g64-vs-g32": Pair(_G[64], _G[32], ("group_size",), "the group size G (64 against 32)", ("up-to-a-point",)),
}
"""The paired comparisons of the rows above (`rlvr_lib.study.comparisons`); rows against the base policy are not
pairs of trained arms."""
