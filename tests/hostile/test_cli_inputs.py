"""Bad command-line inputs: each gives one line on stderr naming the flag, exit status 2, and creates nothing.

The commands run in-process through their ``main(argv)`` (fast: every input is refused before a model
loads), in a temporary working folder whose whole tree is compared before and after; a few run as
subprocesses to check the exit status and stderr end to end.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr_lib.__main__ import STUDY_COMMANDS, main
from rlvr_lib.study.__main__ import main as study_main
from rlvr_lib.study.reproduce import main as reproduce_main

pytestmark = pytest.mark.hostile_class("CLI inputs", host=True)  # the working tree is compared

REPO = Path(__file__).resolve().parents[2]
TINY = ["--set", "prompts_per_step=2", "--set", "group_size=2", "--set", "max_new_tokens=8"]
NO_HUB_MODEL = "rlvr-lib-tests/no-such-model"
"""A hub name no hub has: refused whether the hub answers (no such model) or cannot be reached."""

# (argv, flag the message must name); relative paths are in the test's working folder, where
# `afile` is a file, `empty` an empty folder and `bad.yaml` a malformed YAML file.
CASES = {
    "model path missing": (["train", "--method", "grpo", "--model", "./nope", "--out", "run"], "--model"),
    "model folder without config": (["train", "--method", "grpo", "--model", "empty", "--out", "run"], "--model"),
    "model is a file": (["calibrate", "--model", "afile", "--out", "c.json"], "--model"),
    "model hub name unreachable": (["train", "--method", "grpo", "--model", NO_HUB_MODEL, "--out", "run"], "--model"),
    "out is a file": (["train", "--method", "grpo", "--out", "afile"], "--out"),
    "out under a file": (["train", "--method", "grpo", "--out", "afile/run"], "--out"),
    "out unwritable": (["train", "--method", "grpo", "--out", "/proc/rlvr-cli-test/run"], "--out"),
    "out name unsafe": (["train", "--method", "grpo", "--out", "bad name"], "--out"),
    "steps negative": (["train", "--method", "grpo", "--steps", "-1", "--out", "run"], "--steps"),
    "steps not a number": (["train", "--method", "grpo", "--steps", "ten", "--out", "run"], "--steps"),
    "steps beyond the bound": (["train", "--method", "grpo", "--steps", "99999999999999999999999", "--out", "run"],
                               "--steps"),
    "set steps beyond the bound": (["train", "--method", "grpo", "--set", "steps=99999999999999999999999", "--out",
                                    "run"], "--set"),
    "set seed beyond the bound": (["train", "--method", "grpo", "--set", f"seed={2**64}", "--out", "run"], "--set"),
    "two damaged checkpoints": (["train", "--method", "grpo", "--steps", "1", "--out", "damaged"], "--out"),
    "evaluate seed beyond the bound": (["evaluate", "--seed", str(2**32), "--out", "e.json"], "--seed"),
    "evaluate samples beyond the bound": (["evaluate", "--samples", "100001", "--out", "e.json"], "--samples"),
    "set value out of range": (["train", "--method", "grpo", "--set", "lr=-1", "--out", "run"], "--set"),
    "set without equals": (["train", "--method", "grpo", "--set", "lr", "--out", "run"], "--set"),
    "set unknown method option": (["train", "--method", "sage", "--set", "method_options={tauu: 1}", "--out",
                                   "run"], "--set"),
    "method unknown": (["train", "--method", "nope", "--out", "run"], "--method"),
    "engine unknown": (["train", "--method", "grpo", "--engine", "nope", "--out", "run"], "--engine"),
    "dtype unknown": (["train", "--method", "grpo", "--dtype", "float8", "--out", "run"], "--dtype"),
    "config missing": (["train", "--config", "missing.yaml", "--out", "run"], "--config"),
    "config malformed": (["train", "--config", "bad.yaml", "--out", "run"], "--config"),
    "pretrain steps negative": (["pretrain", "--steps", "-3", "--out", "policy"], "--steps"),
    "pretrain seed negative": (["pretrain", "--seed", "-1", "--out", "policy"], "--seed"),
    "pretrain steps beyond the bound": (["pretrain", "--steps", "10000001", "--out", "policy"], "--steps"),
    "pretrain out is a file": (["pretrain", "--steps", "1", "--out", "afile"], "--out"),
    "pretrain size unknown": (["pretrain", "--size", "huge", "--steps", "1", "--out", "policy"], "--size"),
    "calibrate batch size zero": (["calibrate", "--batch-size", "0", "--out", "c.json"], "--batch-size"),
    "calibrate out is a folder": (["calibrate", "--out", "empty"], "--out"),
    "calibrate out under a file": (["calibrate", "--out", "afile/c.json"], "--out"),
    "dynamics results root is a file": (["calibrate", "--dynamics", "--results-root", "afile", "--out", "d.json"],
                                        "--results-root"),
    "threepo adamw method unknown": (["calibrate-threepo", "--adamw-method", "nope", "--out", "q.json"],
                                     "--adamw-method"),
    "threepo method not a 3PO variant": (["calibrate-threepo", "--method", "grpo", "--out", "q.json"], "--method"),
    "threepo skip leaves no step": (["calibrate-threepo", "--steps", "5", "--skip", "5", "--out", "q.json"], "--skip"),
    "threepo max clipped above 1": (["calibrate-threepo", "--max-clipped", "1.5", "--out", "q.json"], "--max-clipped"),
    "tune-lr method unknown": (["tune-lr", "--methods", "grpo", "nope", "--out", "t.json"], "--methods"),
    "tune-lr tail above steps": (["tune-lr", "--methods", "grpo", "--steps", "3", "--tail", "5", "--out", "t.json"],
                                 "--tail"),
    "plateau window too long": (["plateau", "--steps", "10", "--window", "6", "--out", "p.json"], "--steps"),
    "plateau rel drop negative": (["plateau", "--rel-drop", "-1", "--out", "p.json"], "--rel-drop"),
    "command unknown": (["frobnicate"], "command"),
}

REPRODUCE_CASES = {
    "workers zero": (["--workers", "0", "--out", "nb"], "--workers"),
    "only unknown notebook": (["--only", "nope", "--out", "nb"], "--only"),
    "notebooks dir missing": (["--notebooks-dir", "nodir", "--out", "nb"], "--notebooks-dir"),
    "out is a file": (["--out", "afile"], "--out"),
}


def _tree(root: Path) -> dict[str, tuple[bool, int]]:
    """Every path under ``root`` (hidden ones too: a lock file is one), with whether it is a folder and its mtime."""
    return {str(p.relative_to(root)): (p.is_dir(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A working folder with a file, an empty folder, a malformed config file and a run folder whose checkpoint and
    previous checkpoint are both damaged in it."""
    (tmp_path / "afile").write_text("not a folder\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "checkpoint.pt").write_bytes(b"PK\x03\x04 cut short")
    (tmp_path / "damaged" / "checkpoint.prev.pt").write_bytes(b"\x80\x02not a checkpoint")
    (tmp_path / "bad.yaml").write_text("method: grpo\nlr: [1e-6\n  steps: {\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _usage_error(capsys, run, argv) -> str:
    """``run(argv)``'s stderr, checked to be one line ending an exit with status 2 (and nothing on stdout)."""
    with pytest.raises(SystemExit) as exit_:
        run(argv)
    captured = capsys.readouterr()
    assert exit_.value.code == 2
    assert captured.out == ""
    assert captured.err.endswith("\n") and captured.err.count("\n") == 1, captured.err
    return captured.err


def _check_case(capsys, place, run, argv, flag) -> None:
    if any(a.startswith("/proc/") for a in argv) and not Path("/proc").is_dir():
        pytest.skip("no /proc: no known unwritable place")
    before = _tree(place)
    start = time.monotonic()
    err = _usage_error(capsys, run, argv)
    assert flag in err, err
    assert _tree(place) == before  # no folder, lock file or output left behind
    assert time.monotonic() - start < 60  # refused up front (a hub name must not hang); slack for a busy machine


@pytest.mark.parametrize("argv, flag", CASES.values(), ids=CASES.keys())
def test_bad_input_is_one_line_naming_the_flag(capsys, place, argv, flag):
    _check_case(capsys, place, study_main if argv[0] in STUDY_COMMANDS else main, argv, flag)


@pytest.mark.parametrize("argv, flag", REPRODUCE_CASES.values(), ids=REPRODUCE_CASES.keys())
def test_reproduce_bad_input_is_one_line_naming_the_flag(capsys, place, argv, flag):
    _check_case(capsys, place, reproduce_main, argv, flag)


def test_rerun_into_out_of_another_config_names_out(capsys, place):
    """A rerun resumes from --out's checkpoint; one of another config is refused naming --out (a CLI flag)."""
    assert main(["train", "--method", "grpo", "--steps", "1", *TINY, "--out", "run"]) == 0
    capsys.readouterr()
    before = _tree(place)
    err = _usage_error(capsys, main, ["train", "--method", "grpo", "--steps", "1", *TINY, "--set", "lr=2e-6",
                                      "--out", "run"])
    assert "--out" in err and "another config" in err and "'lr'" in err and "checkpoint_dir" not in err, err
    assert _tree(place) == before


def _cli(place: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *argv], cwd=place, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("argv, flag", [
    (["-m", "rlvr_lib", "train", "--method", "grpo", "--model", "./nope", "--steps", "1", "--out", "run"], "--model"),
    (["-m", "rlvr_lib.study.reproduce", "--workers", "-2", "--out", "nb"], "--workers"),
], ids=["model path missing", "reproduce workers negative"])
def test_subprocess_exit_status_and_one_line(place, argv, flag):
    before = _tree(place)
    done = _cli(place, *argv)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and flag in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert _tree(place) == before


def test_an_error_while_running_is_not_a_usage_error(place, monkeypatch):
    """Only the input checks become the one line: an exception once the command runs keeps its traceback."""
    import rlvr_lib.run

    def broken(*args, **kwargs):
        raise ValueError("a bug inside training")

    monkeypatch.setattr(rlvr_lib.run, "train", broken)
    with pytest.raises(ValueError, match="a bug inside training"):
        main(["train", "--method", "grpo", "--steps", "1", "--out", "run"])
