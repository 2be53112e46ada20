"""Policies: loading any causal LM, and the embedded tiny policy (tokenizer, SFT, checkpoint)."""

from rlvr_lib.policy.load import TINY_POLICY_DIR, load_policy, resolve_policy_path
from rlvr_lib.policy.tokenizer import build_char_tokenizer

__all__ = ["TINY_POLICY_DIR", "build_char_tokenizer", "load_policy", "resolve_policy_path"]
