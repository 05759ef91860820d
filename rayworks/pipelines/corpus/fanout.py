"""Fan a corpus run's work items (units, hash ranges) out to Ray tasks, `cpus` at a time.

Every execution of a corpus run maps a short list of items, each naming files, to small
results (a manifest row, a table of links, a statistics table): the corpus itself never
crosses the object store. Plain Ray tasks do that with less start-up than Ray Data, which
was used here before: a Ray Data execution on a fresh Ray starts its stats actor, an actor
location tracker, an autoscaling coordinator and, for an actor pool, one actor per CPU,
and every worker it uses imports Ray Data's execution path. On the 2-CPU machine that was
about 4 s of the ~6 s fixed cost of a run (docs/results.md, corpus). Tasks reuse Ray's
workers from one execution to the next, so a run's scoring and global phase share the
same warm processes; a worker keeps the scoring steps built (`score_unit.worker_chain`).

Items go out in the given order (callers sort largest first: longest-processing-time
order) with at most `cpus` in flight, so a run holds at most `cpus` of the cluster's CPUs;
results come back as they finish. A task that raises stops the execution: the tasks still
in flight are cancelled and the error is raised in the driver. A worker that dies is
retried by Ray (`max_retries`), as Ray Data retried its tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import ray

MAX_RETRIES = 3
"""Retries of a task whose worker died (Ray's default for tasks)."""


def fan_out(
    fn: Callable[..., Any], items: Sequence[Any], cpus: int, **shared: Any
) -> Iterator[tuple[int, Any]]:
    """`(index, fn(items[index], **shared))` for every item, as the tasks finish; one CPU
    per task, at most `cpus` tasks at a time. `shared` is put in the object store once."""
    if cpus < 1:
        raise ValueError(f"cpus must be >= 1, got {cpus}")
    if not items:
        return
    task = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(fn)
    refs = {name: ray.put(value) for name, value in shared.items()}
    pending: dict[ray.ObjectRef, int] = {}
    queue = iter(enumerate(items))
    try:
        for index, item in queue:
            pending[task.remote(item, **refs)] = index
            if len(pending) >= cpus:
                break
        while pending:
            [ready], _ = ray.wait(list(pending), num_returns=1)
            index = pending.pop(ready)
            result = ray.get(ready)
            for nxt, item in queue:
                pending[task.remote(item, **refs)] = nxt
                break
            yield index, result
    finally:
        for ref in pending:  # an error or a caller that stopped early: stop the rest
            ray.cancel(ref, force=True)
