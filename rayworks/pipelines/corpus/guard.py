"""A time budget per batch: a stuck batch never hangs a corpus run.

The step chain (`chain.py`) runs in a child process of the scoring actor. The actor sends
it a batch and waits at most `budget_s` seconds for the scored batch; the child writes the
index of the step it is in into shared memory, so a batch over budget is named by its
step. A batch over budget is retried once, row by row, in a fresh child, each row under
the same budget; a row over budget again (or one whose child dies, e.g. killed for
memory) is returned as a timeout `(row, "timeout:<step>")` or `(row, "crash:<step>")`,
and `score_unit` rejects it with that reason. So one pathological document costs at most
about three budgets and its own row; every other row of its batch is scored.

Why a process: a Python thread cannot be stopped, and a signal only interrupts the main
thread, which in the Ray Data actors that scored before (`fanout.py`) was not the thread
running the batch (measured: the UDF ran on another thread). A process can be killed
whatever it is doing, C code included, and its memory is returned when it is.
The child is spawned (a fresh interpreter): forking a Ray worker, which runs threads, can
deadlock the child. The batches cross a pipe as Arrow tables (a copy per batch, small
against the scoring, which costs tens of milliseconds per 64 KB document even after the
rewrite of the steps, measured on our 2-core machines).
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing as mp
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import pyarrow as pa

from rayworks.core.errors import RayworksError
from rayworks.pipelines.corpus.step import Batch

START_TIMEOUT_S = 600.0
"""How long a child may take to build its steps (the language model, word tables)."""


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


def _next(conn: Connection) -> pa.Table | None:
    """The next table to score; None when the parent says stop or is gone (a worker that
    Ray stopped closes the pipe: the child then ends quietly instead of with a traceback)."""
    try:
        return conn.recv()
    except (EOFError, OSError):
        return None


def _child(conn: Connection, current: Any, build: Callable[[], Sequence[Any]]) -> None:
    """The child's loop: build the steps, then score every table sent until None."""
    from rayworks.pipelines.corpus.chain import StepChain

    try:
        chain = StepChain(build())
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ready", chain.names))

    def mark(i: int) -> None:
        current.value = i

    while (table := _next(conn)) is not None:
        try:
            out = to_table(chain(to_batch(table), on_step=mark), table.schema)
            conn.send(("ok", out, chain.take_seconds()))
        except BaseException:
            conn.send(("error", traceback.format_exc()))


@dataclass
class Scored:
    """A batch after the chain: its scored rows (those not in `timeouts`, in order) and the
    `(row, reason)` of rows that could not be scored within the budget."""

    table: pa.Table | None
    timeouts: list[tuple[int, str]] = field(default_factory=list)


class GuardedChain:
    """`StepChain(build())` in a child process, each batch under `budget_s` seconds."""

    def __init__(self, build: Callable[[], Sequence[Any]], budget_s: float) -> None:
        if budget_s <= 0:
            raise RayworksError(f"batch_timeout_s must be > 0, got {budget_s}.")
        self.build, self.budget_s = build, budget_s
        self.seconds: Counter[str] = Counter()
        self.restarts = 0
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._start()

    def _start(self) -> None:
        """Spawn a child; it builds its steps while the actor reads its first unit."""
        ours, theirs = self._ctx.Pipe()
        self._current = self._ctx.Value("i", -1, lock=False)
        self._proc = self._ctx.Process(
            target=_child, args=(theirs, self._current, self.build), daemon=True
        )
        self._proc.start()
        theirs.close()
        self._conn = ours
        self.names: list[str] = []

    def _ready(self) -> None:
        """Wait for the child's steps (once per child)."""
        if self.names:
            return
        if not self._conn.poll(START_TIMEOUT_S):
            self.close()
            raise RayworksError(f"the corpus steps did not start within {START_TIMEOUT_S:.0f} s.")
        msg = self._receive()
        if msg is None or msg[0] != "ready":
            self.close()
            raise RayworksError(f"the corpus steps failed to start:\n{msg[1] if msg else ''}")
        self.names = msg[1]

    def _receive(self) -> tuple | None:
        try:
            return self._conn.recv()
        except (EOFError, OSError):  # the child died
            return None

    def _restart(self) -> None:
        self.close()
        self.restarts += 1
        self._start()

    def _run(self, table: pa.Table) -> pa.Table | str:
        """The scored table, or the reason it has none (`timeout:<step>`, `crash:<step>`)."""
        self._ready()
        self._current.value = -1
        try:
            self._conn.send(table)
        except (BrokenPipeError, OSError):
            self._restart()
            self._ready()
            self._conn.send(table)
        done = self._conn.poll(self.budget_s)
        msg = self._receive() if done else None
        if msg is not None and msg[0] == "ok":
            self.seconds.update(msg[2])
            return msg[1]
        if msg is not None:  # a step raised: a bug, not a slow row
            raise RayworksError(f"a corpus step failed:\n{msg[1]}")
        index = self._current.value
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
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.is_alive():
                proc.kill()
            proc.join(timeout=30)
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: nothing left to stop
            self.close()


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


def stalling_steps(cfg: Any, marker: str, seconds: float) -> list[Any]:
    """`chain.build_steps(cfg)` with a `SleepOn` after normalize (for `StepsFactory`)."""
    from rayworks.pipelines.corpus.chain import build_steps

    steps = build_steps(cfg)
    return [steps[0], SleepOn(marker, seconds), *steps[1:]]
