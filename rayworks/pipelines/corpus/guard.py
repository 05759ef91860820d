"""A time budget per batch: a stuck batch never hangs a corpus run.

The step chain (`chain.py`) runs in a child process of the scoring task's worker. The
worker sends it a batch and waits at most `budget_s` seconds for the scored batch; the
child says which step it starts before each one, so a batch over budget is named by its
step. A batch over budget is retried once, row by row, in a fresh child, each row under
the same budget; a row over budget again (or one whose child dies, e.g. killed for
memory) is returned as a timeout `(row, "timeout:<step>")` or `(row, "crash:<step>")`,
and `score_unit` rejects it with that reason. So one pathological document costs at most
about three budgets and its own row; every other row of its batch is scored.

Why a process: a Python thread cannot be stopped, and a signal only interrupts the main
thread, which in the Ray Data actors that scored before (`fanout.py`) was not the thread
running the batch (measured: the UDF ran on another thread). A process can be killed
whatever it is doing, C code included, and its memory is returned when it is.

The child is a fresh interpreter (forking a Ray worker, which runs threads, can deadlock
the child) started by `subprocess`, not `multiprocessing`'s spawn: spawn runs the parent's
main module again in the child, which in a Ray worker is Ray's worker script, so every
child imported Ray (~0.3 s and tens of MB of fresh memory before its first step; measured
on our 2-core machines, docs/results.md, corpus). This child imports the steps alone: it
gets the parent's `sys.path`, then the steps' factory, over a socket pair. With a
`share_key` (the scoring workers' chains, `score_unit.make_chain`) the child is instead
forked from the node's zygote for those settings (`zygote.py`), which built the steps
once: ready in milliseconds, after a kill too, and sharing the zygote's memory; the
child then talks to the worker exactly as a spawned one (`serve`). The batches
cross it as Arrow tables (a copy per batch, small against the scoring, which costs tens of
milliseconds per 64 KB document even after the rewrite of the steps).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
import subprocess
import sys
import threading
import time
import traceback
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import pyarrow as pa

from rayworks.core.errors import RayworksError
from rayworks.pipelines.corpus import zygote
from rayworks.pipelines.corpus.step import Batch
from rayworks.pipelines.corpus.zygote import START_TIMEOUT_S


def to_batch(table: pa.Table) -> Batch:
    """An Arrow table as the steps' column batch (numpy arrays; strings as objects)."""
    return {name: table[name].to_numpy(zero_copy_only=False) for name in table.column_names}


def to_table(batch: Batch, like: pa.Schema) -> pa.Table:
    """A scored batch as an Arrow table. Columns of `like` (the input's) keep their type,
    NaN read back as null (numpy turns a null int into NaN); score columns get the type
    their values imply (a float column keeps NaN as the fill of `step.py`)."""
    arrays, names = [], []
    for name, values in batch.items():
        if name in like.names:
            arrays.append(pa.array(values, type=like.field(name).type, from_pandas=True))
        elif getattr(values, "dtype", None) is not None and values.dtype.kind in "biuf":
            arrays.append(pa.array(values))
        else:
            arrays.append(pa.array(list(values)))
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)


class StepsFactory:
    """`module:function` and its arguments, called in the child to build the steps: the
    actor itself never imports the steps (their modules cost a second to import)."""

    def __init__(self, target: str, *args: Any) -> None:
        self.target, self.args = target, args

    def __call__(self) -> Sequence[Any]:
        module, name = self.target.split(":")
        return getattr(importlib.import_module(module), name)(*self.args)


def build_chain(conn: Connection) -> Any:
    """The chain of the steps' factory received on `conn`; None, with the error sent back
    as `("error", traceback)`, when building it fails."""
    from rayworks.pipelines.corpus.chain import StepChain

    build = conn.recv()
    try:
        return StepChain(build())
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return None


def child_main(conn: Connection) -> None:
    """A spawned child's life: build the steps, then `serve`."""
    if (chain := build_chain(conn)) is not None:
        serve(conn, chain)


def serve(conn: Connection, chain: Any) -> None:
    """The child's loop (spawned, or forked by a zygote with its steps built): say ready,
    then score every table sent until None, telling the parent the index of each step
    before it runs it."""
    conn.send(("ready", chain.names))

    def mark(i: int) -> None:
        conn.send(("step", i))

    while (table := zygote.receive(conn)) is not None:  # None: stop, or the parent is gone
        try:
            out = to_table(chain(to_batch(table), on_step=mark), table.schema)
            conn.send(("ok", out, chain.take_seconds()))
        except (BrokenPipeError, ConnectionResetError):  # the parent is gone
            return
        except BaseException:
            conn.send(("error", traceback.format_exc()))


