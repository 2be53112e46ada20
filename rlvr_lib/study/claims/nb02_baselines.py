"""Notebook 02's pre-registered rows (SAGE T1's anchor rows: no KL, forward KL)."""

from rlvr_lib.study.comparisons import Arm, Pair
from . import TAGGED, Check, Claim, Registry

# Every row is measured on the retention regime (the testbed's RL pool); its premise follows the rule in
# docs/study/claims.md.
_DISCOVERY, _RETENTION, _NONE = ({"regime": "retention", "premise": p} for p in ("discovery", "retention", "none"))
# Every row is SAGE T1's, measured under SAGE's protocol (rlvr_lib.study.protocols; its
# evaluation sampling is not stated: its training temperature 1.0, i.e. the main evaluation).
PROTOCOL = "sage"

REGISTRY = Registry(
    notebook="02_baselines_sage_t1_anchors",
    limits=(
        "Every baseline runs at the testbed's shared settings (its lr tuned here, the anchor at beta 0.2), "
        "not at its own paper's, so a ranking of the anchors and baselines says which objective helps this "
        "policy on these problems, not which helps a 7B model on MATH; the forward-KL and no-KL rows test "
        "SAGE's T1 description, which gives no numbers for them."),
    experiment="baselines",
    tagged=TAGGED,
    claims=(
        Claim("nokl-train-higher", "No KL: higher training accuracy than GRPO (last 10 steps)", "SAGE",
              "T1 (no-KL row)", "no KL reaches a higher training reward than GRPO (no number restated from the paper)",
              ">", "grpo", **_NONE),
        Claim("nokl-test-lower", "No KL: lower test pass@1 than GRPO", "SAGE", "T1 (no-KL row)",
              "no KL is worse than GRPO on test pass@1 (no number restated from the paper)", "<", "grpo", **_NONE),
        Claim("nokl-passn-lower", "No KL: lower test pass@{n_wide} than GRPO ({wide})",
              "SAGE", "T1 (no-KL row)", "no KL is worse at pass@1 and pass@256 (paper's text; no number restated from it)",
              "<", "grpo", changed="added: notebook 05's row, moved here so each claim is counted once; issue 31: "
                                   "pass@256 on the wide evaluation replaced pass@32 standing in for it", **_RETENTION),
        Claim("fkl-passn-higher", "Forward KL: higher pass@{n_wide} than reverse-KL GRPO ({wide})", "SAGE",
              "T1 (forward-KL row)", "forward KL slightly raises pass@256 over GRPO (no number restated from the paper)", ">",
              "grpo", changed="issue 31: pass@256 on the wide evaluation replaced pass@32 standing in for it",
              **_RETENTION),
        Claim("fkl-no-pass1-gain", "Forward KL: no pass@1 gain over GRPO (difference within +-0.005)", "SAGE",
              "T1 (forward-KL row)", "forward KL gives no pass@1 gain over GRPO (no number restated from the paper)",
              "within", "grpo", margin=0.005,
              changed="item 2: '< 0.005' (one-sided: a worse forward KL passed) became within +-0.005", **_NONE),
    ),
    checks=(
        Check("grpo-k2-identity", "grpo_k2 (k2 estimator) has GRPO's gradient: its evaluation equals grpo's on "
                                  "the same seed (an identity check, not a baseline)", "identity",
              changed="item 5: grpo_k2 kept only as a labelled identity check; issue 31: on one seed"),
    ),
)

_GRPO = Arm("grpo")
COMPARISONS = {
    "no-kl": Pair(Arm("grpo_no_kl"), _GRPO, ("method", "kl_coef"), "no KL anchor against GRPO's reverse-KL anchor",
                  ("nokl-train-higher", "nokl-test-lower", "nokl-passn-lower")),
    "forward-kl": Pair(Arm("grpo_forward_kl"), _GRPO, ("method", "kl_estimator"),
                       "the anchor's estimator: forward KL against GRPO's reverse KL (same beta)",
                       ("fkl-passn-higher", "fkl-no-pass1-gain")),
    "k2-identity": Pair(Arm("grpo_k2"), _GRPO, ("method", "kl_estimator"),
                        "the anchor's estimator: k2, whose gradient is GRPO's (an identity check)",
                        ("grpo-k2-identity",)),
}
"""The paired comparisons of the rows above (`rlvr_lib.study.comparisons`): each baseline against ``grpo`` at
GRPO's lr (``grpo_forward_kl``'s own pick is 3.3e-5: its arm here is ``grpo_forward_kl@grpo-lr``)."""
