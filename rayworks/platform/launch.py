"""Launching a registered pipeline: validate everything, connect to Ray, run, summarise.

Order matters: the pipeline name, config, preset, files, overrides and resume directory
are all checked before Ray starts, so bad input never starts a run. A `task` pipeline runs
as one Ray task holding the resources it declares; a `job` pipeline's function is the
driver itself (it creates its own trainers/actors). The summary written to summary.json is
the pipeline's returned dict plus run metadata.
"""

from __future__ import annotations

import re
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rayworks.core.config import PipelineConfig, build_config, load_yaml_file, validate
from rayworks.core.errors import ConfigError
from rayworks.platform import provenance
from rayworks.platform.cluster import connect
from rayworks.platform.context import RunContext, default_runs_dir
from rayworks.platform.progress import follow_run
from rayworks.platform.registry import PipelineSpec, get_pipeline
from rayworks.platform.tracking import TrackingConfig, make_tracker


@dataclass
class RunResult:
    run_dir: Path
    summary: dict[str, Any]


def resources_of(spec: PipelineSpec, cfg: PipelineConfig) -> dict[str, float]:
    """A pipeline's Ray resources; a config may refine them with a `ray_resources()` method."""
    refine = getattr(cfg, "ray_resources", None)
    return dict(refine()) if callable(refine) else dict(spec.resources)


def _remote_options(resources: dict[str, float]) -> dict[str, Any]:
    res = dict(resources)
    opts: dict[str, Any] = {"num_cpus": res.pop("CPU", 0), "num_gpus": res.pop("GPU", 0)}
    if res:
        opts["resources"] = res
    return opts


def run_and_record(spec: PipelineSpec, cfg: PipelineConfig, ctx: RunContext) -> dict[str, Any]:
    """Run the pipeline here and write its summary.json (also when it fails)."""
    started = time.time()
    try:
        summary = spec.fn(cfg, ctx)
    except BaseException as exc:
        failure = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        finish(ctx, spec, failure, started, "failed")
        raise
    return finish(ctx, spec, summary, started, "completed")


def _run_in_worker(name: str, cfg_data: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    spec = get_pipeline(name)
    return run_and_record(spec, spec.config.model_validate(cfg_data), ctx)


def remote_run(spec: PipelineSpec, cfg: PipelineConfig, ctx: RunContext) -> Any:
    """Start the pipeline in a Ray worker and return its ObjectRef (bench fans these out).

    A `task` pipeline's worker holds its declared resources; a `job` pipeline's driver
    holds none (its trainers and actors reserve their own). Every run gets a fresh worker
    process (`max_calls=1`): a bench runs many pipelines back to back, and a worker reused
    after another pipeline (its threads, imported modules, Ray function table) once hung
    in Ray's function fetch for minutes in `make demo`; a new process costs about a second.
    """
    import ray

    opts = _remote_options(resources_of(spec, cfg)) if spec.kind == "task" else {"num_cpus": 0}
    fn = ray.remote(max_retries=0, max_calls=1)(_run_in_worker)
    return fn.options(**opts).remote(spec.name, cfg.model_dump(mode="json"), ctx)


_ABLATION = re.compile(r"(?P<name>[A-Za-z0-9_-]+)\[(?P<label>[A-Za-z0-9_-]+)\]")


def _ablation(
    name: str, overrides: list[str] | tuple[str, ...]
) -> tuple[PipelineSpec, tuple[str, ...]]:
    """The spec of `name` and the overrides, with an ablation's own in front for NAME[LABEL]."""
    match = _ABLATION.fullmatch(name)
    if match is None:
        return get_pipeline(name), tuple(overrides)
    spec = get_pipeline(match["name"])
    label = match["label"]
    if label not in spec.ablations:
        raise ConfigError(
            f"pipeline {spec.name!r} has no ablation {label!r}; its ablations: "
            f"{', '.join(spec.ablations) or '(none)'}."
        )
    return spec, (*spec.ablations[label], *overrides)


def resolve(
    name: str,
    preset: str | None = None,
    files: list[str] | tuple[str, ...] = (),
    overrides: list[str] | tuple[str, ...] = (),
    resume: str | Path | None = None,
) -> tuple[PipelineSpec, PipelineConfig, RunContext | None]:
    """Validate the whole request; return the spec, config and (for resume) the context.

    `NAME[LABEL]` names pipeline NAME with its registered ablation LABEL, as `bench` does:
    the ablation's overrides come first, the request's after them."""
    spec, overrides = _ablation(name, overrides)
    name = spec.name
    if resume is None:
        return spec, build_config(spec.config, preset, files, overrides), None
    ctx = RunContext.open(resume)
    if ctx.pipeline != name:
        raise ConfigError(
            f"--resume {str(resume)!r} is a run of {ctx.pipeline!r}, not of {name!r}."
        )
    if preset is not None:
        raise ConfigError(
            "--preset cannot be combined with --resume: the run's config.yaml is reused."
        )
    base = load_yaml_file(ctx.config_path)
    validate(spec.config, base, f"{ctx.config_path}")
    cfg = build_config(spec.config, None, files, overrides, base=base)
    ctx.seed = cfg.seed
    return spec, cfg, ctx


def finish(
    ctx: RunContext, spec: PipelineSpec, summary: dict[str, Any], started: float, status: str
) -> dict[str, Any]:
    meta = {
        "pipeline": spec.name,
        "run_id": ctx.run_id,
        "status": status,
        "wall_s": time.time() - started,
    }
    full = {**summary, **meta}
    ctx.write_summary(full)
    return full


def run(
    name: str,
    *,
    preset: str | None = None,
    files: list[str] | tuple[str, ...] = (),
    overrides: list[str] | tuple[str, ...] = (),
    runs_dir: str | Path | None = None,
    address: str | None = None,
    resume: str | Path | None = None,
    progress: bool = True,
    tracking: TrackingConfig | None = None,
) -> RunResult:
    """Run pipeline `name` and return its run directory and summary. With `tracking`, the
    finished (or failed) run directory is then mirrored into the tracker (tracking.py)."""
    spec, cfg, ctx = resolve(name, preset, files, overrides, resume)
    root = ctx.run_dir.parent.parent if ctx else Path(runs_dir or default_runs_dir())
    tracker = make_tracker(tracking, root)
    connect(address)
    record = provenance.collect(address=address)
    if ctx is None:
        ctx = RunContext.create(spec.name, cfg, runs_dir, record=record)
    else:
        ctx.write_config(cfg)  # overrides given with --resume persist
        provenance.write(ctx.run_dir, record)  # the earlier attempts' records move to `earlier`
    try:
        with follow_run(ctx.run_dir, enabled=progress):
            if spec.kind == "job":
                summary = run_and_record(spec, cfg, ctx)
            else:
                import ray

                summary = ray.get(remote_run(spec, cfg, ctx))
    finally:
        tracker.log_run(ctx.run_dir)
    return RunResult(ctx.run_dir, summary)
