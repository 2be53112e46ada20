"""Issue 61 item 3: a user's data set as the task from the command line, without code: ``--dataset`` (a Hub name
or a local .jsonl/.json/.csv/.parquet file) with ``--prompt-column`` / ``--answer-column`` / ``--split``, or a
``dataset:`` block in a config file, into a `MathTask` (`rlvr_lib.tasks.math_task.dataset_task`). No Hub access
here: local files the tests write."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from rlvr_lib.__main__ import main
from rlvr_lib.config_files import build_config, use_dataset
from rlvr_lib.tasks import get_task, task_version
from rlvr_lib.tasks.math_task import MathTask, dataset_task

pytestmark = pytest.mark.usefixtures("restore_registries")


TINY = ["--set", "prompts_per_step=2", "--set", "group_size=2", "--set", "max_new_tokens=8"]


def _rows(n: int = 12) -> list[dict]:
    return [{"q": f"What is {a} times {b}?", "gold": str(a * b), "note": "x"} for a in range(3) for b in range(n // 3)]


def _jsonl(tmp_path: Path, name: str = "mine.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(row) + "\n" for row in _rows()))
    return path


def _csv(tmp_path: Path) -> Path:
    path = tmp_path / "mine.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["q", "gold", "note"])
        writer.writeheader()
        writer.writerows(_rows())
    return path


def _error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_dataset_task_reads_the_columns_of_a_jsonl_and_a_csv(tmp_path):
    for path in (_jsonl(tmp_path), _csv(tmp_path)):
        task = dataset_task(str(path), prompt_column="q", answer_column="gold")
        assert isinstance(task, MathTask) and task.families == ("train",) and task.default_eval_families == ("train",)
        assert task.family_capacity("train") == 12
        problems = task.family_problems("train", 12, seed=0)
        assert sorted(p.answer for p in problems) == sorted(row["gold"] for row in _rows())
        assert any("What is 2 times 3?" in p.question for p in problems)
        assert task.name.startswith("dataset-mine-") and task.version.startswith("dataset-")
    # the same arguments name the same task; other columns another one; the file's bytes are in its version
    assert dataset_task(str(path), prompt_column="q", answer_column="gold").name == task.name
    assert dataset_task(str(path), prompt_column="gold", answer_column="q").name != task.name
    before = task.version
    path.write_text(path.read_text().replace("What is 0", "What is zero"))
    assert dataset_task(str(path), prompt_column="q", answer_column="gold").version != before


def test_bad_columns_list_the_file_columns(tmp_path):
    path = _jsonl(tmp_path)
    with pytest.raises(ValueError, match=r"^prompt_column='question' is invalid: must be a column of .*mine\.jsonl: "
                                         r"one of \['q', 'gold', 'note'\]$"):
        dataset_task(str(path), prompt_column="question", answer_column="gold")
    with pytest.raises(ValueError, match=r"^answer_column='answer' is invalid: .*one of \['q', 'gold', 'note'\]"):
        dataset_task(str(path), prompt_column="q")
    with pytest.raises(ValueError, match=r"^source=.*absent\.jsonl' is invalid: must be an existing file"):
        dataset_task(str(tmp_path / "absent.jsonl"))
    with pytest.raises(ValueError, match=r"^split='test' is invalid: must be 'train' for a local file"):
        dataset_task(str(path), prompt_column="q", answer_column="gold", split="test")


def test_train_and_evaluate_on_a_local_file_from_the_command_line(tmp_path, capsys):
    data = _jsonl(tmp_path)
    out = tmp_path / "run"
    assert main(["train", "--method", "grpo", "--dataset", str(data), "--prompt-column", "q", "--answer-column",
                 "gold", "--steps", "1", *TINY, "--threads", "1", "--out", str(out)]) == 0
    (record_path,) = out.glob("grpo-*-s0.json")
    record = json.loads(record_path.read_text())
    name = dataset_task(str(data), prompt_column="q", answer_column="gold").name
    assert record["config"]["train"]["task"] == name and record["config"]["train"]["train_family"] == "train"
    assert record["config"]["task_version"] == task_version(name)
    (row,) = record["history"]
    assert 0.0 <= row["reward_mean"] <= 1.0
    capsys.readouterr()
    summary = tmp_path / "eval.json"
    assert main(["evaluate", "--model", str(out / "model"), "--dataset", str(data), "--prompt-column", "q",
                 "--answer-column", "gold", "--problems", "4", "--samples", "2", "--group-size", "2",
                 "--max-new-tokens", "8", "--threads", "1", "--out", str(summary)]) == 0
    written = json.loads(summary.read_text())
    assert written["spec"]["task"] == name and list(written["final"]["families"]) == ["train"]
    assert len(written["final"]["families"]["train"]["uids"]) == 4


def test_config_dataset_block(tmp_path):
    data = _csv(tmp_path)
    config = build_config("grpo", ("run.yaml", {"dataset": {"source": str(data), "prompt_column": "q",
                                                            "answer_column": "gold"}}))
    assert config.task == use_dataset({"source": str(data), "prompt_column": "q", "answer_column": "gold"})
    assert get_task(config.task).family_capacity("train") == 12
    with pytest.raises(ValueError, match=r"run.yaml: both `task` \('arith'\) and `dataset` are given"):
        build_config("grpo", ("run.yaml", {"task": "arith", "dataset": {"source": str(data)}}))
    with pytest.raises(ValueError, match=r"run.yaml dataset key='prompt' is invalid: must be one of \['source'"):
        build_config("grpo", ("run.yaml", {"dataset": {"source": str(data), "prompt": "q"}}))
    with pytest.raises(ValueError, match=r"run.yaml dataset=.* is invalid: must be a mapping with `source`"):
        build_config("grpo", ("run.yaml", {"dataset": str(data)}))


def test_command_line_errors_name_the_flag(tmp_path, capsys):
    data = _jsonl(tmp_path)
    out = tmp_path / "out"
    for command in (["train", "--method", "grpo"], ["evaluate"]):
        err = _error(capsys, [*command, "--dataset", str(data), "--prompt-column", "question", "--answer-column",
                              "gold", "--out", str(out)])
        assert "argument --prompt-column: prompt_column='question' is invalid: must be a column of" in err
        assert "one of ['q', 'gold', 'note']" in err
        err = _error(capsys, [*command, "--dataset", str(data), "--prompt-column", "q", "--out", str(out)])
        assert "argument --answer-column: answer_column='answer' is invalid" in err
        err = _error(capsys, [*command, "--prompt-column", "q", "--out", str(out)])
        assert "argument --prompt-column: only with --dataset" in err
        err = _error(capsys, [*command, "--dataset", str(data), "--task", "arith", "--out", str(out)])
        assert "argument --dataset: not with --task" in err
        err = _error(capsys, [*command, "--dataset", str(tmp_path / "none.csv"), "--out", str(out)])
        assert "argument --dataset: source=" in err and "must be an existing file" in err
    assert not out.exists()
