"""`rayworks bench NAME`: a pipeline beside its baseline(s) on the same data, seeds and budget.

Every (arm, seed) pair is one run with the same preset and overrides plus `seed=s`, run as
a Ray task; as many run side by side as the cluster's CPUs hold (method and baselines
interleaved in submission order). The headline metric is reported per arm as mean and 95% t-interval over seeds, with
the ratio of the method's mean to each baseline's. Outputs (`runs/bench/NAME/<id>/`):
`bench.md` (command line, then the table), `bench.json`, `bench.png`, and `runs/` with
every arm's run directory. `rayworks demo` benches every method with its smoke preset and
renders one HTML report.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from rayworks.errors import ConfigError
from rayworks.platform.cluster import connect
from rayworks.platform.config import build_config
from rayworks.platform.context import RunContext, default_runs_dir, new_run_id
from rayworks.platform.launch import remote_run, resources_of
from rayworks.platform.registry import all_pipelines, baseline_names, get_pipeline

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


def _arms(name: str) -> list[tuple[str, str]]:
    spec = get_pipeline(name)
    if not spec.baselines:
        raise ConfigError(f"pipeline {name!r} declares no baseline to bench against.")
    return [(name, "method")] + [(b, "baseline") for b in spec.baselines]


def bench(
    name: str,
    seeds: int = 3,
    preset: str = "smoke",
    overrides: list[str] | tuple[str, ...] = (),
    runs_dir: str | Path | None = None,
    address: str | None = None,
    command: str | None = None,
    console: Console | None = None,
) -> BenchResult:
    if seeds < 1:
        raise ConfigError(f"--seeds={seeds} is invalid: need at least 1 seed.")
    arms = _arms(name)
    key, mode = get_pipeline(name).headline
    plan = []  # every seed x arm config, validated before Ray starts; arms interleaved
    for seed in range(seeds):
        for arm, role in arms:
            spec = get_pipeline(arm)
            cfg = build_config(spec.config, preset, (), [*overrides, f"seed={seed}"])
            plan.append((spec, role, cfg))

    import ray

    connect(address)
    out_dir = (Path(runs_dir or default_runs_dir()) / "bench" / name / new_run_id()).absolute()
    # Start only as many runs as the cluster's CPUs hold at once: queued Train worker
    # groups would otherwise time out and retry, and idle drivers would compete for CPU.
    need = max(resources_of(spec, cfg).get("CPU", 1) or 1 for spec, _, cfg in plan)
    slots = max(1, int(ray.cluster_resources().get("CPU", 1) // need))
    queue = list(plan)
    refs: dict[Any, tuple[str, str, int]] = {}
    values: dict[str, list[float]] = {arm: [] for arm, _ in arms}
    failures = []
    with Progress(console=console, transient=False) as progress:
        task = progress.add_task(f"bench {name}", total=len(plan))
        pending: list[Any] = []
        while queue or pending:
            while queue and len(pending) < slots:
                spec, role, cfg = queue.pop(0)
                ref = remote_run(spec, cfg, RunContext.create(spec.name, cfg, out_dir / "runs"))
                refs[ref] = (spec.name, role, cfg.seed)
                pending.append(ref)
            done, pending = ray.wait(pending, num_returns=1)
            arm, _, seed = refs[done[0]]
            try:
                summary = ray.get(done[0])
                values[arm].append(float(summary.get(key, float("nan"))))
            except Exception as exc:  # a failed run is reported in the table, not hidden
                failures.append(
                    f"{arm} seed {seed}: {type(exc).__name__}: {str(exc).splitlines()[0]}"
                )
            progress.advance(task)
    data = summarize(name, key, mode, arms, values, command or f"rayworks bench {name}", failures)
    markdown = write_outputs(out_dir, data)
    return BenchResult(out_dir, markdown, data)


def summarize(
    name: str, key: str, mode: str, arms: list[tuple[str, str]], values: dict[str, list[float]],
    command: str, failures: list[str],
) -> dict[str, Any]:  # fmt: skip
    rows = []
    for arm, role in arms:
        mean, ci = mean_ci(values[arm])
        rows.append(
            {"name": arm, "role": role, "values": values[arm], "mean": mean, "ci95": list(ci)}
        )
    base = next((r for r in rows if r["role"] == "baseline"), None)
    ratio = rows[0]["mean"] / base["mean"] if base and base["mean"] not in (0, None) else None
    return {"pipeline": name, "headline": [key, mode], "command": command, "arms": rows,
            "ratio": ratio, "failures": failures}  # fmt: skip


def _fmt(x: float) -> str:
    return "nan" if x is None or not math.isfinite(x) else f"{x:.4g}"


def to_markdown(data: dict[str, Any]) -> str:
    key, mode = data["headline"]
    lines = [f"`{data['command']}`", "",
             f"| arm | role | {key} ({mode}) mean | 95% CI | seeds | ratio to baseline |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    base_means = {r["name"]: r["mean"] for r in data["arms"] if r["role"] == "baseline"}
    method = data["arms"][0]["mean"]
    for row in data["arms"]:
        ratio = (
            "-"
            if row["role"] == "baseline"
            else ", ".join(
                f"{_fmt(method / m) if m else 'nan'} vs {b}" for b, m in base_means.items()
            )
        )
        lo, hi = row["ci95"]
        lines.append(
            f"| {row['name']} | {row['role']} | {_fmt(row['mean'])} | [{_fmt(lo)}, {_fmt(hi)}] "
            f"| {len(row['values'])} | {ratio} |"
        )
    lines += [f"\nfailed runs: {f}" for f in data["failures"]]
    return "\n".join(lines) + "\n"


def write_outputs(out_dir: Path, data: dict[str, Any]) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    markdown = to_markdown(data)
    (out_dir / "bench.md").write_text(markdown)
    (out_dir / "bench.json").write_text(json.dumps(data, indent=2))
    plot(out_dir / "bench.png", data)
    return markdown


def plot(path: Path, data: dict[str, Any]) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(1.6 + 1.4 * len(data["arms"]), 3.2))
    ax = fig.add_subplot()
    names = [r["name"] for r in data["arms"]]
    means = [r["mean"] for r in data["arms"]]
    errs = [[m - r["ci95"][0] for m, r in zip(means, data["arms"], strict=True)],
            [r["ci95"][1] - m for m, r in zip(means, data["arms"], strict=True)]]  # fmt: skip
    colors = ["tab:blue" if r["role"] == "method" else "tab:gray" for r in data["arms"]]
    ax.bar(names, means, yerr=errs, capsize=6, color=colors)
    for i, row in enumerate(data["arms"]):
        ax.scatter([i] * len(row["values"]), row["values"], color="black", s=12, zorder=3)
    key, mode = data["headline"]
    ax.set_ylabel(f"{key} ({'higher' if mode == 'max' else 'lower'} is better)")
    ax.set_title(f"{data['pipeline']}: mean and 95% CI over seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def demo(
    runs_dir: str | Path | None = None, address: str | None = None, seeds: int = 1,
    only: list[str] | None = None, console: Console | None = None,
) -> Path:  # fmt: skip
    """Bench every method (pipelines that declare a baseline) on its smoke preset; one report."""
    from rayworks.platform.report import render_report

    baselines = baseline_names()
    methods = [s.name for s in all_pipelines() if s.baselines and s.name not in baselines]
    for name in only or []:
        get_pipeline(name)
    chosen = [m for m in methods if not only or m in only]
    root = Path(runs_dir or default_runs_dir()) / "demo" / new_run_id()
    paths: list[Path] = []
    for name in chosen:
        result = bench(name, seeds=seeds, preset="smoke", runs_dir=root, address=address,
                       command=f"rayworks bench {name} --seeds {seeds} --preset smoke", console=console)  # fmt: skip
        (console or Console()).print(result.markdown)
        paths += [result.out_dir, result.out_dir / "runs"]
    return render_report(
        paths, out=root / "report.html", title="rayworks demo: methods vs baselines"
    )
