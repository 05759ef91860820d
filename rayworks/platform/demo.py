"""`rayworks demo`: every method benched beside its baselines on the smoke preset, every
pipeline with a `demo` preset run once, one HTML report."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from rayworks.platform.bench import bench
from rayworks.platform.bench_render import fmt
from rayworks.platform.bench_stats import read_metric
from rayworks.platform.context import default_runs_dir, new_run_id
from rayworks.platform.launch import run as launch_run
from rayworks.platform.registry import PipelineSpec, all_pipelines, baseline_names, get_pipeline


def demo_line(spec: PipelineSpec, run_dir: Path) -> str:
    """One line on a demo-preset run: its headline at every step it was logged."""
    key = spec.headline[0]
    curve = read_metric(run_dir / "metrics.jsonl", key)
    points = ", ".join(f"{fmt(v)} (step {s})" for s, v in sorted(curve.items()))
    return f"{spec.name} --preset demo, {max(curve, default=0)} steps: {key} {points}"


def demo(
    runs_dir: str | Path | None = None,
    address: str | None = None,
    seeds: int = 1,
    only: list[str] | None = None,
    console: Console | None = None,
    ablations: bool = False,
) -> Path:
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
        result = bench(
            name,
            seeds=seeds,
            preset="smoke",
            runs_dir=root,
            address=address,
            command=f"rayworks bench {name} --seeds {seeds} --preset smoke{flag}",
            console=console,
            ablations=ablations,
        )
        (console or Console()).print(result.markdown, markup=False)
        paths += [result.out_dir, result.out_dir / "runs"]
    for spec in all_pipelines():
        if "demo" in spec.config.presets and (not only or spec.name in only):
            done = launch_run(
                spec.name,
                preset="demo",
                runs_dir=root / "learning",
                address=address,
                progress=False,
            )
            (console or Console()).print(demo_line(spec, done.run_dir), markup=False)
            paths.append(done.run_dir)
    return render_report(
        paths, out=root / "report.html", title="rayworks demo: methods vs baselines"
    )
