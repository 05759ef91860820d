"""RunContext: a run's directory, metric log, progress declaration, seed and checkpoints.

Layout of `runs/<pipeline>/<YYYYmmdd-HHMMSS>-<id>/`:
    config.yaml      the validated config (what `--resume` reloads)
    provenance.json  source commit (dirty flag), package versions, host, Ray, the command
    metrics.jsonl    one JSON object per `ctx.log` call: {"step", "time", **metrics}
    progress.json    {"total", "description"} declared by `ctx.progress`
    summary.json     the pipeline's returned dict plus run metadata
    tensorboard/     TensorBoard event files of the same metrics
    checkpoints/     step_XXXXXXXX/ folders (safetensors + JSON, never pickle)
    artifacts/       anything else a pipeline writes (plots, tables, samples)

The context is a small picklable object: a pipeline sends it to its Ray tasks and
Ray Train workers. `ctx.log` writes files only on rank 0, and forwards to Ray Tune or
Ray Train when the run executes under them (`reporter`), so a sweep's scheduler sees
exactly what the run logs.
"""

from __future__ import annotations

import json
import math
import os
import random
import secrets
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from rayworks.core import checkpoint as ckpt
from rayworks.core.config import PipelineConfig, to_yaml
from rayworks.core.errors import CheckpointNotFoundError
from rayworks.platform import provenance
from rayworks.platform.atomic import write_text_atomic
from rayworks.platform.provenance import Provenance

Reporter = Literal["none", "tune", "train"]
RUNS_DIR_ENV = "RAYWORKS_RUNS_DIR"


def default_runs_dir() -> Path:
    return Path(os.environ.get(RUNS_DIR_ENV, "runs"))


