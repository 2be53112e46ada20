"""The departures from the papers, on the papers' pages (docs/papers/): the common departures and "Not run" on the
index, one numbered "Departures" list per paper on its page; every path, notebook and module the pages cite exists."""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

from rlvr_lib.study.claims.tables import PAPER_NAMES

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "papers"
INDEX = PAGES / "index.md"
PAPER_PAGES = {"NudgeRL": "nudgerl.md", "3PO": "3po.md", "SAGE": "sage.md", "VIGOR": "vigor.md"}
"""Each paper's page, whose "Departures" section lists its departures."""
OTHER_PAGES = ("grpo.md", "baselines.md", "head-to-head.md", "discovery.md")
DEPARTURES = "Departures"
NOT_RUN = "Not run"
CITED_DIRS = ("rlvr_lib", "results", "configs", "notebooks", "tests", "docs")
PATH_RE = re.compile(rf"(?<![\w./-])((?:{'|'.join(CITED_DIRS)})/[\w.*+/-]*[\w*])")
"""A repository path: one of the cited top-level directories, then anything up to the last word character."""
NOTEBOOK_FILE_RE = re.compile(r"(?<![\w])(\d\d_[a-z0-9][a-z0-9_]*)\.ipynb")
NOTEBOOK_NUMBER_RE = re.compile(r"[Nn]otebooks? (\d\d)(?:-(\d\d))?\b")
DOTTED_RE = re.compile(r"`(rlvr_lib(?:\.\w+)+)`")


class DOC:
    """What the messages name: the papers' pages."""

    name = "docs/papers/*.md"


def departures_text() -> str:
    """The papers' pages as one text whose level-2 sections are the index's ("Common departures", "Not run"), then
    one per paper (its page's "Departures" section under the paper's name); every page follows under "The pages",
    its headings demoted a level, so that the path, notebook and module checks read all of them."""
    assert INDEX.is_file(), f"{INDEX} is missing"
    parts = [INDEX.read_text(encoding="utf-8")]
    for paper, page in PAPER_PAGES.items():
        sections = _sections((PAGES / page).read_text(encoding="utf-8"))
        assert DEPARTURES in sections, f"{page} has no '## {DEPARTURES}' section; sections: {list(sections)}"
        parts.append(f"## {paper}\n{sections[DEPARTURES]}")
    parts.append("## The pages")
    for page in (*PAPER_PAGES.values(), *OTHER_PAGES):
        assert (PAGES / page).is_file(), f"{PAGES / page} is missing"
        parts.append(re.sub(r"^## ", "### ", (PAGES / page).read_text(encoding="utf-8"), flags=re.M))
    return "\n".join(parts)


@pytest.fixture(scope="module")
def text() -> str:
    return departures_text()


