"""``python -m rlvr_lib train``: config layering and errors, and one step on the embedded tiny policy."""

import json
import math

import pytest
import torch

from rlvr_lib.__main__ import main
from rlvr_lib.config_files import build_config, load_settings, parse_assignments, parse_value

TINY = ["--set", "prompts_per_step=2", "--set", "group_size=2", "--set", "max_new_tokens=8"]


def _error(capsys, argv) -> str:
    """The usage error ``main(argv)`` exits with (argparse: exit status 2, message on stderr)."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


# ------------------------------------------------------------------ training
def test_train_one_step_writes_record_checkpoint_and_model(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--method", "grpo", "--steps", "1", *TINY, "--out", str(out)]) == 0
    (record_path,) = out.glob("grpo-*-s0.json")
    record = json.loads(record_path.read_text())
    assert record["config"]["train"]["method"] == "grpo" and record["config"]["train"]["group_size"] == 2
    assert record["extra"]["world_size"] == 1
    (row,) = record["history"]
    for key in ("loss", "reward_mean", "entropy", "grad_norm", "response_length"):
        assert math.isfinite(row[key]), key
    checkpoint = torch.load(out / "checkpoint.pt", weights_only=False)
    assert checkpoint["step"] == 1 and checkpoint["config"] == record["config"]["train"]
    assert (out / "model" / "config.json").exists() and (out / "model" / "tokenizer.json").exists()
    assert str(record_path) in capsys.readouterr().out

    # The same command again resumes from the checkpoint: the run is finished, nothing is retrained.
    assert main(["train", "--method", "grpo", "--steps", "1", *TINY, "--out", str(out)]) == 0
    assert json.loads(record_path.read_text())["history"] == record["history"]


# ------------------------------------------------------------------ errors
def test_unknown_set_key_names_the_key_and_the_fields(capsys):
    err = _error(capsys, ["train", "--method", "grpo", "--set", "lrr=1e-5", "--out", "unused"])
    assert "--set key='lrr' is invalid" in err and "'lr'" in err and "'max_new_tokens'" in err


def test_bad_set_value_names_the_field_and_what_is_allowed(capsys):
    err = _error(capsys, ["train", "--method", "grpo", "--set", "lr=-1", "--out", "unused"])
    assert "TrainerConfig.lr=-1 is invalid: must be a number in (0, 1]" in err
    err = _error(capsys, ["train", "--method", "grpo", "--set", "group_size=two", "--out", "unused"])
    assert "TrainerConfig.group_size='two' is invalid" in err


def test_bad_method_option_is_reported_before_training(capsys):
    err = _error(capsys, ["train", "--method", "sage", "--set", "method_options={tauu: 1}", "--out", "unused"])
    assert "method_options" in err and "tauu" in err and "tau" in err


def test_set_without_equals_and_unknown_method_are_usage_errors(capsys):
    assert "--set='lr'" in _error(capsys, ["train", "--method", "grpo", "--set", "lr", "--out", "unused"])
    err = _error(capsys, ["train", "--method", "nope", "--out", "unused"])
    assert "method='nope' is not registered" in err and "grpo" in err
    assert "no method" in _error(capsys, ["train", "--out", "unused"])


def test_config_file_key_errors_name_the_file(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("method: grpo\nsteps: 2\nlearning_rate: 1e-6\n")
    err = _error(capsys, ["train", "--config", str(path), "--out", "unused"])
    assert f"{path} key='learning_rate' is invalid" in err
    bad = tmp_path / "c.txt"
    bad.write_text("method: grpo\n")
    assert "config file=" in _error(capsys, ["train", "--config", str(bad), "--out", "unused"])


# ------------------------------------------------------------------ layering and values
def test_layers_override_in_order_preset_file_set_flags(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("method: dapo\nlr: 1e-6\nsteps: 7\neps_high: 0.3\n")
    config = build_config(None, (str(path), load_settings(path)), ("--set", {"steps": 9}), ("flags", {"steps": 11}))
    assert config.method == "dapo" and config.loss_agg == "token_mean"  # the dapo preset applies
    assert (config.lr, config.eps_high, config.steps) == (1e-6, 0.3, 11)
    assert build_config("grpo", (str(path), load_settings(path))).method == "grpo"  # --method wins over the file


def test_engine_flag_sets_the_config_field():
    config = build_config("grpo", ("command line", {"engine": "hf"}))
    assert config.engine == "hf"
    with pytest.raises(ValueError, match="engine='nope' is invalid"):
        build_config("grpo", ("command line", {"engine": "nope"}))


def test_values_parse_as_json_then_yaml_collections_then_strings(tmp_path):
    assert parse_value("1e-6") == 1e-6 and parse_value("3") == 3 and parse_value("true") is True
    assert parse_value("null") is None and parse_value("grpo") == "grpo"
    assert parse_value("{tau: 1.2, q_min: 5e-1}") == {"tau": 1.2, "q_min": 0.5}
    assert parse_assignments(["lr=2e-5", "policy=Qwen/Qwen2.5-3B"]) == {"lr": 2e-5, "policy": "Qwen/Qwen2.5-3B"}
    path = tmp_path / "c.yaml"
    path.write_text("lr: 1e-6\nsteps: 5\nkl_coef: 0\n")
    assert load_settings(path) == {"lr": 1e-6, "steps": 5, "kl_coef": 0}  # YAML 1.2 floats: 1e-6 is a number


# ------------------------------------------------------------------ the TRL backend
def test_train_with_the_trl_backend_writes_record_and_model(tmp_path, capsys):
    out = tmp_path / "trl_run"
    argv = ["train", "--backend", "trl", "--method", "grpo", "--steps", "1", *TINY,
            "--trl-set", "logging_strategy=no", "--out", str(out)]
    assert main(argv) == 0
    (record_path,) = out.glob("grpo-*-s0.json")
    record = json.loads(record_path.read_text())
    assert record["extra"]["backend"] == "trl" and record["config"]["backend"] == "trl"
    (row,) = record["history"]
    for key in ("loss", "reward_mean", "entropy", "grad_norm", "response_length"):
        assert math.isfinite(row[key]), key
    assert (out / "model" / "config.json").exists() and not (out / "checkpoint.pt").exists()
    assert "checkpoint.pt" not in capsys.readouterr().out


def test_trl_backend_flag_errors_are_one_line_usage_errors(capsys):
    assert "argument --trl-set: only with --backend trl" in _error(
        capsys, ["train", "--method", "grpo", "--trl-set", "logging_steps=2"])
    err = _error(capsys, ["train", "--backend", "trl", "--method", "grpo", "--trl-set", "beta=0.1"])
    assert "argument --trl-set: trl_args['beta'] is set by the TrainerConfig" in err and err.count("\n") <= 2
    err = _error(capsys, ["train", "--backend", "trl", "--method", "grpo", "--set", "prompts_per_step=3",
                          "--set", "group_size=1"])
    assert "argument --backend: TRL backend: group_size=1: TRL's GRPOTrainer needs num_generations >= 2" in err
    assert "invalid choice: 'tf'" in _error(capsys, ["train", "--backend", "tf", "--method", "grpo"])


@pytest.mark.parametrize("backend", ["native", "trl"])
def test_a_deepspeed_launch_is_refused_in_one_line(capsys, monkeypatch, backend):
    # what `accelerate launch --config_file configs/accelerate/zero3_8gpu.yaml` sets in each process
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    err = _error(capsys, ["train", "--backend", backend, "--method", "grpo"])
    assert f"argument --backend: {backend!r} does not host DeepSpeed" in err and err.count("\n") <= 2


def test_an_fsdp_launch_refuses_the_vllm_engine_in_one_line(capsys, monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("WORLD_SIZE", "2")  # as a 2-process launch sets it; refused before any process group
    err = _error(capsys, ["train", "--method", "grpo", "--engine", "vllm"])
    assert "argument --engine: engine='vllm' cannot run on a sharded (FSDP)" in err and err.count("\n") <= 2


def test_trl_set_fsdp_is_refused_by_the_trl_backend(capsys):
    err = _error(capsys, ["train", "--backend", "trl", "--method", "grpo", "--trl-set", "fsdp=true"])
    assert "argument --trl-set: TRL backend: method 'grpo': DeepSpeed, and FSDP given as TRL arguments, are not " \
           "hosted" in err


def test_a_named_policy_not_built_is_a_one_line_usage_error(capsys, monkeypatch, tmp_path):
    from rlvr_lib.policy import load

    monkeypatch.setitem(load.POLICY_NAMES, "small", tmp_path / "small-mul")
    err = _error(capsys, ["train", "--method", "grpo", "--model", "small"])
    assert "argument --model: policy='small' is not built at" in err and "make second-size" in err
    assert err.count("\n") <= 2


def test_accelerate_mixed_precision_is_refused_by_the_native_loop_in_one_line(capsys, monkeypatch):
    # what `accelerate launch` sets from a config file whose mixed_precision is bf16: the native loop has no
    # autocast, so it would be ignored; --dtype chooses the parameters' dtype instead
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    err = _error(capsys, ["train", "--method", "grpo"])
    assert "argument --backend: 'native' does not apply accelerate's mixed_precision='bf16'" in err
    assert "--dtype bfloat16" in err and err.count("\n") <= 2


# ------------------------------------------------------------------ a user's method, through the library alone
def test_a_method_registered_here_trains_through_the_command_line(tmp_path, request):
    """A method registered in this file (one changed hook) trains through ``python -m rlvr_lib train``: no study
    file names it, the folder's weights move and the record names it."""
    from rlvr_lib.methods.base import Method
    from rlvr_lib.methods.registry import METHODS, register_method
    from rlvr_lib.policy import load_policy

    calls = []

    class AlternatingAdvantages(Method):
        """GRPO with the advantages replaced by +1, -1, +1, ... over the batch's completions."""

        def advantages(self, batch):
            adv = super().advantages(batch)
            calls.append(adv.shape)
            signs = torch.tensor([1.0, -1.0], dtype=adv.dtype, device=adv.device)
            return signs.repeat(adv.numel() // 2 + 1)[: adv.numel()].reshape(adv.shape)

    name = "alternating-adv-test"
    register_method(name, AlternatingAdvantages, "test only: fixed +-1 advantages")
    request.addfinalizer(lambda: METHODS.pop(name, None))
    out = tmp_path / "user_method"
    assert main(["train", "--method", name, "--steps", "1", *TINY, "--out", str(out)]) == 0
    assert calls, "the method's hook was not called"
    (record_path,) = out.glob(f"{name}-*-s0.json")
    record = json.loads(record_path.read_text())
    assert record["name"] == name and record["config"]["train"]["method"] == name
    assert record["final"] == {} and len(record["history"]) == 1
    base, _ = load_policy(None)
    trained, _ = load_policy(str(out / "model"))
    moved = {k for k, v in trained.state_dict().items() if not torch.equal(v, base.state_dict()[k])}
    assert moved, "the trained weights equal the base policy's"


def test_the_study_run_keeps_its_record_and_reads_the_library_one(tmp_path):
    """`rlvr_lib.study.pipeline.train_run` trains through `rlvr_lib.run` and writes the record it always wrote
    (key, run id, extra); the library's own record, in the same layout, loads as a study `RunRecord`."""
    from rlvr_lib.methods import method_config
    from rlvr_lib.run import CHECKPOINT_FILE, MODEL_DIR, run_key, train
    from rlvr_lib.study.pipeline import train_run, versioned_key
    from rlvr_lib.study.runs import RunRecord
    from rlvr_lib.config import hash_jsonable
    from rlvr_lib.policy.load import policy_fingerprint

    config = method_config("grpo", steps=1, prompts_per_step=2, group_size=2, max_new_tokens=8)
    key = versioned_key({"train": config.to_dict(), "policy_sha": policy_fingerprint(None)}, config.task)
    assert run_key(config) == key  # the key train_run's records always had

    study = train_run(config, tmp_path / "study", progress=False)
    assert study.run_id == f"grpo-{hash_jsonable(key)}-s0" and study.config == key
    assert study.extra["world_size"] == 1 and study.extra["dtype"] == "torch.float32" and "machine" in study.extra
    assert (tmp_path / "study" / CHECKPOINT_FILE).is_file() and (tmp_path / "study" / MODEL_DIR).is_dir()

    trained = train(config, tmp_path / "library", progress=False)
    assert trained.record.name == f"{study.run_id}.json"
    library = RunRecord.load(trained.record)
    assert (library.name, library.config, library.config_hash, library.seed) == (
        study.name, study.config, study.config_hash, study.seed)
    untimed = [[{k: v for k, v in row.items() if not k.startswith("time_")} for row in r.history]
               for r in (library, study)]
    assert untimed[0] == untimed[1]  # same seed, same config, same machine: the same step
    assert {k: library.extra[k] for k in ("world_size", "dtype")} == {"world_size": 1, "dtype": "torch.float32"}


def test_the_library_entry_point_refuses_bad_arguments_before_writing(tmp_path):
    from rlvr_lib.methods import method_config
    from rlvr_lib.run import train

    config = method_config("grpo", steps=1, prompts_per_step=2, group_size=2, max_new_tokens=8)
    with pytest.raises(ValueError, match="backend='tf' is invalid: must be one of"):
        train(config, tmp_path / "a", backend="tf")
    with pytest.raises(ValueError, match="trl_args=.* is invalid: must be empty unless backend='trl'"):
        train(config, tmp_path / "a", trl_args={"logging_steps": 2})
    with pytest.raises(ValueError, match="out folder name='bad name' is invalid: must be file-name safe"):
        train(config, tmp_path / "bad name")
    assert list(tmp_path.iterdir()) == []


def test_study_commands_named_to_the_library_say_where_they_are(capsys):
    err = _error(capsys, ["calibrate", "--out", "c.json"])
    assert "'calibrate' is a command of the study: python -m rlvr_lib.study calibrate" in err
    assert err.count("\n") == 1


# ------------------------------------------------------------------ evaluate
def test_evaluate_writes_the_summary_of_a_trained_folder(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--method", "grpo", "--steps", "1", *TINY, "--out", str(out)]) == 0
    path = tmp_path / "eval.json"
    argv = ["evaluate", "--model", str(out / "model"), "--families", "easy_mix", "rare_mix", "--problems", "2",
            "--samples", "2", "--group-size", "2", "--max-new-tokens", "8", "--out", str(path)]
    assert main(argv) == 0
    data = json.loads(path.read_text())
    assert data["policy"] == str(out / "model") and data["spec"]["families"] == ["easy_mix", "rare_mix"]
    assert set(data["final"]["families"]) == {"easy_mix", "rare_mix"}
    assert 0.0 <= data["final"]["average"]["pass_at_k"]["1"] <= 1.0
    assert str(path) in capsys.readouterr().out


def test_evaluate_flag_errors_name_the_flag(capsys, tmp_path):
    assert "argument --samples: EvalSpec.samples=3 is invalid" in _error(
        capsys, ["evaluate", "--samples", "3", "--out", str(tmp_path / "e.json")])
    assert "argument --task: EvalSpec.task='nope' is not registered" in _error(
        capsys, ["evaluate", "--task", "nope", "--out", str(tmp_path / "e.json")])
    assert "--out" in _error(capsys, ["evaluate", "--out", str(tmp_path)])
    assert list(tmp_path.iterdir()) == []
