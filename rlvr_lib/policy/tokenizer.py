"""Character-level tokenizer for the embedded tiny policy, built with `tokenizers`.

One token per character (lowercase letters, digits, punctuation, space and
newline) plus ``<pad>``, ``<eos>`` and ``<unk>``. It is saved with
`save_pretrained`, so ``AutoTokenizer.from_pretrained(dir)`` loads it exactly as
it loads a real model's tokenizer.
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, EOS, UNK)
CHARSET = string.digits + string.ascii_lowercase + " \n*+-=#:?.,;()[]/'"


def build_char_tokenizer(charset: str = CHARSET) -> PreTrainedTokenizerFast:
    """A tokenizer with one id per character of ``charset``; others map to ``<unk>``."""
    if len(set(charset)) != len(charset):
        raise ValueError("charset is not valid: it repeats a character")
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + tuple(charset))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    # "[\s\S]" isolates every character, newline included.
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, eos_token=EOS, unk_token=UNK, clean_up_tokenization_spaces=False
    )
    tokenizer.model_max_length = 256
    return tokenizer