_BOOT = """
import sys
from multiprocessing.connection import Connection
conn = Connection(int(sys.argv[1]))
sys.path[:] = conn.recv()
from rayworks.pipelines.corpus.guard import child_main
child_main(conn)
"""
"""The child's program: the parent's import path first, then `child_main`."""


def _stop(proc: subprocess.Popen, conn: Connection) -> None:
    """Kill the child (it may be stuck in a step) and close the parent's end."""
    if proc.poll() is None:
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)
    conn.close()


@dataclass
class Scored:
    """A batch after the chain: its scored rows (those not in `timeouts`, in order) and the
    `(row, reason)` of rows that could not be scored within the budget."""

    table: pa.Table | None
    timeouts: list[tuple[int, str]] = field(default_factory=list)


class GuardedChain:
    """`StepChain(build())` in a child process, each batch under `budget_s` seconds.
    `share_key`: the child is forked from this node's zygote for that key (`zygote.py`:
    one build of the steps per node and key, children ready at once), where possible;
    None: every child is spawned and builds its own steps."""

    def __init__(
        self, build: Callable[[], Sequence[Any]], budget_s: float, share_key: str | None = None
    ) -> None:
        if budget_s <= 0:
            raise RayworksError(f"batch_timeout_s must be > 0, got {budget_s}.")
        self.build, self.budget_s, self.share_key = build, budget_s, share_key
        self.seconds: Counter[str] = Counter()
        self.restarts = 0
        self.forked = 0
        self._stopper: weakref.finalize | None = None
        self._forking: Future | None = None
        self._start()

    def _start(self) -> None:
        """Start a child; it builds its steps (or is forked from a zygote, which may have
        to start first) while the worker reads its first unit."""
        self._step = -1
        self.names: list[str] = []
        if self.share_key is not None and zygote.supported():
            self._forking = Future()
            threading.Thread(
                target=_settle, args=(self._forking, self.share_key, self.build), daemon=True
            ).start()
        else:
            self._spawn()

    def _spawn(self) -> None:
        ours, theirs = socket.socketpair()
        with theirs:
            proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
            )
        conn = Connection(ours.detach())
        conn.send(list(sys.path))
        conn.send(self.build)
        self._hold(proc, conn)

    def _hold(self, proc: subprocess.Popen | zygote.Forked, conn: Connection) -> None:
        self._proc, self._conn = proc, conn
        # killed with this object, or at the worker's exit (a child busy in a step would
        # otherwise run on until it next reads the socket)
        self._stopper = weakref.finalize(self, _stop, proc, conn)

    def _forked(self, spawn: bool = True) -> None:
        """Take the zygote's child, or (`spawn`) spawn one where none came."""
        forking, self._forking = self._forking, None
        if forking is None:
            return
        child = forking.result()
        if child is None:
            if spawn:
                self._spawn()
        else:
            self.forked += 1
            self._hold(*child)

    def _ready(self) -> None:
        """Wait for the child's steps (once per child)."""
        if self.names:
            return
        self._forked()
        if not self._conn.poll(START_TIMEOUT_S):
            self.close()
            raise RayworksError(f"the corpus steps did not start within {START_TIMEOUT_S:.0f} s.")
        msg = zygote.receive(self._conn)
        if msg is None or msg[0] != "ready":
            self.close()
            raise RayworksError(f"the corpus steps failed to start:\n{msg[1] if msg else ''}")
        self.names = msg[1]

    def _restart(self) -> None:
        self.close()
        self.restarts += 1
        self._start()

    def _result(self) -> tuple[tuple | None, bool]:
        """(the child's answer to a batch, or None; whether it came within the budget),
        reading the step marks that precede it."""
        deadline = time.monotonic() + self.budget_s
        while True:
            if not self._conn.poll(max(0.0, deadline - time.monotonic())):
                return None, False
            msg = zygote.receive(self._conn)
            if msg is None or msg[0] != "step":
                return msg, True
            self._step = msg[1]

    def _run(self, table: pa.Table) -> pa.Table | str:
        """The scored table, or the reason it has none (`timeout:<step>`, `crash:<step>`)."""
        self._ready()
        self._step = -1
        try:
            self._conn.send(table)
        except (BrokenPipeError, OSError):
            self._restart()
            self._ready()
            self._conn.send(table)
        msg, done = self._result()
        if msg is not None and msg[0] == "ok":
            self.seconds.update(msg[2])
            return msg[1]
        if msg is not None:  # a step raised: a bug, not a slow row
            raise RayworksError(f"a corpus step failed:\n{msg[1]}")
        index = self._step
        step = self.names[index] if 0 <= index < len(self.names) else "start"
        self._restart()
        return f"{'timeout' if not done else 'crash'}:{step}"

    def __call__(self, table: pa.Table) -> Scored:
        out = self._run(table)
        if isinstance(out, pa.Table):
            return Scored(out)
        rows: list[pa.Table] = []
        timeouts: list[tuple[int, str]] = []
        for i in range(table.num_rows):  # the retry: row by row, so one row cannot sink all
            row = self._run(table.slice(i, 1))
            if isinstance(row, pa.Table):
                rows.append(row)
            else:
                timeouts.append((i, row))
        scored = pa.concat_tables(rows, promote_options="permissive") if rows else None
        return Scored(scored, timeouts)

    def take_seconds(self) -> dict[str, float]:
        out, self.seconds = dict(self.seconds), Counter()
        return out

    def close(self) -> None:
        """Stop the child (killed: it may be stuck in a step)."""
        self._forked(spawn=False)  # a child still on its way is taken, to be stopped too
        stopper, self._stopper = self._stopper, None
        if stopper is not None:
            stopper()


