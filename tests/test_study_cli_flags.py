"""``python -m rlvr_lib.study`` and ``python -m rlvr_lib.study.reproduce``: every integer flag has a range, and a value
outside it is a one-line usage error naming the flag, the value and the range (as ``python -m rlvr_lib``'s flags);
the study's own commands take ``--import`` (a user's plug-in) and ``--threads``, as the library's do."""

from __future__ import annotations

import argparse

import pytest
import torch

from rlvr_lib.__main__ import INT_FLAGS
from rlvr_lib.study.__main__ import STUDY_COMMANDS, STUDY_INT_FLAGS, build_parser, main
from rlvr_lib.study.reproduce import REPRODUCE_INT_FLAGS
from rlvr_lib.study.reproduce import main as reproduce_main

pytestmark = pytest.mark.usefixtures("restore_registries")  # the plug-in's method is removed afterwards

POSITIONAL = {"testbed-config": ["grpo"]}


def _integer_flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """``{"<command> <flag>": action}`` of every flag whose ``type=`` parses an integer (`int_at_least`)."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = {}
    for command, p in sub.choices.items():
        for action in p._actions:
            if action.option_strings and getattr(action.type, "__name__", "").startswith("integer"):
                out[f"{command} {action.option_strings[0]}"] = action
    return out


def test_every_integer_flag_of_the_study_has_a_range():
    flags = _integer_flags(build_parser())
    assert set(flags) == set(STUDY_INT_FLAGS)
    assert {f"{c} --threads" for c in STUDY_COMMANDS} <= set(flags)
    for key, (lo, hi) in STUDY_INT_FLAGS.items():
        assert flags[key].type.__name__ == f"integer in [{lo}, {hi}]", key
    # the library's ranges where the meaning is the same
    assert STUDY_INT_FLAGS["calibrate --seed"] == INT_FLAGS["evaluate --seed"] == INT_FLAGS["pretrain --seed"]
    assert STUDY_INT_FLAGS["tune-lr --threads"] == INT_FLAGS["train --threads"]


@pytest.mark.parametrize("key", sorted(STUDY_INT_FLAGS))
def test_a_study_integer_out_of_range_is_a_one_line_usage_error(key, capsys):
    command, flag = key.split(" ")
    lo, hi = STUDY_INT_FLAGS[key]
    for value in (lo - 1, hi + 1):
        with pytest.raises(SystemExit) as exit_:
            main([command, *POSITIONAL.get(command, []), flag, str(value)])
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err
        assert err == (f"python -m rlvr_lib.study {command}: error: argument {flag}: '{value}' is invalid: must be "
                       f"an integer in [{lo}, {hi}] (see --help)")


@pytest.mark.parametrize("flag", sorted(REPRODUCE_INT_FLAGS))
def test_a_reproduce_integer_out_of_range_is_a_one_line_usage_error(flag, capsys):
    lo, hi = REPRODUCE_INT_FLAGS[flag]
    for value in (lo - 1, hi + 1, "x"):
        with pytest.raises(SystemExit) as exit_:
            reproduce_main([flag, str(value)])
        assert exit_.value.code == 2
        assert capsys.readouterr().err.strip() == (
            f"python -m rlvr_lib.study.reproduce: error: argument {flag}: '{value}' is invalid: must be an integer "
            f"in [{lo}, {hi}] (see --help)")


PLUGIN = '''
from rlvr_lib.methods import Method, register_method


class Plain(Method):
    """GRPO under another name."""


register_method("study_cli_plugin_method", Plain, "a plug-in method of the study CLI test", lr=3e-4)
'''


def test_study_commands_import_a_plugin_and_set_threads(tmp_path):
    plugin = tmp_path / "study_plugin.py"
    plugin.write_text(PLUGIN)
    before = torch.get_num_threads()
    wanted = 3 if before != 3 else 2
    out = tmp_path / "settings.yaml"
    assert main(["testbed-config", "study_cli_plugin_method", "--import", str(plugin), "--threads", str(wanted),
                 "--out", str(out)]) == 0
    assert torch.get_num_threads() == wanted  # applied before the command ran (conftest restores it after)
    import yaml

    assert yaml.safe_load(out.read_text())["method"] == "study_cli_plugin_method"


def test_a_study_command_without_the_plugin_names_how_to_import_it(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["testbed-config", "no_such_plugin_method_h61"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'no_such_plugin_method_h61' is not registered" in err and "--import MODULE" in err


def test_a_missing_plugin_file_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["plateau", "--import", str(tmp_path / "absent.py")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("python -m rlvr_lib.study plateau: error: argument --import: plugin ")
    assert "no such file" in err
