"""Experiment tracking: run directories mirrored into MLflow (`--tracking mlflow`).

    rayworks run lm --preset smoke --tracking mlflow                  # <runs_dir>/mlruns
    rayworks sweep lm ... --tracking mlflow --tracking-uri http://mlflow.internal:5000
    rayworks bench lm --seeds 3 --tracking mlflow --tracking-artifacts all

The run directory stays the record; MLflow gets a copy of it. `rayworks run` logs its run
once it ends (completed, failed or interrupted), from the files it wrote: params are the
flattened config.yaml (a secret-looking key's value is "<redacted>"), metrics every
metrics.jsonl row at its step plus the summary's numbers as `summary/<key>`, tags the
provenance (commit, dirty, version, host, command) with the pipeline and run id, and
artifacts config.yaml, summary.json, provenance.json, metrics.jsonl and any HTML report
(`--tracking-artifacts all`: the whole folder, checkpoints included). A bench is a parent
run with one child per arm and seed; a sweep is a parent run whose trials Ray Tune's
`MLflowLoggerCallback` logs live as children (`tracking_tune.py`).

An MLflow failure (no server, a rejected value) never fails or loses a run: it prints one
warning naming what failed and turns tracking off for the rest of the command.
`mlflow` (or `mlflow-skinny`: the `tracking` extra) is imported only when asked for.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, model_validator

from rayworks.core.config import Config, flatten
from rayworks.core.errors import ConfigError
from rayworks.platform import provenance

URI_ENV = "RAYWORKS_TRACKING_URI"
RUN_FILES = ("config.yaml", "summary.json", "provenance.json", "metrics.jsonl")
STATUS = {"completed": "FINISHED", "failed": "FAILED"}  # summary.json status -> MLflow's
MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
MAX_TAG_CHARS = 5000
BATCH = 100  # MLflow accepts at most 100 params / tags and 1000 metrics per log_batch


class TrackingConfig(Config):
    """Where a command's runs are mirrored (`--tracking`, `--tracking-uri`, ...)."""

    backend: Literal["none", "mlflow"] = Field("none", description="none or mlflow")
    uri: str | None = Field(
        None, description=f"tracking URI (default: ${URI_ENV}, else <runs_dir>/mlruns)"
    )
    artifacts: Literal["files", "all"] = Field(
        "files", description="files: the run's record files; all: the whole run directory"
    )
    experiment: str | None = Field(None, description="MLflow experiment (default: pipeline)")

    @model_validator(mode="after")
    def _needs_backend(self) -> TrackingConfig:
        if self.backend == "none" and (self.uri or self.artifacts != "files"):
            given = f"uri={self.uri!r}" if self.uri else f"artifacts={self.artifacts!r}"
            raise ValueError(f"tracking {given} needs a backend: add --tracking mlflow")
        return self

    def resolved_uri(self, runs_dir: str | Path) -> str:
        default = (Path(runs_dir) / "mlruns").absolute().as_uri()
        return self.uri or os.environ.get(URI_ENV) or default


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def sanitize_key(key: str) -> str:
    """A metric or param name MLflow accepts (letters, digits, _ - . / space)."""
    return re.sub(r"[^\w./\- ]", "_", key)[:250]


def safe_params(config: Mapping[str, Any]) -> dict[str, str]:
    """The flattened config as MLflow params: secret-looking keys redacted, URL passwords
    removed, values as JSON text cut to MLflow's limit."""
    out = {}
    for key, value in flatten(config).items():
        text = value if isinstance(value, str) else json.dumps(value)
        if provenance.is_secret_key(key):
            text = provenance.REDACTED
        text = provenance.redact_value(text)
        out[sanitize_key(key)] = text[:MAX_PARAM_CHARS]
    return out


