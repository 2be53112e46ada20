"""Model-dependent rewards: VIGOR's gradient-norm score (two implementations, one value) and INTUITOR's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from conftest import build_char_tokenizer, build_tiny_gpt2, build_tiny_llama, build_tiny_qwen2
from rlvr_lib.rewards import grad_norm_scores, grad_norms_naive, grad_norms_vmap
from rlvr_lib.rewards.grad_norm import ghost_supported, grad_norms_ghost


def _batch(tok):
    """Three rows: left-padded prompts and right-padded completions of different lengths."""
    prompts, completions = ["12*3=?\n", "7*8=?\n", "45*67=?\n"], ["direct: #36", "56", "split: 40*67"]
    p = [tok(x, add_special_tokens=False)["input_ids"] for x in prompts]
    c = [tok(x, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for x in completions]
    P, T = max(map(len, p)), max(map(len, c))
    prompt_ids = torch.tensor([[tok.pad_token_id] * (P - len(x)) + x for x in p])
    prompt_mask = torch.tensor([[0] * (P - len(x)) + [1] * len(x) for x in p])
    completion_ids = torch.tensor([x + [tok.pad_token_id] * (T - len(x)) for x in c])
    completion_mask = torch.tensor([[1] * len(x) + [0] * (T - len(x)) for x in c])
    return prompt_ids, prompt_mask, completion_ids, completion_mask


@pytest.mark.parametrize("build", [build_tiny_qwen2, build_tiny_llama, build_tiny_gpt2], ids=["qwen2", "llama", "gpt2"])
def test_vmap_and_naive_gradient_norms_are_equal_with_padding_and_mixed_lengths(build):
    tok = build_char_tokenizer()
    model = build(tok)
    batch = _batch(tok)
    naive, fast = grad_norms_naive(model, *batch), grad_norms_vmap(model, *batch)
    assert naive.dtype == torch.float64 and naive.shape == (3,) and bool((naive > 0).all())
    torch.testing.assert_close(fast, naive, rtol=1e-6, atol=0)
    # Each row alone gives its own norm: padding and the other rows change nothing.
    for i in range(3):
        alone = grad_norms_naive(model, *(t[i:i + 1] for t in batch))
        torch.testing.assert_close(alone, naive[i:i + 1], rtol=1e-6, atol=0)
    torch.testing.assert_close(grad_norms_vmap(model, *batch, chunk_size=2), naive, rtol=1e-6, atol=0)
    if ghost_supported(model):  # Llama-family modules
        torch.testing.assert_close(grad_norms_ghost(model, *batch), naive, rtol=1e-5, atol=0)
    else:  # GPT-2's Conv1D and LayerNorm: a clear error, and "auto" falls back to the naive loop
        with pytest.raises(ValueError, match="for ghost norms"):
            grad_norms_ghost(model, *batch)
        torch.testing.assert_close(grad_norm_scores(model, *batch, sqrt_len=False).double(), -naive.float().double())


def test_ghost_norms_handle_tied_embeddings_and_leave_no_gradient(policy):
    model, tok = policy  # the shipped policy ties its input embedding to the LM head
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    batch = _batch(tok)
    torch.testing.assert_close(grad_norms_ghost(model, *batch), grad_norms_naive(model, *batch), rtol=1e-5, atol=0)
    assert all(p.grad is None for p in model.parameters())


class _TwoLayer(torch.nn.Module):
    """logits_t = W e(x_t): an embedding and an output layer, called like a causal LM (no attention)."""

    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.embed = torch.nn.Embedding(vocab, hidden)
            self.out = torch.nn.Linear(hidden, vocab, bias=False)

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        return SimpleNamespace(logits=self.out(self.embed(input_ids)))


def test_naive_norm_equals_the_hand_derived_gradient_of_a_two_layer_model():
    model = _TwoLayer(vocab=7, hidden=4)
    prompt_ids, prompt_mask = torch.tensor([[0, 3]]), torch.tensor([[0, 1]])
    completion_ids, completion_mask = torch.tensor([[5, 2, 6, 0]]), torch.tensor([[1, 1, 1, 0]])
    # Positions predicting the 3 completion tokens read inputs 3, 5, 2; l = mean_t -log softmax(W e_x)[y].
    inputs, targets = torch.tensor([3, 5, 2]), torch.tensor([5, 2, 6])
    E, W = model.embed.weight.detach().double(), model.out.weight.detach().double()
    h = E[inputs]                                             # (3, H)
    delta = torch.softmax(h @ W.T, -1) - torch.nn.functional.one_hot(targets, 7).double()  # (3, V)
    grad_W = delta.T @ h / 3                                  # dl/dW = (1/T) sum_t delta_t h_t^T
    grad_E = torch.zeros_like(E).index_add_(0, inputs, delta @ W / 3)  # dl/de_x = (1/T) sum_{t: x_t = x} W^T delta_t
    expected = torch.sqrt((grad_W ** 2).sum() + (grad_E ** 2).sum())
    rows = (prompt_ids, prompt_mask, completion_ids, completion_mask)
    torch.testing.assert_close(grad_norms_naive(model, *rows), expected[None], rtol=1e-6, atol=0)
    # The fast forms give the same hand-derived norm: vmap, and ghost norms (an nn.Embedding and an nn.Linear
    # are both owners ghost supports; the padded prompt position gets a zero output gradient).
    torch.testing.assert_close(grad_norms_vmap(model, *rows), expected[None], rtol=1e-6, atol=0)
    assert ghost_supported(model)
    torch.testing.assert_close(grad_norms_ghost(model, *rows), expected[None], rtol=1e-5, atol=0)


def test_scores_are_minus_sqrt_length_times_the_norm_and_leave_the_model_as_it_was():
    tok = build_char_tokenizer()
    model = build_tiny_qwen2(tok).train()
    batch = _batch(tok)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    norms = grad_norms_naive(model.eval(), *batch)
    model.train()
    lengths = batch[3].sum(1).double()
    torch.testing.assert_close(grad_norm_scores(model, *batch).double(), -(lengths.sqrt() * norms).float().double())
    torch.testing.assert_close(grad_norm_scores(model, *batch, sqrt_len=False, impl="naive").double(),
                               -norms.float().double())
    assert model.training and all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    assert all(p.grad is None for p in model.parameters())  # no gradient left behind
    with pytest.raises(ValueError, match="impl='ghosts' is invalid: must be one of"):
        grad_norm_scores(model, *batch, impl="ghosts")
    empty = list(batch)
    empty[3] = empty[3].clone()
    empty[3][1] = 0
    with pytest.raises(ValueError, match="at least one completion token per row"):
        grad_norms_naive(model, *empty)
