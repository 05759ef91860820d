"""A Ray Train `TorchTrainer` set up the way every rayworks training job uses one.

The worker loop gets the run's context and `in_train=True`; under a Tune trial the loop
reports through Ray Train (`reporter="train"`) and a `TuneReportCallback` forwards those
reports to Tune. Checkpoints and Train's own state live under `<run dir>/ray_train`, and
`max_failures` worker-group failures are retried from the last checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rayworks.platform.context import RunContext


def torch_trainer(
    loop: Callable[[dict[str, Any]], Any],
    loop_config: dict[str, Any],
    ctx: RunContext,
    *,
    num_workers: int,
    use_gpu: bool,
    cpus_per_worker: float,
    max_failures: int,
) -> Any:
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    callbacks = []
    if ctx.reporter == "tune":
        from ray.tune.integration.ray_train import TuneReportCallback

        callbacks.append(TuneReportCallback())
    reporter = "train" if ctx.reporter == "tune" else "none"
    return TorchTrainer(
        loop,
        train_loop_config={**loop_config, "ctx": ctx, "reporter": reporter, "in_train": True},
        scaling_config=ScalingConfig(
            num_workers=num_workers,
            use_gpu=use_gpu,
            resources_per_worker={"CPU": cpus_per_worker},
        ),
        run_config=RunConfig(
            name="train",
            storage_path=str(ctx.run_dir / "ray_train"),
            failure_config=FailureConfig(max_failures=max_failures),
            callbacks=callbacks,
        ),
    )


def fit_metrics(trainer: Any) -> dict[str, Any]:
    """Run the trainer; the final report's metrics without the step counter."""
    result = trainer.fit()
    return {k: v for k, v in (result.metrics or {}).items() if k != "step"}
