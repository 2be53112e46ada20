"""`RowSeededEngine`: a rollout engine whose rows do not depend on the batch or the process (distributed tests)."""

from __future__ import annotations

import collections
import dataclasses
import zlib

from rlvr_lib.rollout import KVCacheEngine, Rollouts


class RowSeededEngine:
    """Samples each row alone, seeded by its prompt and how often the prompt was sampled before.

    A row then does not depend on the rest of the batch, nor on the process's
    sampling seed: one process and two processes roll out the same completions
    (the weight samples of 3PO call ``generate`` once each, in the same order).
    """

    def __init__(self, model, tokenizer):
        self.inner = KVCacheEngine(model, tokenizer)
        self.seen = collections.Counter()

    def generate(self, prompts, params):
        parts = []
        for prompt in prompts:
            seed = zlib.crc32(f"{prompt}|{self.seen[prompt]}".encode())
            self.seen[prompt] += 1
            parts.append(self.inner.generate([prompt], dataclasses.replace(params, seed=seed)))
        return Rollouts.concat(parts)

    def encode_prompts(self, prompts):
        return self.inner.encode_prompts(prompts)
