"""NudgeRL's Qwen3-4B config trains on ``dapo_math_17k_hints``: DAPO-Math-17k with an `LMHintPool` (5 keyword hints
per problem from a small instruct model), built offline: neither the data nor the writer model is loaded until
training draws them."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr_lib.config_files import config_from_file
from rlvr_lib.methods import build_method
from rlvr_lib.tasks import LMHintPool, Problem, get_task
from rlvr_lib.tasks.math_datasets import HINT_WRITER

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "nudgerl_qwen3_4b.yaml"


@pytest.fixture
def nothing_loads(monkeypatch):
    """Loading a data set or a model fails the test."""
    import datasets

    import rlvr_lib.policy

    def refuse(*args, **kwargs):
        raise AssertionError(f"loaded {args} while building the config")

    monkeypatch.setattr(datasets, "load_dataset", refuse)
    monkeypatch.setattr(rlvr_lib.policy, "load_policy", refuse)


def test_the_nudgerl_config_builds_offline_with_a_hint_pool(nothing_loads):
    config = config_from_file(CONFIG)
    assert (config.method, config.task, config.policy) == ("nudgerl", "dapo_math_17k_hints",
                                                           "Qwen/Qwen3-4B-Instruct-2507")
    assert build_method(config).name == "nudgerl"  # NudgeRL's check_task accepts the task: it has a hint pool
    task = get_task(config.task)
    pool = task.hint_pool
    assert isinstance(pool, LMHintPool) and pool.writer == HINT_WRITER
    assert (pool.n_hints, pool.temperature, pool.seed) == (5, 0.7, 0)  # the authors' count and temperature
    assert task.version == f"lm-hints-{HINT_WRITER}-n5-t0.7-s0"  # in the run's key: another writer, another run
    assert task.source == get_task("dapo_math_17k").source and task.families == get_task("dapo_math_17k").families


def test_the_plain_dapo_task_is_still_refused_by_nudgerl():
    from rlvr_lib.methods import method_config

    with pytest.raises(ValueError, match=r"^nudgerl: task 'dapo_math_17k' has no hint pool \(hint_pool=None\)"):
        build_method(method_config("nudgerl", task="dapo_math_17k"))


def test_a_pool_from_a_model_loads_its_writer_on_the_first_hint(tmp_path, tiny_model_and_tokenizer, monkeypatch):
    import rlvr_lib.policy

    model, tokenizer = tiny_model_and_tokenizer
    model.save_pretrained(tmp_path / "writer")
    tokenizer.save_pretrained(tmp_path / "writer")
    loads = []
    real = rlvr_lib.policy.load_policy

    def counted(*args, **kwargs):
        loads.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(rlvr_lib.policy, "load_policy", counted)
    pool = LMHintPool.from_model(str(tmp_path / "writer"), n_hints=3, max_new_tokens=6, seed=1)
    assert loads == [] and pool.writer == str(tmp_path / "writer")
    problem = Problem(uid="p1", question="12*34=?", answer="408", family="train", difficulty="easy",
                      oracle_trace="", strategy="", operands=(12, 34))
    hints = pool.hints(problem)
    assert len(loads) == 1 and 0 <= len(hints) <= 3 and all(isinstance(h, str) and h for h in hints)
    assert pool.hints(problem) == hints and len(loads) == 1  # cached per problem; the writer is loaded once
    other = Problem(uid="p2", question="21*43=?", answer="903", family="train", difficulty="easy",
                    oracle_trace="", strategy="", operands=(21, 43))
    pool.hints(other)
    assert len(loads) == 1


@pytest.mark.parametrize("kwargs, match", [({"engine": "nope"}, "engine='nope'"), ({"dtype": "int8"}, "dtype='int8'"),
                                           ({"model": ""}, "model=''")])
def test_from_model_checks_its_settings_before_loading(kwargs, match):
    settings = {"model": HINT_WRITER, **kwargs}
    with pytest.raises(ValueError, match=match):
        LMHintPool.from_model(settings.pop("model"), **settings)