def new_run_id() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def _jsonable(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        value = value.item() if value.numel() == 1 else value.tolist()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


@dataclass
class RunContext:
    pipeline: str
    run_dir: Path
    seed: int = 0
    reporter: Reporter = "none"
    rank: int = 0
    cache_dir: Path | None = None  # shared artifacts (e.g. base models); default: <root>/cache
    _tb: Any = field(default=None, repr=False, compare=False)

    # ----------------------------------------------------------------- creation
    @classmethod
    def create(
        cls,
        pipeline: str,
        cfg: PipelineConfig,
        runs_dir: str | Path | None = None,
        record: Provenance | None = None,
        suffix: str = "",
    ) -> RunContext:
        """A new run directory with config.yaml and provenance.json (`record`, default:
        this process's, see `provenance.collect`); `suffix` ends its name (a Tune trial id)."""
        run_id = new_run_id() + (f"-{suffix}" if suffix else "")
        run_dir = Path(runs_dir or default_runs_dir()).absolute() / pipeline / run_id
        ctx = cls(pipeline=pipeline, run_dir=run_dir, seed=cfg.seed)
        for sub in (ctx.artifacts_dir, ctx.checkpoints_dir):
            sub.mkdir(parents=True, exist_ok=True)
        ctx.write_config(cfg)
        provenance.write(run_dir, record)
        return ctx

    @classmethod
    def open(cls, run_dir: str | Path, pipeline: str | None = None) -> RunContext:
        """Re-open an existing run (for `--resume`); its config.yaml must exist."""
        run_dir = Path(run_dir).absolute()
        if not (run_dir / "config.yaml").is_file():
            raise CheckpointNotFoundError(
                f"{str(run_dir)!r} is not a rayworks run directory: it has no config.yaml "
                f"(expected runs/<pipeline>/<id>/ as written by `rayworks run`)."
            )
        name = pipeline or run_dir.parent.name
        return cls(pipeline=name, run_dir=run_dir)

    def worker(self, reporter: Reporter, rank: int = 0) -> RunContext:
        """A copy for a remote worker that reports through `reporter` as `rank`."""
        return replace(self, reporter=reporter, rank=rank, _tb=None)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_tb"] = None
        return state

    # -------------------------------------------------------------------- paths
    @property
    def config_path(self) -> Path:
        return self.run_dir / "config.yaml"

    @property
    def metrics_path(self) -> Path:
        return self.run_dir / "metrics.jsonl"

    @property
    def summary_path(self) -> Path:
        return self.run_dir / "summary.json"

    @property
    def progress_path(self) -> Path:
        return self.run_dir / "progress.json"

    @property
    def artifacts_dir(self) -> Path:
        return self.run_dir / "artifacts"

    @property
    def checkpoints_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    @property
    def cache_root(self) -> Path:
        """Where runs share built artifacts: `cache_dir`, else `cache/` beside the pipeline
        folders (`runs/cache/`); a bench points all its arms, ablations included, at one."""
        return self.cache_dir or self.run_dir.parent.parent / "cache"

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    # ------------------------------------------------------------------ logging
    def seed_everything(self, offset: int = 0) -> None:
        seed = self.seed + offset
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)

    def progress(self, total: int, description: str | None = None) -> None:
        """Declare the number of steps; the launcher draws a progress bar from the log."""
        if self.rank == 0:
            self.progress_path.write_text(
                json.dumps({"total": int(total), "description": description or self.pipeline})
            )

    def record(self, step: int, **metrics: Any) -> dict[str, Any]:
        """Write metrics at `step` to metrics.jsonl and TensorBoard (rank 0 only), no report."""
        values = {k: _jsonable(v) for k, v in metrics.items()}
        if self.rank == 0:
            line = {"step": int(step), "time": time.time(), **values}
            with self.metrics_path.open("a") as fh:
                fh.write(json.dumps(line) + "\n")
            self._tensorboard(step, values)
        return values

    def log(self, step: int, checkpoint: Any = None, **metrics: Any) -> None:
        """Record metrics at `step`; under Tune/Train also report them (and `checkpoint`).

        Under Ray Train every rank must call `log` with the same cadence: the report is a
        barrier across ranks. Only rank 0 writes files.
        """
        values = self.record(step, **metrics)
        numeric = {k: v for k, v in values.items() if isinstance(v, int | float)}
        if self.reporter == "tune":
            from ray import tune

            tune.report({"step": int(step), **numeric}, checkpoint=checkpoint)
        elif self.reporter == "train":
            import ray.train

            ray.train.report({"step": int(step), **numeric}, checkpoint=checkpoint)

    def _tensorboard(self, step: int, values: dict[str, Any]) -> None:
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"))
        for key, value in values.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                self._tb.add_scalar(key, value, step)
        self._tb.flush()

    def metrics(self) -> list[dict[str, Any]]:
        """The log's records. A last line cut short by a kill (no newline, not JSON) is
        skipped with a warning; a bad line before the last one is corruption and raises."""
        if not self.metrics_path.is_file():
            return []
        text = self.metrics_path.read_text()
        lines = text.splitlines()
        records = []
        for i, line in enumerate(lines):
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except ValueError:
                if i == len(lines) - 1 and not text.endswith("\n"):
                    warnings.warn(
                        f"{self.metrics_path}: skipped a torn last line ({line[:60]!r}...), "
                        "written when the run was killed",
                        stacklevel=2,
                    )
                    continue
                raise ValueError(
                    f"{self.metrics_path}, line {i + 1}: not JSON ({line[:80]!r})"
                ) from None
        return records

    def write_jsonl(self, name: str, rows: list[dict[str, Any]]) -> Path:
        """Write `rows` as artifacts/<name> (one JSON object per line)."""
        path = self.artifacts_dir / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path

    def write_config(self, cfg: PipelineConfig) -> None:
        """config.yaml, whole or not at all (a resume rewrites it with its overrides)."""
        write_text_atomic(self.config_path, to_yaml(cfg))

    def write_summary(self, summary: dict[str, Any]) -> None:
        clean = {k: _jsonable(v) for k, v in summary.items()}
        write_text_atomic(self.summary_path, json.dumps(clean, indent=2, sort_keys=True))

    # -------------------------------------------------------------- checkpoints
    def checkpoint_dir(self, step: int) -> Path:
        return ckpt.step_dir(self.checkpoints_dir, step)

    def latest_checkpoint(self) -> Path | None:
        return ckpt.latest_checkpoint(self.checkpoints_dir)

    def truncate_metrics(self, after_step: int) -> None:
        """Drop log records past `after_step` (a resumed run re-does those steps)."""
        if self.rank != 0 or not self.metrics_path.is_file():
            return
        kept = [r for r in self.metrics() if r.get("step", 0) <= after_step]
        write_text_atomic(self.metrics_path, "".join(json.dumps(r) + "\n" for r in kept))
