"""The tutorials (`notebooks/tutorials/*.ipynb`): worked examples kept apart from the study's notebooks.

They are stored executed by papermill (every code cell completed), run in `make test`'s own ``tutorial`` stage (not
by nbval or the smoke run, which read `notebooks/*.ipynb` only), are pages of the documentation site and are linked
from the README. The notebook itself is executed by that stage; here its stored execution and its wiring are
checked, and its plug-in is imported and trained the way the notebook does it.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from rlvr_lib.study.reproduce import _notebooks_in

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted(p for p in (ROOT / "notebooks" / "tutorials").glob("*.ipynb") if not p.name.startswith("."))
YOUR_OWN_MODEL = ROOT / "notebooks" / "tutorials" / "your_own_model.ipynb"


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def test_the_worked_example_is_a_tutorial():
    assert YOUR_OWN_MODEL in TUTORIALS


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_a_tutorial_is_stored_executed_by_papermill(path):
    nb = json.loads(path.read_text())
    run = nb["metadata"].get("papermill", {})
    assert run.get("end_time") and not run.get("exception"), f"{path.name}: papermill did not finish it"
    statuses = [c.get("metadata", {}).get("papermill", {}).get("status") for c in nb["cells"] if c["cell_type"] == "code"]
    assert statuses and set(statuses) == {"completed"}, statuses
    errors = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert errors == []
    parameters = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(parameters) == 1, "one cell tagged `parameters` (papermill)"


def test_the_study_commands_leave_the_tutorials_to_their_stage():
    """`reproduce` (nbval, the smoke run, `make reproduce`) lists notebooks/*.ipynb only; the tutorial stage runs
    notebooks/tutorials/*.ipynb."""
    listed = _notebooks_in(ROOT / "notebooks")
    assert listed and not set(listed) & set(TUTORIALS)
    makefile = (ROOT / "Makefile").read_text()
    stage = re.search(r"^TEST_TUTORIAL_CMD = (.*?[^\\])$", makefile, re.M | re.S)
    assert stage and "notebooks/tutorials/*.ipynb" in stage.group(1) and "papermill" in stage.group(1)
    assert "stage $$? tutorial;" in makefile


def test_the_tutorials_are_pages_of_the_site_and_linked_from_the_readme():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    plugins = {next(iter(p)) if isinstance(p, dict) else p: p for p in config["plugins"]}
    include = plugins["mkdocs-jupyter"]["mkdocs-jupyter"]["include"]
    nav = json.dumps(config["nav"])
    for path in TUTORIALS:
        page = path.relative_to(ROOT).as_posix()  # docs/notebooks links to notebooks/
        assert any(Path(page).match(pattern) for pattern in include), (page, include)  # rendered as a notebook
        assert f'"{page}"' in nav, f"{page} is not in mkdocs.yml's nav"
    assert f"({YOUR_OWN_MODEL.relative_to(ROOT).as_posix()})" in (ROOT / "README.md").read_text()


def test_the_tutorial_uses_the_four_methods_a_plugin_logs_and_evaluation():
    code = "\n".join(_source(c) for c in _cells(YOUR_OWN_MODEL) if c["cell_type"] == "code")
    for needle in ('"nudgerl"', '"b3po"', '"sage"', '"vigor"', '"grpo_lenpen"', "LlamaConfig", "from tokenizers import",
                   "register_method(", "register_reward_func(", "import_plugins(", '"--import"', 'report_to=("tensorboard",)',
                   "eval_every=1", "EventAccumulator", "lora="):
        assert needle in code, needle


def _plugin_source() -> str:
    """The notebook's plug-in module: its ``%%writefile`` cell, less the magic line."""
    cells = [_source(c) for c in _cells(YOUR_OWN_MODEL) if _source(c).startswith("%%writefile")]
    assert len(cells) == 1
    return cells[0].split("\n", 1)[1]


def test_the_tutorials_plugin_trains_from_the_command_line(tmp_path, tiny_model_and_tokenizer):
    """The notebook's plug-in, saved as a file: `python -m rlvr_lib train --import` finds its method and its reward
    function, and the method's reward is the verifier's minus the length penalty (a random model is never right, so
    its reward is -penalty * length share, plus the reward function's digit share)."""
    import sys

    model, tokenizer = tiny_model_and_tokenizer
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    plugin = tmp_path / "my_plugin.py"
    plugin.write_text(_plugin_source())
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "rlvr_lib", "train", "--import", str(plugin), "--method", "grpo_lenpen",
         "--model", str(tmp_path / "model"), "--reward-func", "digit_share", "--steps", "1", "--set",
         "prompts_per_step=2", "--set", "group_size=2", "--set", "max_new_tokens=6", "--set", "train_pool_size=4",
         "--set", 'method_options={"penalty": 0.5}', "--threads", "1", "--no-progress", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(next(out.glob("grpo_lenpen-*.json")).read_text())
    row = record["history"][0]
    assert record["config"]["train"]["method_options"] == {"penalty": 0.5}
    assert row["accuracy"] == 0.0  # a random model: the verifier gives 0 throughout
    expected = row["reward_fn_digit_share"] - 0.5 * row["length_share"]
    assert row["reward_mean"] == pytest.approx(expected, abs=1e-6)