def _settle(future: Future, key: str, build: Callable[[], Sequence[Any]]) -> None:
    """`zygote.fork_child(key, build)` into `future` (run on a thread: a zygote that has to
    start first takes as long as a spawned child)."""
    try:
        future.set_result(zygote.fork_child(key, build))
    except BaseException as e:
        future.set_exception(e)


class LocalChain:
    """`StepChain(build())` in this process, without a budget (`batch_timeout_s` null):
    the same interface as `GuardedChain`, for debugging a step in one process."""

    def __init__(self, build: Callable[[], Sequence[Any]]) -> None:
        from rayworks.pipelines.corpus.chain import StepChain

        self.chain = StepChain(build())
        self.restarts = 0

    def __call__(self, table: pa.Table) -> Scored:
        return Scored(to_table(self.chain(to_batch(table)), table.schema))

    def take_seconds(self) -> dict[str, float]:
        return self.chain.take_seconds()

    def close(self) -> None:
        """Nothing to stop."""


class SleepOn:
    """Step `sleep`, for fault drills and tests of the budget: a batch holding a row whose
    text contains `marker` sleeps `seconds` (a stand-in for a step stuck on one document,
    as a pathological regex would be); every other batch passes unchanged."""

    name = "sleep"

    def __init__(self, marker: str, seconds: float) -> None:
        self.marker, self.seconds = marker, seconds

    def __call__(self, batch: Batch) -> Batch:
        if any(self.marker in str(text) for text in batch["text"]):
            time.sleep(self.seconds)
        return batch


class ExitOn:
    """Step `exit`, for fault drills and tests of the budget: a batch holding a row whose
    text contains `marker` ends its process at once (a stand-in for a child killed for
    memory in a step); every other batch passes unchanged."""

    name = "exit"

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __call__(self, batch: Batch) -> Batch:
        if any(self.marker in str(text) for text in batch["text"]):
            os._exit(9)
        return batch


def stalling_steps(cfg: Any, marker: str, seconds: float) -> list[Any]:
    """`chain.build_steps(cfg)` with a `SleepOn` after normalize (for `StepsFactory`)."""
    from rayworks.pipelines.corpus.chain import build_steps

    steps = build_steps(cfg)
    return [steps[0], SleepOn(marker, seconds), *steps[1:]]


def crashing_steps(cfg: Any, marker: str) -> list[Any]:
    """`chain.build_steps(cfg)` with an `ExitOn` after normalize (for `StepsFactory`)."""
    from rayworks.pipelines.corpus.chain import build_steps

    steps = build_steps(cfg)
    return [steps[0], ExitOn(marker), *steps[1:]]


def threaded_steps(cfg: Any) -> list[Any]:
    """`chain.build_steps(cfg)`, having started a thread that never ends (for tests of the
    zygote, which must not fork a process running threads: a stand-in for a library that
    starts a pool at import)."""
    from rayworks.pipelines.corpus.chain import build_steps

    threading.Thread(target=threading.Event().wait, daemon=True).start()
    return build_steps(cfg)
