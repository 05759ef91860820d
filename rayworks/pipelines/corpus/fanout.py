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

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from rayworks.platform.fanout import fan_out_iter

MAX_RETRIES = 3
"""Retries of a task whose worker died (Ray's default for tasks)."""


def fan_units(
    fn: Callable[..., Any],
    calls: Sequence[dict[str, Any]],
    cpus: int,
    shared: dict[str, Any] | None = None,
) -> Iterator[tuple[int, Any]]:
    """`(index, fn(**calls[index], **shared))` as the tasks finish, `cpus` at a time."""
    return fan_out_iter(
        fn,
        calls,
        num_cpus=1,
        threads=None,
        max_in_flight=cpus,
        shared=shared,
        max_retries=MAX_RETRIES,
    )
