"""Shared pytest fixtures for ``rlvr_lib``.

The central fixture is :func:`tiny_model_and_tokenizer`: a tiny, randomly
initialised ``Qwen2ForCausalLM`` and a character-level
``PreTrainedTokenizerFast``, both built inside the test session (nothing is
downloaded or read from disk), deterministically from a fixed seed and without
touching the global torch RNG.

Tokenizer
    * One token per character (``WordLevel`` model, a pre-tokenizer that isolates
      every character, ``decoders.Fuse`` so ``decode(encode(s)) == s`` exactly,
      spaces and newlines included).
    * Special tokens: ``<pad>`` (id 0), ``<eos>`` (id 1), ``<unk>`` (id 2); there
      is no BOS and ``add_special_tokens`` adds nothing, so a prompt of ``k``
      characters is ``k`` tokens.
    * Vocabulary: the specials, then ``CHARSET`` (digits, ASCII letters,
      punctuation, space, newline) -- ``len(tokenizer) == 3 + len(CHARSET)``.
      Characters outside ``CHARSET`` map to ``<unk>``.

Model
    * ``Qwen2ForCausalLM``: hidden 32, intermediate 64, 2 layers, 2 attention
      heads (2 KV heads), vocabulary = ``len(tokenizer)``, 512 positions,
      float32, ``eval()`` mode, ``pad_token_id``/``eos_token_id`` set from the
      tokenizer. Random weights, seeded (``TINY_MODEL_SEED``).

Fixtures
    * ``tiny_model_and_tokenizer`` (session scope): ``(model, tokenizer)``. It is
      shared by every test of the session, so **do not mutate it**: tests that
      train, perturb weights or change the mode should use ``fresh_tiny_model``
      or ``copy.deepcopy(model)``.
    * ``tiny_tokenizer`` (session scope): the tokenizer alone.
    * ``fresh_tiny_model`` (function scope): a deep copy of the session model,
      safe to modify.
    * ``policy`` (module scope): the shipped tiny policy ``(model, tokenizer)``
      (`rlvr_lib.policy.load_policy`); deep-copy the model before training it.
    * ``registered`` (function scope): a function ``add(name, cls, **preset)``
      that registers a test method; the method and task registries are
      restored after the test.

Threads
    ``pytest_configure`` sets ``torch.set_num_threads(RLVR_TEST_THREADS)``
    (environment variable, default 1). The models here are so small that
    intra-op parallelism buys nothing, and on a loaded 2-core machine two
    spinning OpenMP threads made one ``generate`` of the tiny model ~100x slower
    (4.4 s against 0.04 s with one thread). With ``pytest -n 2`` one thread per
    worker is also the right split. ``OMP_NUM_THREADS`` is set to the same
    count, so a command a test runs, in its process (``main([...])`` applies
    ``--threads``' default, `rlvr_lib.cli_checks.default_threads`) or as a
    subprocess, uses it too: left at its default (the host's cores), the
    reduced dynamics calibration took 300 s beside a busy worker, 34 s on one
    thread.

The builders :func:`build_char_tokenizer` and :func:`build_tiny_qwen2` are
plain functions, so a test needing another size or seed can call them directly
(``from conftest import build_tiny_qwen2`` works because pytest puts ``tests/``
on ``sys.path``).
"""

from __future__ import annotations

import copy
import os
import string

import pytest
import torch

TINY_MODEL_SEED = 1234
PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
CHARSET = string.digits + string.ascii_letters + string.punctuation + " \n"


def pytest_configure(config):
    """Use few intra-op threads for the tiny test models (see module docstring); record the hostile suite."""
    import hostile_suite_recorder

    threads = max(1, int(os.environ.get("RLVR_TEST_THREADS", "1")))
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # the commands tests run, in process or spawned
    if not config.pluginmanager.is_registered(hostile_suite_recorder):
        config.pluginmanager.register(hostile_suite_recorder, "hostile-suite-recorder")


