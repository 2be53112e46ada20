"""`make test` runs every stage (the lock print, pytest, nbval, the quick smoke run, the tutorials, the strict docs
build, the vLLM tests) whatever an earlier one returned, prints one line per stage (stage, passed/failed, exit code,
seconds) and the total, and fails at the end if any failed.
vLLM's environment is built in the background from the start; the vllm stage runs in that background job from
pytest's end, beside the later stages, its output printed after theirs; Ctrl-C stops the job too.

The Makefile's logic is tested with stand-ins: each stage's command is a make variable (``TEST_*_CMD``) that the
command line replaces with a short shell command writing its name to a file and exiting with a chosen code;
``-o install`` keeps make from building the environment. The real suite never runs here.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")

REPO = Path(__file__).resolve().parents[1]
STAGES = ("lock", "pytest", "nbval", "smoke", "tutorial", "docs", "vllm")
SUMMARY = re.compile(r"^make test: (\S+)\s+(passed|failed) \(exit code (\d+), (\d+) s\)$")
TOTAL = re.compile(r"^make test: (\d+) s in all \(the install before it not counted\)$")


def _env() -> dict[str, str]:
    """This environment without a surrounding make's flags (the suite itself runs under `make test`)."""
    return {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}


def _default_sigint() -> None:
    """In the child before exec: SIGINT and SIGQUIT at their defaults. A process started in the background by a
    non-interactive shell (``cmd &``, as a CI script may start make test) inherits them ignored, and a shell cannot
    trap a signal ignored on entry: the stand-ins would never see the Ctrl-C this module sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def _make_test(commands: dict[str, str], *extra: str, **popen) -> subprocess.CompletedProcess | subprocess.Popen:
    """``make test`` with each stage's command replaced; ``commands["vllm_env"]`` replaces the background build of
    vLLM's environment (``true`` unless given: the real one would install vLLM)."""
    commands = {"vllm_env": "true", **commands}
    argv = ["make", "--no-print-directory", "-o", "install", *extra, "test",
            *[f"TEST_{stage.upper()}_CMD={command}" for stage, command in commands.items()]]
    if popen:  # Ctrl-C tests: SIGINT at its default in make, whatever this process inherited
        return subprocess.Popen(argv, cwd=REPO, env=_env(), text=True, preexec_fn=_default_sigint, **popen)
    return subprocess.run(argv, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=60)


def _stand_ins(ran: Path, codes) -> dict[str, str]:
    return {stage: f"echo {stage} >> {ran}; exit {code}" for stage, code in zip(STAGES, codes)}


@pytest.mark.parametrize("codes", [(0, 0, 0, 0, 0, 0, 0), (0, 1, 0, 0, 0, 0, 0), (2, 0, 0, 0, 0, 0, 0),
                                   (0, 1, 3, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 2), (0, 0, 5, 0, 0, 0, 0),
                                   (0, 0, 0, 1, 0, 0, 0), (0, 0, 0, 0, 1, 0, 0), (0, 0, 0, 0, 0, 1, 0),
                                   (7, 6, 5, 4, 3, 2, 1)])
def test_every_stage_runs_and_the_summary_says_how_each_ended(tmp_path, codes):
    ran = tmp_path / "ran"
    done = _make_test(_stand_ins(ran, codes))
    order = ran.read_text().split()
    # in order, each once, after any failure; the vllm stage (in the background from pytest's end) after pytest
    assert [s for s in order if s != "vllm"] == list(STAGES[:-1]) and order.count("vllm") == 1, done.stdout
    assert order.index("vllm") > order.index("pytest"), done.stdout
    lines = done.stdout.splitlines()
    summary = [SUMMARY.match(line) for line in lines[-len(STAGES) - 1:-1]]
    assert all(summary), done.stdout
    assert TOTAL.match(lines[-1]), done.stdout
    assert [(m[1], m[2], int(m[3])) for m in summary] == [
        (stage, "passed" if code == 0 else "failed", code) for stage, code in zip(STAGES, codes)]
    assert sum(bool(SUMMARY.match(line)) for line in lines) == len(STAGES)  # one line each, at the end
    assert (done.returncode == 0) == (max(codes) == 0), (done.returncode, done.stderr)
    if max(codes):
        assert "Error 1" in done.stderr  # make reports the target failed


