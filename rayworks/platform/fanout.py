"""Fan independent pieces of one run (arms, seeds, targets) out as parallel Ray tasks.

A `kind="task"` pipeline runs inside a Ray worker; its independent, CPU-bound pieces
(every (arm, seed) of a sweep, every target state of a loader...) go out as one Ray task
each, `num_cpus` apiece and torch pinned to `threads` threads, so on a 2-core laptop two
pieces run at once and on a cluster as many as it has CPUs. A worker blocked in `ray.get`
hands its CPU back to Ray meanwhile, so the parent holding one CPU does not starve its
own children.

Without a running Ray (unit tests, a notebook) the same calls run in this process, in
order: results are identical either way because every piece seeds itself from its
arguments. The same holds inside a placement group that captures child tasks, e.g. a
Ray Tune trial: its bundles hold only the trial's own CPU, which the trial itself uses, so
a child task would wait forever ("No trial resources are available"), and escaping the
group could deadlock a sweep whose trials hold every CPU while they wait for their pieces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def _pinned(fn: Callable[..., T], threads: int, kwargs: dict[str, Any]) -> T:
    import torch

    torch.set_num_threads(threads)
    return fn(**kwargs)


def fan_out(
    fn: Callable[..., T],
    calls: Sequence[dict[str, Any]],
    *,
    num_cpus: float = 1,
    threads: int = 1,
    on_done: Callable[[int, T], None] | None = None,
) -> list[T]:
    """`[fn(**kw) for kw in calls]`, each call a Ray task when Ray is up; results in order.

    `on_done(index, result)` runs in the caller as each piece finishes (in completion
    order), e.g. to log a record or advance a progress count. A piece that raises fails
    the whole fan-out with its own error: the remaining tasks are cancelled.
    """
    import ray

    if not ray.is_initialized() or ray.util.get_current_placement_group() is not None:
        results = []
        for i, kw in enumerate(calls):
            results.append(_pinned(fn, threads, kw))
            if on_done is not None:
                on_done(i, results[-1])
        return results
    task = ray.remote(_pinned).options(num_cpus=num_cpus, max_retries=0)
    refs = [task.remote(fn, threads, kw) for kw in calls]
    index = {ref: i for i, ref in enumerate(refs)}
    results: list[Any] = [None] * len(refs)
    pending = list(refs)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            i = index[done[0]]
            results[i] = ray.get(done[0])
            if on_done is not None:
                on_done(i, results[i])
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    return results
