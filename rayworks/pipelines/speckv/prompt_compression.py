"""Prompt compression: SpecPC and its baselines; SpecKV-PC reuses SpecPC's draft output.

SpecPC (Galim et al., ICLR 2026, arXiv 2506.08373, Sec. "SpecPC"):
1. the draft prefills x and greedily generates, recording attention: the last w prefill
   queries, then one row per generated token;
2. per layer (from `start_layer` on) and step: rows weighted by w evenly spaced weights from
   0 to 1 (`weighted_query`, later queries count more), max over heads and rows;
3. max over layers, then over steps -> one score a_j per prompt token;
4. centred max-pool (`kernel`), topk(a, C) in descending order;
5. each pick expanded to its ±`neighbors // 2` neighbours, nearest first (left before
   right, reconstructed), deduplicated in top-k order;
6. the last w prompt tokens prepended, truncated to C, sorted by position;
7. the target runs on x[idx] as a new prompt (positions renumbered).

Reconstructed: `lookahead` L counts the generated tokens whose query rows are used, so
L = 0 is the prefill window alone and L = 1 adds the first generated token's row (HF
`generate` with L new tokens would give L - 1 such rows). Row weights only apply to steps
with several rows (the prefill window); a single decode row keeps weight 1.
Baselines: `pc_recency` (last C tokens), `pc_random` (window + random others), `pc_oracle`
(the same scoring with the target itself as the draft and its own full greedy answer).
"""

from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor

from rayworks.core.config import Config
from rayworks.pipelines.speckv.kv_policies import greedy_continue, max_pool

PC_POLICIES = ("specpc", "specpc_l0", "specpc_long", "pc_recency", "pc_random", "pc_oracle")


class SpecPCConfig(Config):
    """SpecPC knobs (paper defaults in brackets; methods file CPU recipe values here)."""

    window: int = Field(8, ge=1, description="last w prompt tokens always kept [64]")
    lookahead: int = Field(1, ge=0, description="generated tokens whose rows score [1]")
    long_lookahead: int = Field(8, ge=0, description="lookahead of the `specpc_long` row")
    start_layer: int = Field(1, ge=0, description="first draft layer used [8; 1 of 2 here]")
    weighted_query: bool = Field(True, description="later window queries weigh more [true]")
    kernel: int = Field(3, ge=1, description="max-pool size [32 / 64; 3 here]")
    neighbors: int = Field(3, ge=1, description="neighbour_tokens, ±n/2 per pick [32; 3 here]")


class AttentionLog:
    """Per step, per layer attention rows [1, H, rows, keys] recorded during generation."""

    def __init__(self) -> None:
        self.steps: dict[int, dict[int, Tensor]] = {}

    def __call__(self, step: int, layer: int, probs: Tensor) -> None:
        self.steps.setdefault(step, {})[layer] = probs


def token_scores(log: AttentionLog, n_prompt: int, cfg: SpecPCConfig, lookahead: int) -> Tensor:
    """Steps 2-3: one score per prompt token [n] from steps 0..lookahead of `log`."""
    best = torch.zeros(n_prompt)
    for step in sorted(log.steps)[: lookahead + 1]:
        for layer, probs in log.steps[step].items():
            if layer < cfg.start_layer:
                continue
            p = probs[0, :, :, :n_prompt]  # [H, rows, n]
            rows = p.shape[1]
            if cfg.weighted_query and rows > 1:
                p = p * torch.linspace(0, 1, rows)[None, :, None]
            best = torch.maximum(best, p.amax((0, 1)))
    return best


def expand_neighbors(order: list[int], neighbors: int, n: int) -> list[int]:
    """Step 5: each index followed by its neighbours within ±neighbors//2, nearest first
    (left before right), deduplicated keeping the first occurrence."""
    half = neighbors // 2
    offsets = [0] + [s * d for d in range(1, half + 1) for s in (-1, 1)]
    seen: dict[int, None] = {}
    for j in order:
        for off in offsets:
            if 0 <= j + off < n:
                seen.setdefault(j + off, None)
    return list(seen)


def select_tokens(scores: Tensor, budget: int, cfg: SpecPCConfig) -> Tensor:
    """Steps 4-6: kept prompt positions [min(C, n)] in ascending order."""
    n = scores.shape[0]
    if budget >= n:
        return torch.arange(n)
    pooled = max_pool(scores, cfg.kernel)
    order = pooled.topk(min(budget, n)).indices.tolist()
    picked = expand_neighbors(order, cfg.neighbors, n)
    window = list(range(max(0, n - cfg.window), n))
    kept = list(dict.fromkeys(window + picked))[:budget]
    return torch.tensor(sorted(kept), dtype=torch.long)


def recency_tokens(n: int, budget: int) -> Tensor:
    return torch.arange(max(0, n - budget), n)


def random_tokens(n: int, budget: int, window: int, generator: torch.Generator) -> Tensor:
    if budget >= n:
        return torch.arange(n)
    w = min(window, budget)
    rest = torch.randperm(n - w, generator=generator)[: budget - w]
    return torch.cat([rest, torch.arange(n - w, n)]).sort().values


def draft_pass(
    draft, prompt_ids: Tensor, cfg: SpecPCConfig, max_new_tokens: int, eos: int | None
) -> tuple[Tensor, AttentionLog]:
    """Step 1: the draft's greedy output ŷ [1, L'] and its recorded attention."""
    log = AttentionLog()
    rows = min(cfg.window, prompt_ids.shape[1])
    out = greedy_continue(draft, prompt_ids, max_new_tokens, eos, log, prefill_rows=rows)
    return out, log


def specpc_indices(
    draft,
    prompt_ids: Tensor,
    budget: int,
    cfg: SpecPCConfig,
    max_new_tokens: int,
    eos: int | None,
) -> tuple[Tensor, Tensor]:
    """SpecPC end to end: (kept positions [<= C], the draft output ŷ [1, L'])."""
    with torch.no_grad():
        out, log = draft_pass(draft, prompt_ids, cfg, max(max_new_tokens, cfg.lookahead + 1), eos)
    scores = token_scores(log, prompt_ids.shape[1], cfg, cfg.lookahead)
    return select_tokens(scores, budget, cfg), out
