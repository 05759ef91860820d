"""`rayworks run ttc` / `rayworks bench ttc`: coverage and accuracy against budget.

One run evaluates its allocation rule at every per-query budget of `budgets` on one query
set (level `simulator`: a mixture of known Delta, averaged over `repeats` sampling seeds;
level `sampler`: a trained policy's pooled responses) and, on the very same responses, the
uniform rule, so each budget also gets the uniform budget needed to reach the same coverage
(the efficiency ratio, searched up to `efficiency_cap` times the budget; a ratio at the cap
means uniform never caught up). It logs one record per budget (step = per-query budget), and
its summary holds the metrics at `budget`, the theory check (simulator) or the entropy
separation of solvable and unsolvable queries and the per-difficulty malformed and looping
rates (sampler).

The rules with an exploration weight (ucb, entropy, bconf) get their lam chosen first, on
held-out validation queries only (`choose_lam` over `lam_grid`, coverage at `budget`): the
simulator's from another query seed, the sampler's from the task's `val` split with their
own response pools. The summary's `lam` is the weight used on the test queries.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rayworks.data.tasks.base import Example, Split
from rayworks.pipelines.ttc.allocators import AllocatorConfig, Draw, allocate
from rayworks.pipelines.ttc.config import TTCConfig
from rayworks.pipelines.ttc.sampler import (
    PoolSampler,
    cached_pool,
    difficulty_profile,
    separation,
    to_draws,
)
from rayworks.pipelines.ttc.simulator import make_queries, run_rule, theory_check
from rayworks.platform.context import RunContext
from rayworks.platform.registry import Arm, pipeline

Evaluate = Callable[[AllocatorConfig, int], dict[str, float]]
REPORT = ("accuracy", "efficiency", "unsolvable_share", "coverage_gain", "uniform_coverage")
CURVES = ("coverage", "accuracy", "unsolvable_share")
LAM_RULES = ("ucb", "entropy", "bconf")  # the rules with an exploration weight lam
VAL_SEED_OFFSET = 10_007  # simulator validation queries: another query and sampling seed


def simulator_split(cfg: TTCConfig, split: Split) -> tuple[int, Evaluate]:
    """(n queries, evaluate(rule, total budget) averaged over `repeats` sampling seeds) for
    the test queries of `cfg.seed` or for a held-out validation set drawn from the same
    mixture with other query and sampling seeds."""
    base = cfg.seed if split == "test" else cfg.seed + VAL_SEED_OFFSET
    queries = make_queries(cfg.simulator, np.random.default_rng(base))
    seeds = [base * 1_000 + r for r in range(cfg.repeats)]

    def evaluate(alloc: AllocatorConfig, budget: int) -> dict[str, float]:
        runs = [run_rule(queries, cfg.simulator, alloc, budget, s) for s in seeds]
        return {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}

    return len(queries), evaluate


def simulator_level(cfg: TTCConfig) -> tuple[int, Evaluate, dict[str, float]]:
    """The test queries' (n, evaluate) and the theory check as extra summary."""
    n, evaluate = simulator_split(cfg, "test")
    extra: dict[str, float] = {}
    if cfg.theory_sizes:
        rows = theory_check(tuple(cfg.theory_sizes), seeds=cfg.repeats, seed=cfg.seed)
        for row in rows:
            n_th = int(row["n"])
            extra[f"theory_ratio_n{n_th}"] = row["theory_ratio"]
            extra[f"measured_ratio_n{n_th}"] = row["measured_ratio"]
            extra[f"elimination_budget_n{n_th}"] = row["elimination"]
            extra[f"sum_inv_delta_n{n_th}"] = row["sum_inv_delta"]
        extra["theory_fit"] = float(
            np.mean([r["measured_ratio"] / r["theory_ratio"] for r in rows])
        )
    return n, evaluate, extra


def pool_draws(cfg: TTCConfig, ctx: RunContext, split: Split) -> tuple[list[Example], list]:
    """The `split` queries of the sampler level and their scored response pools."""
    items, pool = cached_pool(cfg.sampler, ctx.cache_root, cfg.seed, split)
    return items, to_draws(items, pool, cfg.sampler.task)


