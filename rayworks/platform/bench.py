"""`rayworks bench NAME`: a pipeline beside its baseline(s) and ablations on the same seeds.

Arms, in this order: the method NAME, its baselines (role "baseline"), then one arm per
ablation the pipeline registers (role "ablation", named `NAME[label]`: pipeline NAME with
the ablation's overrides after the bench's; `--no-ablations` leaves them out). Every
(arm, seed) pair is one run with the same preset and overrides plus `seed=s`; all of them
are validated before Ray starts, then run as Ray tasks, as many side by side as the
cluster's CPUs hold (arms interleaved in submission order).

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
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.progress import Progress

from rayworks.errors import ConfigError
from rayworks.platform import provenance
from rayworks.platform.cluster import connect
from rayworks.platform.config import PipelineConfig, build_config, load_yaml_file
from rayworks.platform.context import RunContext, default_runs_dir, new_run_id
from rayworks.platform.launch import remote_run, resources_of
from rayworks.platform.launch import run as launch_run
from rayworks.platform.registry import PipelineSpec, all_pipelines, baseline_names, get_pipeline
from rayworks.platform.tracking import Tracker, TrackingConfig, make_tracker

Role = Literal["method", "baseline", "ablation"]
Stat = dict[str, Any]  # {"values": [...], "mean": m, "ci95": [lo, hi]}

# Two-sided 95% Student-t quantiles by degrees of freedom (normal beyond 30).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
       10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042}  # fmt: skip


def t95(df: int) -> float:
    if df >= 30:
        return 1.96 if df > 30 else T95[30]
    return T95[max(k for k in T95 if k <= df)]


def mean_ci(values: list[float]) -> tuple[float, tuple[float, float]]:
    """Mean and 95% t-interval (a single value has a zero-width interval)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return float("nan"), (float("nan"), float("nan"))
    mean = statistics.fmean(finite)
    if len(finite) < 2:
        return mean, (mean, mean)
    half = t95(len(finite) - 1) * statistics.stdev(finite) / math.sqrt(len(finite))
    return mean, (mean - half, mean + half)


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
    """A finished run: its summary, or its error when it failed, and its metrics log."""

    arm: str
    seed: int
    summary: dict[str, Any] | None
    error: str | None
    metrics_path: Path


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
        label for label in spec.ablations
        if ablations is True or (not isinstance(ablations, bool) and label in ablations)
    ]  # fmt: skip
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


def _runs_root(out_dir: Path, arm: Arm) -> Path:
    """Where an arm's run dirs go: ablations apart, so `runs/NAME/` holds only the method."""
    runs = out_dir / "runs"
    return runs / "ablation" / arm.label if arm.role == "ablation" else runs


