"""Level (ii) of the TTC evaluation: a trained policy, its task's exact verifier as oracle.

The pool of responses per query is drawn once, as Ray tasks (each loads the policy into an
`hf` rollout engine and samples a shard of the queries), and cached under the run's cache
root so every arm and seed of a bench replays the very same responses. `PoolSampler`
replays them in order, so query i's j-th sample is the same whichever rule asks for it.

`separation` measures what the paper's Entropy rule assumes: that the answers of
unsolvable queries are less diverse than those of hard but solvable ones. It computes the
AUROC of answer entropy (and of B-confidence) over the first `entropy_samples` responses
for telling solvable from unsolvable hard queries, with a bootstrap 95% CI.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from rayworks.core.build_cache import digest, locked_build
from rayworks.core.errors import RayworksError
from rayworks.data.tasks import ArithmeticTask, Example, get_task
from rayworks.data.tasks.base import Split, answer_after
from rayworks.models import resolve_model_dir
from rayworks.pipelines.rl.base import build_base, sft_config
from rayworks.pipelines.ttc.allocators import Draw, QueryState
from rayworks.pipelines.ttc.config import SamplerConfig

HARD_RATE = 0.25  # pool pass rate at or below which a query counts as hard (reconstructed)


def policy_dir(cfg: SamplerConfig, cache_root: Path) -> Path:
    """The policy to sample: `cfg.policy`, else the RL pipelines' cached SFT'd base."""
    if cfg.policy:
        return resolve_model_dir(cfg.policy)
    lm = sft_config(cfg.task, cfg.model, cfg.sft, cfg.max_new_tokens)
    return build_base(cache_root / "base", "policy", lm)


def queries(cfg: SamplerConfig, seed: int, split: Split = "test") -> list[Example]:
    """Items of `split` (`test`: `n_queries` scored ones; `val`: `n_val_queries` held out for
    choosing knobs, disjoint from test by the task's split hash); for arithmetic, operands of
    `min_digits`..`max_digits` digits (the base trains on 1-4), else the task's own mixture."""
    task = (
        ArithmeticTask(cfg.min_digits, cfg.max_digits)
        if cfg.task == "arithmetic"
        else get_task(cfg.task)
    )
    return task.examples(cfg.n_queries if split == "test" else cfg.n_val_queries, split, seed)


def _sample_shard(
    model_dir: str, prompts: list[str], n: int, sampling: dict[str, Any]
) -> list[list[tuple[str, int]]]:
    """One Ray task: `n` responses (text, generated tokens) per prompt, a few prompts per
    forward batch."""
    from rayworks.platform.rollout import HFEngine, SamplingConfig

    engine, out = HFEngine(model_dir), []
    per_batch = max(1, 256 // n)
    for start in range(0, len(prompts), per_batch):
        config = SamplingConfig(**{**sampling, "seed": sampling["seed"] + start})
        rollouts = engine.generate(prompts[start : start + per_batch], n, config)
        rows: list[list[tuple[str, int]]] = [[] for _ in prompts[start : start + per_batch]]
        for r in rollouts:
            rows[r.prompt_index].append((r.text, len(r.completion_ids)))
        out += rows
    return out


def draw_pool(cfg: SamplerConfig, model_dir: Path, prompts: list[str], seed: int) -> list:
    """`pool_size` responses per prompt, sharded over `num_tasks` Ray tasks."""
    import ray

    task = ray.remote(_sample_shard).options(num_cpus=0.5, scheduling_strategy="DEFAULT")
    sampling = {"temperature": cfg.temperature, "max_new_tokens": cfg.max_new_tokens}
    shards = np.array_split(np.arange(len(prompts)), min(cfg.num_tasks, len(prompts)))
    refs = [
        task.remote(
            str(model_dir),
            [prompts[i] for i in idx],
            cfg.pool_size,
            {**sampling, "seed": seed * 1_000_003 + int(idx[0]) * 7_919},
        )
        for idx in shards
    ]
    return [row for shard in ray.get(refs) for row in shard]


def cached_pool(
    cfg: SamplerConfig, cache_root: Path, seed: int, split: Split = "test"
) -> tuple[list[Example], list]:
    """The `split` queries of `seed` and their response pools, drawn once per (policy,
    config, seed, split)."""
    model_dir = policy_dir(cfg, cache_root).resolve()
    items = queries(cfg, seed, split)
    weights = sorted(p.name + str(p.stat().st_size) for p in model_dir.glob("*.safetensors"))
    named = [str(model_dir), weights, cfg.model_dump(mode="json"), seed]
    key = digest(json.dumps(named if split == "test" else [*named, split]))
    folder = cache_root / "ttc_pool" / key
    path = folder / "pool.json"

    def build() -> None:
        offset = 0 if split == "test" else 500_009  # val draws its own sampling stream
        pool = draw_pool(cfg, model_dir, [e.prompt for e in items], seed + offset)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"prompts": [e.prompt for e in items], "pool": pool}))
        tmp.rename(path)

    locked_build(folder, path, build)
    data = json.loads(path.read_text())
    if data["prompts"] != [e.prompt for e in items]:
        raise RayworksError(f"cached pool {path} belongs to other queries; delete it")
    return items, data["pool"]


