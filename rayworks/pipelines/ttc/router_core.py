"""The router's engine room: time-window batching and one allocation across a window.

No Ray and no HTTP here: the model call is an injected coroutine, so the batching and
accounting are tested with a fake sampler and run unchanged behind Serve.

- `WindowBatcher.submit(job)` parks a request (a `Job`: one or more prompts) until its
  window closes: `window_s` after the first request of the window arrived, or at once when
  the window holds `max_prompts` prompts. A job is never split across windows.
- `run_window` groups the window's jobs by allocator config (one `Allocation` needs one
  rule) and runs each group as one allocation: budget = the sum of its prompts' budgets,
  caps = each prompt's `max_samples`. Each round's samples go out as concurrent model
  calls (one per model and sampling setting, `rows_per_call` rows at most per call).
  So within a window the total spent never exceeds the sum of budgets, and no prompt takes
  more than its cap: a prompt may use budget its neighbours left unused, up to that cap.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from rayworks.pipelines.ttc.allocators import Allocation, AllocatorConfig, Draw
from rayworks.pipelines.ttc.router_api import Aggregate, Oracle, extract_answer


@dataclass(frozen=True)
class Sampling:
    """How one prompt is sampled; rows with equal settings share a model call."""

    model: str
    max_tokens: int
    temperature: float
    top_p: float
    stop: tuple[str, ...]


@dataclass
class Query:
    """One prompt of a request, as an arm of the allocation."""

    prompt: str
    sampling: Sampling
    budget: int
    cap: int
    prompt_tokens: int


@dataclass
class Job:
    """One HTTP request: its prompts, its allocator and the future its route awaits."""

    queries: list[Query]
    cfg: AllocatorConfig
    aggregate: Aggregate
    future: asyncio.Future = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    arrived: float = field(default_factory=time.monotonic)


# (model, sampling, prompts) -> [(text, generated tokens), ...] one per prompt row
ModelCall = Callable[[Sampling, list[str]], Awaitable[list[tuple[str, int]]]]


class WindowBatcher:
    """Collects jobs for `window_s` and hands each closed window to `run(jobs)`."""

    def __init__(
        self, window_s: float, max_prompts: int, run: Callable[[list[Job]], Awaitable[None]]
    ) -> None:
        self.window_s, self.max_prompts, self.run = window_s, max_prompts, run
        self.pending: list[Job] = []
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task] = set()  # strong refs: the loop keeps only weak ones

    async def submit(self, job: Job) -> list[dict[str, Any]]:
        """Add `job` to the open window and wait for its per-prompt results."""
        if sum(len(j.queries) for j in self.pending) + len(job.queries) > self.max_prompts:
            self.flush()  # the job would overflow the window: close it first
        self.pending.append(job)
        if sum(len(j.queries) for j in self.pending) >= self.max_prompts:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.window_s, self.flush)
        return await job.future

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        jobs, self.pending = self.pending, []
        if jobs:
            task = asyncio.get_running_loop().create_task(self._run(jobs))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, jobs: list[Job]) -> None:
        try:
            await self.run(jobs)
        except BaseException as err:  # every waiting request gets the error, none hangs
            for job in jobs:
                if not job.future.done():
                    job.future.set_exception(err)
            if not isinstance(err, Exception):
                raise


async def run_window(
    jobs: list[Job],
    call: ModelCall,
    pattern: re.Pattern[str],
    oracle: Oracle | None,
    rows_per_call: int,
) -> None:
    """One allocation per allocator config among `jobs`, run concurrently; resolves every
    job's future with its results (or the error that stopped its group)."""
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        groups.setdefault(job.cfg.model_dump_json(), []).append(job)

    async def one(group: list[Job]) -> None:
        try:
            results = await allocate_group(group, call, pattern, oracle, rows_per_call)
        except Exception as err:
            for job in group:
                if not job.future.done():
                    job.future.set_exception(err)
            return
        for job, result in zip(group, results, strict=True):
            if not job.future.done():  # a client that went away cancelled its future
                job.future.set_result(result)

    await asyncio.gather(*(one(group) for group in groups.values()))


