"""Issue 61 item 1: a user's method and task reach ``python -m rlvr_lib`` without a wrapper script -- through
``--import`` (a module name or a .py file), ``imports:`` in a config file, and an installed package's
``rlvr_lib.plugins`` entry point (a real ``*.dist-info/entry_points.txt`` read by importlib.metadata); a missing
name's error lists what is registered and says how to import one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlvr_lib import plugins
from rlvr_lib.__main__ import main
from rlvr_lib.config_files import build_config
from rlvr_lib.methods import METHODS
from rlvr_lib.methods.registry import unknown_method
from rlvr_lib.tasks import TASKS, get_task

pytestmark = pytest.mark.usefixtures("restore_registries")


REPO = Path(__file__).resolve().parent.parent
TINY = ["--steps", "2", "--set", "prompts_per_step=2", "--set", "group_size=2", "--set", "max_new_tokens=8"]

# A user's module: a length-penalised GRPO (~25 lines) and a task of their own. NAME is replaced per test, so
# each test registers names no other test has taken in this process.
PLUGIN = '''
from dataclasses import dataclass

import torch

from rlvr_lib.config import ConfigBase
from rlvr_lib.methods import METHODS, Method, register_method
from rlvr_lib.tasks import register_task
from rlvr_lib.tasks.registry import ArithmeticTask


@dataclass(frozen=True)
class LenPenOptions(ConfigBase):
    alpha: float = 1.0  # reward per completion token subtracted

    def validate(self) -> None:
        self.check_nonnegative("alpha", self.alpha)


class LengthPenalisedGRPO(Method):
    """GRPO whose reward is the verifier's minus alpha x the completion's length in tokens."""

    Options = LenPenOptions

    def rewards(self, batch, model):
        lengths = batch.rollouts.completion_mask.sum(1).to(torch.float32).cpu()
        return super().rewards(batch, model) - self.options.alpha * lengths


class OneFamilyArith(ArithmeticTask):
    """The testbed's problems as a task of one family."""

    name = "NAME_task"
    families = eval_families = default_eval_families = ("train",)
    ood_families = ()


