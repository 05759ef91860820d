"""`rayworks bench NAME`: a pipeline beside its baseline(s) and ablations on the same seeds.

Arms, in this order: the method NAME, its baselines (role "baseline"), then one arm per
ablation the pipeline registers (role "ablation", named `NAME[label]`: pipeline NAME with
the ablation's overrides after the bench's; `--no-ablations` leaves them out). Every
(arm, seed) pair is one run with the same preset and overrides plus `seed=s`; all of them
are validated before Ray starts, then run as Ray tasks, as many side by side as the
cluster's CPUs hold (arms interleaved in submission order). A baseline the method's own
run computes on the same seeds and data (`registry.InRun`, declared by the pipeline) is not
launched: its row is read from the method's summary of each seed (`split_in_run`), so the
table keeps every arm and no arm runs twice; bench.md names those arms under the table.

The headline metric is reported per arm as mean and 95% t-interval over seeds. `ratio` in
bench.json is the method's mean over the first baseline's; the table's ratio column gives,
for the method and every ablation row, that row's mean over each baseline's mean (baseline
rows show "-"), so an ablation's ratio reads directly against the method's. Each of the
pipeline's `report` keys adds a `mean [lo, hi]` column (summaries lacking the key count as
NaN and are skipped). Failed runs are listed under the table and count in no statistic.

Curves: the headline key's (step, value) records are read from each completed run's
metrics.jsonl (the last value logged at a step wins) and tabulated per step as
`mean [lo, hi] (n)` over the seeds that logged a finite value there ('-' where an arm
logged nothing), over the union of all arms' steps. They are skipped when no run logged
the key at more than one step.

Outputs (`runs/bench/NAME/<id>/`): `bench.md` (command line, table, failures, curve
table), `bench.json`, `bench.png`, `curve.png` (when there are curves) and `runs/` with
every run directory (ablation runs under `runs/ablation/<label>/`); `rayworks bench NAME
--collect DIR` (`collect()`) rewrites them from the runs that finished when a bench was
stopped, and `--resume DIR` (`bench(resume=DIR)`) finishes such a bench in place: runs
already finished there with the same config are kept, the rest run. `rayworks demo` benches every method with its smoke preset, runs every pipeline
that has a `demo` preset (a short run that shows learning, e.g. grpo's rising curve) once,
and renders one HTML report.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.progress import Progress

from rayworks.core.config import PipelineConfig, build_config, load_yaml_file
from rayworks.core.errors import ConfigError
from rayworks.platform import provenance
from rayworks.platform.bench_render import write_outputs
from rayworks.platform.bench_stats import as_number, curves, summarize
from rayworks.platform.cluster import connect
from rayworks.platform.context import RunContext, default_runs_dir, new_run_id
from rayworks.platform.launch import remote_run, resources_of
from rayworks.platform.registry import InRun, PipelineSpec, get_pipeline
from rayworks.platform.tracking import Tracker, TrackingConfig, make_tracker

Role = Literal["method", "baseline", "ablation"]


@dataclass
class BenchResult:
    out_dir: Path
    markdown: str
    data: dict[str, Any]


@dataclass(frozen=True)
class Arm:
    """One bench arm: `pipeline` run with the bench's overrides, then `overrides`."""

    name: str
    role: Role
    pipeline: str
    overrides: tuple[str, ...] = ()
    label: str = ""  # the ablation's label; empty for the method and baselines


@dataclass(frozen=True)
class PlannedRun:
    """One validated (arm, seed) run, ready to submit."""

    arm: Arm
    spec: PipelineSpec
    cfg: PipelineConfig


@dataclass(frozen=True)
class Outcome:
    """A finished run: its summary, or its error when it failed, and its metrics log.

    `prefix` is set for an arm read from the method's run (`in_run`): its keys there carry
    the prefix, in the summary (already stripped in `summary`) and in the metrics log."""

    arm: str
    seed: int
    summary: dict[str, Any] | None
    error: str | None
    metrics_path: Path
    prefix: str | None = None


@dataclass(frozen=True)
class InRunArm:
    """A planned arm run the method's run of the same seed computes (`plan[source]`)."""

    run: PlannedRun
    how: InRun
    source: int


