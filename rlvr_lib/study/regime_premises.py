"""The premises a claims row can need and whether each is measured present on a regime.

Kept apart from `rlvr_lib.study.regimes` (which trains the discovery gate's arms through the run cache) so that
the claims package, which the run cache's pipeline imports, can read them without an import cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlvr_lib.tasks import discovery
from rlvr_lib.validation import check

__all__ = ["GATE_FILE", "PREMISES", "REGIMES_FILE", "load_regimes", "premise_status"]

REGIMES_FILE = Path(__file__).resolve().parents[2] / "results" / "testbed" / "regimes.json"
"""Both regimes' premise measurements: the retention check and the discovery designs (`rlvr_lib.study.regimes`)."""
GATE_FILE = REGIMES_FILE.with_name("discovery_gate.json")
"""The discovery regime's oracle-exploration gate: its conditions, outcome and arms (``regimes --gate``)."""
PREMISES = {
    "discovery": "a strategy that earns reward on the RL pool is sampled too seldom for GRPO to learn it",
    "retention": "GRPO drives out of the policy a strategy that held-out problems need",
    "none": "nothing beyond RL training itself (e.g. a gain over the base policy, a measurement at the base)",
}
"""The premises a claims row can need (`rlvr_lib.study.claims.Claim.premise`)."""


def load_regimes(testbed: str | Path | None = None) -> dict[str, Any]:
    """``regimes.json`` of the ``testbed`` folder (default: :data:`REGIMES_FILE`'s) with the gate of
    ``discovery_gate.json`` beside it as ``["discovery"]["gate"]`` (None without one): the file's oracle-exploration
    gate (``{"gate": {arms, conditions, passed}, seeds, steps, design}``) as one flat dict; {} when not measured."""
    import json

    folder = Path(testbed) if testbed is not None else REGIMES_FILE.parent
    path = folder / REGIMES_FILE.name
    if not path.is_file():
        return {}
    regimes = json.loads(path.read_text())
    gate = folder / GATE_FILE.name
    if "discovery" in regimes:
        report = json.loads(gate.read_text()) if gate.is_file() else None
        regimes["discovery"]["gate"] = None if report is None else {
            **report["gate"], **{k: v for k, v in report.items() if k != "gate"}}
    return regimes


def premise_status(regime: str, premise: str, regimes: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Whether ``premise`` (:data:`PREMISES`) is measured present on ``regime`` (`rlvr_lib.tasks.discovery.REGIMES`).

    Reads ``regimes`` (default: :func:`load_regimes`). The discovery premise on the retention regime is the fresh
    rare-reward check (:func:`retention_premise`); on the discovery regime, the gate. The retention premise on
    the retention regime is notebook 00's dynamics (GRPO lowers rare_mix pass@256), present there; ``none``
    always holds.

    Returns:
        ``{"present": True | False | None (not measured yet), "measurement": str}``.
    """
    check(regime in discovery.REGIMES, "regime", regime, f"one of {list(discovery.REGIMES)}")
    check(premise in PREMISES, "premise", premise, f"one of {list(PREMISES)}")
    if premise == "none":
        return {"present": True, "measurement": "no premise beyond RL training"}
    if regimes is None:
        regimes = load_regimes()
    if regime == "retention":
        if premise == "retention":
            return {"present": True, "measurement": "GRPO lowers rare_mix pass@256 (notebook 00's dynamics)"}
        got = regimes.get("retention")
        if not got:
            return {"present": None, "measurement": "not measured"}
        return {"present": got["discovery_premise"] == "present",
                "measurement": f"hinted round earns reward on {got['share']:.2%} of fresh samples of the RL pool "
                               f"({got['correct']} of {got['samples']}; bound {got['bound']:.1%})"}
    gate = (regimes.get("discovery") or {}).get("gate")
    if premise == "retention":
        return {"present": None, "measurement": "not measured on the discovery regime"}
    if not gate:
        return {"present": None, "measurement": "the discovery gate has no outcome yet"}
    return {"present": bool(gate["passed"]), "measurement": "the discovery gate " +
            ("passed" if gate["passed"] else "failed")}
