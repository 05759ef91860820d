"""Evaluate every KV policy and prompt-compression row on the same prompts.

Latencies are measured by `benchmarks/speckv_latency.py` (one policy at a time); here the
rows of one budget decode as one batch, so per-row times would mean nothing.

Per prompt, the expensive parts are shared by all budgets: one full target prefill that
records every query row (SnapKV's window rows, H2O's accumulated attention, and the full
cache), the target's full-cache greedy answer (the `full` row, the oracle's lookahead and
the queries of recall@C), one target forward of each lookahead (draft, weak draft, oracle)
on top of the prompt cache, and one recorded draft run (SpecKV's lookahead and SpecPC's
attention). Per (policy, budget) only the per-head selection and the greedy decode run.

recall@C (methods file metric, definition reconstructed): the share of the target's true
decode-time attention mass, i.e. the attention its full-cache answer queries (the last
prompt token and every answer token but the last) put on prompt keys summed over the
group's query heads, that falls on the entries a policy kept; averaged over layers and KV
heads. It is 1 at C >= n.

agreement (ours): the share of prompts on which a row's greedy answer equals the target's
own full-cache answer, right or wrong. It measures what compression changes in the target's
output, and it stays informative where the target solves only part of the tasks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch import Tensor

from rayworks.models.kv_forward import KVCache, LayerKV, forward
from rayworks.pipelines.speckv.kv_policies import (
    KVPolicyConfig,
    greedy_continue,
    group_sum,
    keep_indices,
)
from rayworks.pipelines.speckv.prompt_compression import (
    AttentionLog,
    SpecPCConfig,
    draft_pass,
    random_tokens,
    recency_tokens,
    select_tokens,
    token_scores,
)

KV_ROWS = ("snapkv", "speckv", "speckv_weak", "oracle", "h2o", "streaming", "random")


@dataclass
class Outcome:
    """One (row, budget) result on one prompt."""

    correct: bool
    recall: float = float("nan")
    kv_bytes: float = 0.0
    agrees: bool = False  # same greedy answer as the target with its full cache


@dataclass
class PromptResult:
    task: str
    n_prompt: int
    full_correct: bool
    outcomes: dict[tuple[str, int], Outcome] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


def decode(target, cache: KVCache, first_logits: Tensor, steps: int, eos: int) -> list[int]:
    """Greedy decode from a (possibly compressed) cache; the cache is extended in place."""
    out: list[int] = []
    logits = first_logits
    for _ in range(steps):
        tok = int(logits[0].argmax())
        out.append(tok)
        if tok == eos or len(out) == steps:
            break
        logits = forward(target, torch.tensor([[tok]]), cache=cache, logits_rows=slice(-1, None))[
            :, -1
        ]
    return out


def stack(caches: list[KVCache]) -> KVCache:
    """Caches of equal length per head, stacked along the batch dim."""
    return KVCache(
        [
            LayerKV(
                torch.cat([c.layers[i].k for c in caches]),
                torch.cat([c.layers[i].v for c in caches]),
                torch.cat([c.layers[i].pos for c in caches]),
            )
            for i in range(len(caches[0].layers))
        ]
    )


def decode_batch(
    target, cache: KVCache, first_logits: Tensor, steps: int, eos: int
) -> list[list[int]]:
    """Greedy decode of B rows at once ([B, vocab] first logits, a B-row cache of equal length
    per head and equal next position); each row is cut after its first eos."""
    tok = first_logits.argmax(-1)
    out = [tok]
    for _ in range(steps - 1):
        if bool((torch.stack(out, 1) == eos).any(1).all()):
            break
        tok = forward(target, tok[:, None], cache=cache, logits_rows=slice(-1, None))[:, -1].argmax(
            -1
        )
        out.append(tok)
    rows = torch.stack(out, 1).tolist()
    return [r[: r.index(eos) + 1] if eos in r else r for r in rows]


def lookahead_rows(target, cache: KVCache, lookahead: Tensor, n: int) -> list[Tensor]:
    """Target attention rows [1, H, L, n] (prompt keys only) of the lookahead ŷ re-encoded on
    top of the prompt cache (the lookahead part of SpecKV's observation window)."""
    rows: list[Tensor] = []
    forward(
        target,
        lookahead,
        cache=cache.crop(n),
        record=lambda _l, p: rows.append(p[..., :n]),
        logits_rows=slice(-1, None),
    )
    return rows


def recall_at(keep: list[Tensor], mass: list[Tensor]) -> float:
    """Mean over layers and KV heads of the attention mass [1, H_kv, n] on the kept entries."""
    shares = [
        m.gather(-1, k).sum(-1) / m.sum(-1).clamp_min(1e-12)
        for k, m in zip(keep, mass, strict=True)
    ]
    return float(torch.cat([s.flatten() for s in shares]).mean())


def evaluate_prompt(
    models: dict,
    prompt: Tensor,
    answer: list[int],
    task: str,
    budgets: list[int],
    kv_cfg: KVPolicyConfig,
    pc_cfg: SpecPCConfig,
    pc_rows: list[str],
    cascade: dict[str, list[int]],
    eos: int,
    generator: torch.Generator,
    kv_rows: list[str] | tuple[str, ...] = KV_ROWS,
) -> PromptResult:
    """All rows at all budgets on one prompt [1, n] (answer = gold ids incl. eos)."""
    target, n, steps = models["target"], prompt.shape[1], len(answer) + 1
    res = PromptResult(task, n, False)
    t0 = time.perf_counter()
    full_probs: list[Tensor] = []
    full = KVCache()
    logits = forward(
        target,
        prompt,
        cache=full,
        record=lambda _l, p: full_probs.append(p),
        logits_rows=slice(-1, None),
    )[:, -1]
    res.timings["prefill_seconds"] = time.perf_counter() - t0
    res.timings["kv_bytes_full"] = float(full.nbytes())
    t0 = time.perf_counter()
    target_answer = decode(target, full.crop(n), logits, steps, eos)
    res.timings["decode_seconds"] = time.perf_counter() - t0
    res.full_correct = target_answer == answer
    oracle_ids = torch.tensor([target_answer])
    look = {"oracle": lookahead_rows(target, full, oracle_ids, n)}
    draft_log = None
    if "speckv" in kv_rows or pc_rows or cascade:
        t0 = time.perf_counter()
        draft_out, draft_log = draft_pass(models["draft"], prompt, pc_cfg, steps, eos)
        res.timings["draft_seconds"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        look["speckv"] = lookahead_rows(target, full, draft_out, n)
        res.timings["lookahead_seconds"] = time.perf_counter() - t0
    if "speckv_weak" in kv_rows:
        weak_out = greedy_continue(models["draft_weak"], prompt, steps, eos)
        look["speckv_weak"] = lookahead_rows(target, full, weak_out, n)
    # true decode-time queries: the last prompt token and the answer tokens but the last
    mass = [
        group_sum(torch.cat([fp[:, :, -1:, :], lo[:, :, :-1]], 2), full.layers[0].k.shape[1])
        for fp, lo in zip(full_probs, look["oracle"], strict=True)
    ]
    n_kv = full.layers[0].k.shape[1]
    pc_scores = pc_token_scores(pc_rows, draft_log, full_probs, look["oracle"], n, pc_cfg)
    for budget in budgets:
        win = min(kv_cfg.window, budget) + 1
        keeps = []
        for row in kv_rows:
            keep = []
            for layer, fp in enumerate(full_probs):
                if row in look:
                    probs = torch.cat([fp[:, :, -win:], look[row][layer]], 2)
                elif row == "snapkv":
                    probs = fp[:, :, -win:]
                else:
                    probs = fp
                policy = "speckv" if row in look else row
                keep.append(keep_indices(policy, n, budget, n_kv, kv_cfg, probs, generator))
            keeps.append(keep)
        if kv_rows:
            caches = [full.select(keep) for keep in keeps]
            got = decode_batch(target, stack(caches), logits.expand(len(caches), -1), steps, eos)
            for row, keep, cache, g in zip(kv_rows, keeps, caches, got, strict=True):
                res.outcomes[(row, budget)] = Outcome(
                    g == answer, recall_at(keep, mass), float(cache.nbytes()), g == target_answer
                )
        if pc_rows:
            idx = [
                recency_tokens(n, budget)
                if row == "pc_recency"
                else random_tokens(n, budget, pc_cfg.window, generator)
                if row == "pc_random"
                else select_tokens(pc_scores[row], budget, pc_cfg)
                for row in pc_rows
            ]
            ids = torch.stack([prompt[0, i] for i in idx])
            cache = KVCache()
            first = forward(target, ids, cache=cache, logits_rows=slice(-1, None))[:, -1]
            per_row = float(cache.nbytes()) / len(pc_rows)  # the prompt's KV, before decoding
            got = decode_batch(target, cache, first, steps, eos)
            for row, g in zip(pc_rows, got, strict=True):
                res.outcomes[(row, budget)] = Outcome(
                    g == answer, kv_bytes=per_row, agrees=g == target_answer
                )
    for c_pc, kv_budgets in cascade.items():
        idx = select_tokens(token_scores(draft_log, n, pc_cfg, pc_cfg.lookahead), int(c_pc), pc_cfg)
        for budget in kv_budgets:
            res.outcomes[(f"speckv_pc{c_pc}", budget)] = cascade_row(
                target, prompt[:, idx], draft_out, budget, kv_cfg, steps, eos, answer, target_answer
            )
    return res


def pc_token_scores(
    pc_rows: list[str],
    draft_log: AttentionLog | None,
    full_probs: list[Tensor],
    oracle_rows: list[Tensor],
    n: int,
    cfg: SpecPCConfig,
) -> dict[str, Tensor]:
    """SpecPC token scores [n] of the scored prompt-compression rows. The `oracle` row scores
    with the target itself: its last-window prefill rows and one row per token of its own
    full-cache answer (teacher-forced, all layers)."""
    out: dict[str, Tensor] = {}
    lookahead = {"specpc": cfg.lookahead, "specpc_l0": 0, "specpc_long": cfg.long_lookahead}
    for row, steps in lookahead.items():
        if row in pc_rows and draft_log is not None:
            out[row] = token_scores(draft_log, n, cfg, steps)
    if "pc_oracle" in pc_rows:
        log = AttentionLog()
        w = min(cfg.window, n)
        for layer, (fp, lo) in enumerate(zip(full_probs, oracle_rows, strict=True)):
            log(0, layer, fp[:, :, -w:])
            for s in range(lo.shape[2]):
                log(s + 1, layer, lo[:, :, s : s + 1])
        out["pc_oracle"] = token_scores(
            log, n, cfg.model_copy(update={"start_layer": 0}), len(log.steps)
        )
    return out


def cascade_row(
    target,
    ids: Tensor,
    lookahead: Tensor,
    budget: int,
    cfg: KVPolicyConfig,
    steps: int,
    eos: int,
    answer: list[int],
    reference: list[int],
) -> Outcome:
    """SpecKV-PC: SpecKV on the SpecPC-compressed prompt with SpecPC's draft output ŷ
    (`reference`: the target's full-cache answer, for `Outcome.agrees`)."""
    n = ids.shape[1]
    probs: list[Tensor] = []
    cache = KVCache()
    logits = forward(
        target,
        ids,
        cache=cache,
        record=lambda _l, p: probs.append(p),
        record_rows=slice(-(min(cfg.window, budget) + 1), None),
        logits_rows=slice(-1, None),
    )[:, -1]
    look = lookahead_rows(target, cache, lookahead, n)
    n_kv = cache.layers[0].k.shape[1]
    keep = [
        keep_indices("speckv", n, budget, n_kv, cfg, torch.cat([p, lo], 2))
        for p, lo in zip(probs, look, strict=True)
    ]
    cache = cache.select(keep)
    got = decode(target, cache, logits, steps, eos)
    return Outcome(got == answer, kv_bytes=float(cache.nbytes()), agrees=got == reference)
