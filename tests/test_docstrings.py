"""The library's prose stays short and free of history: every module docstring is at most about 30 lines (derivations
and measurements live in docs/), and no docstring or comment cites an issue number (history belongs to git)."""

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted((ROOT / "rlvr_lib").rglob("*.py"))
MAX_MODULE_DOCSTRING_LINES = 32
""""About 30 lines": a module docstring says what the module is, its formulas and its departures from the paper."""
ISSUE = re.compile(r"\bissues? #?\d+", flags=re.I)


def _docstrings(tree: ast.AST):
    """(line, text) of the module's, every class's and every function's docstring."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                yield getattr(node, "lineno", 1), doc


def _comments(source: str):
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string


def test_there_are_modules():
    assert len(MODULES) > 50  # an empty parametrisation below would pass silently


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(ROOT)) for p in MODULES])
def test_module_docstrings_are_short(path):
    doc = ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""
    lines = len(doc.strip().splitlines())
    assert lines <= MAX_MODULE_DOCSTRING_LINES, (
        f"{path.relative_to(ROOT)}: module docstring of {lines} lines; keep what it is, the formulas and the "
        f"departures (at most {MAX_MODULE_DOCSTRING_LINES}) and move the rest to docs/")


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(ROOT)) for p in MODULES])
def test_no_docstring_or_comment_cites_an_issue(path):
    source = path.read_text()
    found = [(line, m.group(0)) for line, text in [*_docstrings(ast.parse(source)), *_comments(source)]
             for m in ISSUE.finditer(text)]
    assert not found, f"{path.relative_to(ROOT)}: issue numbers in docstrings or comments {found[:5]}"


def test_the_checks_fail_on_what_they_forbid(tmp_path):
    source = '"""' + "line\n" * 40 + '"""\n# see issue 12\nx = 1  # fine\n'
    doc = ast.get_docstring(ast.parse(source), clean=False)
    assert len(doc.strip().splitlines()) > MAX_MODULE_DOCSTRING_LINES
    assert [m.group(0) for _, t in _comments(source) for m in ISSUE.finditer(t)] == ["issue 12"]


DOCS = ROOT / "docs"


def test_every_docs_page_the_code_names_exists_and_the_index_lists_every_page():
    named = {m.group(0) for p in MODULES for m in re.finditer(r"docs/[\w./-]+\.md", p.read_text())}
    assert named, "the docstrings link their documentation pages"
    assert sorted(n for n in named if not (ROOT / n).exists()) == []
    index = (DOCS / "README.md").read_text()
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")} - {"README.md", "departures.md", "study/README.md"}
    assert sorted(p for p in pages if f"({p})" not in index) == []
