"""The README's results section is exactly what `rlvr_lib.report` renders from results/."""

from rlvr_lib.report import END, README, START, render


def test_readme_results_section_matches_committed_results():
    text = README.read_text()
    section = text.split(START, 1)[1].split(END, 1)[0].strip("\n")
    assert section == render(), "run `python -m rlvr_lib.report` after changing results/"
