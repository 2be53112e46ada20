"""Faults lose nothing (issue 33, item 4): a training process killed anywhere, a damaged checkpoint, a full disk.

A run killed at any point of a step or of a checkpoint write resumes from the last complete checkpoint and
ends bit-identical to an uninterrupted run; a truncated or corrupted ``checkpoint.pt`` is refused with a
warning naming it and ``checkpoint.prev.pt`` is resumed instead; a write that fails (``ENOSPC``, ``EFBIG``)
leaves the previous checkpoint or record loadable, no temp file behind, and says which file it was writing.

Killed and resource-limited runs are forked children of the test process (nothing to import again), each
on one thread as the in-process runs here, so every run computes the same floats.
"""

import copy
import errno
import json
import os
import random
import resource
import signal
import time
import traceback
import warnings
from pathlib import Path

import pytest
import torch

from rlvr_lib.config import hash_jsonable
from rlvr_lib.files import write_json_atomic
from rlvr_lib.study.runs import RunRecord, cached_run
from rlvr_lib.methods import method_config
from rlvr_lib.trainer import CheckpointError, Trainer, previous_checkpoint, read_checkpoint

pytestmark = pytest.mark.hostile_class("faults", host=True)  # host: nothing lost

CFG = method_config("grpo", steps=6, prompts_per_step=2, group_size=4, max_new_tokens=40, train_family="train",
                    checkpoint_every=1, seed=7)
CKPT = "checkpoint.pt"


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Every run of this module on one thread: the forked runs and the in-process ones compute the same floats."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _trainer(policy, folder) -> Trainer:
    return Trainer(CFG, copy.deepcopy(policy[0]), policy[1], checkpoint_dir=folder)


@pytest.fixture(scope="module")
def reference(policy, tmp_path_factory):
    """The uninterrupted run: its final checkpoint's state and its wall time."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    start = time.perf_counter()
    _trainer(policy, folder).train(progress=False)
    seconds = time.perf_counter() - start
    state = read_checkpoint(folder / CKPT)
    assert state["step"] == CFG.steps
    changed = [k for k, v in policy[0].state_dict().items() if not torch.equal(v, state["model"][k])]
    assert changed, "training left the weights as they were: comparing them would prove nothing"
    return state, seconds


def _assert_same_run(state, expected):
    """Everything in the two checkpoints is equal, bit for bit, but the history's wall-clock fields."""
    assert state["step"] == expected["step"]
    assert _untimed(state["history"]) == _untimed(expected["history"])
    _assert_equal(state["model"], expected["model"], "model")
    _assert_equal(state["optimizer"], expected["optimizer"], "optimizer")
    _assert_equal(state["method"], expected["method"], "method")


def _untimed(history):
    return [{k: v for k, v in row.items() if not k.startswith("time_")} for row in history]


