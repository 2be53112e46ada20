"""A task without the default training family is an error of the layer that chose the task (issue 60 item 8).

``train --task math500`` kept TrainerConfig's default ``train_family='train'``, which MATH-500 lacks; the error
named ``--method`` and did not say that the task reads the Hugging Face Hub. Each case runs ``main(argv)`` in a
temporary folder and is refused before any model or data loads.
"""

import pytest

from rlvr_lib.__main__ import main

HUB = "reads the Hugging Face Hub data set 'HuggingFaceH4/MATH-500'"


def _error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1, err
    return err


@pytest.fixture
def place(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("layer, argv, flag", [
    ("flag", ["--task", "math500"], "--task"),
    ("set", ["--set", "task=math500"], "--set"),
    ("config", ["--config", "cfg.yaml"], "--config"),
])
def test_a_hub_task_without_the_default_family_names_the_task_layer_and_the_hub(capsys, place, layer, argv, flag):
    (place / "cfg.yaml").write_text("method: grpo\ntask: math500\n")
    method = [] if layer == "config" else ["--method", "grpo"]
    err = _error(capsys, ["train", *method, *argv, "--steps", "1", "--out", "run"])
    assert f"argument {flag}: task 'math500' has no family 'train'" in err, err
    assert "['math500', 'math500_l5']" in err and "--set train_family=math500" in err
    assert HUB in err and "network or a cached copy" in err and "--task math_sample" in err
    assert "--method" not in err.split(":", 2)[1]  # the method is not what was wrong
    assert not (place / "run").exists()


def test_a_local_task_without_the_default_family_names_task_and_no_hub(capsys, place):
    err = _error(capsys, ["train", "--method", "grpo", "--task", "code_sample", "--out", "run"])
    assert "argument --task: task 'code_sample' has no family 'train'" in err and "['all']" in err, err
    assert "Hub" not in err


def test_a_train_family_that_a_layer_set_stays_that_layers_error(capsys, place):
    err = _error(capsys, ["train", "--method", "grpo", "--task", "math500", "--set", "train_family=nope",
                          "--out", "run"])
    assert "argument --set: TrainerConfig.train_family='nope' is invalid" in err, err


def test_a_fitting_family_is_accepted_past_the_check(capsys, place, monkeypatch):
    """With ``--set train_family=math500`` the config builds: the command goes on to the run (stopped here)."""
    import rlvr_lib.__main__ as cli

    built = {}

    def stop(out, config):
        built["config"] = config
        raise SystemExit(0)

    monkeypatch.setattr(cli, "_check_train_out", stop)
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--method", "grpo", "--task", "math500", "--set", "train_family=math500", "--out", "run"])
    assert exit_.value.code == 0
    assert (built["config"].task, built["config"].train_family) == ("math500", "math500")
