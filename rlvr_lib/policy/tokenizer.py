"""Character-level tokenizer for the embedded tiny policy: a byte-level BPE with no merges in the Qwen2 layout.

Ids 0-2 are ``<pad>``, ``<eos>``, ``<unk>``; then the testbed's characters; then every other byte.
"""

from __future__ import annotations

import string

from tokenizers import pre_tokenizers
from transformers import Qwen2Tokenizer

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, EOS, UNK)
CHARSET = string.digits + string.ascii_lowercase + " \n*+-=#:?.,;()[]/'"


def _byte_symbol(char: str) -> str:
    """The byte-level symbol of a one-byte character (space -> 'Ġ', newline -> 'Ċ')."""
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False).pre_tokenize_str(char)[0][0]


def build_char_tokenizer(charset: str = CHARSET) -> Qwen2Tokenizer:
    """A tokenizer with one id per byte; the characters of ``charset`` come first."""
    if len(set(charset)) != len(charset) or any(len(c.encode()) != 1 for c in charset):
        raise ValueError("charset is not valid: it must list distinct one-byte (ASCII) characters")
    symbols = [_byte_symbol(c) for c in charset]
    symbols += sorted(set(pre_tokenizers.ByteLevel.alphabet()) - set(symbols))
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + tuple(symbols))}
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=[], unk_token=UNK, eos_token=EOS, pad_token=PAD)
    tokenizer.model_max_length = 256
    return tokenizer
