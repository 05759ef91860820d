"""A tiny random Llama (4 heads of d_h = 8) for the LeSTD unit tests; one torch thread."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from rayworks.models import DecoderSpec, build_decoder


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny SVDs and matmuls: extra threads only add contention on a shared 2-core box."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tiny_llama() -> torch.nn.Module:
    torch.manual_seed(0)
    spec = DecoderSpec(d_model=32, n_layer=2, n_head=4, ffn_mult=2.0, max_seq_len=32)
    model = build_decoder(spec, vocab_size=40).eval()
    model.config.use_cache = False
    return model
