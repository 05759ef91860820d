"""Encoder throughput and peak activation memory against sequence length (the pass
rule's scaling check: MVC linear in T, attention quadratic in memory).

Peak memory is measured exactly, without a GPU: a `TorchDispatchMode` sees every tensor an
operator allocates, adds its storage's bytes to a live total and subtracts them when the
storage is freed (a weakref finalizer), keeping the maximum. Parameters are excluded (they
exist before the forward). Timing is the best of `repeats` forwards under `no_grad`.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from rayworks.pipelines.mvc.stacks import CausalTextEncoder, TextEncoder


class PeakMemory(TorchDispatchMode):
    """`with PeakMemory() as pm: ...` then `pm.peak` = max bytes of live tensor storages
    allocated inside the block."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.current = self.peak = 0

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key = id(storage)
            if key in self.live or storage.nbytes() == 0:
                continue
            self.live[key] = storage.nbytes()
            self.current += storage.nbytes()
            self.peak = max(self.peak, self.current)
            weakref.finalize(storage, self._free, key)
        return out


def encoder(kind: str, vocab_size: int, stack_cfg: dict[str, Any], width: int) -> torch.nn.Module:
    """One-layer encoder of arm `kind` ("attn", "mvc", or "mvc_causal": the streaming one)."""
    cfg = {**stack_cfg, "width": width, "text_layers": 1, "conv_layers": 1, "dropout": 0.0}
    if kind == "mvc_causal":
        return CausalTextEncoder(vocab_size, cfg).eval()
    return TextEncoder(kind, vocab_size, cfg, style_dim=8).eval()


def measure(model: torch.nn.Module, kind: str, length: int, repeats: int) -> dict[str, float]:
    """Seconds (best of `repeats`), frames/s and peak bytes of one batch-1 forward."""
    ids = torch.randint(1, 10, (1, length))
    lengths, style = torch.tensor([length]), torch.zeros(1, 8)

    def forward() -> None:
        if kind == "mvc_causal":
            model(ids)
        else:
            model(ids, lengths, style)

    with torch.no_grad():
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            forward()
            best = min(best, time.perf_counter() - start)
        with PeakMemory() as pm:
            forward()
    return {"seconds": best, "frames_per_s": length / best, "peak_mb": pm.peak / 2**20}


def scaling_piece(kind: str, stack: dict[str, Any], scaling: dict[str, Any]) -> dict[str, Any]:
    """All lengths of one encoder (one fan-out piece); attention stops at attn_max_len."""
    torch.manual_seed(0)
    model = encoder(kind, 16, stack, scaling["width"])
    rows = []
    for length in scaling["lengths"]:
        if kind == "attn" and length > scaling["attn_max_len"]:
            continue
        rows.append(
            {"encoder": kind, "T": length, **measure(model, kind, length, scaling["repeats"])}
        )
    return {"kind": "scaling", "encoder": kind, "rows": rows}