def execute(
    plan: Sequence[PlannedRun], out_dir: Path, title: str, console: Console | None = None,
    record: provenance.Provenance | None = None,
) -> list[Outcome]:  # fmt: skip
    """Run the plan on Ray, only as many at once as the cluster's CPUs hold.

    Queued Train worker groups would otherwise time out and retry, and idle drivers would
    compete for CPU. A failed run comes back with its error, it is not raised. Every run
    directory gets `record` as its provenance.json (default: this process's).
    """
    import ray

    need = max(resources_of(r.spec, r.cfg).get("CPU", 1) or 1 for r in plan)
    slots = max(1, int(ray.cluster_resources().get("CPU", 1) // need))
    queue = list(plan)
    started: dict[Any, tuple[PlannedRun, Path]] = {}
    outcomes: list[Outcome] = []
    with Progress(console=console, transient=False) as progress:
        task = progress.add_task(title, total=len(plan))
        pending: list[Any] = []
        while queue or pending:
            while queue and len(pending) < slots:
                run = queue.pop(0)
                ctx = RunContext.create(
                    run.spec.name, run.cfg, _runs_root(out_dir, run.arm), record=record
                )
                ctx = replace(ctx, cache_dir=out_dir / "runs" / "cache")  # one per bench
                ref = remote_run(run.spec, run.cfg, ctx)
                started[ref] = (run, ctx.metrics_path)
                pending.append(ref)
            done, pending = ray.wait(pending, num_returns=1)
            run, metrics_path = started[done[0]]
            summary, error = None, None
            try:
                summary = ray.get(done[0])
            except Exception as exc:  # a failed run is reported in the table, not hidden
                error = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
            outcomes.append(Outcome(run.arm.name, run.cfg.seed, summary, error, metrics_path))
            progress.advance(task)
    return outcomes


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
    plan = plan_runs(arms, seeds, preset, overrides)
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
    knobs = {"seeds": seeds, "preset": preset, "arms": [a.name for a in arms],
             "overrides": provenance.redact_argv(overrides)}  # fmt: skip
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
    data = summarize_outcomes(spec, arms, outcomes, command or f"rayworks bench {name}")
    markdown = write_outputs(out_dir, data)
    _track(tracker, parent, out_dir, outcomes, data)
    return BenchResult(out_dir, markdown, data)


def _track(
    tracker: Tracker, parent: str | None, out_dir: Path, outcomes: Sequence[Outcome],
    data: dict[str, Any],
) -> None:  # fmt: skip
    """Each (arm, seed) run as a child of the bench's run, then the bench's means."""
    for o in outcomes:
        tags = {"rayworks.arm": o.arm, "rayworks.seed": str(o.seed)}
        tracker.log_run(o.metrics_path.parent, parent=parent, name=f"{o.arm} seed {o.seed}",
                        tags=tags)  # fmt: skip
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
    arms = [arm for arm in plan_arms(name) if (_runs_root(out_dir, arm) / arm.pipeline).is_dir()]
    best: dict[tuple[str, int], Outcome] = {}  # a resumed bench reran its unfinished runs
    for arm in arms:
        for run_dir in sorted((_runs_root(out_dir, arm) / arm.pipeline).iterdir()):
            if (run_dir / "config.yaml").is_file():
                o = _recorded_outcome(arm, run_dir)
                if o.summary is not None or best.get((o.arm, o.seed), o).summary is None:
                    best[(o.arm, o.seed)] = o
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
    for o in outcomes:
        if o.summary is None:
            continue
        for k in keys:
            found[o.arm][k].append(_number(o.summary.get(k)))
        paths[o.arm].append(o.metrics_path)
        seeds[o.arm].append(o.seed)
    failures = [f"{o.arm} seed {o.seed}: {o.error}" for o in outcomes if o.summary is None]
    data = summarize(
        spec.name, key, mode, [(a.name, a.role) for a in arms],
        {arm: by_key[key] for arm, by_key in found.items()}, command, failures,
        report=spec.report, secondary=found, curves=curves(key, paths), seeds=seeds,
    )  # fmt: skip
    data["extra_curves"] = {k: curves(k, paths) for k in spec.curves}
    return data


def _number(value: Any) -> float:
    """A summary or metrics value as a float; missing or non-numeric values are NaN.

    RunContext writes non-finite floats as the strings 'nan'/'inf', which float() reads.
    """
    if isinstance(value, bool):
        return float("nan")
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def stat(values: list[float]) -> Stat:
    """Values with their mean and 95% t-interval, as stored in bench.json."""
    mean, ci = mean_ci(values)
    return {"values": values, "mean": mean, "ci95": list(ci)}


def summarize(
    name: str, key: str, mode: str, arms: Sequence[tuple[str, str]],
    values: Mapping[str, list[float]], command: str, failures: list[str], *,
    report: Sequence[str] = (), secondary: Mapping[str, Mapping[str, list[float]]] | None = None,
    curves: Mapping[str, Mapping[str, Stat]] | None = None,
    seeds: Mapping[str, list[int]] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """bench.json's content: per-arm headline and `report` statistics, ratio and curves.

    `arms` is (name, role) in table order, the method first; `secondary[arm][k]` holds the
    per-seed values of report key `k` (absent: none); `curves` (see `curves()`) is stored
    in the same arm order. `seeds[arm]` names the seed of each of `values[arm]`; with it,
    every other arm gets `paired`: its headline minus the method's, seed by seed, over the
    seeds both completed (the interval of a difference the shared seeds make tighter).
    """
    rows = []
    method = arms[0][0] if arms else None
    for arm, role in arms:
        extra = (secondary or {}).get(arm, {})
        rows.append(
            {"name": arm, "role": role, **stat(list(values[arm])),
             "secondary": {k: stat(list(extra.get(k, []))) for k in report}}
        )  # fmt: skip
        if seeds is not None and arm != method:
            mine = dict(zip(seeds[arm], values[arm], strict=True))
            theirs = dict(zip(seeds[method], values[method], strict=True))
            rows[-1]["paired"] = stat([mine[s] - theirs[s] for s in sorted(mine) if s in theirs])
    base = next((r for r in rows if r["role"] == "baseline"), None)
    ratio = rows[0]["mean"] / base["mean"] if base and base["mean"] not in (0, None) else None
    return {"pipeline": name, "headline": [key, mode], "report": list(report),
            "command": command, "arms": rows, "ratio": ratio, "failures": failures,
            "curves": {a: dict(curves[a]) for a, _ in arms if curves and a in curves}}  # fmt: skip


def read_metric(path: Path, key: str) -> dict[int, float]:
    """`{step: value}` of `key` in one metrics.jsonl; the last value logged at a step wins.

    A missing file, malformed lines and lines without `key` or a numeric step are skipped.
    """
    out: dict[int, float] = {}
    lines = path.read_text(errors="replace").splitlines() if path.is_file() else []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or key not in rec:
            continue
        step = _number(rec.get("step"))
        if math.isfinite(step):
            out[int(step)] = _number(rec[key])
    return out


def curves(key: str, paths: Mapping[str, Sequence[Path]]) -> dict[str, dict[str, Stat]]:
    """Per arm, per step (a string, as in JSON), the statistics of `key` over its runs.

    `paths` maps an arm to its runs' metrics.jsonl files. Empty when no run logged `key`
    at more than one step: a single point is no curve.
    """
    logs = {arm: [read_metric(p, key) for p in files] for arm, files in paths.items()}
    if not any(len(log) > 1 for runs in logs.values() for log in runs):
        return {}
    out: dict[str, dict[str, Stat]] = {}
    for arm, runs in logs.items():
        steps = sorted({s for log in runs for s in log})
        out[arm] = {str(s): stat([log[s] for log in runs if s in log]) for s in steps}
    return out


def _fmt(x: float) -> str:
    return "nan" if x is None or not math.isfinite(x) else f"{x:.4g}"


def _ci(s: Stat) -> str:
    lo, hi = s["ci95"]
    return f"{_fmt(s['mean'])} [{_fmt(lo)}, {_fmt(hi)}]"


def _ratios(row: dict[str, Any], base_means: dict[str, float]) -> str:
    """The ratio cell: '-' for a baseline, else this row's mean over each baseline's."""
    if row["role"] == "baseline":
        return "-"
    return ", ".join(
        f"{_fmt(row['mean'] / m) if m else 'nan'} vs {b}" for b, m in base_means.items()
    )


def to_markdown(data: dict[str, Any]) -> str:
    """The command line, the arms table, failed runs, then the curve table (if any)."""
    key, mode = data["headline"]
    report = data.get("report", [])
    head = ["arm", "role", f"{key} ({mode}) mean", "95% CI", "seeds", "ratio to baseline"]
    paired = any("paired" in r for r in data["arms"])
    head += [f"{key} - {data['arms'][0]['name']}, paired [95% CI]"] if paired else []
    head += [f"{k} mean [95% CI]" for k in report]
    lines = [f"`{data['command']}`", "", _md_row(head), _md_row(["---"] * len(head))]
    base_means = {r["name"]: r["mean"] for r in data["arms"] if r["role"] == "baseline"}
    for row in data["arms"]:
        lo, hi = row["ci95"]
        cells = [row["name"], row["role"], _fmt(row["mean"]), f"[{_fmt(lo)}, {_fmt(hi)}]",
                 str(len(row["values"])), _ratios(row, base_means)]  # fmt: skip
        cells += [_ci(row["paired"]) if "paired" in row else "-"] if paired else []
        cells += [_ci(row["secondary"][k]) for k in report]
        lines.append(_md_row(cells))
    lines += [f"\nfailed runs: {f}" for f in data["failures"]]
    if data.get("curves"):
        lines += ["", curve_markdown(key, data["curves"])]
    plotted = [k for k, c in data.get("extra_curves", {}).items() if c]
    if plotted:
        files = ", ".join(f"`{curve_file(k)}`" for k in plotted)
        lines += ["", f"Also plotted against the step (mean and 95% CI over seeds): {files}."]
    return "\n".join(lines) + "\n"


def curve_file(key: str) -> str:
    """The figure of metric `key` against the step: curve_<key with / as _>.png."""
    return "curve_" + "".join(c if c.isalnum() or c in "-_" else "_" for c in key) + ".png"


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def curve_markdown(key: str, curves: Mapping[str, Mapping[str, Stat]]) -> str:
    """Table "KEY vs step": one row per step of any arm, `mean [lo, hi] (n)` per arm.

    n counts the seeds with a finite value at that step; '-' marks an arm without one.
    """
    arms = list(curves)
    steps = sorted({int(s) for c in curves.values() for s in c})
    lines = [f"**{key} vs step** (mean [95% CI] (n seeds))", "", _md_row(["step", *arms]),
             _md_row(["---"] * (len(arms) + 1))]  # fmt: skip
    for step in steps:
        cells = [str(step)]
        for arm in arms:
            s = curves[arm].get(str(step))
            n = sum(math.isfinite(v) for v in s["values"]) if s else 0
            cells.append(f"{_ci(s)} ({n})" if s else "-")
        lines.append(_md_row(cells))
    return "\n".join(lines)


def write_outputs(out_dir: Path, data: dict[str, Any]) -> str:
    """Write bench.md, bench.json, bench.png and (with curves) curve.png; return the markdown."""
    out_dir.mkdir(parents=True, exist_ok=True)
    markdown = to_markdown(data)
    (out_dir / "bench.md").write_text(markdown)
    (out_dir / "bench.json").write_text(json.dumps(data, indent=2))
    plot(out_dir / "bench.png", data)
    if data.get("curves"):
        plot_curves(out_dir / "curve.png", data)
    for key, extra in data.get("extra_curves", {}).items():
        if extra:
            plot_curves(out_dir / curve_file(key), data, key, extra)
    return markdown


ROLE_COLORS = {"method": "tab:blue", "baseline": "tab:gray", "ablation": "tab:orange"}


def _finite(value: Any, default: float | None = None) -> float | None:
    """`value` as a float when it is a finite number, else `default` (NaN, None, "nan")."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return number if math.isfinite(number) else default


def _ci_span(mean: float | None, ci: Sequence[Any]) -> tuple[float, float]:
    """Error-bar lengths below and above `mean` (none for an undefined mean or CI end)."""
    if mean is None:
        return 0.0, 0.0
    return mean - _finite(ci[0], mean), _finite(ci[1], mean) - mean


def plot(path: Path, data: dict[str, Any]) -> None:
    """Bar per arm: mean with its 95% CI, each seed's value as a dot."""
    from matplotlib.figure import Figure

    names = [r["name"] for r in data["arms"]]
    tilted = len(names) > 4 or max(map(len, names)) > 16  # long arm names would overlap
    fig = Figure(figsize=(1.6 + 1.4 * len(names), 4.6 if tilted else 3.2))
    ax = fig.add_subplot()
    # an arm whose headline is undefined (e.g. "iterations to 1%" never reached) gets no
    # bar and an "n/a" mark instead of breaking the chart
    means = [_finite(r["mean"]) for r in data["arms"]]
    spans = [_ci_span(m, r["ci95"]) for m, r in zip(means, data["arms"], strict=True)]
    errs = [list(side) for side in zip(*spans, strict=True)]
    colors = [ROLE_COLORS[r["role"]] for r in data["arms"]]
    ax.bar(names, [0.0 if m is None else m for m in means], yerr=errs, capsize=6, color=colors)
    for i, row in enumerate(data["arms"]):
        values = [v for v in map(_finite, row["values"]) if v is not None]
        ax.scatter([i] * len(values), values, color="black", s=12, zorder=3)
        if means[i] is None:
            ax.annotate("n/a", (i, 0), ha="center", va="bottom", color="dimgray")
    if tilted:
        ax.tick_params(axis="x", labelrotation=25)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
    key, mode = data["headline"]
    ax.set_ylabel(f"{key} ({'higher' if mode == 'max' else 'lower'} is better)")
    ax.set_title(f"{data['pipeline']}: mean and 95% CI over seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot_curves(
    path: Path, data: dict[str, Any], key: str | None = None,
    arm_curves: Mapping[str, Mapping[str, Stat]] | None = None,
) -> None:  # fmt: skip
    """A metric vs step (default: the headline): a line per arm (mean over seeds) in a
    shaded 95% CI band."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 3.8))
    ax = fig.add_subplot()
    roles = {r["name"]: r["role"] for r in data["arms"]}
    headline, mode = data["headline"]
    for arm, curve in (data["curves"] if arm_curves is None else arm_curves).items():
        if not curve:
            continue
        steps = sorted(curve, key=int)
        x = [int(s) for s in steps]
        mean = [curve[s]["mean"] for s in steps]
        lo, hi = ([curve[s]["ci95"][i] for s in steps] for i in (0, 1))
        style = "--" if roles.get(arm) == "ablation" else "-"
        (line,) = ax.plot(x, mean, style, marker="o", markersize=3, label=arm)
        ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    key = key or headline
    better = f" ({'higher' if mode == 'max' else 'lower'} is better)" if key == headline else ""
    ax.set_xlabel("step")
    ax.set_ylabel(f"{key}{better}")
    ax.set_title(f"{data['pipeline']}: {key} vs step, mean and 95% CI over seeds")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def demo_line(spec: PipelineSpec, run_dir: Path) -> str:
    """One line on a demo-preset run: its headline at every step it was logged."""
    key = spec.headline[0]
    curve = read_metric(run_dir / "metrics.jsonl", key)
    points = ", ".join(f"{_fmt(v)} (step {s})" for s, v in sorted(curve.items()))
    return f"{spec.name} --preset demo, {max(curve, default=0)} steps: {key} {points}"


def demo(
    runs_dir: str | Path | None = None, address: str | None = None, seeds: int = 1,
    only: list[str] | None = None, console: Console | None = None, ablations: bool = False,
) -> Path:  # fmt: skip
    """Bench every method (pipelines that declare a baseline) on its smoke preset, run every
    pipeline with a `demo` preset once with it; one report.

    Ablation arms are left out unless `ablations` (they double some benches; `rayworks
    bench NAME` runs them), which keeps `make demo` within its budget as methods are added.
    """
    from rayworks.platform.report import render_report

    baselines = baseline_names()
    methods = [s.name for s in all_pipelines() if s.baselines and s.name not in baselines]
    for name in only or []:
        get_pipeline(name)
    chosen = [m for m in methods if not only or m in only]
    root = Path(runs_dir or default_runs_dir()) / "demo" / new_run_id()
    paths: list[Path] = []
    for name in chosen:
        flag = "" if ablations else " --no-ablations"
        result = bench(name, seeds=seeds, preset="smoke", runs_dir=root, address=address,
                       command=f"rayworks bench {name} --seeds {seeds} --preset smoke{flag}",
                       console=console, ablations=ablations)  # fmt: skip
        (console or Console()).print(result.markdown, markup=False)
        paths += [result.out_dir, result.out_dir / "runs"]
    for spec in all_pipelines():
        if "demo" in spec.config.presets and (not only or spec.name in only):
            done = launch_run(spec.name, preset="demo", runs_dir=root / "learning",
                              address=address, progress=False)  # fmt: skip
            (console or Console()).print(demo_line(spec, done.run_dir), markup=False)
            paths.append(done.run_dir)
    return render_report(
        paths, out=root / "report.html", title="rayworks demo: methods vs baselines"
    )
