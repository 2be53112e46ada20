"""LMHintPool mechanics with a tiny random model built in the test."""

from rlvr_lib.rollout import HFEngine
from rlvr_lib.tasks import LMHintPool
from rlvr_lib.tasks.arithmetic import family_problems


class CountingEngine(HFEngine):
    calls = 0

    def generate(self, prompts, params):
        CountingEngine.calls += 1
        return super().generate(prompts, params)


def test_lm_hint_pool_samples_cleans_dedupes_and_caches(tiny_model_and_tokenizer):
    model, tokenizer = tiny_model_and_tokenizer
    engine = CountingEngine(model, tokenizer)
    pool = LMHintPool(engine, n_hints=5, max_new_tokens=12, seed=3)
    problems = family_problems("hard_mix", 3)
    pool.prefetch(problems)
    assert CountingEngine.calls == 1  # one batched generation for all problems
    hints = [pool.hints(p) for p in problems]
    assert CountingEngine.calls == 1  # served from the cache
    for h in hints:
        assert len(h) <= 5 and len(set(h)) == len(h)
        assert all(x and "\n" not in x and "," not in x and len(x) <= 48 for x in h)
    again = LMHintPool(CountingEngine(model, tokenizer), n_hints=5, max_new_tokens=12, seed=3)
    again.prefetch(problems)
    assert [again.hints(p) for p in problems] == hints  # deterministic for a seed and batch


def test_clean_keeps_the_first_phrase():
    assert LMHintPool.clean("  shoelace   formula, then area\nmore") == "shoelace formula"
    assert LMHintPool.clean("\n\n") == ""
    assert LMHintPool.clean("x" * 100, max_chars=10) == "x" * 10