@pytest.mark.parametrize("env_seconds, pytest_seconds", [(1, 4), (3, 0)])
def test_vllms_environment_builds_beside_the_stages_and_the_vllm_stage_waits_for_it(tmp_path, env_seconds,
                                                                                    pytest_seconds):
    """The background build starts with make test: a build shorter than pytest ends during it; a longer one is
    waited for by the vllm stage alone (its time counts from pytest's end)."""
    ran = tmp_path / "ran"
    commands = _stand_ins(ran, (0,) * len(STAGES))
    commands["pytest"] = f"echo pytest >> {ran}; sleep {pytest_seconds}"
    commands["vllm_env"] = f"sleep {env_seconds}; echo vllm-env >> {ran}"
    done = _make_test(commands)
    assert done.returncode == 0, done.stdout + done.stderr
    seconds = {m[1]: int(m[4]) for m in map(SUMMARY.match, done.stdout.splitlines()) if m}
    assert pytest_seconds <= seconds["pytest"] <= pytest_seconds + 2, done.stdout  # each stage's own time
    waited = max(0, env_seconds - pytest_seconds)  # the vllm stage's time includes waiting for the build
    assert waited - 1 <= seconds["vllm"] <= waited + 2, done.stdout
    total = int(TOTAL.match(done.stdout.splitlines()[-1])[1])
    assert sum(seconds.values()) - 1 <= total <= sum(seconds.values()) + len(STAGES), done.stdout
    order = ran.read_text().split()
    assert sorted(order) == sorted([*STAGES, "vllm-env"]), order
    assert order.index("vllm") > max(order.index("pytest"), order.index("vllm-env")), order
    if pytest_seconds > env_seconds:
        assert order.index("vllm-env") == order.index("pytest") + 1, order  # built while pytest ran
    else:
        assert order[-2:] == ["vllm-env", "vllm"], order  # the other stages did not wait


def test_the_vllm_stage_runs_beside_the_stages_after_pytest_and_its_output_comes_after_theirs(tmp_path):
    """vLLM's tests take one core: they start when pytest ends and overlap nbval (here 6 s, theirs 2 s: the whole
    run takes about 6 s, not 8); their output is printed after the docs stage's, before the summary; their time is
    their own (from pytest's end to theirs), not the time make test waited for them."""
    ran = tmp_path / "ran"
    commands = _stand_ins(ran, (0,) * len(STAGES))
    commands["nbval"] = f"sleep 6; echo nbval >> {ran}"
    commands["vllm"] = f"echo vllm-started >> {ran}; sleep 2; echo the-vllm-output; exit 3"
    done = _make_test(commands)
    order = ran.read_text().split()
    assert order.index("vllm-started") < order.index("nbval"), order  # started while nbval ran
    lines = done.stdout.splitlines()
    docs = next(i for i, line in enumerate(lines) if line.startswith("== docs:"))
    summary = next(i for i, line in enumerate(lines) if SUMMARY.match(line))
    assert docs < lines.index("the-vllm-output") < summary, done.stdout
    seconds = {m[1]: (m[2], int(m[4])) for m in map(SUMMARY.match, lines) if m}
    assert seconds["vllm"][0] == "failed" and 1 <= seconds["vllm"][1] <= 4, done.stdout  # its own time, its code
    assert 5 <= int(TOTAL.match(lines[-1])[1]) <= 7 and done.returncode != 0, done.stdout


def test_each_stage_command_is_echoed_with_its_quotes_kept(tmp_path):
    ran = tmp_path / "ran"
    commands = _stand_ins(ran, (0,) * len(STAGES))
    commands["pytest"] = f"echo \"it's\" a, b >> {ran}; exit 0"
    done = _make_test(commands)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"== pytest: echo \"it's\" a, b >> {ran}; exit 0" in done.stdout.splitlines()
    ran_lines = ran.read_text().splitlines()  # the vllm stage runs in the background: its line may come earlier
    assert sorted(ran_lines) == sorted(["lock", "it's a, b", *STAGES[2:]]) and ran_lines[:2] == ["lock", "it's a, b"]


