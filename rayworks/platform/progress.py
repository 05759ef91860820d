"""A rich progress bar for a run, drawn by the launcher from the run's own metric log.

Pipelines run in Ray tasks and Ray Train workers whose stdout is not a terminal, so they
never draw bars themselves: they declare `ctx.progress(total)` and `ctx.log(step, ...)`,
and this follower tails `progress.json` / `metrics.jsonl` in the launching process. When the
log is replaced or shrinks (a resume truncates it to the restored step), it reads it anew.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

SHOWN = ("loss", "val_loss", "tokens_per_s", "reward", "accuracy")


def _fmt(key: str, value: float) -> str:
    return f"{key}={value:,.0f}" if abs(value) >= 1000 else f"{key}={value:.4g}"


class _Follower(threading.Thread):
    def __init__(self, run_dir: Path, progress: Progress, task_id: int) -> None:
        super().__init__(daemon=True)
        self.run_dir, self.progress, self.task_id = run_dir, progress, task_id
        self.stop = threading.Event()
        self.offset, self.inode = 0, -1
        self.latest: dict[str, float] = {}

    def poll(self) -> None:
        prog = self.run_dir / "progress.json"
        if prog.is_file():
            try:
                info = json.loads(prog.read_text())
                self.progress.update(
                    self.task_id, total=info["total"], description=info["description"]
                )
            except (ValueError, KeyError):
                pass  # being written right now; read it on the next poll
        path = self.run_dir / "metrics.jsonl"
        try:
            stat = path.stat()
        except FileNotFoundError:
            return
        if stat.st_ino != self.inode or stat.st_size < self.offset:
            # a resume truncated the log (a new file renamed into place): read it anew
            self.inode, self.offset = stat.st_ino, 0
        with path.open() as fh:
            fh.seek(self.offset)
            chunk = fh.read()
        complete = chunk[: chunk.rfind("\n") + 1]
        self.offset += len(complete.encode())
        for line in complete.splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            self.latest.update(
                {k: v for k, v in record.items() if k in SHOWN and isinstance(v, int | float)}
            )
            self.progress.update(self.task_id, completed=record.get("step", 0))
        stats = "  ".join(_fmt(k, self.latest[k]) for k in SHOWN if k in self.latest)
        self.progress.update(self.task_id, stats=stats)

    def run(self) -> None:
        while not self.stop.wait(0.5):
            self.poll()
        self.poll()


@contextmanager
def follow_run(
    run_dir: Path, enabled: bool = True, console: Console | None = None
) -> Iterator[None]:
    if not enabled:
        yield
        return
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[stats]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
    with progress:
        task_id = progress.add_task(run_dir.parent.name, total=None, stats="")
        follower = _Follower(run_dir, progress, task_id)
        follower.start()
        try:
            yield
        finally:
            follower.stop.set()
            follower.join(timeout=5)
