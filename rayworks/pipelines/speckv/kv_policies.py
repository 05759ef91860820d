"""KV-cache dropping: SpecKV and its baselines, as scoring + pooling + per-(layer, head) top-k.

SpecKV (Galim et al., ICLR 2026, arXiv 2506.08373, Sec. "SpecKV"): the draft greedily
continues the prompt x (n tokens) for L tokens, giving the lookahead ŷ; the target prefills
[x; ŷ]; in every layer and KV head the score of a prompt key j outside the observation
window is the max, over the window queries (the last w + 1 prompt queries plus the L
lookahead queries) and over the query heads of the GQA group, of the softmax attention
weight on j; the scores are max-pooled (kernel k, stride 1, centred); the top C - w keys
per (layer, head) are kept plus the last w prompt entries; the lookahead entries are
cropped and decoding proceeds normally (RoPE positions of kept entries unchanged).

Baselines on the same machinery (the methods file's CPU recipe):
- `full`: every entry.  `snapkv`: SpecKV's scoring with the prompt window only (no ŷ).
- `streaming` (StreamingLLM): `sinks` first entries + the most recent C - sinks.
- `h2o` (H2O-lite, reconstructed): one-shot heavy hitters, the attention each key receives
  summed over all prompt queries and the group's heads (no pooling), top C - w + window;
  the original evicts online during generation.
- `random`: C - w random keys per head + the window.
- `oracle` (SpecKV-oracle): SpecKV with ŷ = the target's own full-cache greedy answer.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from rayworks.core.config import Config
from rayworks.models.kv_forward import KVCache, forward
from rayworks.platform.kv_serving import KVPolicies
from rayworks.platform.registry import extension

POLICIES = ("full", "snapkv", "speckv", "streaming", "h2o", "random")
EVAL_POLICIES = (*POLICIES, "oracle")


class KVPolicyConfig(Config):
    """Knobs of the KV-dropping policies (paper defaults in brackets, scaled to C in 8..64)."""

    window: int = Field(
        4,
        ge=1,
        description="observation window w kept and used for scoring [32; methods file "
        "CPU recipe 8; 4 here so C = 8 still selects 4 keys (reconstructed)]",
    )
    kernel: int = Field(
        3, ge=1, description="max-pool kernel [7; 3 so value length 8 lets methods differ]"
    )
    sinks: int = Field(4, ge=0, description="StreamingLLM attention sinks kept [4]")
    pool: bool = Field(True, description="max-pool the scores (pool_type max)")


def max_pool(scores: Tensor, kernel: int) -> Tensor:
    """Centred 1-d max-pool over the last dim (stride 1, same length). [..., T] -> [..., T]."""
    if kernel <= 1:
        return scores
    shape = scores.shape
    flat = scores.reshape(-1, 1, shape[-1])
    pad = kernel // 2
    pooled = F.max_pool1d(
        F.pad(flat, (pad, kernel - 1 - pad), value=float("-inf")), kernel, stride=1
    )
    return pooled.reshape(shape)


def group_max(probs: Tensor, n_kv: int) -> Tensor:
    """Max over the query rows and the query heads of each KV group.

    probs [B, n_heads, rows, keys] -> [B, n_kv, keys]; heads h*g .. h*g + g - 1 share KV head
    h (the `repeat_interleave` layout of the forward)."""
    b, n_heads, rows, keys = probs.shape
    return probs.reshape(b, n_kv, (n_heads // n_kv) * rows, keys).amax(2)


def group_sum(probs: Tensor, n_kv: int) -> Tensor:
    """Sum over the query rows and the group's heads (H2O's accumulated attention)."""
    b, n_heads, rows, keys = probs.shape
    return probs.reshape(b, n_kv, (n_heads // n_kv) * rows, keys).sum(2)


def window_scores(probs: Tensor, n_kv: int, n_prompt: int, window: int, kernel: int) -> Tensor:
    """SnapKV / SpecKV score of prompt keys outside the window, pooled.

    probs [B, n_heads, rows, keys >= n_prompt]: softmax rows of the observation queries.
    Returns [B, n_kv, n_prompt - window]."""
    s = group_max(probs[..., : n_prompt - window], n_kv)
    return max_pool(s, kernel)


def top_with_window(scores: Tensor, n_prompt: int, budget: int, window: int) -> Tensor:
    """Indices [B, H_kv, C] (ascending) of the top C - w scored keys plus the last w keys."""
    b, h, _ = scores.shape
    k = budget - window
    top = scores.topk(k, -1).indices if k > 0 else scores.new_zeros(b, h, 0, dtype=torch.long)
    win = torch.arange(n_prompt - window, n_prompt).expand(b, h, window)
    return torch.cat([top, win], -1).sort(-1).values


def keep_indices(
    policy: str,
    n_prompt: int,
    budget: int,
    n_kv: int,
    cfg: KVPolicyConfig,
    probs: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """One layer's kept prompt entries [1, n_kv, min(C, n)] under `policy`.

    `probs` ([1, n_heads, rows, keys]) are the observation rows the policy scores with: the
    window (+ lookahead) rows for snapkv / speckv / oracle, every prompt row for h2o."""
    if budget >= n_prompt or policy == "full":
        return torch.arange(n_prompt).expand(1, n_kv, n_prompt)
    window = min(cfg.window, budget)
    if policy == "streaming":
        sinks = min(cfg.sinks, budget)
        idx = torch.cat([torch.arange(sinks), torch.arange(n_prompt - budget + sinks, n_prompt)])
        return idx.expand(1, n_kv, budget)
    if policy == "random":
        scores = torch.rand(1, n_kv, n_prompt - window, generator=generator)
    elif policy == "h2o":
        assert probs is not None
        scores = group_sum(probs[..., : n_prompt - window], n_kv)
    elif policy in ("snapkv", "speckv", "oracle"):
        assert probs is not None
        scores = window_scores(probs, n_kv, n_prompt, window, cfg.kernel if cfg.pool else 1)
    else:
        raise ValueError(f"unknown KV policy {policy!r}; allowed: {list(EVAL_POLICIES)}")
    return top_with_window(scores, n_prompt, budget, window)


def greedy_continue(
    model, ids: Tensor, steps: int, eos: int | None, record=None, prefill_rows: int = 1
) -> Tensor:
    """Greedy continuation [1, <= steps] of `ids` [1, n] (stops after eos).

    `record(step, layer, probs)`, when given, gets the attention rows of every forward:
    step 0 is the prefill (its last `prefill_rows` queries), step s >= 1 the query of the
    s-th generated token (the one predicting token s + 1)."""
    cache = KVCache()
    out: list[int] = []
    step = [0]

    def rec(layer: int, probs: Tensor) -> None:
        record(step[0], layer, probs)

    hook = rec if record is not None else None
    logits = forward(
        model,
        ids,
        cache=cache,
        logits_rows=slice(-1, None),
        record=hook,
        record_rows=slice(ids.shape[1] - prefill_rows, None),
    )
    for _ in range(steps):
        tok = int(logits[0, -1].argmax())
        out.append(tok)
        if tok == eos or len(out) == steps:
            break
        step[0] += 1
        logits = forward(
            model, torch.tensor([[tok]]), cache=cache, logits_rows=slice(-1, None), record=hook
        )
    return torch.tensor([out], dtype=torch.long)


def observation_probs(
    target, prompt_ids: Tensor, lookahead: Tensor | None, rows: int
) -> tuple[KVCache, list[Tensor], Tensor]:
    """Target prefill of [x; ŷ] recording the last `rows` + |ŷ| query rows per layer.

    Returns (cache of the prompt entries only, per-layer probs [1, H, rows', n + L], logits of
    the last prompt token [1, vocab])."""
    n = prompt_ids.shape[1]
    seq = prompt_ids if lookahead is None else torch.cat([prompt_ids, lookahead], 1)
    span = rows + seq.shape[1] - n
    probs: list[Tensor] = []
    cache = KVCache()
    logits = forward(
        target,
        seq,
        cache=cache,
        record=lambda _l, p: probs.append(p),
        record_rows=slice(seq.shape[1] - span, None),
        logits_rows=slice(n - 1, n),
    )
    return cache.crop(n), probs, logits[:, -1]


def compressed_prefill(
    target,
    prompt_ids: Tensor,
    policy: str,
    budget: int,
    draft=None,
    *,
    max_new_tokens: int = 16,
    config: KVPolicyConfig | None = None,
    generator: torch.Generator | None = None,
) -> tuple[KVCache, Tensor, dict[str, float]]:
    """Prefill `prompt_ids` [1, n] and drop the cache to `budget` entries per (layer, head)
    (policy `full` keeps all n; any policy keeps all n when budget >= n).

    Returns the cache ready for decoding (lookahead cropped), the logits [1, vocab] of the
    first answer token, and stats (kv_bytes, kv_bytes_full, draft_seconds, prefill_seconds,
    lookahead_tokens). Decode on with `forward(target, tok[None], cache=cache,
    logits_rows=slice(-1, None))`."""
    if policy not in POLICIES:
        raise ValueError(f"unknown KV policy {policy!r}; allowed: {list(POLICIES)}")
    if policy == "speckv" and draft is None:
        raise ValueError("policy 'speckv' needs a draft model (draft=None given)")
    if budget < 1:
        raise ValueError(f"budget={budget} must be >= 1")
    cfg = config or KVPolicyConfig()
    n = prompt_ids.shape[1]
    stats = {"draft_seconds": 0.0, "lookahead_tokens": 0.0}
    with torch.no_grad():
        lookahead = None
        if policy == "speckv":
            t0 = time.perf_counter()
            eos = getattr(draft.config, "eos_token_id", None)
            lookahead = greedy_continue(draft, prompt_ids, max_new_tokens, eos)
            stats["draft_seconds"] = time.perf_counter() - t0
            stats["lookahead_tokens"] = float(lookahead.shape[1])
        t0 = time.perf_counter()
        rows = n if policy == "h2o" else min(cfg.window + 1, n)
        scored = policy in ("snapkv", "speckv", "h2o") and budget < n
        if scored:
            cache, probs, logits = observation_probs(target, prompt_ids, lookahead, rows)
        else:
            cache = KVCache()
            logits = forward(target, prompt_ids, cache=cache, logits_rows=slice(-1, None))[:, -1]
            probs = [None] * len(cache.layers)
        full_bytes = cache.nbytes()
        keep = [
            keep_indices(policy, n, budget, lay.k.shape[1], cfg, p, generator)
            for lay, p in zip(cache.layers, probs, strict=True)
        ]
        cache = cache.select(keep)
        stats["prefill_seconds"] = time.perf_counter() - t0
    stats.update(kv_bytes=float(cache.nbytes()), kv_bytes_full=float(full_bytes))
    return cache, logits, stats


# The model endpoint serves these policies (`rayworks serve model --kv-policy`).
extension("kv_policies", "speckv")(
    KVPolicies(names=POLICIES, prefill=compressed_prefill, needs_draft=("speckv",))
)
