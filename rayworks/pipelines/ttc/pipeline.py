"""`rayworks run ttc` / `rayworks bench ttc`: coverage and accuracy against budget.

One run evaluates its allocation rule at every per-query budget of `budgets` on one query
set (level `simulator`: a mixture of known Delta, averaged over `repeats` sampling seeds;
level `sampler`: a trained policy's pooled responses) and, on the very same responses, the
uniform rule, so each budget also gets the uniform budget needed to reach the same coverage
(the efficiency ratio, searched up to `efficiency_cap` times the budget; a ratio at the cap
means uniform never caught up). It logs one record per budget (step = per-query budget), and
its summary holds the metrics at `budget`, the theory check (simulator) or the entropy
separation of solvable and unsolvable queries (sampler).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rayworks.pipelines.ttc.allocators import AllocatorConfig, allocate
from rayworks.pipelines.ttc.config import TTCConfig
from rayworks.pipelines.ttc.sampler import PoolSampler, cached_pool, separation, to_draws
from rayworks.pipelines.ttc.simulator import make_queries, run_rule, theory_check
from rayworks.platform.context import RunContext
from rayworks.platform.registry import Arm, pipeline

Evaluate = Callable[[AllocatorConfig, int], dict[str, float]]
REPORT = ("accuracy", "efficiency", "unsolvable_share", "coverage_gain", "uniform_coverage")
CURVES = ("coverage", "accuracy", "unsolvable_share")


def simulator_level(cfg: TTCConfig) -> tuple[int, Evaluate, dict[str, float]]:
    """(n queries, evaluate(rule, total budget) averaged over `repeats`, extra summary)."""
    queries = make_queries(cfg.simulator, np.random.default_rng(cfg.seed))
    seeds = [cfg.seed * 1_000 + r for r in range(cfg.repeats)]

    def evaluate(alloc: AllocatorConfig, budget: int) -> dict[str, float]:
        runs = [run_rule(queries, cfg.simulator, alloc, budget, s) for s in seeds]
        return {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}

    extra: dict[str, float] = {}
    if cfg.theory_sizes:
        rows = theory_check(tuple(cfg.theory_sizes), seeds=cfg.repeats, seed=cfg.seed)
        for row in rows:
            n = int(row["n"])
            extra[f"theory_ratio_n{n}"] = row["theory_ratio"]
            extra[f"measured_ratio_n{n}"] = row["measured_ratio"]
            extra[f"elimination_budget_n{n}"] = row["elimination"]
            extra[f"sum_inv_delta_n{n}"] = row["sum_inv_delta"]
        extra["theory_fit"] = float(
            np.mean([r["measured_ratio"] / r["theory_ratio"] for r in rows])
        )
    return len(queries), evaluate, extra


def sampler_level(cfg: TTCConfig, ctx: RunContext) -> tuple[int, Evaluate, dict[str, float]]:
    """The same for a policy's pooled responses (one replay per evaluation)."""
    items, pool = cached_pool(cfg.sampler, ctx.cache_root, cfg.seed)
    draws = to_draws(items, pool, cfg.sampler.task)
    caps = [len(row) for row in draws]
    unsolvable = [not any(d.correct for d in row) for row in draws]

    def evaluate(alloc: AllocatorConfig, budget: int) -> dict[str, float]:
        return allocate(len(draws), budget, alloc, PoolSampler(draws), caps).result(unsolvable)

    extra = separation(draws, cfg.sampler.entropy_samples, cfg.seed)
    extra["pool_pass_rate"] = float(np.mean([d.correct for row in draws for d in row]))
    ctx.write_jsonl(
        "queries.jsonl",
        [
            {
                "prompt": e.prompt,
                "answer": e.answer,
                "pass_rate": sum(d.correct for d in row) / len(row),
                "answers": [d.answer for d in row[: cfg.sampler.entropy_samples]],
            }
            for e, row in zip(items, draws, strict=True)
        ],
    )
    return len(draws), evaluate, extra


def uniform_to_match(
    evaluate: Evaluate, uniform: AllocatorConfig, target: float, lo: int, hi: int
) -> int:
    """Smallest total uniform budget in (lo, hi] reaching `target` coverage (`hi` if none):
    bisection, as uniform coverage grows with the budget on fixed responses."""
    if evaluate(uniform, hi)["coverage"] < target - 1e-12:
        return hi
    while hi - lo > max(1, lo // 100):
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if evaluate(uniform, mid)["coverage"] >= target - 1e-12 else (mid, hi)
    return hi


def run_ttc(cfg: TTCConfig, ctx: RunContext) -> dict[str, float]:
    """Coverage/accuracy vs budget of `cfg.allocator.rule`, beside uniform on the same data."""
    if cfg.level == "simulator":
        n, evaluate, extra = simulator_level(cfg)
    else:
        n, evaluate, extra = sampler_level(cfg, ctx)
    uniform = cfg.allocator.model_copy(update={"rule": "uniform"})
    ctx.progress(max(cfg.budgets), f"ttc {cfg.allocator.rule} ({cfg.level})")  # step = budget
    summary: dict[str, float] = {"n_queries": float(n), **extra}
    for b in sorted(cfg.budgets):
        total = b * n
        got = evaluate(cfg.allocator, total)
        base = evaluate(uniform, total)
        cap = int(cfg.efficiency_cap * total)
        if cfg.level == "sampler" and cfg.allocator.unit == "samples":
            cap = min(cap, n * cfg.sampler.pool_size)
        match = (
            total
            if cfg.allocator.rule == "uniform" or got["coverage"] <= base["coverage"]
            else uniform_to_match(evaluate, uniform, got["coverage"], total, cap)
        )
        row = {
            **got,
            "uniform_coverage": base["coverage"],
            "uniform_accuracy": base["accuracy"],
            "coverage_gain": got["coverage"] - base["coverage"],
            "efficiency": match / total,
        }
        ctx.log(b, **row)
        summary.update({f"{k}_b{b}": v for k, v in row.items() if k in ("coverage", "accuracy")})
        if b == cfg.budget:
            summary.update(row)
    return summary


@pipeline(
    "ttc",
    config=TTCConfig,
    kind="task",
    arms={
        "ttc_uniform": Arm(
            "Uniform Best-of-(B/n) test-time compute: the same samples for every query.",
            {"allocator": AllocatorConfig(rule="uniform"), "theory_sizes": []},
        ),
    },
    headline=("coverage", "max"),
    ablations={
        "etc": ("allocator.rule=etc", "theory_sizes=[]"),
        "ucb": ("allocator.rule=ucb", "theory_sizes=[]"),
        "gap": ("allocator.rule=gap", "theory_sizes=[]"),
        "entropy": ("allocator.rule=entropy", "theory_sizes=[]"),
        "bconf": ("allocator.rule=bconf", "theory_sizes=[]"),
        "k4": ("allocator.k=4", "theory_sizes=[]"),
        "consistency": ("allocator.stop=consistency", "theory_sizes=[]"),
    },
    report=REPORT,
    curves=CURVES,
)
def run(cfg: TTCConfig, ctx: RunContext) -> dict[str, float]:
    """Bandit test-time compute allocation (elimination) vs uniform Best-of-N."""
    return run_ttc(cfg, ctx)