def _sections(text: str) -> dict[str, str]:
    """Level-2 heading -> the text under it, up to the next level-2 heading."""
    parts = re.split(r"^## +(.+?)\s*$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def _numbered(body: str) -> list[int]:
    return [int(n) for n in re.findall(r"^(\d+)\. ", body, flags=re.M)]


def test_one_section_per_paper_and_not_run(text):
    sections = _sections(text)
    for name in ("Common departures", *PAPER_NAMES, NOT_RUN):
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


def test_no_issue_references(text):
    """The pages say what was decided, not where it was asked: no issue numbers."""
    assert not re.search(r"\bissues? #?\d+", text, flags=re.I), re.findall(r".{0,40}\bissues? #?\d+", text, flags=re.I)


def test_the_pages_cite_nothing_outside_the_repository(text):
    """The papers' summaries, settings and tables are on the pages: no reference to the workspace's PAPERS.md."""
    assert "PAPERS.md" not in text


# ------------------------------------------------------------------ every table and figure of PAPERS.md is accounted for
PAPERS_MD = ROOT.parent / "shared" / "PAPERS.md"
"""The workspace's restatement of the four papers (its tables and figures; outside the repository, beside it)."""
ITEM_ID_RE = re.compile(r"(T main|T\d+|Fig \d+|T)(?=[\s:,(]|$)")
TAG_RE = re.compile(r"\[paper item: ([^\]<]+)\]")  # "<paper>": the format, not a tag
ALIASES = {("VIGOR", "Raw ||g|| falls with length"): ("claim", "gradient norm vs length"),
           ("VIGOR", "Cost"): ("measurement", "cost-vigor")}
"""PAPERS.md entries whose rows name them in other words: the claim's ``paper`` field, or a measurement's id."""


def item_id(text: str) -> str:
    """The id of a PAPERS.md "Tables and figures" entry (or of a claim row's ``paper`` field): its leading table or
    figure number (``T1``, ``T main``, ``Fig 4``, ``T``), else its words up to the first ':' or ' ('."""
    text = " ".join(text.split())
    m = ITEM_ID_RE.match(text)
    return m.group(1) if m else re.split(r":| \(", text, maxsplit=1)[0].strip()


def _norm(item: str) -> str:
    """Case and a plural 's' do not tell two ids apart ("Ablations" and a row's "ablation (3B)")."""
    item = item.lower()
    return item[:-1] if item.endswith("s") and not item.endswith("ss") else item


def papers_items(papers: str) -> list[tuple[str, str]]:
    """``(paper, id)`` of every bullet under "Tables and figures to reproduce" in each numbered paper section."""
    out = []
    for section in re.split(r"^## (?=\d+\. |[A-Z])", papers, flags=re.M)[1:]:
        head = re.match(r"\d+\. (\S+)", section)
        if head is None or "Tables and figures to reproduce" not in section:
            continue
        listed = section.split("Tables and figures to reproduce", 1)[1]
        out += [(head.group(1), item_id(b)) for b in re.findall(r"^- (.+)$", listed, flags=re.M)]
    return out


def _registries():
    import importlib

    from rlvr_lib.study.claims import REGISTRIES, Registry

    for module in REGISTRIES.values():
        mod = importlib.import_module(f"rlvr_lib.study.claims.{module}")
        yield from (v for v in vars(mod).values() if isinstance(v, Registry))


def claim_items() -> set[tuple[str, str]]:
    """``(paper, id)`` of every claim row of every notebook (its ``source`` and :func:`item_id` of its ``paper``)."""
    return {(c.source, _norm(item_id(c.paper))) for reg in _registries() for c in reg.claims}


def not_run_items(doc: str) -> list[tuple[str, str]]:
    """``(paper, id)`` of every ``[paper item: <paper> <id>]`` tag of the "Not run" section."""
    tags = TAG_RE.findall(_sections(doc)[NOT_RUN])
    return [tuple(t.split(" ", 1)) for t in tags]


def uncovered(papers: str, doc: str) -> list[tuple[str, str]]:
    """PAPERS.md entries neither measured by a claim row (or an :data:`ALIASES` row) nor listed as not run."""
    rows = claim_items()
    listed = {(p, _norm(i)) for p, i in not_run_items(doc)}
    return [(p, i) for p, i in papers_items(papers)
            if (p, _norm(i)) not in rows and (p, _norm(i)) not in listed and (p, i) not in ALIASES]


@pytest.fixture(scope="module")
def papers() -> str:
    if not PAPERS_MD.is_file():
        pytest.skip(f"{PAPERS_MD} (the workspace's PAPERS.md) is not beside this checkout")
    return PAPERS_MD.read_text(encoding="utf-8")


def test_papers_md_is_parsed_into_its_tables_and_figures(papers):
    items = papers_items(papers)
    assert {p for p, _ in items} == set(PAPER_NAMES)
    for paper, want in {"NudgeRL": ["T1", "Fig 1", "Fig 3", "Fig 4", "Fig 5", "Ablations"],
                        "3PO": ["T1", "Fig 1", "Fig 3", "Fig 4", "Fig 5"],
                        "SAGE": ["T1", "T", "T2", "OOD", "Scale/generality"]}.items():
        assert [i for p, i in items if p == paper] == want
    assert ("VIGOR", "T main") in items and ("VIGOR", "3B on CodeContests") in items
    assert item_id("T1: 44.04 vs 42.99 (OLMo3-7B)") == "T1" and item_id("T (BNPO rows)") == "T"
    assert _norm(item_id("ablation (3B)")) == _norm("Ablations")


def test_every_table_and_figure_of_papers_md_has_a_claim_row_or_is_listed_not_run(papers, text):
    assert not uncovered(papers, text), (
        f"PAPERS.md entries with neither a claim row (its paper field naming the table or figure) nor a "
        f"'[paper item: <paper> <id>]' item in {DOC.name}'s '{NOT_RUN}' section: {uncovered(papers, text)}")
    # the aliases name rows that exist
    rows = {(kind, value) for reg in _registries()
            for kind, value in [*(("claim", c.paper) for c in reg.claims), *(("measurement", m.id) for m in reg.measurements)]}
    assert all(target in rows for target in ALIASES.values()), [t for t in ALIASES.values() if t not in rows]
    # a table or figure that is neither fails the check
    extra = papers.replace("- Fig 5: eps_high sweep", "- Fig 9: a figure no row measures\n- Fig 5: eps_high sweep")
    assert uncovered(extra, text) == [("NudgeRL", "Fig 9")]
    # and one the page lists as not run passes it
    listed = text.replace("[paper item: 3PO Fig 4]", "[paper item: 3PO Fig 4] [paper item: NudgeRL Fig 9]")
    assert uncovered(extra, listed) == []


def test_each_not_run_item_says_so_and_what_running_it_needs(papers, text):
    body = _sections(text)[NOT_RUN]
    items = re.split(r"^\d+\. ", body, flags=re.M)[1:]
    for item in items:
        assert item.startswith("**NOT RUN: "), item[:80]
        assert re.search(r"\b[Nn]eeds?\b", item), f"a not-run item that does not say what running it needs: {item[:80]}"
    known = set(papers_items(papers))
    assert [t for t in not_run_items(text) if t not in known] == [], "a tag that names no PAPERS.md entry"
    # the results issue 56 found missing, each one an item
    for words in ("3PO's code result (Fig 4", "VIGOR's code row", "VIGOR's code -> math transfer",
                  "SAGE's long-reasoning row", "SAGE's model-size rows", "VIGOR's MMLU-Pro measure",
                  "NudgeRL T1's Olmo3-7B column", "3PO T1's Qwen2.5-Math-7B column", "VIGOR's 3B column"):
        assert sum(item.startswith(f"**NOT RUN: {words}") for item in items) == 1, words
