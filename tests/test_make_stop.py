"""`make stop` ends a background reproduction by its process id, and `make lab` runs as root (issue 60 item 8).

README told users to stop a run with ``pkill -f rlvr_lib.study.reproduce``, which ends every matching process on
the host, other people's runs included. `make stop` signals the one process in a pid file. These tests stand a
small stand-in for the reproduction (a process with ``reproduce`` in its command line that records the SIGTERM it
gets) and run the repository's Makefile against it; none of them starts a real reproduction.
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None or shutil.which("ps") is None, reason="needs make, ps")

STAND_IN = """
import signal, sys, time
from pathlib import Path
marker = Path(sys.argv[1])
def stop(signum, frame):
    marker.write_text("SIGTERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
Path(sys.argv[2]).write_text("ready")
time.sleep(120)
"""


def make_stop(pidfile: Path, wait: int = 20) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", "-C", str(REPO), "stop", f"PIDFILE={pidfile}",
                           f"STOP_WAIT={wait}"], capture_output=True, text=True, timeout=wait + 30)


def start(tmp_path: Path, argv: list[str]) -> subprocess.Popen:
    ready = tmp_path / "ready"
    process = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert process.poll() is None and time.monotonic() < deadline, "the stand-in did not start"
        time.sleep(0.05)
    return process


def stand_in(tmp_path: Path, word: str = "reproduce") -> list[str]:
    script = tmp_path / f"{word}_stand_in.py"
    script.write_text(STAND_IN)
    return [sys.executable, str(script), str(tmp_path / "got"), str(tmp_path / "ready")]


@pytest.fixture
def cleanup():
    started = []
    yield started
    for process in started:  # only the processes this test started, by their id
        if process.poll() is None:
            process.kill()
            process.wait(10)


def test_stop_sends_sigterm_to_the_pid_and_removes_the_file(tmp_path, cleanup):
    process = start(tmp_path, stand_in(tmp_path))
    cleanup.append(process)
    pidfile = tmp_path / "reproduce.pid"
    pidfile.write_text(f"{process.pid}\n")
    result = make_stop(pidfile)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"sent SIGTERM to {process.pid}" in result.stdout and "stopped" in result.stdout
    assert process.wait(10) == 0 and (tmp_path / "got").read_text() == "SIGTERM"
    assert not pidfile.exists()


def test_stop_through_make_reaches_the_reproduction(tmp_path, cleanup):
    """README's command records make's pid: GNU make passes SIGTERM on to the recipe it runs."""
    (tmp_path / "Makefile").write_text("reproduce:\n\t" + " ".join(stand_in(tmp_path)) + "\n")
    process = start(tmp_path, ["make", "--no-print-directory", "-f", str(tmp_path / "Makefile"), "reproduce"])
    cleanup.append(process)
    pidfile = tmp_path / "reproduce.pid"
    pidfile.write_text(str(process.pid))
    result = make_stop(pidfile)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "got").read_text() == "SIGTERM"  # the recipe's process got it, not only make
    process.wait(10)
    assert not pidfile.exists()


def test_a_reused_pid_of_another_command_is_not_signalled(tmp_path, cleanup):
    process = start(tmp_path, stand_in(tmp_path, word="other_job"))
    cleanup.append(process)
    pidfile = tmp_path / "reproduce.pid"
    pidfile.write_text(str(process.pid))
    result = make_stop(pidfile)
    assert result.returncode != 0 and "is not a reproduce run" in result.stdout, result.stdout
    time.sleep(0.5)
    assert process.poll() is None and not (tmp_path / "got").exists()  # still running, never signalled
    assert pidfile.exists()


def test_a_pid_whose_process_ended_only_removes_the_file(tmp_path):
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(10)
    pidfile = tmp_path / "reproduce.pid"
    pidfile.write_text(str(process.pid))
    result = make_stop(pidfile)
    assert result.returncode == 0 and f"process {process.pid} has ended" in result.stdout, result.stdout
    assert not pidfile.exists()


@pytest.mark.parametrize("content, message", [(None, "no "), ("", "holds no process id"),
                                              ("12ab", "holds no process id"), ("-1", "holds no process id"),
                                              ("1 2", "holds no process id")])
def test_a_missing_or_bad_pid_file_is_an_error(tmp_path, content, message):
    pidfile = tmp_path / "reproduce.pid"
    if content is not None:
        pidfile.write_text(content)
    result = make_stop(pidfile)
    assert result.returncode != 0 and message in result.stdout, result.stdout
    if content is None:
        assert "echo $! >" in result.stdout  # says how to start a run with a pid file


def test_the_stop_waits_for_a_slow_shutdown_and_reports_it(tmp_path, cleanup):
    script = tmp_path / "reproduce_slow.py"
    script.write_text("import signal, time\nfrom pathlib import Path\n"
                      "signal.signal(signal.SIGTERM, lambda *a: None)\n"  # ignores it: still shutting down
                      f"Path({str(tmp_path / 'ready')!r}).write_text('ready')\ntime.sleep(120)\n")
    process = start(tmp_path, [sys.executable, str(script)])
    cleanup.append(process)
    pidfile = tmp_path / "reproduce.pid"
    pidfile.write_text(str(process.pid))
    result = make_stop(pidfile, wait=2)
    assert result.returncode != 0 and "still running after 2 s" in result.stdout, result.stdout
    assert process.poll() is None and pidfile.exists()  # not killed harder, and stoppable again later


@pytest.mark.parametrize("uid, root", [("0", True), ("1000", False)])
def test_lab_passes_allow_root_only_as_root(uid, root):
    result = subprocess.run(["make", "--no-print-directory", "-n", "-C", str(REPO), "lab", f"LAB_UID={uid}"],
                            capture_output=True, text=True, timeout=60)
    lab = [line for line in result.stdout.splitlines() if "jupyter lab" in line]
    assert len(lab) == 1, result.stdout + result.stderr
    assert ("--allow-root" in lab[0]) == root


def test_lab_reads_the_real_uid_by_default():
    result = subprocess.run(["make", "--no-print-directory", "-n", "-C", str(REPO), "lab"], capture_output=True,
                            text=True, timeout=60)
    (lab,) = [line for line in result.stdout.splitlines() if "jupyter lab" in line]
    assert ("--allow-root" in lab) == (os.getuid() == 0)


def test_readme_never_tells_users_to_pkill():
    for page in (REPO / "README.md", REPO / "docs" / "checking.md"):  # the front page and the two commands' page
        readme = page.read_text(encoding="utf-8")
        assert "pkill" not in readme and "killall" not in readme
        assert "make stop" in readme and "reproduce.pid" in readme, page


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs a git checkout")
def test_quick_profile_notebooks_are_ignored_and_full_ones_are_not():
    """`reproduce --profile quick` writes executed notebooks to results/notebooks/quick/: never to be committed."""
    quick, full = "results/notebooks/quick/01_any.ipynb", "results/notebooks/full/01_any.ipynb"
    ignored = subprocess.run(["git", "-C", str(REPO), "check-ignore", "--no-index", quick, full],
                             capture_output=True, text=True, timeout=30).stdout.split()
    assert ignored == [quick]
