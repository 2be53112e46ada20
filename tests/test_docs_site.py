"""The documentation site's configuration (mkdocs.yml): its nav holds every page and every notebook, its API pages
every public module, and the docs extra is installed with dev.

The strict build itself (``make docs-build``) is a stage of ``make test``, not a test here: it takes tens of seconds.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# The index GitHub shows when browsing docs/; on the site, index.md and the nav do its job (mkdocs.yml, exclude_docs).
EXCLUDED = {"README.md"}


def _config() -> dict:
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text())


def _nav_paths(nav) -> list[str]:
    """Every page path in a nav (nested lists of {title: path or list} or bare paths), in order."""
    out: list[str] = []
    for item in nav:
        values = list(item.values()) if isinstance(item, dict) else [item]
        for value in values:
            if isinstance(value, list):
                out += _nav_paths(value)
            elif not re.match(r"[a-z]+://", value):  # an external link is no page
                out.append(value)
    return out


def _doc_pages() -> set[str]:
    """Every Markdown page under docs/ (docs/notebooks links to notebooks/, which holds none); hidden files, which
    MkDocs leaves out, are no page."""
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    return {p for p in pages if not any(part.startswith(".") for part in p.split("/"))} - EXCLUDED


def test_nav_lists_every_page_and_every_notebook_once():
    config = _config()
    assert config["docs_dir"] == "docs" and config["strict"] is True
    nav = _nav_paths(config["nav"])
    assert len(nav) == len(set(nav)), sorted(p for p in nav if nav.count(p) > 1)
    # A hidden notebook (papermill's file while it runs, a failed execution's copy) is no page: MkDocs leaves it out.
    notebooks = {f"notebooks/{p.name}" for p in (ROOT / "notebooks").glob("*.ipynb") if not p.name.startswith(".")}
    assert notebooks, "notebooks/ holds no notebook"
    missing = (_doc_pages() | notebooks) - set(nav)
    assert not missing, f"pages and notebooks missing from mkdocs.yml's nav: {sorted(missing)}"
    absent = [p for p in nav if not (DOCS / p).is_file()]
    assert not absent, f"mkdocs.yml's nav names files that do not exist under docs/: {absent}"
    assert nav[0] == "index.md"


def test_only_the_github_index_is_excluded_from_the_site():
    patterns = [line.strip() for line in _config()["exclude_docs"].splitlines() if line.strip()]
    assert patterns == [f"/{name}" for name in sorted(EXCLUDED)]
    assert all((DOCS / name).is_file() for name in EXCLUDED)


def test_notebooks_are_rendered_from_notebooks_as_stored():
    link = DOCS / "notebooks"
    assert link.is_symlink() and link.resolve() == (ROOT / "notebooks").resolve()
    plugins = {next(iter(p)) if isinstance(p, dict) else p: p for p in _config()["plugins"]}
    jupyter = plugins["mkdocs-jupyter"]["mkdocs-jupyter"]
    assert jupyter["execute"] is False  # the site shows the stored outputs; nothing is run while building


def _public_modules() -> set[str]:
    out = set()
    for path in (ROOT / "rlvr_lib").rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__main__" or any(p.startswith("_") and p != "__init__" for p in parts):
            continue
        out.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def test_api_reference_covers_every_public_module():
    pages = sorted((DOCS / "api").glob("*.md"))
    targets = [m for page in pages for m in re.findall(r"^::: (\S+)$", page.read_text(), re.M)]
    assert len(targets) == len(set(targets))
    modules = _public_modules()
    assert not modules - set(targets), f"modules missing from docs/api: {sorted(modules - set(targets))}"
    assert not set(targets) - modules, f"docs/api names modules that do not exist: {sorted(set(targets) - modules)}"
    nav = _nav_paths(_config()["nav"])
    assert {f"api/{p.name}" for p in pages} <= set(nav)


def test_docs_extra_is_installed_with_dev():
    """`make test` builds the site, so every install that names dev (EXTRAS=dev,notebooks, the GPU and vLLM sets)
    holds the docs group."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["docs"] and set(extras["docs"]) <= set(extras["dev"])
    assert {re.match(r"[A-Za-z0-9._-]+", r).group() for r in extras["docs"]} == {
        "mkdocs", "mkdocs-material", "mkdocs-jupyter", "mkdocstrings"}


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("target, needle", [("docs", "-m mkdocs serve --strict"),
                                            ("docs-build", "-m mkdocs build --strict")])
def test_make_targets_build_the_site(target, needle):
    done = subprocess.run(["make", "--no-print-directory", "-n", "-o", "install", target], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert needle in done.stdout, done.stdout
