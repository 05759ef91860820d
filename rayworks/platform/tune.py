"""`rayworks sweep`: a Ray Tune search over any pipeline's config keys.

    rayworks sweep lm --param train.lr=loguniform:1e-4:1e-2 --param model.n_layer=choice:2,4 \
        --samples 4 --metric val_loss --mode min --scheduler asha

Each trial runs the pipeline function in the trial's process with a `RunContext` whose
reporter is Tune, so whatever the pipeline logs through `ctx.log` reaches Tune's scheduler
(job pipelines forward their Ray Train reports with `TuneReportCallback`). Every trial is
also a normal run directory under `<sweep>/trials/`. Parameter specs are checked against
the config class before Tune starts: a typo or an impossible value fails at once.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from rayworks.core.config import PipelineConfig, build_config, deep_merge, nest, validate
from rayworks.core.errors import ConfigError
from rayworks.platform import provenance
from rayworks.platform.cluster import connect
from rayworks.platform.context import RunContext, default_runs_dir, new_run_id
from rayworks.platform.launch import resources_of, run_and_record
from rayworks.platform.registry import get_pipeline
from rayworks.platform.tracking import TrackingConfig, make_tracker

DISTRIBUTIONS = ("uniform", "loguniform", "randint", "choice", "grid")


@dataclass(frozen=True)
class ParamSpec:
    key: str
    dist: str
    args: tuple[Any, ...]

    def domain(self) -> Any:
        from ray import tune

        if self.dist == "uniform":
            return tune.uniform(*self.args)
        if self.dist == "loguniform":
            return tune.loguniform(*self.args)
        if self.dist == "randint":
            return tune.randint(self.args[0], self.args[1] + 1)  # inclusive upper bound
        if self.dist == "choice":
            return tune.choice(list(self.args))
        return tune.grid_search(list(self.args))

    def examples(self) -> list[Any]:
        """Values to validate against the config before Tune starts."""
        return list(self.args) if self.dist in ("choice", "grid") else [self.args[0], self.args[-1]]


def parse_param(text: str) -> ParamSpec:
    """`train.lr=loguniform:1e-4:1e-2`, `model.n_layer=choice:2,4`, `seed=grid:0,1,2`."""
    key, sep, spec = text.partition("=")
    dist, _, rest = spec.partition(":")
    if not sep or not key or dist not in DISTRIBUTIONS or not rest:
        raise ConfigError(
            f"bad --param {text!r}: expected KEY=DIST:ARGS with DIST one of {', '.join(DISTRIBUTIONS)} "
            f"(e.g. train.lr=loguniform:1e-4:1e-2, model.n_layer=choice:2,4)."
        )
    if dist in ("choice", "grid"):
        return ParamSpec(key, dist, tuple(yaml.safe_load(v) for v in rest.split(",")))
    bounds = rest.split(":")
    try:
        lo, hi = (int(b) if dist == "randint" else float(b) for b in bounds)
    except ValueError:
        raise ConfigError(
            f"bad --param {text!r}: {dist} needs two numeric bounds LOW:HIGH."
        ) from None
    if lo >= hi or (dist == "loguniform" and lo <= 0):
        raise ConfigError(f"bad --param {text!r}: need LOW < HIGH (and LOW > 0 for loguniform).")
    return ParamSpec(key, dist, (lo, hi))


def check_params(cls: type[PipelineConfig], base: dict[str, Any], params: list[ParamSpec]) -> None:
    for param in params:
        for value in param.examples():
            validate(
                cls, deep_merge(base, nest(param.key, value)), f"--param {param.key}={value!r}"
            )


def _trial(
    config: dict[str, Any],
    name: str,
    base: dict[str, Any],
    trials_dir: str,
    record: dict[str, Any] | None = None,
) -> None:
    """One trial: a run directory named after the Tune trial id (`<time>-<id>-<trial id>`,
    how tracking finds it) whose provenance is the sweep's `record` (the driver's command,
    not this worker's)."""
    from ray import tune

    spec = get_pipeline(name)
    data = base
    for key, value in config.items():
        data = deep_merge(data, nest(key, value))
    cfg = validate(spec.config, data, "sweep trial")
    made = provenance.Provenance.model_validate(record) if record else None
    trial_id = tune.get_context().get_trial_id() or ""
    ctx = RunContext.create(name, cfg, trials_dir, record=made, suffix=trial_id)
    run_and_record(spec, cfg, ctx.worker("tune"))


def default_samples(params: list[ParamSpec]) -> int:
    """Draws of the space when not given: 1 for an all-grid space (else every grid point
    would run 4 times), 4 when anything is sampled."""
    return 1 if all(p.dist == "grid" for p in params) else 4