async def allocate_group(
    jobs: list[Job],
    call: ModelCall,
    pattern: re.Pattern[str],
    oracle: Oracle | None,
    rows_per_call: int,
) -> list[list[dict[str, Any]]]:
    """Run one `Allocation` over all prompts of `jobs`; per job, per prompt results."""
    queries = [q for job in jobs for q in job.queries]
    cfg = jobs[0].cfg
    run = Allocation(len(queries), sum(q.budget for q in queries), cfg, [q.cap for q in queries])
    while requests := run.next_requests():
        draws = await sample_round(queries, requests, call, pattern, oracle, rows_per_call)
        run.record(requests, draws)
    batch = {
        "batch_requests": len(jobs),
        "batch_size": len(queries),
        "rounds": run.rounds,
        "rule": cfg.rule,
        "stop": cfg.stop,
        "unit": cfg.unit,
        "window_budget": run.budget,
        "window_spent": run.spent,
    }
    out, start = [], 0
    for job in jobs:
        states = run.queries[start : start + len(job.queries)]
        out.append([_result(job, q, s, batch) for q, s in zip(job.queries, states, strict=True)])
        start += len(job.queries)
    return out


def _result(job: Job, query: Query, state: Any, batch: dict[str, Any]) -> dict[str, Any]:
    """The selected sample of one prompt with its usage and allocation details."""
    chosen = state.selected(job.aggregate == "best_score")
    text = chosen.text if chosen else ""
    answer, share = state.vote()
    finish = "length" if chosen and chosen.tokens >= query.sampling.max_tokens else "stop"
    # prompt tokens counted once per prompt (OpenAI's convention for n > 1); completion
    # tokens are every sampled token, the compute spent, not only the returned text
    usage = {
        "prompt_tokens": query.prompt_tokens,
        "completion_tokens": state.tokens,
        "total_tokens": query.prompt_tokens + state.tokens,
        "samples": state.samples,
        "budget": query.budget,
        "max_samples": query.cap,
    }
    details = {
        "answer": chosen.answer if chosen else None,
        "vote_answer": answer,
        "vote_share": round(share, 4),
        "samples": state.samples,
        "stop_reason": state.reason or ("done" if state.done else "budget"),
        "score": None if chosen is None or math.isnan(chosen.score) else chosen.score,
        "aggregate": job.aggregate,
    }
    return {"text": text, "finish_reason": finish, "usage": usage, "ttc": details, "batch": batch}


async def sample_round(
    queries: list[Query],
    requests: list[tuple[int, int]],
    call: ModelCall,
    pattern: re.Pattern[str],
    oracle: Oracle | None,
    rows_per_call: int,
) -> list[list[Draw]]:
    """Draw one round: rows grouped by sampling setting, chunked, called concurrently."""
    rows: dict[Sampling, list[int]] = {}  # sampling -> request index per row
    for r, (index, k) in enumerate(requests):
        rows.setdefault(queries[index].sampling, []).extend([r] * k)
    calls, owners = [], []
    for sampling, owner in rows.items():
        for start in range(0, len(owner), rows_per_call):
            chunk = owner[start : start + rows_per_call]
            calls.append(call(sampling, [queries[requests[r][0]].prompt for r in chunk]))
            owners.append(chunk)
    replies = await asyncio.gather(*calls)
    draws: list[list[Draw]] = [[] for _ in requests]
    for chunk, reply in zip(owners, replies, strict=True):
        for r, (text, tokens) in zip(chunk, reply, strict=True):
            prompt = queries[requests[r][0]].prompt
            score = float(oracle(prompt, text)) if oracle else math.nan
            draws[r].append(Draw(extract_answer(text, pattern), score, tokens, text=text))
    return draws


def arithmetic_oracle(prompt: str, completion: str) -> float:
    """A ready oracle for `rayworks.data.tasks.arithmetic` prompts ("Q: 347+58=\\n"): 1.0
    if the completion's last "A: <int>" is the true result, else 0.0 (usable as
    `--oracle rayworks.pipelines.ttc.router_core:arithmetic_oracle`)."""
    asked = re.search(r"Q:\s*(\d+)\s*([+-])\s*(\d+)\s*=", prompt)
    found = re.findall(r"A:\s*(-?\d+)", completion)
    if not asked or not found:
        return 0.0
    a, op, b = int(asked.group(1)), asked.group(2), int(asked.group(3))
    return float(int(found[-1]) == (a + b if op == "+" else a - b))
