"""bench: statistics, arms and ablations, secondary metrics, curves, the written table,
and lm against its plain baseline (plus an ablation) on Ray."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, ClassVar

import pytest

from rayworks.core.config import PipelineConfig
from rayworks.core.errors import ConfigError
from rayworks.platform import bench, bench_render, bench_stats, registry
from rayworks.platform.report import render_report

PNG_SIG = b"\x89PNG\r\n\x1a\n"


class ToyConfig(PipelineConfig):
    presets: ClassVar[dict[str, dict[str, Any]]] = {"smoke": {"lr": 0.1}}
    lr: float = 0.01
    momentum: float = 0.9
    clip: float = 1.0


@pytest.fixture
def toy_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """`toymethod` (baseline `toybase`, two ablations) in a throwaway copy of the registry.

    The copy is restored at teardown, so nothing leaks into `rayworks list` or demo.
    """
    monkeypatch.setattr(registry, "load_all", lambda: None)
    monkeypatch.setattr(registry, "PIPELINES", dict(registry.PIPELINES))
    registry.pipeline("toybase", config=ToyConfig, headline=("acc", "max"))(lambda cfg, ctx: {})
    registry.pipeline(
        "toymethod",
        config=ToyConfig,
        baseline="toybase",
        headline=("acc", "max"),
        ablations={"no-momentum": ("momentum=0",), "no-clip": ("clip=0", "lr=0.5")},
        report=("entropy", "sigma"),
    )(lambda cfg, ctx: {})


def write_metrics(path: Path, lines: list[Any]) -> Path:
    """A metrics.jsonl with these records (strings are written as they are: malformed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def test_mean_ci_matches_the_t_interval():
    mean, (_lo, hi) = bench_stats.mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert hi - mean == pytest.approx(4.303 * 1.0 / math.sqrt(3), rel=1e-4)
    assert bench_stats.mean_ci([5.0]) == (5.0, (5.0, 5.0))
    assert math.isnan(bench_stats.mean_ci([float("nan")])[0])


def test_markdown_starts_with_the_command_and_shows_the_ratio():
    data = bench_stats.summarize(
        "m",
        "acc",
        "max",
        [("m", "method"), ("b", "baseline")],
        {"m": [0.8, 0.9], "b": [0.4, 0.5]},
        "rayworks bench m --seeds 2",
        [],
    )
    md = bench_render.to_markdown(data)
    assert md.splitlines()[0] == "`rayworks bench m --seeds 2`"
    assert data["ratio"] == pytest.approx(0.85 / 0.45)
    assert "1.889 vs b" in md


def test_paired_differences_match_seeds_not_completion_order():
    data = bench_stats.summarize(
        "m",
        "acc",
        "max",
        [("m", "method"), ("b", "baseline")],
        {"m": [0.8, 0.9, 0.7], "b": [0.55, 0.4, 0.5]},
        "cmd",
        [],
        seeds={"m": [0, 1, 2], "b": [1, 2, 0]},  # b's runs finished in another order
    )
    paired = data["arms"][1]["paired"]
    assert paired["values"] == pytest.approx([0.5 - 0.8, 0.55 - 0.9, 0.4 - 0.7])
    assert paired["ci95"][1] < 0  # b is lower in every seed by about the same amount
    assert "paired" not in data["arms"][0]
    assert "acc - m, paired [95% CI]" in bench_render.to_markdown(data)


def test_pipeline_without_baseline_is_refused():
    with pytest.raises(ConfigError, match="declares no baseline or ablation"):
        bench.bench("lm_plain", seeds=1)


def test_lm_matches_its_plain_pytorch_baseline(ray_session, tmp_path, monkeypatch):
    # An ablation that validates every 5 steps gives lm[eval5] a val_loss curve (steps 5, 10);
    # the ablation's config travels to the worker, which needs no registry entry for it.
    lm = registry.get_pipeline("lm")
    with_ablation = dataclasses.replace(
        lm, ablations={"eval5": ("train.eval_every=5",)}, report=("val_ppl",)
    )
    monkeypatch.setitem(registry.PIPELINES, "lm", with_ablation)
    result = bench.bench(
        "lm", seeds=1, preset="smoke", overrides=["train.max_steps=10"], runs_dir=tmp_path
    )
    data = json.loads((result.out_dir / "bench.json").read_text())
    assert [(a["name"], a["role"]) for a in data["arms"]] == [
        ("lm", "method"),
        ("lm_plain", "baseline"),
        ("lm[eval5]", "ablation"),
    ]
    assert all(len(a["values"]) == 1 and math.isfinite(a["values"][0]) for a in data["arms"])
    # Same data order, init and schedule: DDP over two workers reproduces the plain loop.
    assert data["ratio"] == pytest.approx(1.0, abs=0.01)
    assert data["arms"][2]["values"] == pytest.approx(data["arms"][0]["values"])
    ppl = data["arms"][0]["secondary"]["val_ppl"]
    assert ppl["mean"] == pytest.approx(math.exp(data["arms"][0]["mean"]), rel=1e-3)
    assert list(data["curves"]["lm[eval5]"]) == ["5", "10"] and list(data["curves"]["lm"]) == ["10"]
    assert "**val_loss vs step**" in result.markdown
    for png in ("bench.png", "curve.png"):
        assert (result.out_dir / png).read_bytes()[:8] == PNG_SIG
    runs = result.out_dir / "runs"
    assert len(list(runs.glob("*/*/summary.json"))) == 2
    assert len(list(runs.glob("ablation/eval5/lm/*/summary.json"))) == 1


def test_registration_validates_ablations_and_normalizes_report():
    with pytest.raises(ValueError, match="ablation label 'no mask'"):
        registry.pipeline("x", config=ToyConfig, ablations={"no mask": ("lr=0",)})
    with pytest.raises(ValueError, match=r"ablation 'a'.*bad override 'lr'"):
        registry.pipeline("x", config=ToyConfig, ablations={"a": ("lr",)})


def test_new_spec_fields_default_to_empty_and_accept_single_strings(toy_registry):
    assert registry.PIPELINES["toybase"].ablations == {}
    assert registry.PIPELINES["toybase"].report == ()
    registry.pipeline("one", config=ToyConfig, ablations={"a": "lr=0"}, report="acc")(
        lambda cfg, ctx: {}
    )
    assert registry.PIPELINES["one"].ablations == {"a": ("lr=0",)}
    assert registry.PIPELINES["one"].report == ("acc",)


def test_ablation_arms_are_planned_with_merged_overrides(toy_registry):
    arms = bench.plan_arms("toymethod")
    assert [(a.name, a.role, a.pipeline) for a in arms] == [
        ("toymethod", "method", "toymethod"),
        ("toybase", "baseline", "toybase"),
        ("toymethod[no-momentum]", "ablation", "toymethod"),
        ("toymethod[no-clip]", "ablation", "toymethod"),
    ]
    assert [a.name for a in bench.plan_arms("toymethod", ablations=False)] == [
        "toymethod",
        "toybase",
    ]
    plan = bench.plan_runs(arms, seeds=2, preset="smoke", overrides=["lr=0.2", "clip=3"])
    # Interleaved by seed; each ablation = the bench's overrides, then its own, then the seed.
    assert [(r.arm.name, r.cfg.seed) for r in plan] == [(a.name, s) for s in range(2) for a in arms]
    by_arm = {r.arm.name: r.cfg for r in plan if r.cfg.seed == 1}
    assert (by_arm["toymethod"].lr, by_arm["toymethod"].momentum, by_arm["toymethod"].clip) == (
        0.2,
        0.9,
        3.0,
    )
    assert (by_arm["toymethod[no-momentum]"].momentum, by_arm["toymethod[no-momentum]"].lr) == (
        0.0,
        0.2,
    )
    assert (by_arm["toymethod[no-clip]"].clip, by_arm["toymethod[no-clip]"].lr) == (0.0, 0.5)
    assert all(r.spec.name == r.arm.pipeline for r in plan)


def test_bad_ablation_key_fails_before_ray_starts(toy_registry, monkeypatch):
    registry.pipeline(
        "typo", config=ToyConfig, baseline="toybase", ablations={"nomom": ("momentun=0",)}
    )(lambda cfg, ctx: {})

    def no_ray(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("Ray was contacted before the configs were validated")

    monkeypatch.setattr(bench, "connect", no_ray)
    with pytest.raises(ConfigError, match=r"ablation 'nomom'.*unknown key 'momentun'"):
        bench.bench("typo", seeds=2)
    with pytest.raises(AssertionError, match="Ray was contacted"):  # the flag skips it
        bench.bench("typo", seeds=2, ablations=False)


def test_secondary_columns_show_mean_and_ci(toy_registry, tmp_path):
    spec = registry.PIPELINES["toymethod"]
    arms = bench.plan_arms("toymethod", ablations=False)
    summaries = {
        ("toymethod", 0): {"acc": 0.8, "entropy": 1.0, "sigma": 0.5},
        ("toymethod", 1): {"acc": 0.9, "entropy": 2.0},  # no sigma: NaN, skipped
        ("toymethod", 2): {"acc": 0.7, "entropy": 3.0, "sigma": "nan"},
        ("toybase", 0): {"acc": 0.4, "entropy": 5.0, "sigma": 0.1},
        ("toybase", 1): {"acc": 0.5, "entropy": 7.0, "sigma": 0.3},
    }
    outcomes = [
        bench.Outcome(arm, seed, summary, None, tmp_path / "none.jsonl")
        for (arm, seed), summary in summaries.items()
    ]
    outcomes.append(bench.Outcome("toybase", 2, None, "RuntimeError: boom", tmp_path / "x"))
    data = bench.summarize_outcomes(spec, arms, outcomes, "rayworks bench toymethod")
    method, base = data["arms"]
    assert data["report"] == ["entropy", "sigma"]
    assert method["secondary"]["entropy"]["mean"] == pytest.approx(2.0)
    half = 4.302652729911275 * 1.0 / math.sqrt(3)  # t(0.975, 2), exact (was the table's 4.303)
    assert method["secondary"]["entropy"]["ci95"] == pytest.approx([2.0 - half, 2.0 + half])
    sigma = method["secondary"]["sigma"]
    assert sigma["mean"] == 0.5 and sigma["ci95"] == [0.5, 0.5] and len(sigma["values"]) == 3
    assert base["secondary"]["sigma"]["mean"] == pytest.approx(0.2)
    assert base["values"] == [0.4, 0.5] and data["failures"] == [
        "toybase seed 2: RuntimeError: boom"
    ]
    assert data["ratio"] == pytest.approx(0.8 / 0.45)
    md = bench_render.to_markdown(data)
    header, _, row_m, row_b = md.splitlines()[2:6]
    assert header.endswith("| entropy mean [95% CI] | sigma mean [95% CI] |")
    lo, hi = method["secondary"]["entropy"]["ci95"]
    assert row_m.endswith(f"| 2 [{lo:.4g}, {hi:.4g}] | 0.5 [0.5, 0.5] |")
    assert row_b.startswith("| toybase | baseline | 0.45 |") and "| - |" in row_b
    assert "failed runs: toybase seed 2: RuntimeError: boom" in md
    assert "vs step" not in md and data["curves"] == {}  # no metrics logged: no curve


def test_ablation_rows_show_their_ratio_to_each_baseline():
    arms = [("m", "method"), ("b", "baseline"), ("m[x]", "ablation")]
    data = bench_stats.summarize(
        "m", "acc", "max", arms, {"m": [0.8], "b": [0.4], "m[x]": [0.6]}, "c", []
    )
    rows = bench_render.to_markdown(data).splitlines()[4:7]
    assert "| 2 vs b |" in rows[0] and "| - |" in rows[1] and "| 1.5 vs b |" in rows[2]
    assert data["ratio"] == pytest.approx(2.0)


def test_curves_from_metrics_files(tmp_path):
    m0 = write_metrics(
        tmp_path / "m0.jsonl",
        [
            {"step": 0, "acc": 0.1},
            {"step": 10, "acc": 0.2},
            {"step": 10, "loss": 5.0},
            "{broken",
            {"step": 10, "acc": 0.4},  # the last value at a step wins
            {"step": 20, "acc": 0.6},
        ],
    )
    m1 = write_metrics(
        tmp_path / "m1.jsonl",
        [
            {"step": 0, "acc": 0.3},
            {"step": 10, "acc": 0.6},
            {"step": 30, "acc": "nan"},
        ],
    )
    b0 = write_metrics(tmp_path / "b0.jsonl", [{"step": 5, "acc": 0.05}, {"step": 20, "acc": 0.2}])
    assert bench_stats.read_metric(m0, "acc") == {0: 0.1, 10: 0.4, 20: 0.6}
    assert bench_stats.read_metric(tmp_path / "missing.jsonl", "acc") == {}
    curves = bench_stats.curves("acc", {"m": [m0, m1], "b": [b0], "x": []})
    assert list(curves["m"]) == ["0", "10", "20", "30"] and list(curves["b"]) == ["5", "20"]
    assert curves["x"] == {}
    assert curves["m"]["10"]["values"] == [0.4, 0.6]
    assert curves["m"]["10"]["mean"] == pytest.approx(0.5)
    half = 12.706204736174707 * math.sqrt(0.02) / math.sqrt(2)  # t(0.975, 1), exact
    assert curves["m"]["10"]["ci95"] == pytest.approx([0.5 - half, 0.5 + half])
    assert curves["m"]["20"] == {"values": [0.6], "mean": 0.6, "ci95": [0.6, 0.6]}
    assert math.isnan(curves["m"]["30"]["mean"])

    table = bench_render.curve_markdown("acc", curves).splitlines()
    assert table[0].startswith("**acc vs step**") and table[2] == "| step | m | b | x |"
    rows = {line.split(" | ")[0].strip("| "): line for line in table[4:]}
    assert list(rows) == ["0", "5", "10", "20", "30"]  # the union of every arm's steps
    assert rows["5"] == "| 5 | - | 0.05 [0.05, 0.05] (1) | - |"
    assert rows["10"].startswith(f"| 10 | 0.5 [{0.5 - half:.4g}, {0.5 + half:.4g}] (2) | - |")
    assert rows["20"] == "| 20 | 0.6 [0.6, 0.6] (1) | 0.2 [0.2, 0.2] (1) | - |"
    assert rows["30"] == "| 30 | nan [nan, nan] (0) | - | - |"


def test_curves_are_skipped_when_no_run_logs_two_steps(tmp_path):
    a = write_metrics(tmp_path / "a.jsonl", [{"step": 5, "acc": 0.1}, {"step": 5, "acc": 0.2}])
    b = write_metrics(tmp_path / "b.jsonl", [{"step": 7, "acc": 0.3}, {"step": 9, "loss": 1.0}])
    assert bench_stats.curves("acc", {"m": [a], "b": [b]}) == {}


def test_outputs_hold_the_curve_table_json_and_png(tmp_path):
    runs = {
        "m": [
            write_metrics(
                tmp_path / f"m{s}.jsonl", [{"step": t, "acc": 0.1 * t + s} for t in (1, 2, 3)]
            )
            for s in range(3)
        ],
        "b": [write_metrics(tmp_path / "b0.jsonl", [{"step": 2, "acc": 0.1}])],
    }
    data = bench_stats.summarize(
        "m",
        "acc",
        "max",
        [("m", "method"), ("b", "baseline")],
        {"m": [1.0, 2.0], "b": [0.5]},
        "rayworks bench m",
        ["b seed 1: RuntimeError: boom"],
        curves=bench_stats.curves("acc", runs),
    )
    out = tmp_path / "bench" / "m" / "20260101-000000-abc"
    md = bench_render.write_outputs(out, data)
    lines = md.splitlines()
    assert lines.index("**acc vs step** (mean [95% CI] (n seeds))") > lines.index(
        "failed runs: b seed 1: RuntimeError: boom"
    )
    half = 4.302652729911275 * 1.0 / math.sqrt(3)  # t(0.975, 2); step 2's values: 0.2, 1.2, 2.2
    assert f"| 2 | 1.2 [{1.2 - half:.4g}, {1.2 + half:.4g}] (3) | 0.1 [0.1, 0.1] (1) |" in md
    stored = json.loads((out / "bench.json").read_text())
    assert stored["curves"]["m"]["3"]["values"] == pytest.approx([0.3, 1.3, 2.3])
    assert (out / "curve.png").read_bytes()[:8] == PNG_SIG
    html = render_report([out], out=tmp_path / "report.html").read_text()
    assert 'alt="bench curve m/20260101-000000-abc"' in html

    (out / "curve.png").unlink()
    bench_render.write_outputs(out, {**data, "curves": {}})
    assert not (out / "curve.png").exists() and (out / "bench.png").is_file()


def test_cli_no_ablations_flag_reaches_bench(monkeypatch, tmp_path):
    from rayworks.cli import main

    seen: dict[str, Any] = {}

    def fake_bench(name: str, **kwargs: Any) -> bench.BenchResult:
        seen[name] = kwargs["ablations"]
        return bench.BenchResult(tmp_path, "", {})

    monkeypatch.setattr(bench, "bench", fake_bench)
    assert main(["bench", "lm", "--no-ablations"]) == 0 and seen == {"lm": False}
    assert main(["bench", "lm_plain"]) == 0 and seen["lm_plain"] is True
    assert (
        main(["bench", "asyppo", "--ablation", "no-mask", "--ablation", "no-entropy-filter"]) == 0
    )
    assert seen["asyppo"] == ["no-mask", "no-entropy-filter"]


def test_chosen_ablations_keep_registration_order_and_unknown_ones_are_named(toy_registry):
    arms = bench.plan_arms("toymethod", ablations=["no-clip"])
    assert [a.name for a in arms] == ["toymethod", "toybase", "toymethod[no-clip]"]
    arms = bench.plan_arms("toymethod", ablations=["no-clip", "no-momentum"])
    assert [a.label for a in arms[2:]] == ["no-momentum", "no-clip"]
    with pytest.raises(ConfigError, match="has no ablation 'nope'; its ablations: no-momentum"):
        bench.plan_arms("toymethod", ablations=["nope"])


def test_no_baselines_leaves_the_method_and_its_ablations(toy_registry):
    arms = bench.plan_arms("toymethod", ablations=["no-clip"], baselines=False)
    assert [(a.name, a.role) for a in arms] == [
        ("toymethod", "method"),
        ("toymethod[no-clip]", "ablation"),
    ]
    with pytest.raises(ConfigError, match="no baseline and no ablation arm left"):
        bench.plan_arms("toymethod", ablations=False, baselines=False)


def test_declared_curve_keys_get_their_own_figures(toy_registry, tmp_path):
    registry.pipeline(
        "curvy",
        config=ToyConfig,
        baseline="toybase",
        headline=("acc", "max"),
        curves=("reward/hack", "never_logged"),
    )(lambda cfg, ctx: {})
    assert registry.PIPELINES["curvy"].curves == ("reward/hack", "never_logged")
    arms = bench.plan_arms("curvy", ablations=False)
    outcomes = [
        bench.Outcome(
            arm,
            seed,
            {"acc": 0.5},
            None,
            write_metrics(
                tmp_path / f"{arm}{seed}.jsonl",
                [{"step": t, "reward/hack": 0.1 * t * (arm == "curvy")} for t in (1, 2)],
            ),
        )
        for arm in ("curvy", "toybase")
        for seed in (0, 1)
    ]
    data = bench.summarize_outcomes(registry.PIPELINES["curvy"], arms, outcomes, "rayworks bench")
    hack = data["extra_curves"]["reward/hack"]
    assert hack["curvy"]["2"]["mean"] == pytest.approx(0.2) and hack["toybase"]["2"]["mean"] == 0
    assert data["extra_curves"]["never_logged"] == {}
    md = bench_render.write_outputs(tmp_path / "out", data)
    assert (
        "Also plotted against the step (mean and 95% CI over seeds): `curve_reward_hack.png`." in md
    )
    assert (tmp_path / "out" / "curve_reward_hack.png").read_bytes()[:8] == PNG_SIG
    assert not (tmp_path / "out" / "curve_never_logged.png").exists()


def test_an_arm_whose_headline_is_undefined_still_gets_a_chart(tmp_path):
    """An arm that never reaches its target (headline NaN) is drawn as "n/a", not a crash."""
    data = bench_stats.summarize(
        "m",
        "iters",
        "min",
        [("m", "method"), ("b", "baseline")],
        {"m": [3.0, 4.0], "b": [math.nan, math.nan]},
        "rayworks bench m",
        [],
    )
    out = tmp_path / "bench" / "m" / "20260101-000000-nan"
    bench_render.write_outputs(out, data)
    assert (out / "bench.png").read_bytes()[:8] == PNG_SIG


def fake_run(arm_dir: Path, seed: int, summary: dict[str, Any] | None) -> None:
    """A run directory as RunContext writes it: config.yaml, metrics.jsonl, summary.json."""
    run_dir = arm_dir / f"run-{seed}"
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(f"seed: {seed}\nlr: 0.1\n")
    write_metrics(run_dir / "metrics.jsonl", [{"step": t, "acc": 0.1 * t} for t in (1, 2)])
    if summary is not None:
        (run_dir / "summary.json").write_text(json.dumps(summary))


def test_collect_summarizes_a_stopped_bench_from_its_finished_runs(toy_registry, tmp_path):
    out = tmp_path / "bench" / "toymethod" / "20260101-000000-abc123"
    runs = out / "runs"
    for seed, acc in ((0, 0.8), (1, 0.6)):
        fake_run(runs / "toymethod", seed, {"acc": acc, "entropy": 1.0})
        fake_run(runs / "toybase", seed, {"acc": acc - 0.2})
        fake_run(runs / "ablation" / "no-clip" / "toymethod", seed, {"acc": acc - 0.1})
    fake_run(runs / "toymethod", 2, None)  # stopped mid-run: listed, not counted
    result = bench.collect(out)
    arms = {a["name"]: a for a in result.data["arms"]}
    assert list(arms) == ["toymethod", "toybase", "toymethod[no-clip]"]  # no-momentum never ran
    assert arms["toymethod"]["values"] == [0.8, 0.6]
    assert arms["toybase"]["paired"]["values"] == pytest.approx([-0.2, -0.2])
    assert arms["toymethod[no-clip]"]["values"] == pytest.approx([0.7, 0.5])
    assert result.data["failures"] == ["toymethod seed 2: did not finish (no summary.json)"]
    assert result.data["curves"]["toymethod"]["2"]["mean"] == pytest.approx(0.2)
    assert (out / "bench.md").read_text().startswith("`rayworks bench toymethod --collect ")
    with pytest.raises(ConfigError, match="no runs/ folder"):
        bench.collect(tmp_path)


def test_cli_collect_refuses_a_bench_of_another_pipeline(toy_registry, tmp_path, capsys):
    from rayworks.cli import main

    out = tmp_path / "bench" / "toybase" / "x"
    (out / "runs").mkdir(parents=True)
    assert main(["bench", "toymethod", "--collect", str(out)]) != 0
    assert "is not a bench of 'toymethod'" in capsys.readouterr().err


def test_collect_counts_a_run_that_raised_as_failed(toy_registry, tmp_path):
    out = tmp_path / "bench" / "toymethod" / "x"
    fake_run(out / "runs" / "toymethod", 0, {"acc": 0.8})
    fake_run(out / "runs" / "toybase", 0, {"error": "RuntimeError: boom\nmore", "status": "failed"})
    data = bench.collect(out).data
    assert data["failures"] == ["toybase seed 0: RuntimeError: boom"]
    assert [a["values"] for a in data["arms"]] == [[0.8], []]


def test_resume_keeps_finished_runs_and_reruns_the_rest(toy_registry, tmp_path, monkeypatch):
    out = tmp_path / "bench" / "toymethod" / "x"
    plan = bench.plan_runs(bench.plan_arms("toymethod", ablations=False), 2, "smoke")
    for run in plan[:2]:  # seed 0 of both arms finished
        run_dir = out / "runs" / run.arm.pipeline / f"{run.arm.name}-0"
        run_dir.mkdir(parents=True)
        (run_dir / "config.yaml").write_text(json.dumps(run.cfg.model_dump(mode="json")))
        (run_dir / "summary.json").write_text(json.dumps({"acc": 0.5}))
    fake_run(out / "runs" / "toymethod", 1, None)  # seed 1 stopped mid-run
    executed: list[tuple[str, int]] = []

    def fake_execute(todo, out_dir, title, console=None, record=None):
        assert out_dir == out.absolute() and record is not None  # the bench's provenance
        executed.extend((r.arm.name, r.cfg.seed) for r in todo)
        return [bench.Outcome(r.arm.name, r.cfg.seed, {"acc": 0.9}, None, Path("-")) for r in todo]

    monkeypatch.setattr(bench, "connect", lambda address=None: None)
    monkeypatch.setattr(bench, "execute", fake_execute)
    result = bench.bench("toymethod", seeds=2, ablations=False, resume=out)
    assert executed == [("toymethod", 1), ("toybase", 1)]
    assert [a["values"] for a in result.data["arms"]] == [[0.5, 0.9], [0.5, 0.9]]
    assert result.data["failures"] == []
    with pytest.raises(ConfigError, match=r"ran with lr=0\.1, this command gives lr=0\.3"):
        bench.bench("toymethod", seeds=2, ablations=False, resume=out, overrides=["lr=0.3"])
    with pytest.raises(ConfigError, match="not a bench directory of 'toymethod'"):
        bench.bench("toymethod", resume=tmp_path)


def test_collect_prefers_the_finished_run_of_a_resumed_seed(toy_registry, tmp_path):
    out = tmp_path / "bench" / "toymethod" / "x"
    fake_run(out / "runs" / "toymethod", 0, None)  # stopped, then rerun by --resume:
    (out / "runs" / "toymethod" / "run-0").rename(out / "runs" / "toymethod" / "z-stopped")
    fake_run(out / "runs" / "toymethod", 0, {"acc": 0.7})
    data = bench.collect(out).data
    assert data["failures"] == [] and data["arms"][0]["values"] == [0.7]


# -- arms the method's run computes (registry.InRun): not launched, still tabulated ---------


class InRunConfig(PipelineConfig):
    presets: ClassVar[dict[str, dict[str, Any]]] = {"smoke": {}}
    arm: str = "m"
    compare: list[str] = ["b"]


@pytest.fixture
def in_run_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """`inrun` with arm `inrun_b` (computed by the method's run under keys `b_*`) and
    `inrun_c` (launched: a run of its own)."""
    monkeypatch.setattr(registry, "load_all", lambda: None)
    monkeypatch.setattr(registry, "PIPELINES", dict(registry.PIPELINES))
    how = registry.InRun("one model shared by both arms", member="b", prefix="b_", shared=("n",))
    registry.pipeline(
        "inrun",
        config=InRunConfig,
        headline=("acc", "max"),
        report=("loss", "n"),
        arms={
            "inrun_b": registry.Arm("b", {"arm": "b", "compare": []}, in_run=how),
            "inrun_c": registry.Arm("c", {"arm": "c", "compare": []}),
        },
    )(lambda cfg, ctx: {})


def _fake_execute(executed: list[tuple[str, int]]):
    """An `execute` that writes no run: the method's summary holds arm b's keys as b_*."""

    def execute(todo, out_dir, title, console=None, record=None):
        outcomes = []
        for r in todo:
            executed.append((r.arm.name, r.cfg.seed))
            summary = {"acc": 0.5 + r.cfg.seed, "loss": 1.0, "b_acc": 0.25 + r.cfg.seed, "n": 7}
            outcomes.append(bench.Outcome(r.arm.name, r.cfg.seed, summary, None, Path("-")))
        return outcomes

    return execute


def test_an_in_run_arm_is_not_launched_and_keeps_its_row(in_run_registry, tmp_path, monkeypatch):
    executed: list[tuple[str, int]] = []
    monkeypatch.setattr(bench, "connect", lambda address=None: None)
    monkeypatch.setattr(bench, "execute", _fake_execute(executed))
    result = bench.bench("inrun", seeds=2, runs_dir=tmp_path)
    assert sorted(executed) == [("inrun", 0), ("inrun", 1), ("inrun_c", 0), ("inrun_c", 1)]
    arms = {a["name"]: a for a in result.data["arms"]}
    assert list(arms) == ["inrun", "inrun_b", "inrun_c"]  # every arm, in the bench's order
    assert arms["inrun_b"]["role"] == "baseline"
    assert arms["inrun_b"]["values"] == [0.25, 1.25]  # the method summary's b_acc per seed
    assert math.isnan(arms["inrun_b"]["secondary"]["loss"]["mean"])  # no b_loss: no value
    assert arms["inrun_b"]["secondary"]["n"]["values"] == [7, 7]  # shared: taken unprefixed
    assert arms["inrun_b"]["paired"]["values"] == pytest.approx([-0.25, -0.25])
    assert "inrun_b: read from the runs of inrun (one model shared by both arms)" in result.markdown
    # a method run that does not compute the arm (compare=[]) leaves it to a run of its own
    executed.clear()
    bench.bench("inrun", seeds=1, runs_dir=tmp_path, overrides=["compare=[]"])
    assert sorted(executed) == [("inrun", 0), ("inrun_b", 0), ("inrun_c", 0)]


def test_collect_reads_an_in_run_arm_from_the_methods_runs(in_run_registry, tmp_path):
    out = tmp_path / "bench" / "inrun" / "x"
    fake_run(out / "runs" / "inrun", 0, {"acc": 0.8, "b_acc": 0.3, "b_loss": 2.0})
    (out / "runs" / "inrun" / "run-0" / "config.yaml").write_text("seed: 0\ncompare: [b]\n")
    fake_run(out / "runs" / "inrun_c", 0, {"acc": 0.1})
    arms = {a["name"]: a for a in bench.collect(out).data["arms"]}
    assert list(arms) == ["inrun", "inrun_b", "inrun_c"]
    assert arms["inrun_b"]["values"] == [0.3] and arms["inrun_b"]["secondary"]["loss"]["mean"] == 2


def test_an_in_run_arm_the_methods_defaults_do_not_compute_is_refused():
    how = registry.InRun("x", member="z", prefix="z_")
    with pytest.raises(ValueError, match="default compare does not hold 'z'"):
        registry.pipeline(
            "bad", config=InRunConfig, arms={"bad_z": registry.Arm("z", {}, in_run=how)}
        )


def test_execute_returns_outcomes_in_plan_order(toy_registry, tmp_path, monkeypatch):
    """Runs that finish out of order still come back at their plan position: `bench` reads
    an in-run arm off `outcomes[source]`, the method run of its seed."""
    import sys
    import types

    plan = bench.plan_runs(bench.plan_arms("toymethod", ablations=False), 2, "smoke")
    fake = types.SimpleNamespace(
        cluster_resources=lambda: {"CPU": 2},
        wait=lambda pending, num_returns=1: ([pending[-1]], pending[:-1]),  # newest first
        get=lambda ref: {"acc": ref[1]},
    )
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setattr(bench, "resources_of", lambda spec, cfg: {"CPU": 1})
    monkeypatch.setattr(bench, "remote_run", lambda spec, cfg, ctx: (spec.name, cfg.seed))
    outcomes = bench.execute(plan, tmp_path, "t")
    assert [(o.arm, o.seed) for o in outcomes] == [(r.arm.name, r.cfg.seed) for r in plan]
    assert [o.summary["acc"] for o in outcomes] == [r.cfg.seed for r in plan]
