"""The tiny policy: tokenizer, Auto-class loading of the shipped checkpoint, pretraining."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config

from rlvr_lib.policy import TINY_POLICY_DIR, build_char_tokenizer, load_policy
from rlvr_lib.policy.pretrain import PretrainConfig, pretrain
from rlvr_lib.tasks.arithmetic import make_problem, verify


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
    assert log["config"] == PretrainConfig().to_dict()
    assert list(log["config"]) == list(PretrainConfig().to_dict())  # field order, as written
    assert PretrainConfig.from_dict(log["config"]) == PretrainConfig()
    assert "python -m rlvr_lib pretrain" in (TINY_POLICY_DIR / "README.md").read_text()


def test_the_small_size_is_the_tiny_policy_at_twice_the_width_and_about_four_times_the_parameters():
    from transformers import Qwen2ForCausalLM

    from rlvr_lib.policy.load import POLICY_DIRS
    from rlvr_lib.policy.pretrain import POLICY_SIZES, model_config, size_config

    tiny, small = size_config("tiny"), size_config("small")
    assert tiny == PretrainConfig()  # the shipped policy's config
    differ = {k for k, v in small.to_dict().items() if tiny.to_dict()[k] != v}
    assert differ == {"hidden_size", "intermediate_size"}  # same data, steps, lr, seed: size only
    vocab = len(build_char_tokenizer())  # the shipped policy's
    count = lambda c: Qwen2ForCausalLM(model_config(c, vocab, 0, 1)).num_parameters()  # noqa: E731
    assert 3.5 <= count(small) / count(tiny) <= 4.5
    readme = (Path(__file__).resolve().parents[1] / "docs" / "testbed-guide.md").read_text()  # "A second model size"
    assert f"{count(small) / count(tiny):.2f}x its parameters ({count(small) / 1e6:.2f}M)" in readme
    assert size_config("small", seed=3).seed == 3
    with pytest.raises(ValueError, match=r"size='huge' is invalid: must be one of \['small', 'tiny'\]"):
        size_config("huge")
    assert set(POLICY_SIZES) == set(POLICY_DIRS)


def test_the_small_model_card_quotes_the_pretraining_logs():
    """The second size's model card types its shape, time and final loss (and the tiny one's): each must be the
    committed logs', so a rebuild that changes one makes the card wrong loudly."""
    from rlvr_lib.policy.load import resolve_policy_path

    tiny, small = (json.loads((Path(resolve_policy_path(n)) / "pretrain_log.json").read_text())
                   for n in (None, "small"))
    card = " ".join((Path(resolve_policy_path("small")) / "README.md").read_text().split())
    config = small["config"]
    assert (f"a {small['parameters'] / 1e6:.2f}M-parameter `Qwen2ForCausalLM` (hidden {config['hidden_size']}, "
            f"MLP {config['intermediate_size']}; {config['num_layers']} layers, {config['num_heads']} heads") in card
    assert f"{small['parameters'] / tiny['parameters']:.1f}x the tiny one's {tiny['parameters'] / 1e6:.2f}M" in card
    assert f"{config['steps']:,} steps of {config['batch_size']} examples" in card
    assert (f"{int(small['train_seconds'] + 0.5):,} s on one thread of an AMD EPYC, final loss "
            f"{small['final_loss']:.3f} against the tiny one's {tiny['final_loss']:.3f}") in card


def test_pretrain_cli_pretrains_each_size_into_its_checkpoint_folder(monkeypatch, capsys):
    import rlvr_lib.policy.pretrain as pt
    from rlvr_lib.__main__ import main
    from rlvr_lib.policy.load import POLICY_DIRS

    calls = []
    monkeypatch.setattr(pt, "pretrain", lambda config, out: calls.append((config, out)) or
                        {"parameters": 1, "train_seconds": 0.0, "final_loss": 0.0})
    for size in pt.POLICY_SIZES:
        assert main(["pretrain", "--size", size, "--seed", "3"]) == 0
    assert calls == [(pt.size_config(size, seed=3), POLICY_DIRS[size]) for size in pt.POLICY_SIZES]