def build_char_tokenizer(charset: str = CHARSET):
    """Build a character-level fast tokenizer.

    Args:
        charset: Characters of the vocabulary, in id order after the three
            special tokens (``<pad>`` 0, ``<eos>`` 1, ``<unk>`` 2).

    Returns:
        A ``transformers.PreTrainedTokenizerFast`` whose ``decode`` inverts
        ``encode`` exactly for text made of ``charset`` characters.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = list(dict.fromkeys(charset))  # de-duplicate, keep order
    vocab = {PAD: 0, EOS: 1, UNK: 2}
    for ch in chars:
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # "[\s\S]" matches any single character, newline included.
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([PAD, EOS, UNK])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        model_max_length=512,
    )


def build_tiny_qwen2(tokenizer, *, seed: int = TINY_MODEL_SEED, hidden_size: int = 32,
                     num_layers: int = 2, num_heads: int = 2):
    """Build a tiny randomly initialised ``Qwen2ForCausalLM`` for ``tokenizer``.

    The weights depend only on ``seed`` and the sizes; the global torch RNG is
    left untouched (``torch.random.fork_rng``).

    Args:
        tokenizer: Tokenizer whose ``len`` gives the vocabulary size and whose
            pad/eos ids are written into the config.
        seed: Initialisation seed.
        hidden_size: Model width.
        num_layers: Number of decoder layers.
        num_heads: Number of attention (and key/value) heads.

    Returns:
        The model, float32, in ``eval()`` mode, on CPU.
    """
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model.float().eval()


def _seeded(build, seed: int):
    """``build()`` under ``torch.manual_seed(seed)``, the global RNG untouched; float32, ``eval()``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build()
    return model.float().eval()


def build_tiny_llama(tokenizer, *, seed: int = 0):
    """A tiny random ``LlamaForCausalLM`` (2 layers, 4 heads over 2 KV heads: grouped-query attention)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    return _seeded(lambda: LlamaForCausalLM(cfg), seed)


def build_tiny_qwen3(tokenizer, *, seed: int = 0):
    """A tiny random ``Qwen3ForCausalLM`` (q/k norms, 4 heads over 1 KV head, head_dim 8)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=1, head_dim=8, max_position_embeddings=256,
                      pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    return _seeded(lambda: Qwen3ForCausalLM(cfg), seed)


def build_tiny_gpt2(tokenizer, *, seed: int = 0):
    """A tiny random ``GPT2LMHeadModel`` (learned absolute positions; no dropout, so train() equals eval())."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=128,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, pad_token_id=tokenizer.pad_token_id,
                     eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id)
    return _seeded(lambda: GPT2LMHeadModel(cfg), seed)


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    """A test that runs a command in this process (``main([...])`` applies ``--threads``, default cores / processes)
    must not leave its thread count to the next tests: two xdist workers at 2 threads each on 2 cores run the
    torch-heavy tests up to 10x slower."""
    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@pytest.fixture
def spy_on_verify(monkeypatch):
    """``spy_on_verify(task)``: the list that collects ``(problem, completion, verdict)`` of every
    ``task.verify`` call from then on (the task's own verifier still decides)."""

    def install(task):
        calls, verify = [], type(task).verify

        def spy(problem, completion):
            verdict = verify(task, problem, completion)
            calls.append((problem, completion, verdict))
            return verdict

        monkeypatch.setattr(task, "verify", spy)
        return calls

    return install


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """Session-wide character-level tokenizer (see module docstring)."""
    return build_char_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_and_tokenizer(tiny_tokenizer):
    """Session-wide ``(model, tokenizer)`` pair; treat it as read-only."""
    return build_tiny_qwen2(tiny_tokenizer), tiny_tokenizer


@pytest.fixture
def fresh_tiny_model(tiny_model_and_tokenizer):
    """A deep copy of the session model that a test may modify freely."""
    return copy.deepcopy(tiny_model_and_tokenizer[0])


@pytest.fixture(scope="module")
def policy():
    """The shipped tiny policy ``(model, tokenizer)``; tests deep-copy the model before training it."""
    from rlvr_lib.policy import load_policy

    return load_policy()


@pytest.fixture
def registered():
    """``add(name, cls, **preset)`` registers a test method; METHODS and TASKS are restored afterwards."""
    from rlvr_lib.methods import METHODS, register_method
    from rlvr_lib.tasks import TASKS

    methods, tasks = dict(METHODS), dict(TASKS)

    def add(name, cls, **preset):
        register_method(name, cls, f"test method {name}", **preset)

    yield add
    METHODS.clear(), METHODS.update(methods)
    TASKS.clear(), TASKS.update(tasks)


@pytest.fixture(scope="module")
def restore_registries():
    """The methods, composites and tasks a test module registers are removed afterwards (other tests list them);
    a module uses it with ``pytestmark = pytest.mark.usefixtures("restore_registries")``."""
    from rlvr_lib.methods import METHODS
    from rlvr_lib.tasks import TASKS

    methods, tasks = dict(METHODS), dict(TASKS)
    yield
    METHODS.clear(), METHODS.update(methods)
    TASKS.clear(), TASKS.update(tasks)
