"""Issue 61 item 7: ``--threads N`` on every command of ``python -m rlvr_lib``, applied with
``torch.set_num_threads`` / ``set_num_interop_threads`` before the command's work; its default is
``OMP_NUM_THREADS`` when set, else the host's cores divided by the processes of the launch on this host."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr_lib.__main__ import INT_FLAGS, default_threads, host_cores, local_processes, main

REPO = Path(__file__).resolve().parent.parent

# Imported by --import after --threads is applied (the prelude's order), it reports what torch runs with; the
# command then stops at its own usage error (an unknown task), before loading anything.
PROBE = "import torch\nprint(f'THREADS {torch.get_num_threads()} {torch.get_num_interop_threads()}', flush=True)\n"


def _threads_seen(tmp_path: Path, argv: list[str], env: dict[str, str | None]) -> tuple[int, int]:
    probe = tmp_path / "thread_probe.py"
    probe.write_text(PROBE)
    environ = {**os.environ, "PYTHONPATH": str(REPO)}
    for key, value in env.items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value
    done = subprocess.run([sys.executable, "-m", "rlvr_lib", *argv, "--import", str(probe), "--out",
                           str(tmp_path / "out")], cwd=tmp_path, env=environ, capture_output=True, text=True,
                          timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("THREADS ")]
    assert len(lines) == 1, (done.stdout, done.stderr)
    assert done.returncode == 2 and "is not registered" in done.stderr  # stopped at the task, as planned
    _, intra, inter = lines[0].split()
    return int(intra), int(inter)


@pytest.mark.parametrize("command", [["train", "--method", "grpo", "--task", "nope"],
                                     ["evaluate", "--task", "nope"]])
def test_threads_flag_is_applied_in_the_command(tmp_path, command):
    assert _threads_seen(tmp_path, [*command, "--threads", "3"], {"OMP_NUM_THREADS": "1"}) == (3, 3)


def test_default_is_cores_over_local_processes_or_omp_num_threads(tmp_path):
    cores = host_cores()
    expected = max(1, cores // 2)
    seen = _threads_seen(tmp_path, ["evaluate", "--task", "nope"],
                         {"OMP_NUM_THREADS": None, "LOCAL_WORLD_SIZE": "2"})
    assert seen == (expected, expected)
    assert _threads_seen(tmp_path, ["evaluate", "--task", "nope"],
                         {"OMP_NUM_THREADS": "1", "LOCAL_WORLD_SIZE": None}) == (1, 1)


def test_default_formula():
    assert default_threads({}, cores=16) == 16
    assert default_threads({"LOCAL_WORLD_SIZE": "4"}, cores=16) == 4
    assert default_threads({"LOCAL_WORLD_SIZE": "3"}, cores=16) == 5  # floor
    assert default_threads({"LOCAL_WORLD_SIZE": "8"}, cores=2) == 1  # at least one
    assert default_threads({"OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, cores=16) == 8
    assert default_threads({"LOCAL_WORLD_SIZE": "4", "OMP_NUM_THREADS": "6"}, cores=16) == 6  # an explicit choice
    assert default_threads({"LOCAL_WORLD_SIZE": "x", "OMP_NUM_THREADS": ""}, cores=16) == 16  # unreadable: ignored
    assert local_processes({}) == 1 and local_processes({"LOCAL_WORLD_SIZE": "0"}) == 1
    assert host_cores() >= 1


@pytest.mark.parametrize("command", ["train", "evaluate", "pretrain"])
@pytest.mark.parametrize("value", ["0", "4097", "two"])
def test_threads_out_of_bounds_is_a_usage_error(capsys, tmp_path, command, value):
    argv = [command, *(["--method", "grpo"] if command == "train" else []), "--threads", value,
            "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    lo, hi = INT_FLAGS[f"{command} --threads"]
    err = capsys.readouterr().err
    assert f"argument --threads: {value!r} is invalid: must be an integer in [{lo}, {hi}]" in err, err
    assert not (tmp_path / "out").exists()