def test_pretraining_the_small_size_writes_its_shape(tmp_path):
    from rlvr_lib.__main__ import main

    assert main(["pretrain", "--size", "small", "--steps", "1", "--out", str(tmp_path / "small")]) == 0
    config = json.loads((tmp_path / "small" / "config.json").read_text())
    assert (config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]) == (192, 768, 4)


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


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(steps=0), "PretrainConfig.steps=0 is invalid: must be an integer >= 1"),
        (dict(batch_size=2.5), "PretrainConfig.batch_size=2.5 is invalid"),
        (dict(hidden_size=-8), "PretrainConfig.hidden_size=-8 is invalid"),
        (dict(num_layers=0), "PretrainConfig.num_layers=0 is invalid"),
        (dict(num_heads=0), "PretrainConfig.num_heads=0 is invalid"),
        (dict(intermediate_size=0), "PretrainConfig.intermediate_size=0 is invalid"),
        (dict(save_every=0), "PretrainConfig.save_every=0 is invalid"),
        (dict(hint_share=1.5), r"PretrainConfig.hint_share=1.5 is invalid: must be a number in \[0, 1\]"),
        (dict(distractor_share=-0.1), "PretrainConfig.distractor_share=-0.1 is invalid"),
        (dict(lr=0.0), r"PretrainConfig.lr=0.0 is invalid: must be a number in \(0, inf\)"),
        (dict(strategy_prior=(0.5, 0.5, 0.5)),
         r"PretrainConfig.strategy_prior=\(0.5, 0.5, 0.5\) is invalid: .*summing to 1"),
        (dict(strategy_prior=(0.5, 0.5)), "PretrainConfig.strategy_prior=.* is invalid"),
        (dict(strategy_prior=("a", "b", "c")), "PretrainConfig.strategy_prior=.* is invalid"),
        (dict(strategy_prior=(1.5, -0.5, 0.0)), "PretrainConfig.strategy_prior=.* is invalid"),
        (dict(seed=-1), "PretrainConfig.seed=-1 is invalid"),
        (dict(warmup_steps=-1), "PretrainConfig.warmup_steps=-1 is invalid"),
        (dict(weight_decay=-0.1), "PretrainConfig.weight_decay=-0.1 is invalid"),
        (dict(hidden_size=30, num_heads=4),
         "PretrainConfig.hidden_size=30 is invalid: must be a multiple of num_heads=4"),
    ],
)
def test_pretrain_config_validation(kw, match):
    with pytest.raises(ValueError, match=match):
        PretrainConfig(**kw)


def test_pretrain_config_accepts_the_same_bounds():
    PretrainConfig(hint_share=0.0, distractor_share=1.0, lr=1e-9, steps=1, save_every=1)
    PretrainConfig(hidden_size=16, num_heads=16, num_layers=1, intermediate_size=1, batch_size=1)
    PretrainConfig(strategy_prior=(1.0, 0.0, 0.0), seed=0, warmup_steps=0, weight_decay=0.0)


def test_pretrain_config_round_trips_json():
    cfg = PretrainConfig(seed=3, strategy_prior=(0.6, 0.3, 0.1))
    assert PretrainConfig.from_json(cfg.to_json()) == cfg
    assert cfg.to_dict()["strategy_prior"] == [0.6, 0.3, 0.1]
    with pytest.raises(ValueError, match="PretrainConfig.hint_share"):
        cfg.replace(hint_share=2.0)