def sweep(
    name: str,
    params: list[str],
    preset: str | None = None,
    files: list[str] | tuple[str, ...] = (),
    overrides: list[str] | tuple[str, ...] = (),
    samples: int | None = None,
    metric: str | None = None,
    mode: str | None = None,
    scheduler: str = "fifo",
    max_concurrent: int = 0,
    runs_dir: str | Path | None = None,
    address: str | None = None,
    console: Console | None = None,
    tracking: TrackingConfig | None = None,
) -> Path:
    """Run the search; return the sweep directory (trials.md / trials.csv / trials/).

    `samples` is Tune's num_samples: how often the whole space is drawn (a grid is repeated
    that many times). Unset, it is 1 when every parameter is a grid (each point once) and
    4 otherwise. With `tracking`, the sweep is a parent run and each trial a child run
    (tracking_tune.py)."""
    spec = get_pipeline(name)
    if not params:
        raise ConfigError("sweep needs at least one --param KEY=DIST:ARGS.")
    base_cfg = build_config(spec.config, preset, files, overrides)
    base = base_cfg.model_dump(mode="json")
    parsed = [parse_param(p) for p in params]
    check_params(spec.config, base, parsed)
    samples = default_samples(parsed) if samples is None else samples
    metric = metric or spec.headline[0]
    mode = mode or spec.headline[1]

    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    # Pipelines log train metrics more often than eval metrics; ASHA skips results that
    # lack the metric, so Tune's strict check (every result must carry it) is relaxed.
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    tracker = make_tracker(tracking, runs_dir or default_runs_dir())
    connect(address)
    sweep_dir = (Path(runs_dir or default_runs_dir()) / "sweeps" / name / new_run_id()).absolute()
    sweep_dir.mkdir(parents=True)
    record = provenance.collect(address=address)
    provenance.write(sweep_dir, record)
    need = resources_of(spec, base_cfg).get("CPU", 1) or 1
    concurrent = max_concurrent or max(1, int(ray.cluster_resources().get("CPU", 1) // need))
    trial_cpus = 0.01 if spec.kind == "job" else need  # a job's trainer reserves its own workers
    have = ray.cluster_resources().get("CPU", 0)
    if spec.kind == "job" and need + trial_cpus > have:
        raise ConfigError(
            f"one {name} trial needs {need:g} CPU for its workers and actors plus {trial_cpus:g} "
            f"for its driver, but the cluster has {have:g}: it would wait forever. Lower the "
            "resources its config reserves (--set ...) or add CPUs."
        )
    knobs = {
        "params": " ".join(params),
        "samples": samples,
        "metric": metric,
        "mode": mode,
        "scheduler": scheduler,
    }
    parent = tracker.start_parent(
        sweep_dir, kind="sweep", pipeline=name, params={**base, "sweep": knobs}
    )
    trainable = tune.with_resources(
        tune.with_parameters(
            _trial,
            name=name,
            base=base,
            trials_dir=str(sweep_dir / "trials"),
            record=record.model_dump(mode="json"),
        ),
        {"cpu": trial_cpus},
    )
    sched = (
        ASHAScheduler(grace_period=1, reduction_factor=2)
        if scheduler == "asha"
        else FIFOScheduler()
    )
    tuner = tune.Tuner(
        trainable,
        param_space={p.key: p.domain() for p in parsed},
        tune_config=tune.TuneConfig(
            metric=metric,
            mode=mode,
            num_samples=samples,
            scheduler=sched,
            max_concurrent_trials=concurrent,
        ),
        run_config=tune.RunConfig(
            name="tune",
            storage_path=str(sweep_dir),
            verbose=1,
            callbacks=tracker.tune_callbacks(parent, name, base, sweep_dir / "trials"),
        ),
    )
    try:
        grid = tuner.fit()
    except BaseException:
        tracker.end_parent(parent, sweep_dir, "failed", {})
        raise
    table = trial_table(grid, [p.key for p in parsed], metric)
    write_tables(sweep_dir, table, metric, mode)
    best = _best(table, metric, mode)
    tracker.end_parent(
        parent, sweep_dir, "completed", {} if best is None else {f"best/{metric}": best}
    )
    show(table, metric, mode, console or Console())
    return sweep_dir


def _best(rows: list[dict[str, Any]], metric: str, mode: str) -> float | None:
    values = [r[metric] for r in rows if r[metric] is not None]
    return (min if mode == "min" else max)(values) if values else None


def trial_table(grid: Any, keys: list[str], metric: str) -> list[dict[str, Any]]:
    rows = []
    for result in grid:
        df = result.metrics_dataframe
        best = None
        if df is not None and metric in df:
            best = df[metric].dropna().iloc[-1] if df[metric].notna().any() else None
        rows.append(
            {
                **{k: result.config.get(k) for k in keys},
                metric: None if best is None else float(best),
                "iterations": (result.metrics or {}).get("training_iteration"),
                "status": "error" if result.error else "ok",
                "trial": Path(result.path).name if result.path else "",
            }
        )
    return rows


def write_tables(sweep_dir: Path, rows: list[dict[str, Any]], metric: str, mode: str) -> None:
    if not rows:
        return
    cols = list(rows[0])
    ordered = sorted(
        rows, key=lambda r: (r[metric] is None, (r[metric] or 0) * (1 if mode == "min" else -1))
    )
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_cell(r[c]) for c in cols) + " |" for r in ordered]
    (sweep_dir / "trials.md").write_text("\n".join(lines) + "\n")
    (sweep_dir / "trials.csv").write_text(
        "\n".join([",".join(cols)] + [",".join(_cell(r[c]) for c in cols) for r in ordered]) + "\n"
    )
    (sweep_dir / "trials.json").write_text(json.dumps(ordered, indent=2))


def _cell(value: Any) -> str:
    return f"{value:.5g}" if isinstance(value, float) else str(value)


def show(rows: list[dict[str, Any]], metric: str, mode: str, console: Console) -> None:
    table = Table(title=f"trials (best {metric} = {mode})")
    for col in rows[0] if rows else []:
        table.add_column(col)
    for row in rows:
        table.add_row(*(_cell(v) for v in row.values()))
    console.print(table)
