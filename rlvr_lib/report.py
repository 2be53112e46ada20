"""The README's results section, rendered from what is committed under ``results/``.

``python -m rlvr_lib.report`` rewrites the part of README.md between the
``<!-- results:start -->`` and ``<!-- results:end -->`` markers; a test checks the
README matches, so the table can never drift from the results it quotes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


from rlvr_lib.experiments import aggregate_seeds, format_ci, load_runs, results_root

START, END = "<!-- results:start -->", "<!-- results:end -->"
README = Path(__file__).resolve().parent.parent / "README.md"


def _calibration_section(root: Path) -> list[str]:
    path = root / "testbed" / "calibration.json"
    if not path.exists():
        return ["*No calibration committed yet (`python -m rlvr_lib calibrate`).*"]
    report = json.loads(path.read_text())
    lines = [
        f"**Testbed calibration** (`results/testbed/calibration.json`, {report['config']['problems_per_family']} problems "
        f"x {report['config']['samples']} samples per family):",
        "",
        "| target | value | bound | met |",
        "|---|---|---|---|",
    ]
    lines += [f"| {name} | {t['value']} | {t['bound']} | {'yes' if t['met'] else '**no**'} |" for name, t in report["targets"].items()]
    return lines


def _method_section(root: Path, experiment: str, title: str) -> list[str]:
    records = load_runs(experiment, root)
    if not records:
        return [f"*No `{experiment}` runs committed yet.*"]
    by_name: dict[str, list] = {}
    for r in records:
        by_name.setdefault(r.name, []).append(r)
    kmax = max(int(k) for k in records[0].final["average"]["pass_at_k"])
    lines = [
        f"**{title}** (`results/{experiment}/`; mean [95% CI] over seeds, average of in-distribution families):",
        "",
        f"| run | seeds | pass@1 | pass@8 | pass@{kmax} | strategy entropy | malformed | modes/problem |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, recs in sorted(by_name.items(), key=lambda kv: (kv[0] != "base", kv[0])):
        avg = [r.final["average"] for r in recs]

        def cell(values):
            return format_ci(aggregate_seeds(values))

        lines.append(
            f"| {name} | {len(recs)} | {cell([a['pass_at_k']['1'] for a in avg])} | {cell([a['pass_at_k']['8'] for a in avg])} "
            f"| {cell([a['pass_at_k'][str(kmax)] for a in avg])} | {cell([a['strategy_entropy'] for a in avg])} "
            f"| {cell([a['malformed_rate'] for a in avg])} | {cell([a['mean_modes'] for a in avg])} |"
        )
    return lines


SECTIONS = (("grpo_baseline_full", "GRPO baseline", "01_grpo_baseline"),)


def render(root: str | Path | None = None) -> str:
    """The markdown of the results section (without the markers)."""
    root = results_root(root)
    lines = _calibration_section(root)
    for experiment, title, notebook in SECTIONS:
        lines += [""] + _method_section(root, experiment, title)
        executed = root / "notebooks" / "full" / f"{notebook}.ipynb"
        if executed.exists():
            lines += ["", f"Claims table and figures: `results/notebooks/full/{notebook}.ipynb`."]
    return "\n".join(lines)


def update_readme(readme: Path = README, root: str | Path | None = None) -> bool:
    """Rewrite the README's results section; returns whether it changed."""
    text = readme.read_text()
    if START not in text or END not in text:
        raise ValueError(f"{readme} has no '{START}' ... '{END}' section to fill")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{START}\n{render(root)}\n{END}{tail}"
    if new != text:
        readme.write_text(new)
    return new != text


if __name__ == "__main__":
    changed = update_readme()
    print("README results section", "updated" if changed else "already up to date")
    sys.exit(0)
