"""Where rollouts are generated, how weights reach the generator, and how a run survives
its engines.

Two placements (`rollout.placement`, resolved by `resolve_placement`):
- `separate`: rollout-engine actors (`rollout.make_engine_group`), each with its own copy
  of the policy; the learner publishes weights through the object store (`EngineGroup`).
  What vLLM and clusters with generation devices of their own need.
- `colocated`: the engine lives in the learner's process and generates from the learner's
  own module in eval mode, without gradients (`LocalRollout`): no weight copy and no Ray
  call per step, as verl's hybrid engine shares one device between rollout and training.

Two modes (`rollout.mode`):
- `sync`: step t's rollouts come from version t (the weights after t updates).
- `async`: step t+1's rollouts are generated while step t trains, from version t: one
  step off-policy (AReaL's and OpenRLHF's asynchronous modes with a staleness bound of
  one). Every submit and every weight load is queued in order, so a generation submitted
  before a load sees the old weights and one submitted after it sees the new ones. A
  colocated async engine generates on a background thread from its own copy of the
  module, refreshed by value at each load.

Both sources return a `Pending` from `submit`; `result()` waits for it. `EngineGroup`
waits with a deadline whose error names the engine, the call and the step, and replaces a
dead engine: Ray restarts the actor (`max_restarts`), the group loads the weights of the
version the call was meant to see, and generates that shard again. Rows of a failed call
are never returned; a restarted engine that answers with another version is caught by the
version check and regenerated the same way, and one restarted between calls by the
incarnation call queued behind each load (counted in `restarts`, and reloaded).

A learner first publishes the weights it starts from (`load(..., rollback=True)`, also at
version 0): the group can only regenerate a version whose copy it keeps, and engines
outlive a Ray Train attempt, so a learner restarted from scratch finds them at the
version the failed attempt left them at.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import torch

from rayworks.core.errors import RayworksError
from rayworks.platform.rollout import (
    HFEngine,
    Images,
    Rollout,
    SamplingConfig,
    StaleWeightsError,
    check_version,
)


class EngineTimeoutError(RayworksError):
    """A rollout engine (or another actor of the run) did not answer within its deadline."""


class EngineFailedError(RayworksError):
    """A rollout engine died more often than the run allows, or did not come back."""


def resolve_placement(placement: str, engine: str, nodes: int) -> str:
    """`auto` is colocated for the hf engine on a one-node cluster, separate otherwise
    (vLLM runs in its own actors; on several nodes generation gets its own devices)."""
    if placement != "auto":
        return placement
    return "colocated" if engine == "hf" and nodes == 1 else "separate"


def get_within(ref: Any, timeout_s: float, what: str) -> Any:
    """`ray.get(ref)` with a deadline; the error names `what` (the actor, call and step)."""
    import ray

    try:
        return ray.get(ref, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError as err:
        raise EngineTimeoutError(
            f"{what} did not answer within {timeout_s:g} s (rollout.call_timeout_s); the "
            "actor may be hung or the cluster overloaded."
        ) from err


class Pending:
    """Rollouts being generated; `result()` waits for them (once)."""

    def __init__(self, fetch: Callable[[], list[Rollout]]) -> None:
        self._fetch, self._value = fetch, None

    def result(self) -> list[Rollout]:
        if self._value is None:
            self._value = self._fetch()
        return self._value


class EngineGroup:
    """The `separate` placement: rollout-engine actors with restarts and deadlines.

    `weights` keeps the object-store copy of each version still needed (the newest two),
    so a shard regenerated after a restart sees the version it was submitted against.
    """

    def __init__(self, actors: list[Any], timeout_s: float, max_restarts: int) -> None:
        self.actors, self.timeout_s, self.max_restarts = actors, timeout_s, max_restarts
        self.version = 0  # the version the next submitted generation will see
        self.weights: dict[int, Any] = {}  # version -> ObjectRef of its state dict
        self.loads: list[tuple[int, Any, Any]] = []  # (engine, load, incarnation) unchecked
        self.restarts = 0
        self.seen: dict[int, str] = {}  # engine -> the incarnation (process) it answered from

    def start(self) -> None:
        """Wait for every engine to be up (a slow start is not a hang, nor one Ray is
        restarting) and note its process."""
        for i in range(len(self.actors)):
            self.seen[i] = self._incarnation(i, "the start of the rollout engines")

    def name(self, i: int) -> str:
        return f"rollout engine {i} (actor {self.actors[i]._actor_id.hex()[:12]})"

    def submit(
        self, prompts: list[str], n: int, sampling: SamplingConfig, images: Images, what: str
    ) -> Pending:
        """Shard `prompts` over the engines (contiguous; shard i samples with seed + i)."""
        size, extra = divmod(len(prompts), len(self.actors))
        shards, start = [], 0
        for i in range(len(self.actors)):
            stop = start + size + (i < extra)
            if stop > start:
                seed = None if sampling.seed is None else sampling.seed + i
                args = (
                    prompts[start:stop],
                    n,
                    sampling.model_copy(update={"seed": seed}),
                    None if images is None else images[start:stop],
                )
                shards.append((i, start, args, self.actors[i].generate.remote(*args)))
            start = stop
        version = self.version
        return Pending(lambda: self._collect(shards, version, what))

    def _collect(self, shards: list[tuple], version: int, what: str) -> list[Rollout]:
        self._check_loads(what)
        out: list[Rollout] = []
        for i, offset, args, ref in shards:
            rows = self._answer(i, args, ref, version, what)
            out += [replace(r, prompt_index=r.prompt_index + offset) for r in rows]
        return out

    def _answer(self, i: int, args: tuple, ref: Any, version: int, what: str) -> list[Rollout]:
        import ray

        revived, last = False, ""
        for _ in range(self.max_restarts + 1):
            try:
                rows = get_within(ref, self.timeout_s, f"{self.name(i)}, generate for {what}")
            except ray.exceptions.RayActorError as err:
                rows = None  # died during the call: its rows are lost, never trained on
                last = f"died ({type(err).__name__})"
            if rows is not None and all(r.version == version for r in rows):
                if revived and version != self.version:  # end where the other engines are
                    self._load_on(i, self.version, what)
                return rows
            if rows is not None:
                last = f"answered from versions {sorted({r.version for r in rows})}"
            self._revive(i, what)  # died, or restarted and lost its weights
            self._load_on(i, version, what)
            revived = True
            ref = self.actors[i].generate.remote(*args)
        raise EngineFailedError(
            f"{self.name(i)} failed {self.max_restarts + 1} times during {what}, which needs "
            f"version {version}; the last try {last} (rollout.max_engine_restarts)."
        )

    def _incarnation(self, i: int, what: str) -> str:
        """Engine i's process, waiting (up to the deadline) while Ray restarts it."""
        import ray

        deadline = time.monotonic() + self.timeout_s
        while True:  # ActorUnavailableError / RayActorError while Ray restarts it
            try:
                return get_within(self.actors[i].incarnation.remote(), self.timeout_s, self.name(i))
            except ray.exceptions.RayActorError as err:  # ActorUnavailableError included
                if time.monotonic() > deadline:
                    raise EngineFailedError(
                        f"{self.name(i)} did not come back during {what}: {err}"
                    ) from err
                time.sleep(0.05)  # polling for a restart, not a timing assumption

    def _revive(self, i: int, what: str) -> None:
        """Wait until Ray has restarted engine i; count the restart if its process is new."""
        now = self._incarnation(i, what)
        if self.seen.setdefault(i, now) != now:  # a first sight is no restart
            self.seen[i] = now
            self.restarts += 1
        if self.restarts > self.max_restarts * len(self.actors):
            raise EngineFailedError(
                f"rollout engines restarted {self.restarts} times by {what}; giving up "
                "(rollout.max_engine_restarts per engine)."
            )

    def _load_on(self, i: int, version: int, what: str) -> None:
        """Load the kept copy of `version` into engine i (rollback: it may be newer)."""
        if version not in self.weights:  # a learner publishes its start (module docstring)
            raise EngineFailedError(
                f"{self.name(i)} must be reloaded with version {version} during {what}, "
                f"but the group keeps only versions {sorted(self.weights)}."
            )
        ref = self.actors[i].load_weights.remote(self.weights[version], version, True)
        get_within(ref, self.timeout_s, f"{self.name(i)}, reload of version {version} in {what}")

    def load(
        self,
        state_dict: dict[str, torch.Tensor],
        version: int,
        rollback: bool = False,
        wait: bool = True,
    ) -> None:
        """Publish `version` to every engine (one object-store copy). `wait=False` queues
        the loads behind the generations already submitted (async mode); their errors
        surface at the next `result()`. Keeps the copies a regeneration may need: the
        previous version's and this one's; a rollback starts over from this one alone."""
        import ray

        if not rollback:
            check_version(self.version, version)
        ref = ray.put({k: v.detach().cpu() for k, v in state_dict.items()})
        kept = {} if rollback else {v: r for v, r in self.weights.items() if v >= self.version}
        self.weights = kept | {version: ref}
        self.version = version
        self.loads += [
            (i, a.load_weights.remote(ref, version, rollback), a.incarnation.remote())
            for i, a in enumerate(self.actors)
        ]
        if wait:
            self._check_loads(f"the load of version {version}")

    def _check_loads(self, what: str) -> None:
        """Wait for the queued loads. An engine that died, or that answers the incarnation
        call queued behind its load from a new process (restarted between calls: whether
        the load reached the old process or the new one, nothing else would tell), is
        revived, counted and reloaded with the current version."""
        import ray

        loads, self.loads = self.loads, []
        for i, ref, process in loads:
            try:
                get_within(ref, self.timeout_s, f"{self.name(i)}, weight load before {what}")
                now = get_within(process, self.timeout_s, self.name(i))
                if self.seen.setdefault(i, now) == now:
                    continue
            except ray.exceptions.RayActorError:
                pass  # died during the load or right after it
            self._revive(i, what)
            self._load_on(i, self.version, what)

    def close(self) -> None:
        """Nothing to free here: the driver that started the actors ends them."""