def plan_arms(
    name: str, ablations: bool | Sequence[str] = True, baselines: bool = True
) -> list[Arm]:
    """The method, its baselines (unless `baselines=False`), then one arm per registered
    ablation (`ablations=True`), none (False) or those named (a list of labels, in
    registration order)."""
    spec = get_pipeline(name)
    if not spec.baselines and not spec.ablations:
        raise ConfigError(f"pipeline {name!r} declares no baseline or ablation to bench against.")
    if not isinstance(ablations, bool):
        unknown = sorted(set(ablations) - set(spec.ablations))
        if unknown:
            raise ConfigError(
                f"pipeline {name!r} has no ablation {unknown[0]!r}; its ablations: "
                f"{', '.join(spec.ablations) or '(none)'}."
            )
    chosen = [
        label
        for label in spec.ablations
        if ablations is True or (not isinstance(ablations, bool) and label in ablations)
    ]
    arms = [Arm(name, "method", name)]
    arms += [Arm(b, "baseline", b) for b in spec.baselines] if baselines else []
    if len(arms) == 1 and not chosen:
        raise ConfigError(f"bench {name!r}: no baseline and no ablation arm left to compare.")
    return arms + [
        Arm(f"{name}[{label}]", "ablation", name, spec.ablations[label], label) for label in chosen
    ]


def plan_runs(
    arms: Sequence[Arm], seeds: int, preset: str, overrides: Sequence[str] = ()
) -> list[PlannedRun]:
    """Every seed x arm config, validated now (before Ray starts), arms interleaved by seed."""
    if seeds < 1:
        raise ConfigError(f"--seeds={seeds} is invalid: need at least 1 seed.")
    plan = []
    for seed in range(seeds):
        for arm in arms:
            spec = get_pipeline(arm.pipeline)
            layers = [*overrides, *arm.overrides, f"seed={seed}"]
            try:
                cfg = build_config(spec.config, preset, (), layers)
            except ConfigError as exc:
                if arm.role != "ablation":
                    raise
                raise ConfigError(f"ablation {arm.label!r} of {arm.pipeline!r}: {exc}") from None
            plan.append(PlannedRun(arm, spec, cfg))
    return plan


def split_in_run(plan: Sequence[PlannedRun]) -> tuple[list[PlannedRun], list[InRunArm]]:
    """The runs to launch, and the baseline runs the method's run of the same seed already
    computes (the method pipeline's `in_run`, when that run's config holds the arm); the
    latter's `source` indexes the launched list."""
    launched = [r for r in plan if not _in_run(r, plan)]
    method_at = {r.cfg.seed: i for i, r in enumerate(launched) if r.arm.role == "method"}
    derived = []
    for run in plan:
        how = _in_run(run, plan)
        if how is not None:
            derived.append(InRunArm(run, how, method_at[run.cfg.seed]))
    return launched, derived


def _in_run(run: PlannedRun, plan: Sequence[PlannedRun]) -> InRun | None:
    """How the method's run of `run`'s seed computes `run`'s arm, or None (launch it)."""
    if run.arm.role != "baseline":
        return None
    method = next(r for r in plan if r.arm.role == "method" and r.cfg.seed == run.cfg.seed)
    how = method.spec.in_run.get(run.arm.name)
    return how if how is not None and how.computed_by(method.cfg) else None


def from_method_run(arm: str, how: InRun, method: Outcome) -> Outcome:
    """The outcome of `arm` read off the method's outcome of the same seed: its keys with
    `how.prefix` stripped, and `how.shared` as they are (a failed method run fails the arm
    with the same error)."""
    summary = None
    if method.summary is not None:
        n = len(how.prefix)
        summary = {k: method.summary[k] for k in how.shared if k in method.summary}
        summary |= {k[n:]: v for k, v in method.summary.items() if k.startswith(how.prefix)}
    return Outcome(arm, method.seed, summary, method.error, method.metrics_path, how.prefix)


def _runs_root(out_dir: Path, arm: Arm) -> Path:
    """Where an arm's run dirs go: ablations apart, so `runs/NAME/` holds only the method."""
    runs = out_dir / "runs"
    return runs / "ablation" / arm.label if arm.role == "ablation" else runs


