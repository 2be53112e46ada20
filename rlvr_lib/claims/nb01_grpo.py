"""Notebook 01's pre-registered rows (GRPO: pass@1 vs pass@k, strategy shares, group size).

Rows as the notebook stated them before its full-profile runs, rewritten to issue 28's forms; ``changed`` says
where and which item required it.
"""

from . import Check, Claim, Measurement, Registry

REGISTRY = Registry(
    notebook="01_grpo_pass_at_k_modes_group_size",
    experiment="grpo_baseline",
    claims=(
        Claim("grpo-raises-pass1", "GRPO raises pass@1 (gain over base)", "SAGE", "T1 (base, GRPO rows)",
              ("pass@1", 0.227, 0.266), ">", "base"),
        Claim("grpo-not-passn", "...but not pass@{n}: its gain is under half the pass@1 gain "
                                "(gain@{n} - gain@1 / 2 < 0)", "SAGE", "T1 (base, GRPO rows)",
              "pass@256 .708 -> .714 (+.006) while pass@1 +.039: gain@256 - gain@1 / 2 = -.014", "<", "base"),
        Claim("grpo-sharpens-top", "GRPO sharpens the dominant pattern: share of its top strategy ({top_grpo}) "
                                   "over base's top ({top_base})", "SAGE", "T2 (constraint setup)",
              ("share of the top pattern", 0.458, 0.604), ">", "base",
              changed="item 4: the paper's +32% is large, so the threshold is the minimum effect, not 0"),
        Claim("grpo-rare-stays-rare", "GRPO leaves the rare strategy ({rare}) rare: its share changes by less "
                                      "than 0.01 either way", "SAGE", "T2 (proof by contradiction)",
              ("share of the rare pattern", 0.007, 0.008), "within", "base", margin=0.01,
              changed="item 2: 'rises by under 0.01' (one-sided: a fall passed) became within +-0.01"),
        Claim("more-rollouts-help", "More rollouts help: pass@1 of G=32 minus G=8", "NudgeRL", "T1 (GRPO rows)",
              ("pass@1", 0.454, 0.487), ">", "method"),
        Claim("up-to-a-point", "...up to a point: pass@1 of G=64 minus G=32", "NudgeRL", "T1 (GRPO rows)",
              ("pass@1", 0.487, 0.451), "<", "method"),
    ),
    measurements=(
        Measurement("grpo-narrows-rare", "GRPO narrows pass@{n} where only the rare strategy works "
                                         "({rare_family}: change < 0)", "<",
                    changed="item 7: the papers' shared premise, not a stated claim: moved from the claims"),
    ),
    checks=(
        Check("ari", "Unsupervised modes recover strategy labels on base samples, tag removed "
                     "(min ARI over families >= 0.8)", "measurement",
              changed="item 5: a measurement check, moved out of the claims"),
    ),
)
