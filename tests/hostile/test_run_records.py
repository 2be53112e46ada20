"""Issue 60, item 5: run records carry a checksum and are schema-checked on read; a record that fails is recomputed
with a warning (as a truncated one is), or refused under ``RLVR_CACHE_ONLY=1``; every committed record still reads;
a lock held by a killed process does not block the next run.

Every test writes under a tmp results root only; the committed records are only read.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import pytest

from counting_run import CountingRun as Counter
from rlvr_lib.study.runs import (CACHE_ONLY_ENV, CHECKSUM_KEY, CacheMiss, RecordInvalid, RunRecord, cached_run,
                                 check_record, load_runs, read_record, record_checksum)

pytestmark = pytest.mark.hostile_class("run records (checksum, schema)", host=False)

RESULTS = Path(__file__).resolve().parents[2] / "results"


CFG = {"lr": 0.1, "steps": 3}


def _first(tmp_path, fn=None):
    fn = fn or Counter()
    rec = cached_run("exp", "run", CFG, 0, fn, root=tmp_path)
    return rec, tmp_path / "exp" / f"{rec.run_id}.json", fn


# ------------------------------------------------------------------ writing
def test_a_new_record_carries_the_checksum_of_its_other_fields(tmp_path):
    rec, path, _ = _first(tmp_path)
    data = json.loads(path.read_text())
    assert data[CHECKSUM_KEY].startswith("sha256:") and len(data[CHECKSUM_KEY]) == len("sha256:") + 64
    assert data[CHECKSUM_KEY] == record_checksum(data) == record_checksum({k: v for k, v in data.items()
                                                                           if k != CHECKSUM_KEY})
    # the other fields and the run key are what they were before checksums: the record minus its checksum
    assert {k: v for k, v in data.items() if k != CHECKSUM_KEY} == rec.to_dict()
    assert CHECKSUM_KEY not in rec.to_dict() and path.stem == rec.run_id
    assert RunRecord.load(path) == rec
    saved = rec.save(tmp_path / "copy.json")  # RunRecord.save seals too
    assert json.loads(saved.read_text())[CHECKSUM_KEY] == data[CHECKSUM_KEY]


def test_the_checksum_is_canonical_and_changes_with_any_value():
    a = {"b": 1, "a": [1.5, None, "x"], "c": {"z": 0, "y": -0.0}}
    assert record_checksum(a) == record_checksum(dict(reversed(list(a.items()))))  # key order does not count
    assert record_checksum(a) == record_checksum({**a, CHECKSUM_KEY: "anything"})
    assert record_checksum(a) != record_checksum({**a, "b": 2})
    assert record_checksum(a) != record_checksum({**a, "b": 1.0})  # 1 and 1.0 are different JSON
    assert record_checksum(a) != record_checksum({**a, "c": {"z": 0, "y": 0.0}})


# ------------------------------------------------------------------ reading
def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


EDITS = {
    # name: (change, what the warning / CacheMiss says)
    "metric_edited": (lambda d: d["final"].update({"pass@1": 0.99}), "checksum mismatch"),
    "history_edited": (lambda d: d["history"][0].update({"loss": 0.0}), "checksum mismatch"),
    "seed_a_string": (lambda d: d.update(seed="0"), "field 'seed' must be int, got str"),
    "seed_a_bool": (lambda d: d.update(seed=False), "field 'seed' must be int, got bool"),
    "final_a_list": (lambda d: d.update(final=[0.25]), "field 'final' must be dict, got list"),
    "history_rows_not_objects": (lambda d: d.update(history=[1, 2]), "history[0] must be an object"),
    "wall_time_a_string": (lambda d: d.update(wall_time_s="3"), "field 'wall_time_s' must be number, got str"),
    "config_missing": (lambda d: d.pop("config"), "missing required field(s) ['config']"),
    "checksum_a_number": (lambda d: d.update(checksum=5), "field 'checksum' must be str"),
    "config_edited_hash_kept": (lambda d: (d.pop(CHECKSUM_KEY), d["config"].update(lr=0.5)),
                                "is not the hash of the record's config"),
    "not_an_object": (lambda d: (d.clear(), d.update({"run_id": 1})), "missing required field(s)"),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_record_that_fails_is_recomputed_with_a_warning_naming_file_and_reason(tmp_path, caplog, edit):
    change, reason = EDITS[edit]
    rec, path, fn = _first(tmp_path)
    _edit(path, change)
    with pytest.raises(RecordInvalid, match=str(path).replace(".", r"\.")):
        RunRecord.load(path)
    with caplog.at_level(logging.WARNING, logger="rlvr_lib.study.runs"):
        again = cached_run("exp", "run", CFG, 0, fn, root=tmp_path)
    assert fn.calls == 2  # recomputed, as a truncated record is
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and str(path) in warned[0] and reason in warned[0], warned
    assert again.final == {"pass@1": 0.25} and again.seed == 0
    assert read_record(path)[CHECKSUM_KEY] == record_checksum(json.loads(path.read_text()))  # rewritten, sealed


@pytest.mark.parametrize("edit", ["metric_edited", "seed_a_string", "config_missing"])
def test_under_cache_only_a_failing_record_raises_cache_miss_with_the_reason(tmp_path, monkeypatch, edit):
    change, reason = EDITS[edit]
    rec, path, fn = _first(tmp_path)
    _edit(path, change)
    monkeypatch.setenv(CACHE_ONLY_ENV, "1")
    with pytest.raises(CacheMiss) as err:
        cached_run("exp", "run", CFG, 0, fn, root=tmp_path)
    assert "stale or unreadable" in str(err.value) and reason in str(err.value) and str(path) in str(err.value)
    assert fn.calls == 1  # nothing computed


def test_a_truncated_record_gives_the_same_path_with_its_reason(tmp_path, monkeypatch, caplog):
    rec, path, fn = _first(tmp_path)
    path.write_text(path.read_text()[:50])
    monkeypatch.setenv(CACHE_ONLY_ENV, "1")
    with pytest.raises(CacheMiss, match=r"stale or unreadable \(run record .*unreadable \(JSONDecodeError"):
        cached_run("exp", "run", CFG, 0, fn, root=tmp_path)
    monkeypatch.delenv(CACHE_ONLY_ENV)
    with caplog.at_level(logging.WARNING, logger="rlvr_lib.study.runs"):
        cached_run("exp", "run", CFG, 0, fn, root=tmp_path)
    assert fn.calls == 2 and any("unreadable" in r.getMessage() for r in caplog.records)


def test_a_legacy_record_without_checksum_is_served_unchanged(tmp_path):
    rec, path, fn = _first(tmp_path)
    _edit(path, lambda d: d.pop(CHECKSUM_KEY))  # as written before issue 60
    before = path.read_text()
    assert cached_run("exp", "run", CFG, 0, fn, root=tmp_path) == rec and fn.calls == 1
    assert path.read_text() == before  # read, not rewritten
    # a record of a run without the study (rlvr_lib.run.record_dict: no git_commit) passes too
    _edit(path, lambda d: d.pop("git_commit"))
    assert cached_run("exp", "run", CFG, 0, fn, root=tmp_path).git_commit is None and fn.calls == 1


def test_load_runs_refuses_a_record_of_wrong_types_and_warns_on_a_checksum_mismatch(tmp_path, caplog):
    rec, path, fn = _first(tmp_path)
    _edit(path, lambda d: d["final"].update({"pass@1": 0.5}))
    with caplog.at_level(logging.WARNING, logger="rlvr_lib.study.runs"):
        [loaded] = load_runs("exp", tmp_path)
    assert loaded.final == {"pass@1": 0.5}
    assert any("checksum mismatch" in r.getMessage() and str(path) in r.getMessage() for r in caplog.records)
    _edit(path, lambda d: d.update(final="0.5"))
    with pytest.raises(RecordInvalid, match=r"exp/run-.*\.json: field 'final' must be dict, got str"):
        load_runs("exp", tmp_path)


def test_check_record_messages_name_the_field_and_what_is_allowed():
    with pytest.raises(RecordInvalid, match="expected a JSON object, got list"):
        check_record([])
    with pytest.raises(RecordInvalid, match=r"field 'git_commit' must be str or null, got int"):
        check_record({"experiment": "e", "name": "n", "run_id": "n-x-s0", "config": {}, "config_hash": "x",
                      "seed": 0, "git_commit": 3})


# ---------------------------------------------------- every committed record
def _committed_records() -> list[Path]:
    out = []
    for p in sorted(RESULTS.glob("**/*.json")):
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError):  # a record being written is atomic: a JSON that does not parse is no record
            continue
        if isinstance(data, dict) and "run_id" in data:
            out.append(p)
    return out


def test_every_committed_record_passes_the_check_and_reads_unchanged():
    paths = _committed_records()
    assert len(paths) >= 500, f"expected the committed run records under {RESULTS}, found {len(paths)}"
    failed = {}
    for p in paths:
        try:
            data = read_record(p)
        except RecordInvalid as e:
            failed[str(p.relative_to(RESULTS))] = str(e)
            continue
        rec = RunRecord.from_dict(data)
        assert {k: v for k, v in rec.to_dict().items() if k in data} == {k: v for k, v in data.items()
                                                                         if k != CHECKSUM_KEY}, p
    assert not failed, f"{len(failed)} of {len(paths)} committed records fail: {dict(list(failed.items())[:5])}"


# ------------------------------------------------------------------ locks
def _hold_the_lock_forever(root, started):
    def fn():
        started.set()
        time.sleep(600)
        return [], {}

    cached_run("exp", "run", CFG, 0, fn, root=root)


def _second(root, queue):
    queue.put(cached_run("exp", "run", CFG, 0, Counter(), root=root).final)


def test_a_lock_of_a_killed_process_is_taken_over_promptly(tmp_path):
    """cached_run's lock is an ``fcntl.flock``: the kernel releases it when its holder dies, even by SIGKILL, so
    the next process proceeds at once; the empty ``.lock`` file left behind blocks nothing."""
    ctx = mp.get_context("spawn")
    started = ctx.Event()
    holder = ctx.Process(target=_hold_the_lock_forever, args=(str(tmp_path), started))
    holder.start()
    try:
        assert started.wait(60), "the first process never entered its run"
        queue = ctx.Queue()
        second = ctx.Process(target=_second, args=(str(tmp_path), queue))
        second.start()
        time.sleep(1.0)
        assert queue.empty()  # blocked behind the live holder
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(10)
        t0 = time.monotonic()
        final = queue.get(timeout=60)
        assert final == {"pass@1": 0.25}
        assert time.monotonic() - t0 < 30
        second.join(30)
        assert second.exitcode == 0
    finally:
        if holder.is_alive():
            os.kill(holder.pid, signal.SIGKILL)
            holder.join(10)
    lock = next((tmp_path / "exp").glob(".*.lock"))
    assert lock.exists()  # the file stays; it is the flock on it that died with the process
    assert cached_run("exp", "run", CFG, 0, Counter(), root=tmp_path).final == {"pass@1": 0.25}  # a cache hit now