register_method("NAME", LengthPenalisedGRPO, "GRPO with a length penalty", **METHODS["grpo"].preset)
register_task("NAME_task", OneFamilyArith)
'''


def _plugin(folder: Path, name: str, module: str | None = None) -> Path:
    path = folder / f"{module or name}.py"
    path.write_text(PLUGIN.replace("NAME", name))
    return path


def _env(**extra: str) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **extra}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (extra.get("PYTHONPATH"), str(REPO)) if p)
    return env


def _cli(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlvr_lib", *args], cwd=cwd, env=_env(**env), capture_output=True,
                          text=True, timeout=600)


def _record(out: Path) -> dict:
    (path,) = out.glob("*-s0.json")
    return json.loads(path.read_text())


def _check_lenpen_run(out: Path, method: str) -> None:
    record = _record(out)
    assert record["config"]["train"]["method"] == method
    assert record["config"]["train"]["task"] == f"{method}_task"
    assert len(record["history"]) == 2
    # every reward is the verifier's (0 or 1) minus at least one token: the plugin's reward hook ran
    assert all(row["reward_mean"] < 0 for row in record["history"]), record["history"]
    assert (out / "model" / "config.json").is_file()


# ------------------------------------------------------------------ --import, a file and a module
def test_train_imports_a_plugin_file(tmp_path):
    plugin = _plugin(tmp_path, "lenpen_file")
    out = tmp_path / "run"
    done = _cli(["train", "--import", str(plugin), "--method", "lenpen_file", "--task", "lenpen_file_task", *TINY,
                 "--out", str(out)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    _check_lenpen_run(out, "lenpen_file")


def test_train_imports_a_plugin_module_and_config_imports(tmp_path):
    _plugin(tmp_path, "lenpen_mod")
    config = tmp_path / "run.yaml"
    config.write_text("imports: [lenpen_mod]\nmethod: lenpen_mod\ntask: lenpen_mod_task\n"
                      "method_options: {alpha: 1.0}\n")
    out = tmp_path / "run"
    done = _cli(["train", "--config", str(config), *TINY, "--out", str(out)], tmp_path, PYTHONPATH=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    _check_lenpen_run(out, "lenpen_mod")
    assert _record(out)["config"]["train"]["method_options"] == {"alpha": 1.0}


def test_import_in_process_registers_and_builds_config(tmp_path):
    plugin = _plugin(tmp_path, "lenpen_inproc")
    config = build_config("lenpen_inproc", ("config file", {"imports": [str(plugin)], "task": "lenpen_inproc_task"}))
    assert config.method == "lenpen_inproc" and config.task == "lenpen_inproc_task"
    assert "lenpen_inproc" in METHODS and get_task("lenpen_inproc_task").families == ("train",)
    assert plugins.import_plugin(str(plugin)) is plugins.import_plugin(str(plugin))  # a file is imported once


# ------------------------------------------------------------------ entry points
def _distribution(site: Path, package: str, value: str) -> None:
    """An installed distribution in folder ``site``: its package and a dist-info whose entry_points.txt declares
    ``value`` in the group rlvr_lib.plugins (what pip writes for a [project.entry-points] table)."""
    (site / package).mkdir()
    (site / package / "__init__.py").write_text(PLUGIN.replace("NAME", package)
                                                + "\ndef register():\n    REGISTER_CALLS.append(1)\n"
                                                + "REGISTER_CALLS = []\n")
    info = site / f"{package}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[rlvr_lib.plugins]\n{package} = {value}\n")


def test_train_finds_an_installed_entry_point(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _distribution(site, "lenpen_ep", "lenpen_ep")
    out = tmp_path / "run"
    done = _cli(["train", "--method", "lenpen_ep", "--task", "lenpen_ep_task", *TINY, "--out", str(out)], tmp_path,
                PYTHONPATH=str(site))
    assert done.returncode == 0, done.stderr[-3000:]
    _check_lenpen_run(out, "lenpen_ep")


def test_entry_points_load_once_lazily_and_call_a_callable(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    _distribution(site, "lenpen_epcall", "lenpen_epcall:register")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(plugins, "_ENTRY_POINTS_LOADED", False)
    assert "lenpen_epcall" not in METHODS
    get_task("arith")  # a registered name loads nothing
    assert "lenpen_epcall" not in sys.modules
    config = build_config("lenpen_epcall", ("flags", {"task": "lenpen_epcall_task"}))  # the first missing name
    assert config.method == "lenpen_epcall" and "lenpen_epcall_task" in TASKS
    module = sys.modules["lenpen_epcall"]
    assert module.REGISTER_CALLS == [1] and "lenpen_epcall" in plugins.loaded_entry_points()
    assert plugins.load_entry_points() == [] and module.REGISTER_CALLS == [1]  # once per process


def test_a_failing_entry_point_is_named(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    info = site / "broken_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken_plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[rlvr_lib.plugins]\nbroken = no_such_module_xyz\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(plugins, "_ENTRY_POINTS_LOADED", False)
    with pytest.raises(plugins.PluginError, match=r"entry point 'broken' = 'no_such_module_xyz' of package "
                                                  r"'broken_plugin' \(group 'rlvr_lib.plugins'\) failed to load: "
                                                  r"ModuleNotFoundError"):
        get_task("no_such_task_here")


# ------------------------------------------------------------------ errors
def test_missing_method_and_task_say_what_is_registered_and_how_to_import(capsys, tmp_path):
    for argv, name in ((["train", "--method", "grpo_lenpen_missing"], "method='grpo_lenpen_missing'"),
                       (["train", "--method", "grpo", "--task", "missing_task"], "task='missing_task'"),
                       (["evaluate", "--task", "missing_task"], "task='missing_task'")):
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--out", str(tmp_path / "x")])
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err
        assert f"{name} is not registered: must be one of [" in err, err
        assert "'grpo'" in err or "'arith'" in err
        assert "--import MODULE" in err and "imports: [...]" in err and "'rlvr_lib.plugins'" in err
    assert not (tmp_path / "x").exists()
    assert str(unknown_method("nope")).startswith("method='nope' is not registered: must be one of ['b3po'")


def test_bad_import_is_a_one_line_usage_error(capsys, tmp_path):
    broken = tmp_path / "broken_plugin.py"
    broken.write_text("raise RuntimeError('boom')\n")
    cases = ((["--import", "no_such_module_abc"], "argument --import: plugin 'no_such_module_abc' is invalid: no "
                                                  "module named 'no_such_module_abc'"),
             (["--import", str(tmp_path / "absent.py")], "is invalid: must be a module name or a path to a .py file "
                                                         "(no such file)"),
             (["--import", str(broken)], "failed to import: RuntimeError: boom"))
    for flags, expected in cases:
        for command in (["train", "--method", "grpo"], ["evaluate"], ["pretrain"]):
            with pytest.raises(SystemExit) as exit_:
                main([*command, *flags, "--out", str(tmp_path / "x")])
            assert exit_.value.code == 2
            err = capsys.readouterr().err
            assert expected in err and err.count("\n") == 1, err
    assert not (tmp_path / "x").exists()
    config = tmp_path / "c.yaml"
    config.write_text("imports: [no_such_module_abc]\nmethod: grpo\n")
    with pytest.raises(SystemExit):
        main(["train", "--config", str(config), "--out", str(tmp_path / "x")])
    assert f"argument --config: {config} imports: plugin 'no_such_module_abc' is invalid" in capsys.readouterr().err


def test_help_names_the_plugin_flags(capsys):
    for command in ("train", "evaluate", "pretrain"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--import MODULE" in text and "--threads" in text, command
    assert textwrap.dedent(plugins.HOW_TO_IMPORT) in plugins.missing_name("reward", "r", ["a"]).args[0]


def test_a_reward_function_from_an_entry_point_and_the_missing_reward_error(tmp_path, monkeypatch):
    from rlvr_lib.rewards.callables import REWARD_FUNCS, resolve_reward_func

    site = tmp_path / "site"
    (site / "reward_plug").mkdir(parents=True)
    (site / "reward_plug" / "__init__.py").write_text(
        "from rlvr_lib.rewards.callables import register_reward_func\n\n"
        "def brevity(prompts, completions, **columns):\n"
        "    return [-float(len(c)) for c in completions]\n\n"
        "register_reward_func('plug_brevity', brevity)\n")
    info = site / "reward_plug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: reward_plug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[rlvr_lib.plugins]\nreward_plug = reward_plug\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(plugins, "_ENTRY_POINTS_LOADED", False)
    monkeypatch.setattr("rlvr_lib.rewards.callables.REWARD_FUNCS", dict(REWARD_FUNCS))
    func = resolve_reward_func("plug_brevity")  # not registered until the entry point loads
    assert func(["p"], ["abc", "a"]) == [-3.0, -1.0]
    with pytest.raises(ValueError, match=r"reward function 'no_such_reward' is not registered .* to add one, import "
                                         r"the module that registers it with --import MODULE .*'rlvr_lib.plugins'"):
        resolve_reward_func("no_such_reward")
