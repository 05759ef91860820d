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

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def _pinned(fn: Callable[..., T], threads: int | None, kwargs: dict[str, Any], **shared: Any) -> T:
    if threads is not None:  # None: leave torch alone (and unimported: ~1 s per worker)
        import torch

        torch.set_num_threads(threads)
    return fn(**kwargs, **shared)


def fan_out_iter(
    fn: Callable[..., T],
    calls: Sequence[dict[str, Any]],
    *,
    num_cpus: float = 1,
    threads: int | None = 1,
    max_in_flight: int | None = None,
    shared: dict[str, Any] | None = None,
    max_retries: int = 0,
    after_submit: Callable[[], None] | None = None,
) -> Iterator[tuple[int, T]]:
    """`(index, fn(**calls[index], **shared))` for every call, as the pieces finish.

    `max_in_flight` pieces at most are submitted at a time, in the order of `calls` (so a
    caller that sorts its calls largest first gets longest-processing-time order, and a
    run holds at most that many of a cluster's CPUs); None submits all at once. `shared`
    keywords go to every call and into the object store once. `threads` pins torch's
    threads in the piece (None: torch untouched). `max_retries` retries a piece whose
    worker died. A piece that raises, or a caller that stops iterating, cancels the
    pieces still in flight and submits no more. `after_submit` runs once the first
    pieces are submitted as Ray tasks (not without Ray), e.g. to start side work that must
    not take the workers they are leased first.
    """
    import ray

    if max_in_flight is not None and max_in_flight < 1:
        raise ValueError(f"max_in_flight must be >= 1 or None, got {max_in_flight}")
    shared = shared or {}
    if not ray.is_initialized() or ray.util.get_current_placement_group() is not None:
        for i, kw in enumerate(calls):
            yield i, _pinned(fn, threads, kw, **shared)
        return
    task = ray.remote(_pinned).options(num_cpus=num_cpus, max_retries=max_retries)
    refs = {name: ray.put(value) for name, value in shared.items()}
    window = max_in_flight or max(1, len(calls))
    queue = iter(enumerate(calls))
    pending: dict[Any, int] = {}

    def submit() -> None:
        for i, kw in queue:
            pending[task.remote(fn, threads, kw, **refs)] = i
            if len(pending) >= window:
                return

    try:
        submit()
        if after_submit is not None:
            after_submit()
        while pending:
            [done], _ = ray.wait(list(pending), num_returns=1)
            i = pending.pop(done)
            result = ray.get(done)
            submit()
            yield i, result
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)


def fan_out(
    fn: Callable[..., T],
    calls: Sequence[dict[str, Any]],
    *,
    num_cpus: float = 1,
    threads: int | None = 1,
    on_done: Callable[[int, T], None] | None = None,
    max_in_flight: int | None = None,
    shared: dict[str, Any] | None = None,
    max_retries: int = 0,
) -> list[T]:
    """`[fn(**kw) for kw in calls]`, each call a Ray task when Ray is up; results in order.

    `on_done(index, result)` runs in the caller as each piece finishes (in completion
    order), e.g. to log a record or advance a progress count. A piece that raises fails
    the whole fan-out with its own error: the remaining tasks are cancelled. The other
    keywords are `fan_out_iter`'s.
    """
    results: list[Any] = [None] * len(calls)
    for i, result in fan_out_iter(
        fn,
        calls,
        num_cpus=num_cpus,
        threads=threads,
        max_in_flight=max_in_flight,
        shared=shared,
        max_retries=max_retries,
    ):
        results[i] = result
        if on_done is not None:
            on_done(i, result)
    return results
