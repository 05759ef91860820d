"""Each trial of `rayworks sweep --tracking mlflow` as a child MLflow run of the sweep.

Ray Tune's own `MLflowLoggerCallback` (ray.air.integrations.mlflow) runs on the sweep's
driver and opens one MLflow run per trial as the trial starts, logs every result Tune
receives, and ends the run with the trial. `TrialRunsCallback` keeps that and changes
what is logged: the run is a child of the sweep's parent run (`mlflow.parentRunId`) and
carries the sweep's provenance tags; params are the trial's whole resolved config (the
sweep's base config with the sampled values, secrets redacted), not only the sampled
values; metrics are what the pipeline logged, at its own `step`, without Tune's
bookkeeping keys; at the end the trial's run directory (`trials/<pipeline>/*-<trial id>`,
see `tune._trial`) adds its summary numbers, record files and status.

Every hook runs through the tracker's guard: a failing MLflow warns once and stops
tracking; the sweep goes on. This module imports Ray Tune and is loaded only with
`--tracking mlflow`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray.air.integrations.mlflow import MLflowLoggerCallback
from ray.tune.result import AUTO_RESULT_KEYS

from rayworks.core.config import deep_merge, nest
from rayworks.platform import provenance
from rayworks.platform.tracking import (
    MLflowTracker,
    metric_rows,
    numeric,
    provenance_tags,
    read_summary,
    safe_params,
)

if TYPE_CHECKING:
    from ray.tune.experiment import Trial

SKIPPED = frozenset({*AUTO_RESULT_KEYS, "step", "timestamp", "done", "trial_id"})


class TrialRunsCallback(MLflowLoggerCallback):
    def __init__(
        self,
        tracker: MLflowTracker,
        parent: str | None,
        pipeline: str,
        base: dict[str, Any],
        trials_dir: Path,
    ) -> None:
        sweep_tags = provenance_tags(provenance.read(trials_dir.parent))
        tags = {**sweep_tags, "rayworks.kind": "trial", "rayworks.pipeline": pipeline}
        if parent:
            tags["mlflow.parentRunId"] = parent
        super().__init__(
            tracking_uri=tracker.uri, experiment_name=tracker.experiment or pipeline, tags=tags
        )
        self.tracker, self.pipeline = tracker, pipeline
        self.base, self.trials_dir = base, trials_dir

    def setup(self, *args: Any, **kwargs: Any) -> None:
        def start() -> None:
            _ = self.tracker.client  # allows the default file store before Ray's setup
            super(TrialRunsCallback, self).setup(*args, **kwargs)

        self.tracker.guard("setting up Tune's MLflowLoggerCallback", start)

    def log_trial_start(self, trial: Trial) -> None:
        self.tracker.guard(f"opening the run of trial {trial}", self._start, trial)

    def _start(self, trial: Trial) -> None:
        if trial in self._trial_runs:
            return  # a trial restored after a failure keeps its run
        tags = {**self.tags, "trial_name": str(trial), "rayworks.trial_id": trial.trial_id}
        run = self.mlflow_util.start_run(tags=tags, run_name=str(trial))
        self._trial_runs[trial] = run.info.run_id
        config = self.base
        for key, value in trial.config.items():
            config = deep_merge(config, nest(key, value))
        self.mlflow_util.log_params(run_id=run.info.run_id, params_to_log=safe_params(config))

    def log_trial_result(self, iteration: int, trial: Trial, result: dict) -> None:
        if trial not in getattr(self, "_trial_runs", {}):
            return
        metrics = {k: v for k, v in numeric(result).items() if k not in SKIPPED}
        step = int(result.get("step", result.get("training_iteration", iteration)))
        self.tracker.guard(
            f"logging a result of trial {trial}",
            self.mlflow_util.log_metrics,
            run_id=self._trial_runs[trial],
            metrics_to_log=metrics,
            step=step,
        )

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        if trial in getattr(self, "_trial_runs", {}):
            self.tracker.guard(f"closing the run of trial {trial}", self._end, trial, failed)

    def _end(self, trial: Trial, failed: bool) -> None:
        from mlflow.entities import Metric, RunTag

        run_id = self._trial_runs[trial]
        found = sorted((self.trials_dir / self.pipeline).glob(f"*-{trial.trial_id}"))
        if found:
            run_dir = found[-1]
            summary = read_summary(run_dir)
            rows = map(numeric, metric_rows(run_dir / "metrics.jsonl"))
            step = max((int(row["step"]) for row in rows if "step" in row), default=0)
            now = int(time.time() * 1000)
            self.tracker.client.log_batch(
                run_id,
                metrics=[Metric(f"summary/{k}", v, now, step) for k, v in numeric(summary).items()],
                tags=[
                    RunTag("rayworks.run_id", run_dir.name),
                    RunTag("rayworks.run_dir", str(run_dir)),
                    RunTag("rayworks.status", str(summary.get("status", "did not finish"))),
                ],
            )
            self.tracker.upload_files(run_id, run_dir)
        super().log_trial_end(trial, failed)
