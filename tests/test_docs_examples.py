"""docs/extending.md's worked example runs as written: every ```python block of the page, in order, in one namespace.

The blocks carry their own checks (the method's advantages against its formula, the task's verifier on a right and a
wrong answer, two training steps on the embedded policy); this test also checks what they leave behind, so a block
that stops checking fails here. The method and the task they register are unregistered afterwards.
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
