"""docs/extending.md's worked example runs as written: every ```python block of the page, in order, in one namespace.

The blocks carry their own checks (the method's advantages against its formula, the task's verifier on a right and a
wrong answer, two training steps on the embedded policy); this test also checks what they leave behind, so a block
that stops checking fails here. The method and the task they register are unregistered afterwards.

The papers' pages (docs/papers/): each has its sections, links its notebook, names its claims module and says how
many claims and measurements that module pre-registered, as the module does; its departures are numbered 1..n.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "extending.md"
BLOCK_RE = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def code_blocks(text: str) -> list[str]:
    """The page's ```python blocks, in order."""
    return BLOCK_RE.findall(text)


@pytest.fixture
def restored_registries():
    from rlvr_lib.methods import METHODS
    from rlvr_lib.tasks import TASKS

    methods, tasks = dict(METHODS), dict(TASKS)
    yield
    METHODS.clear(), METHODS.update(methods)
    TASKS.clear(), TASKS.update(tasks)


def test_the_page_has_the_worked_example_blocks():
    blocks = code_blocks(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) >= 5, f"{PAGE.name} has {len(blocks)} python blocks"
    joined = "\n".join(blocks)
    for needed in ("register_method(", "register_task(", "Trainer(", ".verify("):
        assert needed in joined, f"{PAGE.name}'s code blocks never call {needed}"


def test_extending_page_runs_and_its_method_and_task_behave(restored_registries):
    from rlvr_lib.methods import METHODS
    from rlvr_lib.tasks import TASKS

    module = types.ModuleType("docs_extending")  # a real module: dataclasses look their class's module up
    sys.modules[module.__name__] = module
    namespace = module.__dict__
    try:
        for i, block in enumerate(code_blocks(PAGE.read_text(encoding="utf-8"))):
            try:
                exec(compile(block, f"{PAGE.name}[block {i}]", "exec"), namespace)
            except Exception as err:  # name the block that failed
                raise AssertionError(f"{PAGE.name}, python block {i} failed: {err!r}\n{block}") from err
    finally:
        del sys.modules[module.__name__]

    # the method: registered, and its advantages are GRPO's times the hard-group factor
    assert "hard_group_bonus" in METHODS and "times_digit" in TASKS
    advantages, grpo = namespace["advantages"], namespace["grpo"]
    rewards = namespace["batch"].rewards
    expected = grpo * torch.tensor([1 + 2.0 * (1 - rewards[:4].mean())] * 4 + [1 + 2.0 * (1 - rewards[4:].mean())] * 4)
    assert torch.allclose(advantages, expected)
    assert not torch.allclose(advantages, grpo)  # the hook changed GRPO's advantages
    # with bonus 0 the method is GRPO
    from rlvr_lib.methods import build_method, method_config

    zero = build_method(method_config("hard_group_bonus", method_options={"bonus": 0.0}))
    assert torch.allclose(zero.advantages(namespace["batch"]), grpo)

    # the task: the verifier scores right and wrong answers
    assert (namespace["right"].reward, namespace["wrong"].reward) == (1.0, 0.0)

    # the run: two steps, the method's factor logged each step as its formula says, the weights moved
    history = namespace["history"]
    assert len(history) == 2
    for row in history:
        assert row["hard_group_factor"] == pytest.approx(1 + 2.0 * (1 - row["reward_mean"]), abs=1e-6)
    model, before = namespace["model"], namespace["before"]
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


# ------------------------------------------------------------------ the papers' pages name their notebook and claims
PAPER_PAGES = {"grpo.md": "nb01_grpo", "baselines.md": "nb02_baselines", "nudgerl.md": "nb03_nudgerl",
               "3po.md": "nb04_3po", "sage.md": "nb05_sage", "vigor.md": "nb06_vigor",
               "head-to-head.md": "nb07_head_to_head", "discovery.md": "nb08_discovery"}
"""Each reproduction's page under docs/papers/ and the claims module of its notebook."""
COUNTS_RE = re.compile(r"The (\d+) pre-registered claims(?:(?:,| and) (\d+) measurements?)?")
SECTIONS = ("## The idea", "## Our translation", "## Settings", "## The paper's tables we reproduce",
            "## Claims and figures", "## Departures")


@pytest.mark.parametrize("page, module", sorted(PAPER_PAGES.items()))
def test_each_paper_page_names_its_notebook_and_claims_module_as_they_are(page, module):
    import importlib

    text = (ROOT / "docs" / "papers" / page).read_text(encoding="utf-8")
    for heading in SECTIONS:
        assert re.search(rf"^{re.escape(heading)}$", text, flags=re.M), f"{page} has no '{heading}' section"
    registry = importlib.import_module(f"rlvr_lib.study.claims.{module}").REGISTRY
    assert f"`rlvr_lib/study/claims/{module}.py`" in text, f"{page} does not name its claims module {module}"
    assert f"../notebooks/{registry.notebook}.ipynb" in text, f"{page} does not link notebook {registry.notebook}"
    assert (ROOT / "notebooks" / f"{registry.notebook}.ipynb").is_file()
    counts = COUNTS_RE.search(text)
    assert counts, f"{page} does not say how many claims its notebook pre-registered"
    assert int(counts.group(1)) == len(registry.claims), (page, counts.group(0), len(registry.claims))
    assert int(counts.group(2) or 0) == len(registry.measurements), (page, counts.group(0), len(registry.measurements))
    departures = text.split("\n## Departures\n", 1)[1]
    numbers = [int(n) for n in re.findall(r"^(\d+)\. ", departures, flags=re.M)]
    assert numbers and numbers == list(range(1, len(numbers) + 1)), f"{page}'s departures are not numbered 1..n"


def test_every_paper_page_is_checked():
    pages = {p.name for p in (ROOT / "docs" / "papers").glob("*.md")} - {"index.md"}
    assert pages == set(PAPER_PAGES), pages ^ set(PAPER_PAGES)
