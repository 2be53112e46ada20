"""The package's import graph (issue 30): no cycle, `rlvr_lib.eval` sits below the methods and the trainer, the
library never imports the study harness (`rlvr_lib.study`), and the top level holds only the library.

The graph is read from the source with `ast`, not by importing: every ``import`` statement of every
module under ``rlvr_lib/`` counts, at module level or inside a function (a function-level import is a
dependency that only waits to run). An edge goes to the module named: ``from a import b`` goes to
``a.b`` when that is a module, else to ``a``; the parent packages that Python also runs are not
edges (import-linter's reading). Imports through `importlib` with computed names are not seen.

There is no cycle: the test fails on any.
"""

from __future__ import annotations

import ast
import re
import graphlib
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "rlvr_lib"

def module_names(package_dir: Path) -> dict[str, Path]:
    """``{dotted module name: file}`` for every ``.py`` under ``package_dir`` (a package is its ``__init__``)."""
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported(node: ast.AST, package: str) -> list[str]:
    """The dotted names one import statement names (``from a import b`` gives ``a.b``; resolved later)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: strip level - 1 trailing parts of the importing package
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(parts + ([node.module] if node.module else []))
    return [f"{base}.{alias.name}" for alias in node.names]


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}``, from every import statement in each module's source."""
    modules = module_names(package_dir)
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _imported(node, package):
                while target and target not in modules:  # "a.b" that is a name in module "a", or outside the package
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(a, b) for a, targets in graph.items() for b in targets}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, ..., a]``, or None when the graph is acyclic."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as err:
        return err.args[1]
    return None


@pytest.fixture(scope="module")
def graph():
    return import_graph(PACKAGE_DIR)


def test_reader_sees_function_level_and_relative_imports(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .b import f\n")
    (pkg / "a.py").write_text("from pkg.sub import b\nimport json\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import x\n")
    graph = import_graph(pkg)
    assert edges(graph) == {("pkg.a", "pkg.sub.b"), ("pkg.sub", "pkg.sub.b"), ("pkg.sub.b", "pkg.a")}
    assert find_cycle(graph) is not None


def test_no_import_cycle(graph):
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_eval_imports_neither_methods_nor_the_trainer(graph):
    found = {(a, b) for a, b in edges(graph) if a.startswith("rlvr_lib.eval")
             and b.startswith(("rlvr_lib.methods", "rlvr_lib.trainer"))}
    assert found == set(), "rlvr_lib.eval imports the methods or the trainer"


LIBRARY = ("algos", "backends", "config", "config_files", "cli_checks", "distributed", "eval", "files", "kernels",
           "lockfile", "lora", "methods", "plugins", "policy", "rewards", "rollout", "run", "schedules", "seeding",
           "tasks", "tracking", "trainer", "trainer_config", "validation")
"""The RL library: the top-level modules and packages of `rlvr_lib` outside the study harness. The harness,
`rlvr_lib.study` (run cache, claims, pipeline, report, reproduce, calibration, plots, bench, probes, ...), builds on
the library and may import it, never the other way round."""

OUTSIDE_THE_LIBRARY = {
    "__init__": "the package itself: its version, nothing imported",
    "__main__": "the library's command line (python -m rlvr_lib pretrain / train / evaluate): it imports the library "
                "only (the study's commands are python -m rlvr_lib.study), and nothing imports it",
    "study": "the study harness",
}
"""The only other names the top level of `rlvr_lib` holds, with why each stays there."""


def test_the_top_level_holds_only_the_library(graph):
    top = {m.split(".")[1] for m in graph if m.count(".") >= 1} | {"__init__"}
    assert top - set(LIBRARY) - set(OUTSIDE_THE_LIBRARY) == set(), "a top-level module that is neither library nor listed"
    assert set(OUTSIDE_THE_LIBRARY) <= top  # every name is a real module
    assert not any(b == "rlvr_lib.__main__" for _, b in edges(graph))  # the command line is no one's dependency


def test_the_library_never_imports_the_study_harness(graph):
    def in_library(module: str) -> bool:
        parts = module.split(".")
        return len(parts) > 1 and parts[1] in LIBRARY

    assert {m.split(".")[1] for m in graph if m.count(".") >= 1} >= set(LIBRARY)  # every name is a real module
    found = sorted((a, b) for a, b in edges(graph) if in_library(a) and not in_library(b) and b != "rlvr_lib")
    assert found == [], f"library modules import the study harness: {found}"


def test_the_command_line_and_the_entry_point_never_reach_the_study(graph):
    """``python -m rlvr_lib`` and `rlvr_lib.run` reach no module of `rlvr_lib.study`, directly or through what they
    import (a method name goes from the command line to the loss without entering the study)."""
    for start in ("rlvr_lib.__main__", "rlvr_lib.run"):
        reached, todo = set(), [start]
        while todo:
            for target in graph[todo.pop()] - reached:
                reached.add(target)
                todo.append(target)
        found = sorted(m for m in reached if m == "rlvr_lib.study" or m.startswith("rlvr_lib.study."))
        assert found == [], f"{start} reaches the study harness: {found}"


def test_the_reachability_check_sees_a_study_import(tmp_path):
    """The check above fails on a command line that imports the study through a library module."""
    pkg = tmp_path / "rlvr_lib"
    (pkg / "study").mkdir(parents=True)
    for name in ("__init__.py", "study/__init__.py", "study/runs.py"):
        (pkg / name).write_text("")
    (pkg / "__main__.py").write_text("def main():\n    from rlvr_lib.run import train\n")
    (pkg / "run.py").write_text("def train():\n    from rlvr_lib.study.runs import cached_run\n")
    with pytest.raises(AssertionError, match="rlvr_lib.__main__ reaches the study harness: \\['rlvr_lib.study.runs'\\]"):
        test_the_command_line_and_the_entry_point_never_reach_the_study(import_graph(pkg))


def test_readme_layout_names_every_top_level_and_study_module():
    """README's layout section matches the tree: each module (``name.py``) and package (``name/``) at the top level
    of `rlvr_lib` and of `rlvr_lib.study` is named in it."""
    text = (PACKAGE_DIR.parent / "README.md").read_text()
    start = text.index("```\nrlvr_lib/\n")
    layout = text[start:text.index("```", start + 3)]

    def entries(folder: Path) -> set[str]:
        return {p.name if p.suffix == ".py" else f"{p.name}/" for p in folder.iterdir()
                if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").is_file()}

    missing = sorted(e for folder in (PACKAGE_DIR, PACKAGE_DIR / "study") for e in entries(folder)
                     if not re.search(rf"(?<![\w/.]){re.escape(e)}", layout))
    assert missing == [], f"README's layout section does not name {missing}"
