"""``python -m rlvr_lib``: integer inputs have upper bounds; damaged checkpoints and an unreachable Hub end in one line.

* Every integer flag has a documented range (`rlvr_lib.__main__.INT_FLAGS`); a value outside is a usage error
  naming the flag, the value and the range. Every integer `TrainerConfig` field a file, ``--set`` or a flag gives
  has one too (`rlvr_lib.config_files.CONFIG_INT_BOUNDS`): ``--steps 99999999999999999999999`` is refused.
* A run folder whose two checkpoints are damaged is refused in one line naming both files, before anything loads
  (garbage, truncation), or when the trainer finds the damage (a sha256 mismatch) in one line too.
* ``evaluate --task math500`` without the Hub ends in one line saying the task reads the Hub and how to run it
  from a local copy (the machine running the tests has no network to the Hub; ``HF_HUB_OFFLINE=1`` makes sure).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr_lib.__main__ import INT_FLAGS, build_parser, hub_data_errors, main
from rlvr_lib.config_files import CONFIG_INT_BOUNDS, build_config
from rlvr_lib.trainer import previous_checkpoint

REPO = Path(__file__).resolve().parents[1]
TINY = ["--set", "prompts_per_step=2", "--set", "group_size=2", "--set", "max_new_tokens=8"]
HUGE = "99999999999999999999999"


def _error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line
    return err


def _commands() -> dict:
    """``{command: its sub-parser}`` of the command line."""
    (sub,) = [a for a in build_parser()._actions if isinstance(a.choices, dict)]
    return sub.choices


def _integer_flags() -> dict[str, object]:
    """``{"<command> <flag>": type}`` of every option of every command whose type parses integers."""
    found = {}
    for command, p in _commands().items():
        for action in p._actions:
            if action.type is not None and getattr(action.type, "__name__", "").startswith("integer"):
                found[f"{command} {action.option_strings[-1]}"] = action.type
    return found


def test_every_integer_flag_has_a_documented_upper_bound():
    flags = _integer_flags()
    assert set(flags) == set(INT_FLAGS), set(flags) ^ set(INT_FLAGS)
    assert {"train --steps", "pretrain --steps", "evaluate --seed", "evaluate --batch-size"} <= set(flags)
    for name, parse in flags.items():
        lo, hi = INT_FLAGS[name]
        assert parse.__name__ == f"integer in [{lo}, {hi}]"
        assert parse(str(lo)) == lo and parse(str(hi)) == hi
        for bad in (str(lo - 1), str(hi + 1), HUGE, "1" * 5000, "1.5"):
            with pytest.raises(Exception, match=rf"is invalid: must be an integer in \[{lo}, {hi}\]"):
                parse(bad)
    help_text = _commands()["evaluate"].format_help()
    assert "0 to 4_294_967_295" in help_text  # documented in --help


@pytest.mark.parametrize("argv, flag", [
    (["train", "--method", "grpo", "--steps", HUGE], "--steps"),
    (["pretrain", "--steps", HUGE], "--steps"),
    (["pretrain", "--seed", "-1"], "--seed"),
    (["evaluate", "--batch-size", "1000001"], "--batch-size"),
    (["evaluate", "--seed", str(2**32)], "--seed"),
])
def test_an_integer_flag_out_of_range_is_a_one_line_usage_error(capsys, tmp_path, argv, flag):
    out = tmp_path / "out"
    err = _error(capsys, [*argv, "--out", str(out)])
    value = argv[argv.index(flag) + 1]
    command = argv[0]
    lo, hi = INT_FLAGS[f"{command} {flag}"]
    assert f"argument {flag}: {value!r} is invalid: must be an integer in [{lo}, {hi}]" in err, err
    assert not out.exists()


def test_config_integers_out_of_range_name_the_layer_the_field_and_the_range(capsys, tmp_path):
    err = _error(capsys, ["train", "--method", "grpo", "--set", f"steps={HUGE}", "--out", str(tmp_path / "a")])
    assert f"argument --set: steps={HUGE} is invalid: must be an integer in [1, 1000000] (given by --set)" in err
    config = tmp_path / "c.yaml"
    config.write_text(f"method: grpo\nseed: {2**32}\n")
    err = _error(capsys, ["train", "--config", str(config), "--out", str(tmp_path / "b")])
    assert f"argument --config: seed={2**32} is invalid: must be an integer in [0, {2**32 - 1}]" in err
    with pytest.raises(ValueError, match=r"group_size=100001 is invalid: .*\[1, 100000\] \(given by file\.yaml\)"):
        build_config("grpo", ("file.yaml", {"group_size": 100001}))
    assert not any(tmp_path.glob("a*")) and not (tmp_path / "b").exists()


def test_the_bounds_admit_every_preset_and_the_defaults():
    from rlvr_lib.methods import METHODS, method_config

    assert set(CONFIG_INT_BOUNDS) <= set(__import__("rlvr_lib.trainer_config", fromlist=["x"]).TrainerConfig
                                         .__dataclass_fields__)
    for name in METHODS:
        config = method_config(name)
        for field, (lo, hi) in CONFIG_INT_BOUNDS.items():
            assert lo <= getattr(config, field) <= hi, (name, field)
        assert build_config(name, ("command line", {"steps": 1_000_000, "seed": 2**32 - 1})).steps == 1_000_000


# ------------------------------------------------------------------ damaged checkpoints
def _cli(args, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlvr_lib", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})})


def _lines(stderr: str) -> list[str]:
    """stderr's lines, without progress bars (transformers' "Loading weights" tqdm lines)."""
    return [line for line in stderr.replace("\r", "\n").splitlines() if line.strip() and "Loading weights" not in line]


def test_two_damaged_checkpoints_end_in_one_line_naming_both(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    checkpoint, prev = out / "checkpoint.pt", previous_checkpoint(out / "checkpoint.pt")
    checkpoint.write_bytes(os.urandom(5000))
    prev.write_bytes(b"not a checkpoint")
    done = _cli(["train", "--method", "grpo", "--steps", "1", *TINY, "--out", str(out)])
    assert done.returncode == 2, done.stderr
    (line,) = _lines(done.stderr)
    assert line.startswith("python -m rlvr_lib train: error: argument --out: both checkpoints are damaged")
    assert f"delete {checkpoint} and {prev} to start over" in line
    assert {p.name for p in out.iterdir()} == {"checkpoint.pt", "checkpoint.prev.pt"}  # nothing written


def test_one_damaged_checkpoint_without_a_previous_names_it(capsys, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoint.pt").write_bytes(b"\x80\x02garbage")
    err = _error(capsys, ["train", "--method", "grpo", "--steps", "1", *TINY, "--out", str(out)])
    assert f"there is no previous checkpoint {previous_checkpoint(out / 'checkpoint.pt')}" in err
    assert f"delete {out / 'checkpoint.pt'} to start over" in err


def test_checkpoints_damaged_inside_their_tensors_end_in_one_line_too(capsys, tmp_path):
    """Damage a memory-mapped read does not see (a flipped byte in the weights): the trainer's sha256 check finds
    it after the model loaded; the command still ends in one line (exit status 1) naming both files."""
    out = tmp_path / "run"
    assert main(["train", "--method", "grpo", "--steps", "2", *TINY, "--set", "checkpoint_every=1",
                 "--out", str(out)]) == 0
    checkpoint, prev = out / "checkpoint.pt", previous_checkpoint(out / "checkpoint.pt")
    assert prev.exists()
    for path in (checkpoint, prev):
        data = bytearray(path.read_bytes())
        for i in range(len(data) // 2, len(data) // 2 + 16):
            data[i] ^= 0xFF
        path.write_bytes(bytes(data))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--method", "grpo", "--steps", "2", *TINY, "--set", "checkpoint_every=1", "--out", str(out)])
    message = exit_.value.code
    assert isinstance(message, str) and "\n" not in message, message
    assert message.startswith("python -m rlvr_lib train: error: checkpoint ")
    assert "does not match the sha256" in message and f"delete {checkpoint} and {prev} to start over" in message


# ------------------------------------------------------------------ a task that reads the Hub, offline
def test_math500_offline_is_one_line_saying_it_reads_the_hub(tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "empty_hf_home")}
    done = _cli(["evaluate", "--task", "math500", "--problems", "1", "--samples", "1", "--group-size", "1",
                 "--out", str(tmp_path / "e.json")], env=env)
    assert done.returncode == 1, done.stderr
    (line,) = _lines(done.stderr)
    assert line.startswith("python -m rlvr_lib evaluate: error: task 'math500' could not load its data")
    assert "reads the Hugging Face Hub data set 'HuggingFaceH4/MATH-500'" in line
    assert "HF_HOME" in line and "HF_HUB_OFFLINE=1" in line and "Traceback" not in done.stderr
    assert not (tmp_path / "e.json").exists()


def test_hub_errors_only_are_turned_into_the_one_line():
    with pytest.raises(SystemExit) as exit_, hub_data_errors("evaluate", "math500"):
        raise ConnectionError("Couldn't reach 'HuggingFaceH4/MATH-500' on the Hub (LocalEntryNotFoundError)")
    assert "\n" not in exit_.value.code and "task 'math500' could not load its data" in exit_.value.code
    with pytest.raises(FileNotFoundError), hub_data_errors("evaluate", "math500"):
        raise FileNotFoundError("a local file")  # not the Hub's: passes through
    with pytest.raises(ValueError), hub_data_errors("evaluate", "math500"):
        raise ValueError("anything else")


@pytest.mark.parametrize("field", ["steps", "group_size", "seed", "eval_every", "minibatches"])
def test_a_config_built_in_python_is_bounded_as_a_file_is(field):
    """TrainerConfig itself refuses an integer out of its INT_BOUNDS, whichever way the config was built."""
    from rlvr_lib.methods import method_config
    from rlvr_lib.trainer_config import INT_BOUNDS

    lo, hi = INT_BOUNDS[field]
    with pytest.raises(ValueError, match=rf"TrainerConfig\.{field}={hi + 1} is invalid: must be an integer in "
                                         rf"\[{lo}, {hi}\]"):
        method_config("grpo", **{field: hi + 1})
    with pytest.raises(ValueError, match=rf"TrainerConfig\.{field}"):
        method_config("grpo", **{field: lo - 1})