def test_pretraining_mixture_never_shows_the_held_out_fact():
    import re

    import numpy as np

    from rlvr_lib.policy.pretrain import PretrainingMixture
    from rlvr_lib.tasks.arithmetic import STRATEGIES, round_only
    from rlvr_lib.tasks.arithmetic import unseen_fact

    config = PretrainConfig()
    prior, hint_prior = dict(zip(STRATEGIES, config.strategy_prior)), dict(zip(STRATEGIES, config.hint_prior))
    mixture = PretrainingMixture(config, np.random.default_rng(0))
    pairs = [mixture.sample() for _ in range(8000)]
    mul = [(p, c) for p, c in pairs if "*" in p.split("=")[0]]
    assert not [c for _, c in mul if re.search(r"(?<![\d*])90?\*\d", c)]  # no step 9*b or 90*b, any b
    assert not [p for p, _ in mul if p.split("=")[0].endswith("*9")]  # nor the problems a*9
    steps = [(int(d), int(b)) for _, c in mul for d, b in re.findall(r"(?<![\d*])(\d)0?\*(\d+)", c)]
    assert steps and not [db for db in steps if unseen_fact(*db)]  # nor a scattered unseen product
    # Round-only problems (first factor ending in 9) are shown, never with split; unhinted, `direct` takes
    # split's share there and `round` keeps its prior share, so nothing ties round to them.
    operands = [tuple(map(int, p.split(" hint: ")[0].split("=")[0].split("*"))) for p, _ in mul]
    strategy = [c.split(":")[0] for _, c in mul]
    hinted = [" hint: " in p for p, _ in mul]
    only = [s for ab, s in zip(operands, strategy) if round_only(*ab)]
    assert only and "split" not in only
    only_unhinted = [s for ab, s, h in zip(operands, strategy, hinted) if round_only(*ab) and not h]
    assert abs(only_unhinted.count("round") / len(only_unhinted) - prior["round"]) < 0.04
    # Redrawing the problem (not the strategy) keeps the unhinted strategy shares at the prior elsewhere.
    unhinted = [s for ab, s, h in zip(operands, strategy, hinted) if not h and not round_only(*ab)]
    assert abs(unhinted.count("round") / len(unhinted) - prior["round"]) < 0.015
    assert abs(unhinted.count("split") / len(unhinted) - prior["split"]) < 0.03
    # Strategy hints name strategies by hint_prior; the subtraction skill is sub_share of the examples.
    named = [p.split(" hint: ")[1].strip() for p, _ in pairs if " hint: " in p]
    named = [h for h in named if h in STRATEGIES]
    assert abs(named.count("round") / len(named) - hint_prior["round"]) < 0.03
    assert abs((len(pairs) - len(mul)) / len(pairs) - config.sub_share) < 0.015
    assert all(re.fullmatch(r"\d{3}-\d{3}=\?", p.split(" hint: ")[0].strip())
               for p, _ in pairs if "*" not in p.split("=")[0])
    assert config.hold_out_fact  # the shipped checkpoint's setting
    leaky = PretrainingMixture(PretrainConfig(hold_out_fact=False), np.random.default_rng(0))
    assert any(re.search(r"(?<!\d)9\*\d\d(?!\d)", leaky.sample()[1]) for _ in range(2000))


def test_policy_fingerprint_follows_the_weights_not_the_path(tmp_path):
    import shutil

    from rlvr_lib.policy.load import policy_fingerprint

    copy = tmp_path / "copy"
    shutil.copytree(TINY_POLICY_DIR, copy)
    assert policy_fingerprint(None) == policy_fingerprint(TINY_POLICY_DIR) == policy_fingerprint(copy)
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    weights.write_bytes(bytes(data))
    assert policy_fingerprint(copy) != policy_fingerprint(None)
    assert policy_fingerprint("Qwen/Qwen2.5-0.5B") == "Qwen/Qwen2.5-0.5B"  # a hub name is its own key


def test_pretraining_config_of_the_shipped_policy_is_the_default(tmp_path):
    from rlvr_lib.policy.pretrain import pretraining_config

    assert pretraining_config(TINY_POLICY_DIR) == PretrainConfig()
    with pytest.raises(ValueError, match=r"policy_dir=.* is invalid: must be a checkpoint written by "
                                         r"rlvr_lib.policy.pretrain.pretrain"):
        pretraining_config(tmp_path)
