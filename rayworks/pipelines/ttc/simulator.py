"""Level (i) of the TTC evaluation: queries with a known solve probability Delta_x.

Each query is easy (Delta in `easy`), hard (Delta in `hard`) or unsolvable (Delta = 0). A
sample is correct with probability Delta; a wrong sample says one of the query's wrong
answers, drawn with Zipf(1) weights over `wrong_answers[kind]` distinct answers — so how
diverse a query's wrong answers are is a setting of the simulator (reconstructed: the paper's
rationale is that unsolvable queries give repetitive outputs). The Entropy rule's advantage
is therefore built in here; only the real sampler can test it.

The oracle is `exact` (1 if correct else 0) or `noisy` (correctness + Gaussian noise of
`noise` std, clipped to [0, 1], like an imperfect PRM). Token lengths are Poisson around
`tokens_correct` / `tokens_wrong` (at least 1) for the token-budget mode.

`theory_budgets` gives Theorem 1's scales for a set of Deltas, and `budget_to_cover` finds by
bisection the smallest budget at which a rule reaches a coverage target, so the two can be
compared (`theory_check`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from pydantic import Field

from rayworks.core.config import Config
from rayworks.pipelines.ttc.allocators import AllocatorConfig, Draw, allocate


class SimulatorConfig(Config):
    """A mixture of easy, hard and unsolvable queries and the oracle that scores them."""

    n_queries: int = Field(200, ge=1, description="queries per allocation")
    easy_share: float = Field(0.4, ge=0, le=1, description="share of easy queries")
    hard_share: float = Field(0.4, ge=0, le=1, description="share of hard queries (rest: none)")
    easy: tuple[float, float] = Field((0.3, 0.9), description="Delta range of easy queries")
    hard: tuple[float, float] = Field((0.01, 0.1), description="Delta range of hard queries")
    oracle: str = Field("exact", pattern="^(exact|noisy)$", description="exact or noisy")
    noise: float = Field(0.3, ge=0, description="noisy oracle: score noise std")
    wrong_answers: dict[str, int] = Field(
        default_factory=lambda: {"easy": 3, "hard": 8, "unsolvable": 2},
        description="distinct wrong answers per kind (reconstructed; sets answer diversity)",
    )
    tokens_correct: float = Field(24.0, gt=0, description="mean tokens of a correct sample")
    tokens_wrong: float = Field(32.0, gt=0, description="mean tokens of a wrong sample")


@dataclass(frozen=True)
class SimQuery:
    delta: float
    kind: str
    wrong: int  # distinct wrong answers


def make_queries(cfg: SimulatorConfig, rng: np.random.Generator) -> list[SimQuery]:
    """`n_queries` queries with the configured mixture (counts rounded, rest unsolvable)."""
    n = cfg.n_queries
    n_easy = round(cfg.easy_share * n)
    n_hard = min(n - n_easy, round(cfg.hard_share * n))
    out = [
        SimQuery(float(rng.uniform(*cfg.easy)), "easy", cfg.wrong_answers["easy"])
        for _ in range(n_easy)
    ]
    out += [
        SimQuery(float(rng.uniform(*cfg.hard)), "hard", cfg.wrong_answers["hard"])
        for _ in range(n_hard)
    ]
    out += [
        SimQuery(0.0, "unsolvable", cfg.wrong_answers["unsolvable"])
        for _ in range(n - n_easy - n_hard)
    ]
    order = rng.permutation(n)
    return [out[i] for i in order]


class Simulator:
    """Draws samples for `queries`: query i's j-th sample is fixed by (seed, i, j), whatever
    order the allocator asks in, so rules compared on one seed see the same responses
    (common random numbers) and coverage grows monotonically with the budget."""

    CHUNK = 64

    def __init__(self, queries: list[SimQuery], cfg: SimulatorConfig, seed: int) -> None:
        self.queries, self.cfg, self.seed = queries, cfg, seed
        self._drawn: list[list[Draw]] = [[] for _ in queries]
        self._used = [0] * len(queries)

    @property
    def unsolvable(self) -> list[bool]:
        return [q.delta == 0 for q in self.queries]

    def _more(self, index: int) -> None:
        """Draw the next CHUNK samples of query `index` (vectorised)."""
        q, cfg, n = self.queries[index], self.cfg, self.CHUNK
        rng = np.random.default_rng([self.seed, index, len(self._drawn[index])])
        correct = rng.random(n) < q.delta
        weights = 1.0 / np.arange(1, q.wrong + 1)
        wrong = rng.choice(q.wrong, size=n, p=weights / weights.sum())
        scores = correct.astype(float)
        if cfg.oracle == "noisy":
            scores = np.clip(scores + rng.normal(0, cfg.noise, n), 0, 1)
        tokens = np.maximum(1, rng.poisson(np.where(correct, cfg.tokens_correct, cfg.tokens_wrong)))
        self._drawn[index] += [
            Draw("correct" if c else f"wrong{w}", float(s), int(t), bool(c))
            for c, w, s, t in zip(correct, wrong, scores, tokens, strict=True)
        ]

    def draw(self, index: int) -> Draw:
        while self._used[index] >= len(self._drawn[index]):
            self._more(index)
        self._used[index] += 1
        return self._drawn[index][self._used[index] - 1]

    def __call__(self, requests: list[tuple[int, int]]) -> list[list[Draw]]:
        return [[self.draw(i) for _ in range(k)] for i, k in requests]


def run_rule(
    queries: list[SimQuery], cfg: SimulatorConfig, alloc: AllocatorConfig, budget: int, seed: int
) -> dict[str, float]:
    """One allocation of `budget` on `queries` with sampling seed `seed`: its result."""
    sim = Simulator(queries, cfg, seed)
    return allocate(len(queries), budget, alloc, sim).result(sim.unsolvable)


def budget_to_cover(
    queries: list[SimQuery],
    cfg: SimulatorConfig,
    alloc: AllocatorConfig,
    target: float,
    seed: int,
    hi: int | None = None,
) -> int:
    """Smallest budget (samples) at which `alloc` reaches `target` coverage on `seed`'s
    responses (with fixed responses coverage is monotone in the budget for the elimination
    and uniform rules): doubling from n until the target is met, then bisection, so no
    allocation runs at much more than twice the answer. Returns `hi` if even that is not
    enough."""
    n = len(queries)
    cap = hi or 64 * n * max(1, math.ceil(1 / max(min(q.delta for q in queries), 1e-9)))

    def enough(budget: int) -> bool:
        return run_rule(queries, cfg, alloc, budget, seed)["coverage"] >= target - 1e-12

    lo, hi = n - 1, n  # below one sample per query nothing is guaranteed
    while hi < cap and not enough(hi):
        lo, hi = hi, 2 * hi
    if hi >= cap:
        hi = cap
        if not enough(cap):
            return cap
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


def theory_budgets(deltas: list[float]) -> dict[str, float]:
    """Theorem 1's scales (log factors dropped): elimination ~ sum 1/Delta, uniform ~
    n * max 1/Delta, and their ratio."""
    inv = [1 / d for d in deltas]
    elim, unif = sum(inv), len(inv) * max(inv)
    return {"elimination": elim, "uniform": unif, "ratio": unif / elim}


def theory_check(
    sizes: tuple[int, ...] = (8, 16, 32), target: float = 1.0, seeds: int = 5, seed: int = 0
) -> list[dict[str, float]]:
    """Budget each rule needs for `target` coverage with Delta_i = i/n (mean over seeds),
    elimination (K=1) vs uniform, beside Theorem 1's n * max(1/Delta) / sum(1/Delta) = n / H_n.

    At full coverage the expectations are exact: elimination spends sum_i T_i with
    T_i ~ Geometric(Delta_i), i.e. sum 1/Delta on average; uniform needs n * max_i T_i.
    """
    cfg = SimulatorConfig()
    rows = []
    for n in sizes:
        queries = [SimQuery(i / n, "graded", 1) for i in range(1, n + 1)]
        budgets = {
            rule: float(
                np.mean(
                    [
                        budget_to_cover(queries, cfg, AllocatorConfig(rule=rule), target, s)
                        for s in range(seed * 1_000, seed * 1_000 + seeds)
                    ]
                )
            )
            for rule in ("elimination", "uniform")
        }
        theory = theory_budgets([q.delta for q in queries])
        rows.append(
            {
                "n": n,
                "elimination": budgets["elimination"],
                "uniform": budgets["uniform"],
                "measured_ratio": budgets["uniform"] / budgets["elimination"],
                "theory_ratio": theory["ratio"],
                "sum_inv_delta": theory["elimination"],
                "n_max_inv_delta": theory["uniform"],
            }
        )
    return rows
