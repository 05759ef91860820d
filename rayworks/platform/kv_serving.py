"""Serving long prompts from a compressed KV cache.

The policies are an extension point: a pipeline registers a `KVPolicies` family with
`registry.extension("kv_policies", NAME)` (the speckv pipeline registers `speckv`,
`snapkv`, `streaming`, `h2o`, `random` and a budgeted `full`), and this module serves
whatever is registered without naming any pipeline. A request may name a `kv_policy` (the
server's `--kv-policy` is the default) and a `kv_budget` (KV entries kept per layer and KV
head for the prompt; default `--kv-budget`). Each prompt row is prefilled on its own by
its family's `prefill` (a draft-based policy such as SpecKV first lets the draft write a
lookahead answer of up to `lookahead` tokens), and decoding continues from that cache
with the explicit forward of `rayworks.models.kv_forward`. The response's `usage.kv_cache` reports the bytes the kept
cache took against a full cache after prefill (summed over rows), so a client sees the
memory each request saved.

The plain path (policy `full` with no budget) is the engine's batched HF loop; this one
runs rows one by one (a per-row cache has per-head selections of its own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from pydantic import Field

from rayworks.core.config import Config
from rayworks.core.errors import RayworksError
from rayworks.platform.openai_api import APIError
from rayworks.platform.registry import get_extensions


@dataclass(frozen=True)
class KVPolicies:
    """A family of prompt-KV policies a pipeline adds to the model endpoint.

    `prefill(target, prompt_ids, policy, budget, draft, max_new_tokens=...)` returns the
    row's kept cache, the logits of its first generated token and its stats (`kv_bytes`,
    `kv_bytes_full`, optionally `draft_seconds`); `needs_draft` lists the policies that
    need the server's draft model."""

    names: tuple[str, ...]
    prefill: Callable[..., tuple[Any, torch.Tensor, dict[str, float]]]
    needs_draft: tuple[str, ...] = ()


def _families() -> list[KVPolicies]:
    return [fam for _, fam in sorted(get_extensions("kv_policies").items())]


def policies() -> tuple[str, ...]:
    """`full` and every registered policy, in registration order without repeats."""
    return tuple(dict.fromkeys(["full", *(n for fam in _families() for n in fam.names)]))


def needs_draft(policy: str) -> bool:
    return any(policy in fam.needs_draft for fam in _families())


def family(policy: str) -> KVPolicies:
    """The registered family that serves `policy` (first registered wins)."""
    for fam in _families():
        if policy in fam.names:
            return fam
    raise RayworksError(f"no registered KV policy family serves {policy!r}")


class KVServing(Config):
    """Server defaults of the KV policy; a request's `kv_policy` / `kv_budget` override them."""

    policy: str = Field("full", description="default KV policy of requests")
    budget: int | None = Field(None, ge=1, description="default KV entries kept per head")
    draft: str | None = Field(None, description="draft model folder (draft-based policies)")
    lookahead: int = Field(32, ge=1, description="most draft tokens SpecKV writes per prompt")

    def check(self) -> None:
        """Errors a server would only hit at the first request, raised at start instead."""
        if self.policy not in policies():
            raise RayworksError(
                f"--kv-policy {self.policy!r} is unknown; allowed: {list(policies())}"
            )
        if needs_draft(self.policy) and self.draft is None:
            raise RayworksError(f"--kv-policy {self.policy} needs a draft model (--draft DIR)")
        if self.policy != "full" and self.budget is None:
            raise RayworksError(f"--kv-policy {self.policy} needs --kv-budget (entries per head)")


def load_draft(draft: str | Path, target: torch.nn.Module) -> torch.nn.Module:
    """The draft LM, which must share the target's vocabulary (ids go straight across)."""
    from rayworks.models import load_causal_lm

    model = load_causal_lm(draft).eval()
    if model.config.vocab_size != target.config.vocab_size:
        raise RayworksError(
            f"draft {str(draft)!r} has vocab_size {model.config.vocab_size} but the target has "
            f"{target.config.vocab_size}; a draft must share the target's tokenizer"
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
    if needs_draft(policy) and draft is None:
        raise APIError(
            400,
            f"kv_policy {policy!r} needs a draft model; this server has none (--draft)",
            param="kv_policy",
        )
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

    prefill = family(policy).prefill
    caches, logits = [], []
    with torch.no_grad():
        for ids in rows:
            cache, first, row_stats = prefill(
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