def final_answer(text: str) -> str | None:
    """The answer after the last "A:" (every task's answer marker); None when absent or
    empty."""
    return answer_after(text) or None


def to_draws(task_items: list[Example], pool: list, task_name: str) -> list[list[Draw]]:
    """Score every pooled response with the task's exact verifier (the oracle)."""
    task = get_task(task_name)
    out = []
    for example, responses in zip(task_items, pool, strict=True):
        row = []
        for text, tokens in responses:
            correct = task.verify(example, text) >= 1.0
            row.append(Draw(final_answer(text), float(correct), int(tokens), correct, text))
        out.append(row)
    return out


class PoolSampler:
    """Replays each query's pooled responses in order (`caps` keep allocations inside)."""

    def __init__(self, draws: list[list[Draw]]) -> None:
        self.draws, self.used = draws, [0] * len(draws)

    def __call__(self, requests: list[tuple[int, int]]) -> list[list[Draw]]:
        out = []
        for i, k in requests:
            if self.used[i] + k > len(self.draws[i]):
                raise RayworksError(
                    f"query {i} asked for more than its {len(self.draws[i])} pooled responses"
                )
            out.append(self.draws[i][self.used[i] : self.used[i] + k])
            self.used[i] += k
        return out


def auroc(pos: list[float], neg: list[float]) -> float:
    """P(score of a random positive > that of a random negative), ties counting half."""
    if not pos or not neg:
        return math.nan
    p, n = np.asarray(pos)[:, None], np.asarray(neg)[None, :]
    return float((p > n).mean() + 0.5 * (p == n).mean())


def bootstrap_auroc(
    pos: list[float], neg: list[float], rng: np.random.Generator, reps: int = 1000
) -> tuple[float, float]:
    """95% percentile interval of the AUROC, resampling queries within each class."""
    if len(pos) < 2 or len(neg) < 2:
        return math.nan, math.nan
    stats = [
        auroc(list(rng.choice(pos, len(pos))), list(rng.choice(neg, len(neg)))) for _ in range(reps)
    ]
    lo, hi = np.percentile(stats, [2.5, 97.5])
    return float(lo), float(hi)


def separation(draws: list[list[Draw]], first: int, seed: int) -> dict[str, float]:
    """Does answer entropy (or B-confidence) over the first `first` responses separate hard
    solvable queries (pool pass rate in (0, HARD_RATE]) from unsolvable ones (rate 0)?"""
    rates = [sum(bool(d.correct) for d in row) / len(row) for row in draws]
    stats = []
    for row in draws:
        state = QueryState(0, draws=list(row[:first]))
        stats.append((state.entropy(), state.vote()[1]))
    hard = [s for s, r in zip(stats, rates, strict=True) if 0 < r <= HARD_RATE]
    none = [s for s, r in zip(stats, rates, strict=True) if r == 0]
    easy = [s for s, r in zip(stats, rates, strict=True) if r > HARD_RATE]
    rng = np.random.default_rng(seed)
    out: dict[str, float] = {
        "share_easy": len(easy) / len(draws),
        "share_hard": len(hard) / len(draws),
        "share_unsolvable": len(none) / len(draws),
    }
    for j, name in ((0, "entropy"), (1, "bconf")):
        # solvable-hard is the positive class; low confidence is what marks it
        sign = 1 if name == "entropy" else -1
        pos, neg = [sign * s[j] for s in hard], [sign * s[j] for s in none]
        out[f"{name}_auroc"] = auroc(pos, neg)
        out[f"{name}_auroc_lo"], out[f"{name}_auroc_hi"] = bootstrap_auroc(pos, neg, rng)
        for label, group in (("easy", easy), ("hard", hard), ("unsolvable", none)):
            out[f"{name}_{label}"] = float(np.mean([s[j] for s in group])) if group else math.nan
    return out


LOOP_RE = re.compile(r"(.{4,32}?)\1\1", re.DOTALL)


def looping(text: str) -> bool:
    """Whether a response repeats itself: some block of 4-32 characters occurs three times
    in a row (a generation stuck in a loop)."""
    return LOOP_RE.search(text) is not None


def difficulty_profile(
    items: list[Example], draws: list[list[Draw]], first: int
) -> dict[str, float]:
    """Per task difficulty d (arithmetic: operand digits): `pass_d{d}` (share of correct
    responses), `malformed_d{d}` (no parsable final answer), `loop_d{d}` (`looping`),
    `entropy_d{d}` (mean normalised answer entropy over the first `first` responses, the
    Entropy rule's signal) and `queries_d{d}`; what tells whether items beyond the policy's
    capacity give repetitive or malformed output."""
    out: dict[str, float] = {}
    for d in sorted({e.difficulty for e in items}):
        rows = [row for e, row in zip(items, draws, strict=True) if e.difficulty == d]
        flat = [x for row in rows for x in row]
        out[f"queries_d{d}"] = float(len(rows))
        out[f"pass_d{d}"] = float(np.mean([bool(x.correct) for x in flat]))
        out[f"malformed_d{d}"] = float(np.mean([x.answer is None for x in flat]))
        out[f"loop_d{d}"] = float(np.mean([looping(x.text) for x in flat]))
        out[f"entropy_d{d}"] = float(
            np.mean([QueryState(0, draws=list(row[:first])).entropy() for row in rows])
        )
    return out