def numeric(record: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a metrics row or summary (booleans and strings left out)."""
    return {
        sanitize_key(k): float(v)
        for k, v in record.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


def provenance_tags(record: Mapping[str, Any] | None) -> dict[str, str]:
    if not record:
        return {}
    git = record.get("git") or {}
    tags = {
        "rayworks.version": str(record.get("rayworks")),
        "rayworks.hostname": str(record.get("hostname")),
        "rayworks.ray_cluster": str((record.get("ray") or {}).get("cluster")),
        "rayworks.command": str(record.get("command_line", ""))[:MAX_TAG_CHARS],
        "rayworks.git": "yes" if git else "no (not a git checkout)",
    }
    if git.get("commit"):
        tags |= {"rayworks.commit": git["commit"], "mlflow.source.git.commit": git["commit"]}
    if git:
        tags["rayworks.dirty"] = str(bool(git.get("dirty"))).lower()
    return tags


def read_summary(run_dir: Path) -> dict[str, Any]:
    """A run's summary.json, or {} while it has none (a stopped or running run)."""
    try:
        data = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def metric_rows(path: Path) -> Iterator[dict[str, Any]]:
    """metrics.jsonl's records; a torn or bad line is skipped (the file is the record)."""
    lines = path.read_text(errors="replace").splitlines() if path.is_file() else []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            yield row


class Tracker:
    """No tracking: what every command gets without `--tracking`. `MLflowTracker`
    implements the same calls; each returns None (or []) when there is nothing to do."""

    artifacts: str = "files"

    def log_run(
        self,
        run_dir: Path,
        *,
        parent: str | None = None,
        name: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> str | None:
        """Mirror a finished (or failed, or stopped) run directory; return its run id."""
        return None

    def start_parent(
        self, out_dir: Path, *, kind: str, pipeline: str, params: Mapping[str, Any]
    ) -> str | None:
        """Open the parent run of a sweep or bench (`out_dir` holds its provenance.json)."""
        return None

    def end_parent(
        self, parent: str | None, out_dir: Path, status: str, metrics: Mapping[str, float]
    ) -> None:
        """Close it with `metrics` and the top-level files of `out_dir` as artifacts."""

    def tune_callbacks(
        self, parent: str | None, pipeline: str, base: Mapping[str, Any], trials_dir: Path
    ) -> list[Any]:
        """Ray Tune callbacks that log each trial as a child run of `parent`."""
        return []


class MLflowTracker(Tracker):
    def __init__(self, uri: str, artifacts: str = "files", experiment: str | None = None):
        self.uri, self.artifacts, self.experiment = uri, artifacts, experiment
        self.disabled = False
        self._client: Any = None
        self._experiments: dict[str, str] = {}

    def __getstate__(self) -> dict[str, Any]:  # Tune pickles its callbacks (tuner.pkl)
        return {**self.__dict__, "_client": None}

    @property
    def client(self) -> Any:
        if self._client is None:
            if self.uri.startswith("file:") or "://" not in self.uri:
                # MLflow 3 refuses a plain-folder store unless told; ours is that default
                os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            from mlflow import MlflowClient

            self._client = MlflowClient(tracking_uri=self.uri)
        return self._client

    def guard(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """`fn(...)`, or None with one warning when it (or anything before) failed."""
        if self.disabled:
            return None
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            self.disabled = True
            where = provenance.redact_value(self.uri)
            _say(
                f"WARNING: MLflow tracking at {where} failed while {what} "
                f"({type(exc).__name__}: {str(exc)[:300]}); tracking is off for the rest of "
                "this command. The run directories are complete and remain the record."
            )
            return None

    def experiment_id(self, pipeline: str) -> str:
        name = self.experiment or pipeline
        if name not in self._experiments:
            found = self.client.get_experiment_by_name(name)
            self._experiments[name] = (
                found.experiment_id if found else self.client.create_experiment(name)
            )
        return self._experiments[name]

    def log_run(self, run_dir, *, parent=None, name=None, tags=None):  # type: ignore[override]
        run_id = self.guard(
            f"logging run {run_dir}", self._log_run, Path(run_dir), parent, name, tags or {}
        )
        if run_id and parent is None:
            self._logged(run_id)
        return run_id

    def _logged(self, run_id: str) -> None:
        _say(f"MLflow: run {run_id} at {provenance.redact_value(self.uri)}")

    def _log_run(
        self, run_dir: Path, parent: str | None, name: str | None, extra: Mapping[str, str]
    ) -> str:
        from mlflow.entities import Metric, Param

        summary = read_summary(run_dir)
        record = provenance.read(run_dir) or {}
        pipeline = str(summary.get("pipeline") or run_dir.parent.name)
        rows = list(metric_rows(run_dir / "metrics.jsonl"))
        first = numeric(rows[0]).get("time") if rows else None
        start = float(record.get("created_at") or first or time.time())
        wall = numeric(summary).get("wall_s")
        end = start + wall if wall is not None else time.time()
        tags = {
            **provenance_tags(record),
            "rayworks.kind": "run",
            "rayworks.pipeline": pipeline,
            "rayworks.run_id": run_dir.name,
            "rayworks.run_dir": str(run_dir),
            "rayworks.status": str(summary.get("status", "did not finish")),
            **extra,
        }
        if summary.get("error"):
            tags["rayworks.error"] = provenance.redact_value(str(summary["error"]))[:MAX_TAG_CHARS]
        if parent:
            tags["mlflow.parentRunId"] = parent
        run = self.client.create_run(
            self.experiment_id(pipeline),
            start_time=int(start * 1000),
            tags=tags,
            run_name=name or run_dir.name,
        )
        run_id = run.info.run_id
        config = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
        params = [Param(k, v) for k, v in safe_params(config).items()]
        metrics = []
        for row in map(numeric, rows):  # a row without a numeric step is not a point
            if "step" in row:
                stamp, step = int(row.get("time", start) * 1000), int(row["step"])
                metrics += [
                    Metric(k, v, stamp, step) for k, v in row.items() if k not in ("step", "time")
                ]
        last_step = max((m.step for m in metrics), default=0)
        metrics += [
            Metric(f"summary/{k}", v, int(end * 1000), last_step)
            for k, v in numeric(summary).items()
        ]
        self._batches(run_id, params, metrics)
        self.upload_files(run_id, run_dir)
        status = STATUS.get(str(summary.get("status")), "KILLED")
        self.client.set_terminated(run_id, status, end_time=int(end * 1000))
        return run_id

    def _batches(self, run_id: str, params: list[Any], metrics: list[Any]) -> None:
        for i in range(0, len(params), BATCH):
            self.client.log_batch(run_id, params=params[i : i + BATCH])
        for i in range(0, len(metrics), 10 * BATCH):
            self.client.log_batch(run_id, metrics=metrics[i : i + 10 * BATCH])

    def upload_files(self, run_id: str, run_dir: Path) -> None:
        """The run's record files and HTML reports (`artifacts="all"`: the whole folder)."""
        if self.artifacts == "all":
            self.client.log_artifacts(run_id, str(run_dir))
            return
        for name in RUN_FILES:
            if (run_dir / name).is_file():
                self.client.log_artifact(run_id, str(run_dir / name))
        for page in sorted(run_dir.rglob("*.html")):
            if "checkpoints" not in page.relative_to(run_dir).parts:
                sub = page.parent.relative_to(run_dir).as_posix()
                self.client.log_artifact(run_id, str(page), None if sub == "." else sub)

    def start_parent(self, out_dir, *, kind, pipeline, params):  # type: ignore[override]
        return self.guard(
            f"opening the {kind} run of {out_dir}",
            self._start_parent,
            Path(out_dir),
            kind,
            pipeline,
            params,
        )

    def _start_parent(
        self, out_dir: Path, kind: str, pipeline: str, params: Mapping[str, Any]
    ) -> str:
        from mlflow.entities import Param

        tags = {
            **provenance_tags(provenance.read(out_dir)),
            "rayworks.kind": kind,
            "rayworks.pipeline": pipeline,
            "rayworks.run_id": out_dir.name,
            "rayworks.run_dir": str(out_dir),
        }
        run = self.client.create_run(
            self.experiment_id(pipeline), tags=tags, run_name=f"{kind} {out_dir.name}"
        )
        run_id = run.info.run_id
        self._batches(run_id, [Param(k, v) for k, v in safe_params(params).items()], [])
        return run_id

    def end_parent(self, parent, out_dir, status, metrics):  # type: ignore[override]
        if parent is not None:
            self.guard(
                f"closing the run of {out_dir}",
                self._end_parent,
                parent,
                Path(out_dir),
                status,
                metrics,
            )

    def _end_parent(
        self, parent: str, out_dir: Path, status: str, metrics: Mapping[str, float]
    ) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        finite = numeric(metrics)
        self._batches(parent, [], [Metric(k, v, now, 0) for k, v in finite.items()])
        for path in sorted(out_dir.iterdir()):
            if path.is_file() and not path.name.startswith("."):
                self.client.log_artifact(parent, str(path))
        self.client.set_terminated(parent, STATUS.get(status, "KILLED"), end_time=now)
        self._logged(parent)

    def tune_callbacks(self, parent, pipeline, base, trials_dir):  # type: ignore[override]
        if self.disabled:
            return []
        from rayworks.platform.tracking_tune import TrialRunsCallback

        return [TrialRunsCallback(self, parent, pipeline, dict(base), Path(trials_dir))]


def make_tracker(cfg: TrackingConfig | None, runs_dir: str | Path) -> Tracker:
    """The tracker `cfg` asks for; checked before any run starts (mlflow importable)."""
    if cfg is None or cfg.backend == "none":
        return Tracker()
    if importlib.util.find_spec("mlflow") is None:
        raise ConfigError(
            "--tracking mlflow needs the mlflow package, which is not installed here: "
            "pip install 'rayworks[tracking]' (or mlflow / mlflow-skinny)."
        )
    return MLflowTracker(cfg.resolved_uri(runs_dir), cfg.artifacts, cfg.experiment)
