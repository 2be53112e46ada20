"""docs/departures.md: one section per paper and a "Not run" section, and every path and notebook it cites exists."""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

from rlvr_lib.study.claims.tables import PAPER_NAMES

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "departures.md"
NOT_RUN = "Not run"
CITED_DIRS = ("rlvr_lib", "results", "configs", "notebooks", "tests", "docs")
PATH_RE = re.compile(rf"(?<![\w./-])((?:{'|'.join(CITED_DIRS)})/[\w.*+/-]*[\w*])")
"""A repository path: one of the cited top-level directories, then anything up to the last word character."""
NOTEBOOK_FILE_RE = re.compile(r"(?<![\w])(\d\d_[a-z0-9][a-z0-9_]*)\.ipynb")
NOTEBOOK_NUMBER_RE = re.compile(r"[Nn]otebooks? (\d\d)(?:-(\d\d))?\b")
DOTTED_RE = re.compile(r"`(rlvr_lib(?:\.\w+)+)`")


@pytest.fixture(scope="module")
def text() -> str:
    assert DOC.is_file(), f"{DOC} is missing"
    return DOC.read_text(encoding="utf-8")


def _sections(text: str) -> dict[str, str]:
    """Level-2 heading -> the text under it, up to the next level-2 heading."""
    parts = re.split(r"^## +(.+?)\s*$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def _numbered(body: str) -> list[int]:
    return [int(n) for n in re.findall(r"^(\d+)\. ", body, flags=re.M)]


def test_one_section_per_paper_and_not_run(text):
    sections = _sections(text)
    for name in (*PAPER_NAMES, NOT_RUN):
        assert name in sections, f"no '## {name}' section in {DOC.name}; sections: {list(sections)}"
        items = _numbered(sections[name])
        assert items, f"section {name!r} has no numbered item"
        assert items == list(range(1, len(items) + 1)), f"section {name!r} is not numbered 1..n: {items}"


def test_cited_paths_exist(text):
    cited = sorted(set(PATH_RE.findall(text)))
    assert any(p.startswith("rlvr_lib/") for p in cited), "the page cites no rlvr_lib path"
    missing = [p for p in cited if not glob.glob(str(ROOT / p))]
    assert not missing, f"{DOC.name} cites paths that do not exist: {missing}"


def test_cited_notebooks_exist(text):
    notebooks = ROOT / "notebooks"
    names = set(NOTEBOOK_FILE_RE.findall(text))
    missing = [n for n in sorted(names) if not (notebooks / f"{n}.ipynb").is_file()]
    numbers = set()
    for first, last in NOTEBOOK_NUMBER_RE.findall(text):
        numbers.update(f"{n:02d}" for n in range(int(first), int(last or first) + 1))
    assert names or numbers, "the page cites no notebook"
    missing += [f"notebook {n}" for n in sorted(numbers) if not list(notebooks.glob(f"{n}_*.ipynb"))]
    assert not missing, f"{DOC.name} cites notebooks that are not under notebooks/: {missing}"


def _defines(source: str, name: str) -> bool:
    return re.search(rf"^\s*(?:def |class )?{re.escape(name)}\b\s*[(:=]", source, flags=re.M) is not None


def test_cited_modules_and_names_exist(text):
    """A dotted `rlvr_lib.a.b[.Name]` reference names a module file, then (optionally) a name it defines."""
    missing = []
    for ref in sorted(set(DOTTED_RE.findall(text))):
        parts = ref.split(".")
        for k in range(len(parts), 0, -1):
            base = ROOT.joinpath(*parts[:k])
            module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
            if module.is_file():
                rest = parts[k:]
                if len(rest) > 1 or (rest and not _defines(module.read_text(encoding="utf-8"), rest[0])):
                    missing.append(ref)
                break
        else:
            missing.append(ref)
    assert not missing, f"{DOC.name} names modules or attributes that do not exist: {missing}"


def test_issue_references_are_open_markers_only(text):
    """The only issue references are the "open (issue 56)" markers of departures whose fix has not landed."""
    stray = re.sub(r"open \(issue 56\)", "", text)
    assert not re.search(r"\bissues? #?\d+", stray, flags=re.I), re.findall(r".{0,40}\bissues? #?\d+", stray, flags=re.I)
    assert "open (issue 56)" in text