class LocalRollout:
    """The `colocated` placement: an hf engine in the learner's process.

    `background=False` (sync): the engine generates from the learner's module itself, so a
    load only records the version. `background=True` (async): the engine has its own copy
    of the module and one worker thread; loads copy the weights (snapshotted when `load`
    is called) and run on that thread in order with the generations.
    """

    def __init__(self, engine: HFEngine, background: bool) -> None:
        self.engine, self.background = engine, background
        self.restarts = 0
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="rollout") if background else None
        self.version = engine.version

    @classmethod
    def around(
        cls,
        module: torch.nn.Module,
        tokenizer: Any,
        processor: Any,
        chat_template: bool,
        background: bool,
    ) -> LocalRollout:
        model = copy.deepcopy(module) if background else module
        return cls(HFEngine.wrap(model, tokenizer, processor, chat_template), background)

    def submit(
        self, prompts: list[str], n: int, sampling: SamplingConfig, images: Images, what: str
    ) -> Pending:
        args = (prompts, n, sampling, images)
        if self.pool is None:
            rows = self.engine.generate(*args)
            return Pending(lambda: rows)
        future: Future = self.pool.submit(self.engine.generate, *args)
        return Pending(future.result)

    def load(
        self,
        state_dict: dict[str, torch.Tensor],
        version: int,
        rollback: bool = False,
        wait: bool = True,
    ) -> None:
        if not rollback:
            check_version(self.version, version)
        self.version = version
        if self.pool is None:  # the engine's model is the learner's module: nothing to copy
            self.engine.version = version
            return
        snapshot = {k: v.detach().clone() for k, v in state_dict.items()}
        future = self.pool.submit(self.engine.load_weights, snapshot, version, rollback)
        if wait:
            future.result()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def check_lag(rows: list[Rollout], step: int, max_staleness: int) -> list[int]:
    """Per-row version lag (step - version); error if a row is newer than the step or
    older than `max_staleness` allows."""
    lags = [step - r.version for r in rows]
    if lags and (min(lags) < 0 or max(lags) > max_staleness):
        raise StaleWeightsError(
            f"step {step} got rollouts of weight versions {sorted({r.version for r in rows})}; "
            f"allowed are {step - max_staleness}..{step} (rollout.max_staleness={max_staleness})."
        )
    return lags


RolloutSource = EngineGroup | LocalRollout
