"""Serving long prompts from a compressed KV cache (SpecKV when a draft model is configured).

A request may name a `kv_policy` (`full`, `speckv`, `snapkv`, `streaming`, `h2o`,
`random`; the server's `--kv-policy` is the default) and a `kv_budget` (KV entries kept per
layer and KV head for the prompt; default `--kv-budget`). Each prompt row is prefilled on
its own by `compressed_prefill` of the SpecKV pipeline (for `speckv` the draft first
writes a lookahead answer of up to `lookahead` tokens, which the target re-encodes to score
its keys, then crops), and decoding continues from that cache with the explicit forward of
`rayworks.models.kv_forward`. The response's `usage.kv_cache` reports the bytes the kept
cache took against a full cache after prefill (summed over rows), so a client sees the
memory each request saved.

The plain path (policy `full` with no budget) is the engine's batched HF loop; this one
runs rows one by one (a per-row cache has per-head selections of its own).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from pydantic import Field

from rayworks.errors import RayworksError
from rayworks.platform.config import Config
from rayworks.platform.openai_api import APIError


def policies() -> tuple[str, ...]:
    from rayworks.pipelines.speckv.kv_policies import POLICIES

    return POLICIES


class KVServing(Config):
    """Server defaults of the KV policy; a request's `kv_policy` / `kv_budget` override them."""

    policy: str = Field("full", description="default KV policy of requests")
    budget: int | None = Field(None, ge=1, description="default KV entries kept per head")
    draft: str | None = Field(None, description="draft model folder (needed by speckv)")
    lookahead: int = Field(32, ge=1, description="most draft tokens SpecKV writes per prompt")

    def check(self) -> None:
        """Errors a server would only hit at the first request, raised at start instead."""
        if self.policy not in policies():
            raise RayworksError(
                f"--kv-policy {self.policy!r} is unknown; allowed: {list(policies())}"
            )
        if self.policy == "speckv" and self.draft is None:
            raise RayworksError("--kv-policy speckv needs a draft model (--draft DIR)")
        if self.policy != "full" and self.budget is None:
            raise RayworksError(f"--kv-policy {self.policy} needs --kv-budget (entries per head)")


def load_draft(draft: str | Path, target: torch.nn.Module) -> torch.nn.Module:
    """The draft LM, which must share the target's vocabulary (ids go straight across)."""
    from rayworks.models import load_causal_lm

    model = load_causal_lm(draft).eval()
    if model.config.vocab_size != target.config.vocab_size:
        raise RayworksError(
            f"draft {str(draft)!r} has vocab_size {model.config.vocab_size} but the target has "
            f"{target.config.vocab_size}; SpecKV needs a draft with the target's tokenizer"
        )
    return model


def explicit_forward_supported(model: torch.nn.Module) -> bool:
    """kv_forward re-runs Llama-layout decoders (q/k/v/o projections, RoPE, RMSNorm)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    return (
        bool(layers) and hasattr(layers[0], "self_attn") and hasattr(layers[0].self_attn, "q_proj")
    )


def resolve(
    serving: KVServing, policy: str | None, budget: int | None, draft: Any, model: Any
) -> tuple[str, int | None]:
    """The request's (policy, budget) after defaults, or a 400 naming the bad field."""
    policy = policy or serving.policy
    budget = budget or serving.budget
    if policy not in policies():
        raise APIError(
            400, f"kv_policy {policy!r} is unknown; allowed: {list(policies())}", param="kv_policy"
        )
    if policy == "full" and budget is None:
        return policy, None
    if policy == "speckv" and draft is None:
        raise APIError(
            400, "kv_policy 'speckv' needs a draft model; this server has none (--draft)",
            param="kv_policy",
        )  # fmt: skip
    if budget is None:
        raise APIError(
            400, f"kv_policy {policy!r} needs kv_budget (entries per head)", param="kv_budget"
        )
    if not explicit_forward_supported(model):
        raise APIError(
            400, "kv_policy needs a Llama-layout decoder; this model is not one", param="kv_policy"
        )
    return policy, budget


def compressed_steps(
    target: torch.nn.Module,
    draft: torch.nn.Module | None,
    rows: list[list[int]],
    policy: str,
    budget: int,
    lookahead: int,
    sample: Any,
    stats: list[dict[str, float]],
) -> Iterator[list[int]]:
    """Prefill every row through `policy` (stats appended per row), then yield one sampled
    token per row per step, forever, each row decoding from its own compressed cache."""
    from rayworks.models.kv_forward import forward
    from rayworks.pipelines.speckv.kv_policies import compressed_prefill

    caches, logits = [], []
    with torch.no_grad():
        for ids in rows:
            cache, first, row_stats = compressed_prefill(
                target, torch.tensor([ids]), policy, budget, draft, max_new_tokens=lookahead
            )
            caches.append(cache)
            logits.append(first)
            stats.append(row_stats)
        while True:
            nxt = sample(torch.cat(logits))
            yield nxt.tolist()
            for i, (cache, token) in enumerate(zip(caches, nxt.tolist(), strict=True)):
                out = forward(
                    target, torch.tensor([[token]]), cache=cache, logits_rows=slice(-1, None)
                )
                logits[i] = out[:, -1]


def usage(policy: str, budget: int, stats: list[dict[str, float]]) -> dict[str, Any]:
    """`usage.kv_cache`: the kept and full prefill cache bytes, summed over the rows."""
    kept = int(sum(s["kv_bytes"] for s in stats))
    full = int(sum(s["kv_bytes_full"] for s in stats))
    return {
        "policy": policy,
        "budget": budget,
        "bytes": kept,
        "bytes_full": full,
        "bytes_saved": full - kept,
        "draft_seconds": round(sum(s.get("draft_seconds", 0.0) for s in stats), 4),
    }
