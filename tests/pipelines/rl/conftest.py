"""A tiny HF decoder + char tokenizer folder, built on demand, for the RL tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from rayworks.models import DecoderSpec, TokenizerSpec, decoder_for, train_tokenizer

TRACES = ["Q: 12+3=\n<think>2+3=5 c0|1+0=1 c0</think>A: 15"] * 30


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """`tiny_lm(texts, d_model=32, n_layer=2, n_head=2)` -> a new model folder (seed 0)."""

    def build(texts: list[str] = TRACES, d_model: int = 32, n_layer: int = 2,
              n_head: int = 2) -> Path:  # fmt: skip
        path = tmp_path_factory.mktemp("tiny_lm")
        tok = train_tokenizer(TokenizerSpec(), texts)
        torch.manual_seed(0)
        spec = DecoderSpec(d_model=d_model, n_layer=n_layer, n_head=n_head)
        decoder_for(spec, tok).save_pretrained(path)
        tok.save_pretrained(path)
        return path

    return build
