"""The loop after a refactor gives the records it gave before, number for number.

`tests/data/regression/records/` holds quick `train_and_evaluate` runs written by
`tests/data/regression/make_records.py` with the code of the commit each record
names. Replaying them with today's code must give the same training history
(every metric but wall-clock times) and the same final evaluation, exactly. A
deliberate change of behaviour means regenerating the records, and saying so.
"""

import json
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data" / "regression"
sys.path.insert(0, str(DATA))
from make_records import CONFIGS, EXPERIMENT, SPEC  # noqa: E402

from rlvr_lib.pipeline import train_and_evaluate  # noqa: E402


def _stored(name: str) -> dict:
    (path,) = (DATA / EXPERIMENT).glob(f"{name}-*-s0.json")
    return json.loads(path.read_text())


def _untimed(history):
    return [{k: v for k, v in row.items() if not k.startswith("time_")} for row in history]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_replayed_run_equals_the_stored_record(name, tmp_path):
    stored = _stored(name)
    record = train_and_evaluate(EXPERIMENT, name, CONFIGS[name], SPEC, root=tmp_path, checkpoint_every=0)
    assert record.run_id == stored["run_id"]  # same config hash: the stored runs stay cache hits
    fresh = json.loads(json.dumps(record.to_dict()))  # through JSON, as stored
    assert _untimed(fresh["history"]) == _untimed(stored["history"])
    assert fresh["final"] == stored["final"]