def replay(draws: list[list[Draw]]) -> Evaluate:
    """evaluate(rule, total budget): one allocation over the pooled responses, in order."""
    caps = [len(row) for row in draws]
    unsolvable = [not any(d.correct for d in row) for row in draws]

    def evaluate(alloc: AllocatorConfig, budget: int) -> dict[str, float]:
        return allocate(len(draws), budget, alloc, PoolSampler(draws), caps).result(unsolvable)

    return evaluate


def sampler_level(cfg: TTCConfig, ctx: RunContext) -> tuple[int, Evaluate, dict[str, float]]:
    """The same for a policy's pooled responses to the test queries."""
    items, draws = pool_draws(cfg, ctx, "test")
    first = cfg.sampler.entropy_samples
    extra = separation(draws, first, cfg.seed)
    extra["pool_pass_rate"] = float(np.mean([d.correct for row in draws for d in row]))
    extra.update(difficulty_profile(items, draws, first))
    ctx.write_jsonl(
        "queries.jsonl",
        [
            {
                "prompt": e.prompt,
                "answer": e.answer,
                "difficulty": e.difficulty,
                "pass_rate": sum(d.correct for d in row) / len(row),
                "malformed": sum(d.answer is None for d in row) / len(row),
                "answers": [d.answer for d in row[:first]],
            }
            for e, row in zip(items, draws, strict=True)
        ],
    )
    return len(draws), replay(draws), extra


def held_out(cfg: TTCConfig, ctx: RunContext) -> tuple[int, Evaluate]:
    """(n, evaluate) of the validation queries: no test query reaches a knob's choice."""
    if cfg.level == "simulator":
        return simulator_split(cfg, "val")
    _, draws = pool_draws(cfg, ctx, "val")
    return len(draws), replay(draws)


def choose_lam(
    evaluate: Evaluate, alloc: AllocatorConfig, grid: list[float], total: int
) -> tuple[float, list[dict[str, float]]]:
    """The exploration weight lam of `alloc`'s priority rule with the best coverage at the
    total budget `total`, by `evaluate` on validation queries only; ties go to the smaller
    share of samples spent on unsolvable queries, then to the earlier grid entry.

    The bonus lam * sqrt(2 ln t / n_x) is about 1.2-3.5 at lam = 1 for the first 8 samples of
    a query, against an entropy or confidence in [0, 1]: at lam = 1 it decides the order and
    the rule is nearly round robin, so lam is a knob to choose, not a constant.
    """
    rows = []
    for lam in grid:
        got = evaluate(alloc.model_copy(update={"lam": lam}), total)
        rows.append(
            {"lam": lam, "coverage": got["coverage"], "unsolvable_share": got["unsolvable_share"]}
        )
    best = max(rows, key=lambda r: (r["coverage"], -r["unsolvable_share"]))
    return best["lam"], rows


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
    alloc, chosen = cfg.allocator, dict[str, float]()
    if alloc.rule in LAM_RULES and cfg.lam_grid:
        n_val, evaluate_val = held_out(cfg, ctx)
        lam, rows = choose_lam(evaluate_val, alloc, cfg.lam_grid, cfg.budget * n_val)
        alloc = alloc.model_copy(update={"lam": lam})
        ctx.write_jsonl("lam_selection.jsonl", rows)
        best = next(r for r in rows if r["lam"] == lam)
        chosen = {"lam": lam, "val_coverage": best["coverage"]}
    if cfg.level == "simulator":
        n, evaluate, extra = simulator_level(cfg)
    else:
        n, evaluate, extra = sampler_level(cfg, ctx)
    uniform = alloc.model_copy(update={"rule": "uniform"})
    ctx.progress(max(cfg.budgets), f"ttc {alloc.rule} ({cfg.level})")  # step = budget
    summary: dict[str, float] = {"n_queries": float(n), **extra, **chosen}
    for b in sorted(cfg.budgets):
        total = b * n
        got = evaluate(alloc, total)
        base = evaluate(uniform, total)
        cap = int(cfg.efficiency_cap * total)
        if cfg.level == "sampler" and cfg.allocator.unit == "samples":
            cap = min(cap, n * cfg.sampler.pool_size)
        match = (
            total
            if alloc.rule == "uniform" or got["coverage"] <= base["coverage"]
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