def test_the_stages_default_to_the_real_commands():
    """Without stand-ins the stages are the lock print, the pytest suite, nbval on notebooks/, the quick smoke run,
    the tutorials (notebooks/tutorials/ by papermill), the strict docs build and test-vllm, in this order (a dry run: make prints the recipe and runs none of it)."""
    done = subprocess.run(["make", "--no-print-directory", "-n", "-o", "install", "test"], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    needles = ["-m rlvr_lib.lockfile locks/", "-m pytest -n 2 -q tests", "-m rlvr_lib.study.reproduce --stored full",
               "RLVR_CACHE_ONLY=1 OMP_NUM_THREADS=1", "--nbval-lax $full", "--nbval-lax $quick",
               "reproduce --profile quick --force --workers 2",
               "papermill --no-progress-bar -k python3 \"$nb\" \".make/tutorials/", "-m mkdocs build --strict",
               "wait \"$job\"", "else go=$t; (make --no-print-directory test-vllm)",
               "exit $failed"]
    # vLLM's environment is built in the background from the start, in its own process group; the same job runs
    # the vllm stage once make test writes the go file after pytest.
    needles[:0] = ["setsid /bin/sh -c '(mkdir -p .make && make --no-print-directory vllm-env > .make/vllm-env.log "
                   "2>&1); while [ ! -s \"$2/go\" ]",
                   "(make --no-print-directory test-vllm) > \"$2/out\" 2>&1; code=$?; date +%s > \"$2/end\"; "
                   "exit $code' sh \"$$\" \"$run\" &"]
    needles.insert(needles.index("-m pytest -n 2 -q tests") + 1, "echo \"$go\" > \"$run/go\"")
    where = [text.find(needle) for needle in needles]
    assert -1 not in where and where == sorted(where), text
    for stage in STAGES[:-1]:
        assert f"stage $? {stage};" in text
    assert "stage $code vllm $go $end;" in text  # its code from the job or the fallback; from pytest's end to its own


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc (Linux)")
@pytest.mark.parametrize("shell", ["/bin/sh", "/bin/bash"])
def test_ctrl_c_stops_make_test_and_starts_no_later_stage(tmp_path, shell):
    """A stage that catches SIGINT and exits (as pytest does on Ctrl-C, exit code 2) does not let the next stage
    start: Ctrl-C still stops the whole target, under dash and under bash (which goes on after a child that
    handled the signal itself unless told otherwise)."""
    if not os.path.exists(shell):
        pytest.skip(f"no {shell}")
    ran = tmp_path / "ran"
    env_pid = tmp_path / "env.pid"
    commands = _stand_ins(ran, (0,) * len(STAGES))
    commands["pytest"] = f"trap 'kill $$!; exit 2' INT; echo pytest >> {ran}; sleep 30 & wait"
    commands["vllm_env"] = f"echo $$$$ > {env_pid}; sleep 30; echo vllm-env >> {ran}"
    proc = _make_test(commands, f"SHELL={shell}", start_new_session=True, stdout=subprocess.PIPE,
                      stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while "pytest" not in (ran.read_text() if ran.exists() else ""):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.05)
        time.sleep(0.3)  # the stand-in is inside its wait
        started = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: the whole foreground group
        output = proc.communicate(timeout=20)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0 and time.monotonic() - started < 15, output
    time.sleep(0.5)
    assert ran.read_text().split() == ["lock", "pytest"], output
    # The background build of vLLM's environment (its own process group, made by this make test) is stopped too.
    assert _running_in_group(int(env_pid.read_text())) == [], output


def _running_in_group(pgid: int) -> list[int]:
    """The processes of group ``pgid`` that are not zombies (one killed but not yet reaped is gone), from /proc."""
    running = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, IndexError, ValueError):
            continue  # ended while being read
        if int(group) == pgid and state != "Z":
            running.append(int(stat.parent.name))
    return running