def execute(
    plan: Sequence[PlannedRun],
    out_dir: Path,
    title: str,
    console: Console | None = None,
    record: provenance.Provenance | None = None,
) -> list[Outcome]:
    """Run the plan on Ray, only as many at once as the cluster's CPUs hold.

    Queued Train worker groups would otherwise time out and retry, and idle drivers would
    compete for CPU. A failed run comes back with its error, it is not raised. Every run
    directory gets `record` as its provenance.json (default: this process's). Outcomes
    come back in plan order, not in the order the runs finish: callers index them by plan
    position (`bench` reads in-run arms off `outcomes[source]`).
    """
    import ray

    need = max(resources_of(r.spec, r.cfg).get("CPU", 1) or 1 for r in plan)
    slots = max(1, int(ray.cluster_resources().get("CPU", 1) // need))
    queue = list(plan)
    started: dict[Any, tuple[int, PlannedRun, Path]] = {}
    outcomes: dict[int, Outcome] = {}
    with Progress(console=console, transient=False) as progress:
        task = progress.add_task(title, total=len(plan))
        pending: list[Any] = []
        while queue or pending:
            while queue and len(pending) < slots:
                index, run = len(plan) - len(queue), queue.pop(0)
                ctx = RunContext.create(
                    run.spec.name, run.cfg, _runs_root(out_dir, run.arm), record=record
                )
                ctx = replace(ctx, cache_dir=out_dir / "runs" / "cache")  # one per bench
                ref = remote_run(run.spec, run.cfg, ctx)
                started[ref] = (index, run, ctx.metrics_path)
                pending.append(ref)
            done, pending = ray.wait(pending, num_returns=1)
            index, run, metrics_path = started[done[0]]
            summary, error = None, None
            try:
                summary = ray.get(done[0])
            except Exception as exc:  # a failed run is reported in the table, not hidden
                error = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
            outcomes[index] = Outcome(run.arm.name, run.cfg.seed, summary, error, metrics_path)
            progress.advance(task)
    return [outcomes[i] for i in range(len(plan))]


def bench(
    name: str,
    seeds: int = 3,
    preset: str = "smoke",
    overrides: list[str] | tuple[str, ...] = (),
    runs_dir: str | Path | None = None,
    address: str | None = None,
    command: str | None = None,
    console: Console | None = None,
    ablations: bool | Sequence[str] = True,
    baselines: bool = True,
    resume: str | Path | None = None,
    tracking: TrackingConfig | None = None,
) -> BenchResult:
    """Bench pipeline `name` against its baselines (and, with `ablations`, its ablations).

    `resume`: a bench directory of `name` (a stopped bench) to finish in place instead of a
    new one. The same command must be given again: every run that finished there is kept
    when its config.yaml equals the planned one (another config is refused, naming the
    key), runs that failed or never finished run again, into the same directory and with
    the same cached bases (`runs/cache`).

    `tracking`: the bench becomes a parent run, each (arm, seed) run a child (tracking.py).
    """
    arms = plan_arms(name, ablations, baselines)
    plan, in_run = split_in_run(plan_runs(arms, seeds, preset, overrides))
    spec = get_pipeline(name)
    if resume is None:
        out_dir = (Path(runs_dir or default_runs_dir()) / "bench" / name / new_run_id()).absolute()
        kept: dict[int, Outcome] = {}
    else:
        out_dir = Path(resume).absolute()
        if out_dir.parent.name != name or not (out_dir / "runs").is_dir():
            raise ConfigError(
                f"--resume {str(resume)!r} is not a bench directory of {name!r} "
                f"(expected runs/bench/{name}/<id> with a runs/ folder)."
            )
        kept = finished_runs(plan, out_dir)

    tracker = make_tracker(tracking, out_dir.parent.parent.parent)  # the runs root
    connect(address)
    out_dir.mkdir(parents=True, exist_ok=True)
    record = provenance.collect(address=address)
    provenance.write(out_dir, record)
    knobs = {
        "seeds": seeds,
        "preset": preset,
        "arms": [a.name for a in arms],
        "overrides": provenance.redact_argv(overrides),
    }
    parent = tracker.start_parent(out_dir, kind="bench", pipeline=name, params=knobs)
    todo = [run for i, run in enumerate(plan) if i not in kept]
    try:
        fresh = iter(
            execute(todo, out_dir, f"bench {name}", console, record=record) if todo else []
        )
        outcomes = [kept[i] if i in kept else next(fresh) for i in range(len(plan))]
    except BaseException:
        tracker.end_parent(parent, out_dir, "failed", {})
        raise
    outcomes += [from_method_run(d.run.arm.name, d.how, outcomes[d.source]) for d in in_run]
    data = summarize_outcomes(spec, arms, outcomes, command or f"rayworks bench {name}")
    markdown = write_outputs(out_dir, data)
    _track(tracker, parent, out_dir, outcomes, data)
    return BenchResult(out_dir, markdown, data)


def _track(
    tracker: Tracker,
    parent: str | None,
    out_dir: Path,
    outcomes: Sequence[Outcome],
    data: dict[str, Any],
) -> None:
    """Each (arm, seed) run as a child of the bench's run, then the bench's means."""
    for o in (o for o in outcomes if o.prefix is None):  # an in-run arm has no run of its own
        tags = {"rayworks.arm": o.arm, "rayworks.seed": str(o.seed)}
        tracker.log_run(
            o.metrics_path.parent, parent=parent, name=f"{o.arm} seed {o.seed}", tags=tags
        )
    means = {f"mean/{row['name']}": row["mean"] for row in data["arms"]}
    ratio = {"ratio": data["ratio"]} if isinstance(data.get("ratio"), float) else {}
    tracker.end_parent(parent, out_dir, "completed", {**means, **ratio})


def finished_runs(plan: Sequence[PlannedRun], out_dir: Path) -> dict[int, Outcome]:
    """`{plan index: outcome}` of the planned runs that already finished in `out_dir`.

    A run is matched by arm and seed; it counts when its summary.json exists and is not
    `status: failed`. Its config.yaml must equal the planned config, else the bench being
    resumed was another command and mixing the two would corrupt every statistic.
    """
    found: dict[int, Outcome] = {}
    for i, run in enumerate(plan):
        root = _runs_root(out_dir, run.arm) / run.arm.pipeline
        dirs = sorted(root.iterdir()) if root.is_dir() else []
        for run_dir in (d for d in dirs if (d / "config.yaml").is_file()):
            recorded = load_yaml_file(run_dir / "config.yaml")
            if recorded.get("seed") != run.cfg.seed:
                continue
            outcome = _recorded_outcome(run.arm, run_dir)
            if outcome.summary is None:
                continue  # failed or stopped: it runs again
            planned = json.loads(json.dumps(run.cfg.model_dump(mode="json")))
            diff = _first_difference(planned, json.loads(json.dumps(recorded)))
            if diff is not None:
                key, was, now = diff
                raise ConfigError(
                    f"--resume: {str(run_dir)!r} ({run.arm.name}, seed {run.cfg.seed}) ran with "
                    f"{key}={was!r}, this command gives {key}={now!r}; resume with the "
                    "bench's original command (its first line in bench.md once it finishes)."
                )
            found[i] = outcome
    return found


def _first_difference(now: Any, was: Any, key: str = "") -> tuple[str, Any, Any] | None:
    """The first dotted key where two JSON-like configs differ, with (was, now); else None."""
    if isinstance(now, dict) and isinstance(was, dict):
        for k in [*now, *(k for k in was if k not in now)]:
            sub = f"{key}.{k}" if key else str(k)
            if k not in now or k not in was:
                return sub, was.get(k, "(absent)"), now.get(k, "(absent)")
            found = _first_difference(now[k], was[k], sub)
            if found is not None:
                return found
        return None
    return None if now == was else (key, was, now)


def collect(out_dir: str | Path) -> BenchResult:
    """Re-summarize a bench from the runs that finished in `out_dir`; runs nothing.

    For a bench stopped before its last run (a wall-clock limit, a lost node): the arms are
    read off the layout the bench writes (`runs/NAME/`, `runs/<baseline>/`,
    `runs/ablation/<label>/NAME/`), each run's seed off its config.yaml and its result off its
    summary.json. Run directories without a summary.json are listed as failed ("did not
    finish") unless the same arm and seed finished in another (a `--resume` reran it);
    seeds never started are simply absent, so every arm's `n` says what it holds.
    """
    out_dir = Path(out_dir).absolute()
    name, runs = out_dir.parent.name, out_dir / "runs"
    if not runs.is_dir():
        raise ConfigError(f"{str(out_dir)!r} is not a bench directory: it has no runs/ folder.")
    spec = get_pipeline(name)
    planned = plan_arms(name)
    arms = [arm for arm in planned if (_runs_root(out_dir, arm) / arm.pipeline).is_dir()]
    best: dict[tuple[str, int], Outcome] = {}  # a resumed bench reran its unfinished runs
    configs: dict[int, dict[str, Any]] = {}  # seed -> the method run's config
    for arm in arms:
        for run_dir in sorted((_runs_root(out_dir, arm) / arm.pipeline).iterdir()):
            if (run_dir / "config.yaml").is_file():
                o = _recorded_outcome(arm, run_dir)
                if o.summary is not None or best.get((o.arm, o.seed), o).summary is None:
                    best[(o.arm, o.seed)] = o
                    if arm.role == "method":
                        configs[o.seed] = load_yaml_file(run_dir / "config.yaml")
    for arm in (a for a in planned if a.role == "baseline" and a.name in spec.in_run):
        how = spec.in_run[arm.name]
        found = [best[(name, s)] for s, cfg in configs.items() if how.computed_by(cfg)]
        arms += [arm] if found and arm not in arms else []
        for o in found:  # a bench from before the arm was in-run has runs of its own
            best.setdefault((arm.name, o.seed), from_method_run(arm.name, how, o))
    arms = [a for a in planned if a in arms]  # the bench's own order
    outcomes = sorted(best.values(), key=lambda o: o.seed)
    command = f"rayworks bench {name} --collect {out_dir}"
    data = summarize_outcomes(spec, arms, outcomes, command)
    return BenchResult(out_dir, write_outputs(out_dir, data), data)


def _recorded_outcome(arm: Arm, run_dir: Path) -> Outcome:
    """A run directory's outcome as `execute` would have returned it (launch.finish writes
    summary.json with `status` "failed" and the error for a run that raised)."""
    seed, metrics = int(load_yaml_file(run_dir / "config.yaml")["seed"]), run_dir / "metrics.jsonl"
    path = run_dir / "summary.json"
    summary = json.loads(path.read_text()) if path.is_file() else None
    if summary is None:
        return Outcome(arm.name, seed, None, "did not finish (no summary.json)", metrics)
    if summary.get("status") == "failed":
        error = (str(summary.get("error", "failed")).splitlines() or ["failed"])[0]
        return Outcome(arm.name, seed, None, error, metrics)
    return Outcome(arm.name, seed, summary, None, metrics)


def summarize_outcomes(
    spec: PipelineSpec, arms: Sequence[Arm], outcomes: Sequence[Outcome], command: str
) -> dict[str, Any]:
    """bench.json's content from finished runs: completed runs count, failed ones are listed."""
    key, mode = spec.headline
    keys = (key, *spec.report)
    found: dict[str, dict[str, list[float]]] = {a.name: {k: [] for k in keys} for a in arms}
    paths: dict[str, list[Path]] = {a.name: [] for a in arms}
    seeds: dict[str, list[int]] = {a.name: [] for a in arms}
    prefixes: dict[str, str] = {}  # arms read from the method's runs: their logged keys' prefix
    for o in outcomes:
        if o.summary is None:
            continue
        for k in keys:
            found[o.arm][k].append(as_number(o.summary.get(k)))
        paths[o.arm].append(o.metrics_path)
        seeds[o.arm].append(o.seed)
        if o.prefix is not None:
            prefixes[o.arm] = o.prefix
    failures = [f"{o.arm} seed {o.seed}: {o.error}" for o in outcomes if o.summary is None]
    data = summarize(
        spec.name,
        key,
        mode,
        [(a.name, a.role) for a in arms],
        {arm: by_key[key] for arm, by_key in found.items()},
        command,
        failures,
        report=spec.report,
        secondary=found,
        curves=curves(key, paths, prefixes),
        seeds=seeds,
    )
    data["extra_curves"] = {k: curves(k, paths, prefixes) for k in spec.curves}
    data["in_run"] = {a: spec.in_run[a].reason for a in prefixes if a in spec.in_run}
    return data
