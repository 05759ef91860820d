"""Bandit allocation of test-time compute (Zuo & Zhu, "Strategic Scaling of Test-Time
Compute: A Bandit Learning Approach", ICLR 2026).

Queries are arms; pulling an arm draws one response from the model, scored by an oracle
r(x, y) in [0, 1]. The goal is at least one response with r >= gamma (`reward_threshold`)
per query under a total budget B (samples, or tokens). Rules:

- `uniform`: Best-of-(B/n): every query gets the same number of samples, no early stop
  (the paper's baseline).
- `etc`: explore-then-commit: `etc_explore` samples per query, then the remaining budget
  split evenly over the queries still unsolved, in one go (the theory's comparison).
- `elimination`: the paper's Algorithm 1: each round draw K samples for every query still
  active and drop a query once a sample reaches gamma; stop when B is spent or none is
  active. A final round that cannot serve every active query serves the least-sampled first
  (the paper leaves it open; reconstructed).
- `ucb`, `gap`, `entropy`: the paper's exploration variants. After every query has had its
  first K samples, each round samples only the top `select_fraction` of the active queries
  by a priority (formulas reconstructed: the paper's are not public):
  ucb = mean oracle score + lam * sqrt(2 ln t / n_x);
  gap = best score - gamma (closest to the threshold first);
  entropy = normalised entropy of the sampled final answers + lam * sqrt(2 ln t / n_x),
  where t is the number of samples drawn so far and n_x those of query x.
- `bconf` (beyond the paper): the B-confidence of the answers drawn so far (frequency of
  the most common answer) as the difficulty signal: a query stops once its confidence
  reaches `bconf_threshold` (after `min_samples`), and the rounds prioritise queries whose
  confidence is middling (closest to `bconf_target`) plus the same exploration bonus.

`stop="consistency"` replaces the oracle by self-consistency: a query is done once the top
answer's share reaches `consistency_threshold` after `min_samples` samples, and the answer
returned is the majority vote. `unit="tokens"` counts the budget in generated tokens; since a
sample's length is unknown before it is drawn, a round only asks for as many samples as fit
if each took `max_sample_tokens`, so the budget is never exceeded.

The allocation is a state machine (`Allocation.next_requests` / `record`) so the same code
runs synchronously against a simulator (`allocate`) and asynchronously behind the Serve
router. Ground-truth correctness rides along on each `Draw` for evaluation only; no rule
reads it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field, model_validator

from rayworks.core.config import Config
from rayworks.core.errors import RayworksError
from rayworks.evals.calibration_math import b_confidence

Rule = Literal["uniform", "etc", "elimination", "ucb", "gap", "entropy", "bconf"]
RULES: tuple[str, ...] = ("uniform", "etc", "elimination", "ucb", "gap", "entropy", "bconf")
PRIORITY_RULES = ("ucb", "gap", "entropy", "bconf")
MALFORMED = "<malformed>"  # the answer class of responses without a parsable answer


class AllocatorConfig(Config):
    """One allocation rule and its knobs (the budget itself is passed separately)."""

    rule: Rule = Field("elimination", description=f"allocation rule: {', '.join(RULES)}")
    k: int = Field(1, ge=1, description="samples per selected query per round (K)")
    stop: Literal["oracle", "consistency"] = Field(
        "oracle", description="oracle: reward >= reward_threshold; consistency: answer agreement"
    )
    reward_threshold: float = Field(
        0.5, ge=0, le=1, description="oracle score that counts as correct (the paper's gamma)"
    )
    consistency_threshold: float = Field(
        0.6, gt=0, le=1, description="stop once the top answer's share reaches this (consistency)"
    )
    min_samples: int = Field(
        3, ge=1, description="samples before a consistency or bconf stop can happen"
    )
    etc_explore: int = Field(2, ge=1, description="ETC: samples per query before committing (m)")
    lam: float = Field(1.0, ge=0, description="exploration weight of ucb, entropy and bconf")
    select_fraction: float = Field(
        0.5, gt=0, le=1, description="priority rules: share of active queries sampled per round"
    )
    bconf_threshold: float = Field(
        0.8, gt=0, le=1, description="bconf: stop once the top answer's share reaches this"
    )
    bconf_target: float = Field(
        0.5, ge=0, le=1, description="bconf: confidence whose queries are sampled first"
    )
    unit: Literal["samples", "tokens"] = Field("samples", description="what the budget counts")
    max_sample_tokens: int = Field(
        64, ge=1, description="tokens mode: the most tokens one sample can cost"
    )

    @model_validator(mode="after")
    def _consistent(self) -> AllocatorConfig:
        if self.stop == "consistency" and self.rule in ("ucb", "gap"):
            raise ValueError(
                f"rule={self.rule!r} ranks queries by oracle scores, which stop='consistency' "
                "does not have; use elimination, entropy, bconf, etc or uniform"
            )
        return self


@dataclass(frozen=True)
class Draw:
    """One sampled response: its parsed final answer, oracle score and cost.

    `correct` is the ground truth, kept for evaluation only (coverage, accuracy); the
    allocation rules never read it.
    """

    answer: str | None
    score: float = math.nan
    tokens: int = 1
    correct: bool | None = None
    text: str = ""

    @property
    def answer_class(self) -> str:
        return MALFORMED if self.answer is None else self.answer


@dataclass
class QueryState:
    """What the allocator knows about one query."""

    index: int
    cap: int | None = None  # most samples this query may take (streaming `max_sample`)
    draws: list[Draw] = field(default_factory=list)
    done: bool = False
    reason: str = ""  # why it stopped: solved, consistent, confident, capped

    @property
    def samples(self) -> int:
        return len(self.draws)

    @property
    def tokens(self) -> int:
        return sum(d.tokens for d in self.draws)

    @property
    def counts(self) -> Counter[str]:
        return Counter(d.answer_class for d in self.draws)

    @property
    def best(self) -> Draw | None:
        """The highest-scoring draw (the first of equals); None before any draw."""
        scored = [d for d in self.draws if not math.isnan(d.score)]
        return max(scored, key=lambda d: d.score) if scored else None

    @property
    def best_score(self) -> float:
        best = self.best
        return best.score if best else 0.0

    @property
    def mean_score(self) -> float:
        scores = [d.score for d in self.draws if not math.isnan(d.score)]
        return sum(scores) / len(scores) if scores else 0.0

    def vote(self) -> tuple[str | None, float]:
        """(majority answer, its share): the plug-in B-confidence under B = exact answer
        (`rayworks.evals.calibration_math.b_confidence`). Malformed responses count in the
        denominator but never win the vote."""
        if not self.draws:
            return None, 0.0
        return b_confidence([d.answer for d in self.draws])

    def entropy(self) -> float:
        """Entropy of the sampled answer classes divided by its maximum, log(n_x); a query
        with one sample has nothing to compare and counts as maximally diverse (1)."""
        n = self.samples
        if n <= 1:
            return 1.0
        h = -sum(c / n * math.log(c / n) for c in self.counts.values())
        return h / math.log(n)

    def selected(self, by_score: bool) -> Draw | None:
        """The response returned for this query: best oracle score, or a majority-vote one."""
        if by_score:
            return self.best
        answer, _ = self.vote()
        return next((d for d in self.draws if d.answer == answer), None)


class Allocation:
    """One allocation over `n` queries and a total `budget`, driven round by round.

    `next_requests()` returns `[(query, k), ...]` to sample next (empty when finished);
    `record(requests, draws)` takes one list of draws per request. Nothing is drawn here,
    so a simulator, Ray tasks or Serve deployments can do the sampling.
    """

    def __init__(
        self, n: int, budget: int, cfg: AllocatorConfig, caps: Sequence[int | None] | None = None
    ) -> None:
        if n < 1:
            raise RayworksError(f"an allocation needs at least one query, got n={n}")
        if budget < 0:
            raise RayworksError(f"budget must be >= 0, got {budget}")
        if caps is not None and len(caps) != n:
            raise RayworksError(f"caps has {len(caps)} entries for {n} queries")
        self.cfg, self.budget = cfg, int(budget)
        self.queries = [QueryState(i, None if caps is None else caps[i]) for i in range(n)]
        self.rounds = 0
        self._phase = 0  # etc: 0 explore, 1 commit, 2 finished

    # -- accounting -------------------------------------------------------------------------

    @property
    def spent(self) -> int:
        """Budget used: samples, or generated tokens."""
        if self.cfg.unit == "tokens":
            return sum(q.tokens for q in self.queries)
        return sum(q.samples for q in self.queries)

    @property
    def remaining(self) -> int:
        return self.budget - self.spent

    def affordable(self) -> int:
        """Samples that fit in the remaining budget, whatever their length."""
        per = self.cfg.max_sample_tokens if self.cfg.unit == "tokens" else 1
        return max(0, self.remaining // per)

    def room(self, q: QueryState) -> int:
        return math.inf if q.cap is None else max(0, q.cap - q.samples)  # type: ignore[return-value]

    @property
    def active(self) -> list[QueryState]:
        return [q for q in self.queries if not q.done and self.room(q) > 0]

    # -- the rules --------------------------------------------------------------------------

    def next_requests(self) -> list[tuple[int, int]]:
        """The next round: `[(query index, samples), ...]`; [] once the allocation is over."""
        free = self.affordable()
        active = self.active
        if free <= 0 or not active:
            return []
        rule = self.cfg.rule
        if rule == "etc":
            wanted = self._etc(active, free)
        elif rule in ("uniform", "elimination") or any(q.samples == 0 for q in active):
            # uniform: Best-of-(B/n) drawn K at a time round robin (so a token budget splits
            # evenly too); every query gets its first K before a priority rule may skip it
            wanted = [(q, self.cfg.k) for q in self._least_sampled(active)]
        else:
            # ties (e.g. every unsolved query at score 0 under an exact oracle) go to the
            # least-sampled query first, so a tied rule falls back to round robin
            ranked = sorted(active, key=lambda q: (-self.priority(q), q.samples, q.index))
            take = max(1, math.ceil(self.cfg.select_fraction * len(ranked)))
            wanted = [(q, self.cfg.k) for q in ranked[:take]]
        return self._fit(wanted, free)

    def _least_sampled(self, queries: list[QueryState]) -> list[QueryState]:
        return sorted(queries, key=lambda q: (q.samples, q.index))

    def _etc(self, active: list[QueryState], free: int) -> list[tuple[QueryState, int]]:
        if self._phase == 0:
            short = [q for q in active if q.samples < self.cfg.etc_explore]
            if short:
                return [(q, self.cfg.etc_explore - q.samples) for q in self._least_sampled(short)]
            self._phase = 1
        if self._phase == 1:
            self._phase = 2
            unsolved = [q for q in active if not self._solved(q)]
            if not unsolved:
                return []
            each, extra = divmod(free, len(unsolved))
            return [(q, each + (i < extra)) for i, q in enumerate(unsolved)]
        return []

    def priority(self, q: QueryState) -> float:
        """Higher is sampled first (see the module docstring for each rule's formula)."""
        t = max(2, sum(x.samples for x in self.queries))
        bonus = self.cfg.lam * math.sqrt(2 * math.log(t) / max(1, q.samples))
        rule = self.cfg.rule
        if rule == "ucb":
            return q.mean_score + bonus
        if rule == "gap":
            return q.best_score - self.cfg.reward_threshold
        if rule == "entropy":
            return q.entropy() + bonus
        if rule == "bconf":
            return -abs(q.vote()[1] - self.cfg.bconf_target) + bonus
        return -q.samples  # elimination and the rest: least sampled first

    def _fit(self, wanted: list[tuple[QueryState, int]], free: int) -> list[tuple[int, int]]:
        """Cut the round to the affordable samples and to each query's cap, in order."""
        out = []
        for q, k in wanted:
            k = min(k, free, self.room(q))
            if k > 0:
                out.append((q.index, int(k)))
                free -= k
            if free <= 0:
                break
        return out

    # -- stopping ---------------------------------------------------------------------------

    def _solved(self, q: QueryState) -> bool:
        """Whether `q` has met its stop condition (oracle, consistency or confidence)."""
        if self.cfg.stop == "oracle" and q.best_score >= self.cfg.reward_threshold:
            q.reason = "solved"
            return True
        if q.samples >= self.cfg.min_samples:
            share = q.vote()[1]
            if self.cfg.stop == "consistency" and share >= self.cfg.consistency_threshold:
                q.reason = "consistent"
                return True
            if self.cfg.rule == "bconf" and share >= self.cfg.bconf_threshold:
                q.reason = "confident"
                return True
        return False

    def record(self, requests: list[tuple[int, int]], draws: list[list[Draw]]) -> None:
        """Add the draws of one round (one list per request) and apply the stop rules."""
        if len(draws) != len(requests):
            raise RayworksError(f"got {len(draws)} draw lists for {len(requests)} requests")
        for (index, _), got in zip(requests, draws, strict=True):
            self.queries[index].draws.extend(got)
        if self.spent > self.budget:
            raise RayworksError(
                f"the sampler spent {self.spent} > budget {self.budget} {self.cfg.unit}: a "
                f"sample cost more than max_sample_tokens={self.cfg.max_sample_tokens}"
            )
        self.rounds += 1
        stops = self.cfg.rule not in ("uniform", "etc")  # Best-of-N and ETC never stop early
        for index, _ in requests:
            q = self.queries[index]
            if stops and not q.done and self._solved(q):
                q.done = True
            elif not q.done and self.room(q) == 0:
                q.reason = q.reason or "capped"

    # -- results ----------------------------------------------------------------------------

    def answers(self) -> list[Draw | None]:
        """The response returned per query (best score under an oracle, else majority)."""
        return [q.selected(self.cfg.stop == "oracle") for q in self.queries]

    def result(self, unsolvable: Sequence[bool] | None = None) -> dict[str, float]:
        """Coverage (any correct draw), accuracy (returned answer correct), budget split."""
        n = len(self.queries)
        covered = [any(d.correct for d in q.draws) for q in self.queries]
        chosen = self.answers()
        out = {
            "coverage": sum(covered) / n,
            "accuracy": sum(bool(d and d.correct) for d in chosen) / n,
            "spent": float(self.spent),
            "budget": float(self.budget),
            "rounds": float(self.rounds),
            "samples": float(sum(q.samples for q in self.queries)),
            "tokens": float(sum(q.tokens for q in self.queries)),
        }
        if unsolvable is not None:
            wasted = sum(q.samples for q, u in zip(self.queries, unsolvable, strict=True) if u)
            out["unsolvable_share"] = wasted / max(1, out["samples"])
        return out


SampleFn = Callable[[list[tuple[int, int]]], list[list[Draw]]]


def allocate(
    n: int,
    budget: int,
    cfg: AllocatorConfig,
    sample: SampleFn,
    caps: Sequence[int | None] | None = None,
) -> Allocation:
    """Run an allocation to the end with a synchronous sampler `sample(requests)`."""
    run = Allocation(n, budget, cfg, caps)
    while requests := run.next_requests():
        run.record(requests, sample(requests))
    return run
