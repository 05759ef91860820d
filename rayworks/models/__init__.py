"""Tiny HF-compatible model builders and local tokenizer training (no hub downloads)."""

from rayworks.models.decoder import (
    DecoderSpec,
    build_decoder,
    decoder_for,
    load_causal_lm,
    resolve_model_dir,
)
from rayworks.models.tokenizer import TokenizerSpec, load_tokenizer, train_tokenizer

__all__ = [
    "DecoderSpec",
    "TokenizerSpec",
    "build_decoder",
    "decoder_for",
    "load_causal_lm",
    "load_tokenizer",
    "resolve_model_dir",
    "train_tokenizer",
]