def _assert_equal(a, b, where):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            _assert_equal(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_equal(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def _temp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# ----------------------------------------------------------------- forked runs
def _fork(body) -> int:
    """Runs ``body()`` in a forked child; returns its pid. The child exits 0 if ``body`` returned, else 1."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            body()
            code = 0
        except BaseException:  # noqa: BLE001 - reported on stderr, the exit status says it failed
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def _wait(pid: int) -> int:
    """The child's exit code; minus the signal's number if a signal ended it."""
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _die_at(kind: str, n: int, half: int) -> None:
    """In a child: SIGKILL itself at the ``n``-th ``kind`` event of its checkpoint writes.

    ``"write"``: once ``half`` bytes of the ``n``-th checkpoint's temp file are written (and flushed);
    ``"link"``, ``"fsync"``, ``"replace"``: right after the ``n``-th such call (keeping the previous
    checkpoint, before the temp file is renamed, after it is).
    """
    calls = [0]

    def count() -> bool:
        calls[0] += 1
        return calls[0] == n

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    if kind == "write":
        save = torch.save

        class HalfThenDie:
            def __init__(self, file):
                self.file, self.written = file, 0

            def write(self, data):
                out = self.file.write(data)
                self.written += len(data)
                if self.written >= half:
                    self.file.flush()
                    die()
                return out

            def flush(self):
                self.file.flush()

        torch.save = lambda obj, f, *a, **kw: save(obj, HalfThenDie(f) if count() else f, *a, **kw)
    else:
        real = getattr(os, kind)

        def then_die(*args, **kwargs):
            out = real(*args, **kwargs)
            if count():
                die()
            return out

        setattr(os, kind, then_die)


@pytest.mark.hostile_class("killed run", host=True)
def test_a_run_killed_anywhere_resumes_bit_identical(policy, reference, tmp_path):
    expected, seconds = reference
    half = _checkpoint_size(expected, tmp_path) // 2
    rng = random.Random(33)
    # At every point of a checkpoint write, in a seeded order, the n-th time it comes in that run...
    targeted = [(kind, rng.choice([1, 2])) for kind in rng.sample(["write", "link", "fsync", "replace"], 4)]
    # ...then twice at a seeded moment of the run, mostly inside a step.
    delays = [rng.uniform(0.05, 0.5) * seconds for _ in range(2)]

    def run(kill=None):
        def body():
            if kill:
                _die_at(*kill, half=half)
            _trainer(policy, tmp_path / "run").train(progress=False)
        return body

    for kill in targeted:
        code = _wait(_fork(run(kill)))
        assert code == -signal.SIGKILL, f"the run was to die at {kill} but exited with {code}"
        if kill[0] == "write":
            assert _temp_files(tmp_path / "run"), "the write killed halfway left no partial temp file"
    steps_done = read_checkpoint(tmp_path / "run" / CKPT)["step"]
    assert 0 < steps_done < CFG.steps
    for delay in delays:
        pid = _fork(run())
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)  # a child that already finished stays a zombie until waited: still its pid
        assert _wait(pid) in (0, -signal.SIGKILL)
    assert _wait(_fork(run())) == 0

    _assert_same_run(read_checkpoint(tmp_path / "run" / CKPT), expected)
    assert _temp_files(tmp_path / "run") == []


@pytest.mark.hostile_class("killed run", host=True)
def test_a_finished_run_reopened_removes_the_temp_files_a_kill_left(policy, tmp_path):
    # A kill inside the last checkpoint write of a run leaves a temp file, and a resumed run with no step left
    # writes no checkpoint that would clean it: opening the folder does.
    trainer = _trainer(policy, tmp_path)
    trainer.train(progress=False)
    for name in (f".{CKPT}.4242.tmp", ".checkpoint.prev.pt.4242.tmp"):
        (tmp_path / name).write_bytes(b"half a checkpoint")
    reopened = _trainer(policy, tmp_path)
    assert _temp_files(tmp_path) == [] and reopened.step_count == CFG.steps
    assert reopened.train(progress=False) == trainer.history  # nothing left to do, nothing changed


def test_a_save_after_a_write_killed_past_keeping_the_previous_leaves_no_temp_file(policy, tmp_path):
    """A kill after the previous checkpoint was kept (a hard link of ``checkpoint.pt``) and before the new one
    replaced it leaves both names on one file; the next save keeps that file as the previous one and leaves no temp
    link (rename() of two links of one file does nothing, so a temp link renamed onto it would stay)."""
    trainer = _trainer(policy, tmp_path)
    trainer.step()  # checkpoint_every=1: writes checkpoint.pt
    assert not (tmp_path / "checkpoint.prev.pt").exists()
    os.link(tmp_path / CKPT, tmp_path / "checkpoint.prev.pt")  # the killed write's state
    kept = (tmp_path / CKPT).read_bytes()
    trainer.step()
    assert _temp_files(tmp_path) == []
    assert (tmp_path / "checkpoint.prev.pt").read_bytes() == kept
    assert read_checkpoint(tmp_path / CKPT)["step"] == 2 and read_checkpoint(tmp_path / "checkpoint.prev.pt")["step"] == 1


def _checkpoint_size(state, folder: Path) -> int:
    """Bytes of a checkpoint of ``state``'s size (what a half-written temp file is half of)."""
    path = folder / "size-probe.pt"
    torch.save(state, path)
    size = path.stat().st_size
    path.unlink()
    return size


# ----------------------------------------------------------------- damaged checkpoints
def _damaged_resume(policy, tmp_path, damage, match):
    """Three steps, damage ``checkpoint.pt`` (step 3): the resume warns naming it and goes on from step 2."""
    first = _trainer(policy, tmp_path)
    for _ in range(3):
        first.step()
    path = tmp_path / CKPT
    damage(path)
    with pytest.warns(RuntimeWarning, match=match) as caught:
        resumed = _trainer(policy, tmp_path)
    message = str(caught[0].message)
    assert str(path) in message and str(previous_checkpoint(path)) in message, message
    assert resumed.step_count == 2
    return resumed


@pytest.mark.hostile_class("damaged checkpoint", host=True)
def test_a_truncated_checkpoint_is_refused_and_the_previous_one_resumed(policy, reference, tmp_path):
    def truncate(path):
        os.truncate(path, path.stat().st_size // 2)

    resumed = _damaged_resume(policy, tmp_path, truncate, "is truncated or corrupted")
    resumed.train(progress=False)
    _assert_same_run(read_checkpoint(tmp_path / CKPT), reference[0])


@pytest.mark.hostile_class("damaged checkpoint", host=True)
def test_a_corrupted_checkpoint_is_refused_and_the_previous_one_resumed(policy, reference, tmp_path):
    def flip(path):
        data = bytearray(path.read_bytes())
        for i in range(len(data) // 2, len(data) // 2 + 16):  # inside the weights: torch.load alone reads them
            data[i] ^= 0xFF
        path.write_bytes(bytes(data))

    resumed = _damaged_resume(policy, tmp_path, flip, "is corrupted: its content does not match the sha256")
    resumed.train(progress=False)
    _assert_same_run(read_checkpoint(tmp_path / CKPT), reference[0])


@pytest.mark.hostile_class("damaged checkpoint", host=True)
def test_when_both_checkpoints_are_damaged_the_error_names_both(policy, tmp_path):
    first = _trainer(policy, tmp_path)
    first.step(), first.step()
    path, prev = tmp_path / CKPT, previous_checkpoint(tmp_path / CKPT)
    os.truncate(path, 100)
    prev.write_bytes(b"not a checkpoint")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "resuming from the previous checkpoint" warning before the error
        with pytest.raises(CheckpointError) as caught:
            _trainer(policy, tmp_path)
    assert f"delete {path} and {prev} to start over" in str(caught.value)


# ----------------------------------------------------------------- failed writes
def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.hostile_class("full disk", host=True)
@pytest.mark.parametrize("where", ["write", "fsync", "replace"])
def test_a_full_disk_during_a_checkpoint_write_keeps_the_previous_one(policy, tmp_path, monkeypatch, where):
    trainer = _trainer(policy, tmp_path)
    trainer.step()
    path = tmp_path / CKPT
    if where == "write":  # the disk fills a megabyte into the checkpoint's temp file
        fdopen = os.fdopen

        class FillsUp:
            def __init__(self, file):
                self.file, self.written = file, 0

            def write(self, data):
                self.written += len(data)
                if self.written > 1 << 20:
                    _no_space()
                return self.file.write(data)

            def __getattr__(self, name):
                return getattr(self.file, name)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.file.close()

        monkeypatch.setattr(os, "fdopen", lambda fd, mode: FillsUp(fdopen(fd, mode)))
    elif where == "fsync":
        monkeypatch.setattr(os, "fsync", _no_space)
    else:
        replace = os.replace
        monkeypatch.setattr(os, "replace", lambda src, dst: _no_space() if Path(dst) == path else replace(src, dst))
    with pytest.raises(OSError) as caught:
        trainer.step()
    monkeypatch.undo()
    assert caught.value.errno == errno.ENOSPC
    assert f"while writing {path} ({CKPT} is left as it was" in str(caught.value)
    assert read_checkpoint(path)["step"] == 1 and read_checkpoint(previous_checkpoint(path))["step"] == 1
    assert _temp_files(tmp_path) == []
    assert _trainer(policy, tmp_path).step_count == 1


def _record(n_rows: int) -> RunRecord:
    key = hash_jsonable({})  # a record RunRecord.load's check accepts (config_hash and run_id agree with config)
    return RunRecord(experiment="faults", name="grpo", run_id=f"grpo-{key}-s0", config={}, config_hash=key, seed=0,
                     history=[{"step": i, "reward_mean": 0.5} for i in range(n_rows)])


@pytest.mark.hostile_class("full disk", host=True)
def test_a_full_disk_during_a_record_write_keeps_the_previous_record(tmp_path, monkeypatch):
    path = _record(2).save(tmp_path / "grpo-0-s0.json")
    monkeypatch.setattr(os, "fsync", _no_space)
    with pytest.raises(OSError) as caught:
        _record(3).save(path)
    assert caught.value.errno == errno.ENOSPC and f"while writing {path}" in str(caught.value)
    with pytest.raises(OSError, match=r"while writing .*/faults/run-\w+-s0\.json"):  # cached_run: the same
        cached_run("faults", "run", {"a": 1}, 0, lambda: ([], {"x": 1.0}), root=tmp_path)
    monkeypatch.undo()
    assert len(RunRecord.load(path).history) == 2
    assert _temp_files(tmp_path) == [] and _temp_files(tmp_path / "faults") == []
    assert not list((tmp_path / "faults").glob("*.json"))
    assert cached_run("faults", "run", {"a": 1}, 0, lambda: ([], {"x": 1.0}), root=tmp_path).final == {"x": 1.0}


@pytest.mark.hostile_class("full disk", host=True)
def test_a_file_size_limit_during_checkpoint_and_record_writes_keeps_the_previous_ones(policy, tmp_path):
    """A real RLIMIT_FSIZE (SIGXFSZ ignored, so writes past it fail with EFBIG), in a forked child."""
    path, record = tmp_path / CKPT, tmp_path / "grpo-0-s0.json"

    def body():
        trainer = _trainer(policy, tmp_path)
        trainer.step()
        _record(2).save(record)
        errors = {}
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        for what, limit, write in [("checkpoint", path.stat().st_size // 2, trainer.step),
                                   ("record", record.stat().st_size, lambda: _record(200).save(record))]:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
            try:
                write()
            except OSError as err:
                errors[what] = [err.errno, str(err)]
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        write_json_atomic(tmp_path / "errors.json", errors)

    assert _wait(_fork(body)) == 0
    errors = json.loads((tmp_path / "errors.json").read_text())
    assert errors.keys() == {"checkpoint", "record"}, errors
    for (code, message), written in [(errors["checkpoint"], path), (errors["record"], record)]:
        assert code == errno.EFBIG and f"while writing {written} ({written.name} is left as it was" in message
    assert read_checkpoint(path)["step"] == 1
    assert len(RunRecord.load(record).history) == 2
    assert _temp_files(tmp_path) == []


@pytest.mark.hostile_class("no hard links", host=True)
def test_without_hard_links_the_previous_checkpoint_is_a_copy(policy, tmp_path, monkeypatch):
    def no_links(*args, **kwargs):
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(os, "link", no_links)  # a file system without hard links
    trainer = _trainer(policy, tmp_path)
    trainer.step(), trainer.step()
    path = tmp_path / CKPT
    assert read_checkpoint(path)["step"] == 2 and read_checkpoint(previous_checkpoint(path))["step"] == 1
    assert _temp_files(tmp_path) == []
