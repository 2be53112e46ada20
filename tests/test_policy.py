"""The tiny policy: tokenizer, Auto-class loading of the shipped checkpoint, pretraining."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config

from rlvr_lib.policy import TINY_POLICY_DIR, build_char_tokenizer, load_policy
from rlvr_lib.policy.pretrain import PretrainConfig, pretrain
from rlvr_lib.tasks import make_problem, verify


@pytest.mark.parametrize(
    "text", ["47*86=? hint: round\nround: 50*86-3*86=4300-258=4042 #4042", "  two  spaces\n\nnewlines", "é 日本 🙂\t"]
)
def test_tokenizer_round_trip_is_exact_after_save_and_auto_load(tmp_path, text):
    tok = build_char_tokenizer()
    tok.save_pretrained(tmp_path)
    # A qwen2 config next to it makes AutoTokenizer rebuild a Qwen2Tokenizer: ids must not change.
    Qwen2Config(vocab_size=len(tok)).save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    ids = tok(text)["input_ids"]
    assert loaded(text)["input_ids"] == ids
    assert loaded.decode(ids) == text
    assert len(ids) == len(text.encode())  # one token per byte


def test_tokenizer_ids_are_stable():
    tok = build_char_tokenizer()
    assert (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2)
    assert tok("0123")["input_ids"] == [3, 4, 5, 6]
    with pytest.raises(ValueError, match="charset"):
        build_char_tokenizer("aa")


def test_shipped_checkpoint_loads_through_auto_classes_and_solves_a_hinted_problem():
    model = AutoModelForCausalLM.from_pretrained(TINY_POLICY_DIR)
    tokenizer = AutoTokenizer.from_pretrained(TINY_POLICY_DIR)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert 5e5 <= sum(p.numel() for p in model.parameters()) <= 3e6
    assert sum(f.stat().st_size for f in TINY_POLICY_DIR.iterdir()) <= 20 * 2**20
    problem = make_problem(23, 4)
    ids = tokenizer(problem.prompt_with("split"), return_tensors="pt")["input_ids"]
    out = model.generate(ids, max_new_tokens=48, do_sample=False, eos_token_id=tokenizer.eos_token_id)
    text = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert verify(problem, text).status == "correct", text


def test_load_policy_defaults_to_the_embedded_policy():
    model, tokenizer = load_policy(device="cpu")
    assert model.config.vocab_size == len(tokenizer)
    assert tokenizer.pad_token_id == 0


def test_pretraining_log_documents_the_rebuild():
    log = json.loads((TINY_POLICY_DIR / "pretrain_log.json").read_text())
    assert log["config"] == json.loads(json.dumps(PretrainConfig().__dict__))
    assert "python -m rlvr_lib pretrain" in (TINY_POLICY_DIR / "README.md").read_text()


def _tiny_pretrain_config(**kw):
    return PretrainConfig(steps=4, batch_size=8, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                          warmup_steps=2, save_every=2, **kw)


def _weights(path):
    return AutoModelForCausalLM.from_pretrained(path).state_dict()


def test_pretraining_is_deterministic(tmp_path):
    cfg = _tiny_pretrain_config()
    pretrain(cfg, tmp_path / "a", progress=False)
    pretrain(cfg, tmp_path / "b", progress=False)
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not (tmp_path / "a" / ".pretrain_state.pt").exists()  # a finished run leaves no state behind
    c = tmp_path / "c"
    pretrain(_tiny_pretrain_config(seed=1), c, progress=False)
    assert not all(torch.equal(a[k], v) for k, v in _weights(c).items())


def test_interrupted_pretraining_resumes_exactly(tmp_path, monkeypatch):
    import rlvr_lib.policy.pretrain as pt

    cfg = _tiny_pretrain_config()
    pretrain(cfg, tmp_path / "full", progress=False)
    real_replace = pt.os.replace

    def replace_then_die(src, dst):
        real_replace(src, dst)
        if str(dst).endswith(".pretrain_state.pt"):
            raise KeyboardInterrupt  # killed right after the step-2 state file landed

    monkeypatch.setattr(pt.os, "replace", replace_then_die)
    with pytest.raises(KeyboardInterrupt):
        pretrain(cfg, tmp_path / "resumed", progress=False)
    monkeypatch.setattr(pt.os, "replace", real_replace)
    assert torch.load(tmp_path / "resumed" / ".pretrain_state.pt", weights_only=False)["step"] == 2
    log = pretrain(cfg, tmp_path / "resumed", progress=False)
    a, b = _weights(tmp_path / "full"), _weights(tmp_path / "resumed")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert log["history"] == json.loads((tmp_path / "full" / "pretrain_log.json").read_text())["history"]


def test_pretrain_config_validation():
    with pytest.raises(ValueError, match="hint_share=1.5"):
        PretrainConfig(hint_share=1.5)
    with pytest.raises(ValueError, match="strategy_prior"):
        PretrainConfig(strategy_prior=(0.5, 0.5, 0.5))
    with pytest.raises(ValueError, match="divisible by num_heads"):
        PretrainConfig(hidden_size=30, num_heads=4)
