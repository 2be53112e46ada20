"""Every "issue N" the code, the notebooks, the configs or the docs cite has an entry in docs/decisions.md, so a
reader can follow it (the issue tracker is not part of the repository)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CITED = re.compile(r"\b[Ii]ssues? (\d+)")
SOURCES = ["rlvr_lib/**/*.py", "notebooks/**/*.ipynb", "configs/**/*", "docs/**/*.md", "README.md"]


def cited_issues() -> dict[int, str]:
    """Issue number -> one file citing it."""
    out: dict[int, str] = {}
    for pattern in SOURCES:
        for path in ROOT.glob(pattern):
            if path.is_file() and path.name != "decisions.md":
                for n in CITED.findall(path.read_text(errors="replace")):
                    out.setdefault(int(n), str(path.relative_to(ROOT)))
    return out


def listed_issues() -> set[int]:
    rows = re.findall(r"^\| (\d+) \|", (ROOT / "docs" / "decisions.md").read_text(), flags=re.M)
    return {int(n) for n in rows}


def test_every_cited_issue_has_an_entry():
    cited = cited_issues()
    assert cited, "no citation found: the pattern or the globs are wrong"
    missing = {n: f for n, f in cited.items() if n not in listed_issues()}
    assert not missing, f"issues cited but not in docs/decisions.md (issue: a file citing it): {missing}"


def test_the_pattern_finds_a_citation(tmp_path):
    assert CITED.findall("changed='issue 31: GRPO at ...'; see issues 55") == ["31", "55"]
