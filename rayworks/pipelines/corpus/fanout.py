"""How every execution of a corpus run fans out: one Ray task per item, `cpus` at a time.

Every execution of a run maps a short list of items, each naming files (a unit of input,
a hash range's key files), to a small result (a manifest row, a table of links, a
statistics table): the corpus itself never crosses the object store. `fan_units` runs
them through the platform's `fan_out_iter`: one CPU per task, at most `cpus` in flight,
in the callers' order (largest first: longest-processing-time order), so a run holds at
most `cpus` of a cluster's CPUs; torch untouched (the corpus never imports it); a task
whose worker died retried, as Ray Data retried its tasks.

Why plain Ray tasks, not Ray Data, which ran these executions before: Ray Data's
streaming of blocks was never used here, but its start was paid on every run: its stats
actor, an actor-location tracker and an autoscaling coordinator (a new worker process
each), one actor per CPU for the scoring pool, and Ray Data's execution path imported by
every worker. Tasks reuse Ray's workers from one execution to the next, so scoring and
the global phase share warm processes, and each worker keeps its scoring steps built
(`score_unit.worker_chain`). Measured on the 2-CPU machine (docs/results.md, corpus):
the smoke run's 6.2-6.7 s fell to 3.8-4.3 s.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rayworks.platform.fanout import fan_out_iter

MAX_RETRIES = 3
"""Retries of a task whose worker died (Ray's default for tasks)."""


@dataclass(frozen=True)
class Span:
    """One task of an execution: its function, worker process and wall-clock interval
    (`time.time()` of the worker's node)."""

    phase: str
    pid: int
    start: float
    end: float


@dataclass
class Timeline:
    """The tasks of a run's executions, recorded by `fan_units` while `record()` is open,
    and summed per execution by `phases`: where a run's CPUs waited (an execution's
    tail, the driver's work between executions) shows as idle share, so the next scaling
    regression is visible in the run's profile (`runner._profile`)."""

    spans: list[Span] = field(default_factory=list)

    @contextlib.contextmanager
    def record(self) -> Iterator[Timeline]:
        token = _TIMELINE.set(self)
        try:
            yield self
        finally:
            _TIMELINE.reset(token)

    def phases(self, origin: float, cpus: int) -> list[dict[str, Any]]:
        """Per execution, in order: tasks, worker processes, first start and last end
        (seconds after `origin`), busy seconds (the tasks' wall time summed) and the
        share of `cpus` x its span the tasks left idle."""
        by_phase: dict[str, list[Span]] = {}
        for s in self.spans:
            by_phase.setdefault(s.phase, []).append(s)
        rows = []
        for phase, spans in by_phase.items():
            start, end = min(s.start for s in spans), max(s.end for s in spans)
            busy = sum(s.end - s.start for s in spans)
            rows.append(
                {
                    "phase": phase,
                    "tasks": len(spans),
                    "workers": len({s.pid for s in spans}),
                    "start_s": start - origin,
                    "end_s": end - origin,
                    "busy_s": busy,
                    "idle_share": 1.0 - busy / (cpus * (end - start)) if end > start else 0.0,
                }
            )
        return sorted(rows, key=lambda r: r["start_s"])


_TIMELINE: contextvars.ContextVar[Timeline | None] = contextvars.ContextVar(
    "corpus_timeline", default=None
)


def timed(fn: Callable[..., Any], **kwargs: Any) -> tuple[Any, tuple[int, float, float]]:
    """`fn(**kwargs)` in a task, with the worker's pid and the call's wall-clock interval."""
    start = time.time()
    out = fn(**kwargs)
    return out, (os.getpid(), start, time.time())


def fan_units(
    fn: Callable[..., Any],
    calls: Sequence[dict[str, Any]],
    cpus: int,
    shared: dict[str, Any] | None = None,
    after_submit: Callable[[], None] | None = None,
) -> Iterator[tuple[int, Any]]:
    """`(index, fn(**calls[index], **shared))` as the tasks finish, `cpus` at a time; each
    task's span goes to the `Timeline` being recorded, if any. `after_submit`: run once
    the first tasks are submitted (`platform.fanout.fan_out_iter`)."""
    timeline = _TIMELINE.get()
    results = fan_out_iter(
        functools.partial(timed, fn),
        calls,
        num_cpus=1,
        threads=None,
        max_in_flight=cpus,
        shared=shared,
        max_retries=MAX_RETRIES,
        after_submit=after_submit,
    )
    with contextlib.closing(results):  # a caller that stops early cancels the rest
        for index, (out, (pid, start, end)) in results:
            if timeline is not None:
                timeline.spans.append(Span(fn.__name__, pid, start, end))
            yield index, out


def import_modules(modules: Sequence[str]) -> None:
    """Import `modules` (a warm-up task's work, `WarmUp`)."""
    for name in modules:
        importlib.import_module(name)


class WarmUp:
    """`count` one-CPU tasks that import `modules`, for workers an execution with fewer
    tasks than `cpus` leaves idle: `start` them once that execution's tasks are submitted
    (`fan_units(after_submit=...)`, so they never take its workers), `wait` before the
    next execution (so the run stays inside its CPU budget); their spans then go to the
    `Timeline` being recorded. Why: a worker's first task pays its imports (~0.3-0.5 s
    on our 2-core machines); when the next execution puts a worker that sat idle to work,
    that cost lands on the run's critical path. A run of one unit at 2 CPUs took 0.4 s
    longer than at 1 CPU for it (docs/results.md, corpus)."""

    def __init__(self, count: int, modules: Sequence[str]) -> None:
        self.count, self.modules = count, list(modules)
        self.refs: list[Any] = []

    def start(self) -> None:
        import ray

        if self.count < 1 or not ray.is_initialized():
            return
        task = ray.remote(timed).options(num_cpus=1, max_retries=MAX_RETRIES)
        self.refs = [task.remote(import_modules, modules=self.modules) for _ in range(self.count)]

    def wait(self) -> None:
        if not self.refs:
            return
        import ray

        timeline = _TIMELINE.get()
        refs, self.refs = self.refs, []
        for _, (pid, start, end) in ray.get(refs):
            if timeline is not None:
                timeline.spans.append(Span(import_modules.__name__, pid, start, end))
