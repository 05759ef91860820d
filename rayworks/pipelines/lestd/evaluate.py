"""Metrics of a compressed LM: bits/char, attention-logit error, tokens/s vs dense.

- Validation bits/char: mean next-token NLL / ln 2 on held-out stdlib files (the tokenizer
  is character-level, so a token is a character; the EOS separating files counts too).
  Its uncertainty over the held-out text is a percentile bootstrap over rows
  (`bootstrap_bpc`): rows are resampled with replacement, the statistic is the ratio
  Σ NLL / (Σ characters · ln 2) of the resample, and the interval is the (a/2, 1 - a/2)
  quantiles (a = 1 - `ci_level`) of `resamples` such statistics (the percentile interval
  of Efron & Tibshirani 1993, ch. 13). Rows of 128 characters are not independent of
  their neighbours in the same file, so the interval is somewhat too narrow.
- Attention-logit error: per layer, the pre-softmax logits S^h = q^h k^hᵀ / √d_h (RoPE
  applied) of the dense weights and of the reconstructed weights, both on the *dense*
  model's inputs to that layer (so the error is the layer's own, not accumulated),
  ‖S - S̃‖_F / ‖S‖_F over all heads, averaged over layers.
- Tokens/s: full-sequence forwards of the same batch through the dense and the
  compressed-domain model, interleaved in one process (median of `reps` timings each), so
  the ratio is robust to load from other processes while absolute numbers are not.
"""

from __future__ import annotations

import math
import statistics
import time

import numpy as np
import torch
from torch import Tensor, nn

from rayworks.evals.lm_metrics import loss_sum


@torch.no_grad()
def bits_per_char(model: nn.Module, ids: Tensor, batch_size: int = 16) -> float:
    total, count = loss_sum(model, ids, ids, batch_size)
    return total / max(1, count) / math.log(2)


@torch.no_grad()
def row_nll(model: nn.Module, ids: Tensor, batch_size: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """Per row of `ids`: (summed next-token NLL in nats, number of predicted characters)."""
    sums, counts = [], []
    for start in range(0, len(ids), batch_size):
        x = ids[start : start + batch_size]
        logits = model(input_ids=x, use_cache=False).logits[:, :-1].float()
        target = x[:, 1:]
        nll = torch.nn.functional.cross_entropy(
            logits.transpose(1, 2), target, ignore_index=-100, reduction="none"
        )
        sums.append(nll.sum(dim=1).double())
        counts.append((target != -100).sum(dim=1))
    return torch.cat(sums).numpy(), torch.cat(counts).numpy().astype(np.float64)


def resampled_bpc(nll: np.ndarray, counts: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Bits/char Σ nll / (Σ counts · ln 2) of `resamples` bootstrap resamples of the rows.

    One (resamples, n) index draw from numpy `default_rng(seed)`: the same seed and row count
    give the same resamples, so two models scored on the same rows are resampled in pairs.
    """
    n = len(nll)
    if n == 0 or len(counts) != n:
        raise ValueError(f"bootstrap needs equal, non-empty rows (got {n} and {len(counts)})")
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    return nll[idx].sum(axis=1) / (counts[idx].sum(axis=1) * math.log(2))


def percentile_interval(stats: np.ndarray, level: float) -> tuple[float, float]:
    """The (1 - level)/2 and (1 + level)/2 quantiles of bootstrap statistics (numpy's
    default linear interpolation): the percentile interval."""
    lo, hi = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def bootstrap_bpc(
    nll: np.ndarray, counts: np.ndarray, resamples: int, level: float, seed: int
) -> tuple[float, float]:
    """Percentile-bootstrap interval of bits/char over rows (`resampled_bpc`)."""
    return percentile_interval(resampled_bpc(nll, counts, resamples, seed), level)


@torch.no_grad()
def layer_inputs(model: nn.Module, ids: Tensor) -> tuple[list[Tensor], tuple[Tensor, Tensor]]:
    """Each attention layer's input (post-norm hidden states) and the RoPE (cos, sin)."""
    inputs: list[Tensor] = []
    rope: list[tuple[Tensor, Tensor]] = []

    def grab(_module: nn.Module, args: tuple, kwargs: dict) -> None:
        inputs.append(kwargs.get("hidden_states", args[0] if args else None))
        rope.append(kwargs["position_embeddings"])

    hooks = [
        layer.self_attn.register_forward_pre_hook(grab, with_kwargs=True)
        for layer in model.model.layers
    ]
    try:
        model(input_ids=ids, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return inputs, rope[0]


def attention_logits(attn: nn.Module, x: Tensor, rope: tuple[Tensor, Tensor]) -> Tensor:
    """(B, H, T, T) pre-softmax logits of an HF attention module on inputs x (B, T, d)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    b, t, _ = x.shape
    q = attn.q_proj(x).view(b, t, -1, attn.head_dim).transpose(1, 2)
    k = attn.k_proj(x).view(b, t, -1, attn.head_dim).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, *rope)
    return q @ k.transpose(-1, -2) * attn.head_dim**-0.5


@torch.no_grad()
def attention_logit_error(dense: nn.Module, recon: nn.Module, ids: Tensor) -> float:
    """Mean over layers of ‖S - S̃‖_F / ‖S‖_F on the dense model's layer inputs."""
    inputs, rope = layer_inputs(dense, ids)
    errs = []
    for x, ld, lr in zip(inputs, dense.model.layers, recon.model.layers, strict=True):
        s, s_hat = attention_logits(ld.self_attn, x, rope), attention_logits(lr.self_attn, x, rope)
        errs.append(float((s - s_hat).norm() / s.norm().clamp_min(1e-30)))
    return sum(errs) / len(errs)


@torch.no_grad()
def tokens_per_s(models: dict[str, nn.Module], ids: Tensor, reps: int) -> dict[str, float]:
    """Tokens/s of a full forward of `ids` per model, timings interleaved (median of reps)."""
    times: dict[str, list[float]] = {name: [] for name in models}
    for m in models.values():  # warm-up
        m(input_ids=ids, use_cache=False)
    for _ in range(reps):
        for name, m in models.items():
            start = time.perf_counter()
            m(input_ids=ids, use_cache=False)
            times[name].append(time.perf_counter() - start)
    return {name: ids.numel() / statistics.median(ts) for name, ts in times.items()}
