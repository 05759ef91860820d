"""`--tracking mlflow`: a run, a sweep's trials and failures, read back from a file store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from rayworks.cli import main
from rayworks.core.config import PipelineConfig, flatten, validate
from rayworks.core.errors import ConfigError
from rayworks.platform import bench, registry, tune
from rayworks.platform.context import RunContext
from rayworks.platform.tracking import MLflowTracker, TrackingConfig, make_tracker

mlflow = pytest.importorskip("mlflow")
FAST = ["train.num_workers=1", "train.max_steps=10", "eval.max_new_tokens=8"]


@pytest.fixture(autouse=True)
def _file_store(monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 asks for the opt-in


def _client(uri: str):
    return mlflow.MlflowClient(tracking_uri=uri)


def _runs(uri: str) -> list:
    client = _client(uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(ids)


@pytest.fixture(scope="module")
def tracked(cli_at, tmp_path_factory):
    """One `rayworks run lm_plain --tracking mlflow` into the default store."""
    runs = tmp_path_factory.mktemp("tracked") / "runs"
    _, cli = cli_at(runs)
    sets = [arg for key in FAST for arg in ("--set", key)]
    cli(["run", "lm_plain", "--preset", "smoke", *sets, "--no-progress", "--tracking", "mlflow"])
    [run_dir] = list(runs.glob("lm_plain/*/"))
    return run_dir, (runs / "mlruns").absolute().as_uri()


def test_a_tracked_run_mirrors_its_run_dir(tracked):
    run_dir, uri = tracked
    [run] = _runs(uri)
    client = _client(uri)
    config = flatten(yaml.safe_load((run_dir / "config.yaml").read_text()))
    assert run.data.params["train.lr"] == json.dumps(config["train.lr"])
    assert set(run.data.params) == set(config)
    assert run.data.params["data.task"] == "arithmetic"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [r for r in rows if "loss" in r]
    history = client.get_metric_history(run.info.run_id, "loss")
    assert len(history) == len(losses) >= 2
    assert [m.step for m in history] == [r["step"] for r in losses]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert run.data.metrics["summary/val_loss"] == pytest.approx(summary["val_loss"])
    record = json.loads((run_dir / "provenance.json").read_text())
    tags = run.data.tags
    assert tags["rayworks.run_id"] == run_dir.name and tags["rayworks.pipeline"] == "lm_plain"
    if record["git"]:
        assert tags["rayworks.commit"] == record["git"]["commit"]
        assert tags["rayworks.dirty"] == str(record["git"]["dirty"]).lower()
    assert run.info.status == "FINISHED"
    files = {f.path for f in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "summary.json", "provenance.json", "metrics.jsonl"} <= files
    assert not any(f.startswith("checkpoints") for f in files)


def _fake_run(tmp_path: Path) -> Path:
    """A run dir whose config holds secret-looking values (a config class that let them in)."""
    run_dir = tmp_path / "runs" / "toy" / "20260101-000000-abcdef"
    run_dir.mkdir(parents=True)
    config = {"seed": 0, "reward": {"api_key": "sk-live-1", "url": "https://me:pw-live-2@h/x"}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    rows = [{"step": s, "time": 1.7e9 + s, "loss": 1.0 / s} for s in (1, 2, 3)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = {"loss": 0.33, "status": "completed", "wall_s": 3.0, "pipeline": "toy"}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


def test_secrets_in_a_config_never_reach_mlflow(tmp_path):
    run_dir = _fake_run(tmp_path)
    uri = (tmp_path / "store").as_uri()
    run_id = MLflowTracker(uri).log_run(run_dir)
    params = _client(uri).get_run(run_id).data.params
    assert params["reward.api_key"] == "<redacted>"
    assert params["reward.url"] == "https://me:<redacted>@h/x"
    assert "live" not in json.dumps(params)
    assert len(_client(uri).get_metric_history(run_id, "loss")) == 3


def test_an_mlflow_failure_warns_and_keeps_the_run(tmp_path, capsys):
    run_dir = _fake_run(tmp_path)
    before = sorted(p.name for p in run_dir.iterdir())
    tracker = MLflowTracker("nosuchscheme://tracking")
    assert tracker.log_run(run_dir) is None
    assert "failed while logging run" in capsys.readouterr().err
    assert (
        tracker.disabled
        and tracker.start_parent(run_dir, kind="bench", pipeline="toy", params={}) is None
    )
    assert sorted(p.name for p in run_dir.iterdir()) == before


def test_tracking_flags_are_checked_before_anything_runs(capsys, tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"uri='x' needs a backend"):
        validate(TrackingConfig, {"uri": "x"}, "flags")
    assert main(["run", "lm", "--tracking-artifacts", "all"]) == 2
    assert "artifacts='all' needs a backend" in capsys.readouterr().err
    monkeypatch.setenv("RAYWORKS_TRACKING_URI", "http://mlflow.internal:5000")
    tracker = make_tracker(TrackingConfig(backend="mlflow"), tmp_path)
    assert isinstance(tracker, MLflowTracker) and tracker.uri == "http://mlflow.internal:5000"


def test_each_trial_of_a_sweep_is_a_child_run(ray_session, tmp_path):
    uri = (tmp_path / "store").as_uri()
    sweep_dir = tune.sweep(
        "lm_plain",
        params=["train.lr=grid:0.003,0.0001"],
        preset="smoke",
        overrides=FAST,
        samples=1,
        metric="val_loss",
        mode="min",
        runs_dir=tmp_path / "runs",
        tracking=TrackingConfig(backend="mlflow", uri=uri),
    )
    runs = _runs(uri)
    [parent] = [r for r in runs if r.data.tags.get("rayworks.kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 2 and len(runs) == 3
    assert {c.data.params["train.lr"] for c in children} == {"0.003", "0.0001"}
    assert all(c.data.params["model.d_model"] == "32" for c in children)  # the whole config
    assert parent.data.tags["rayworks.run_id"] == sweep_dir.name
    assert "best/val_loss" in parent.data.metrics
    client = _client(uri)
    for child in children:
        run_dir = Path(child.data.tags["rayworks.run_dir"])
        assert run_dir.parent.parent == sweep_dir / "trials"
        rows = (run_dir / "metrics.jsonl").read_text().splitlines()
        losses = [r for r in map(json.loads, rows) if "loss" in r]
        assert len(client.get_metric_history(child.info.run_id, "loss")) == len(losses)
        files = {f.path for f in client.list_artifacts(child.info.run_id)}
        assert {"config.yaml", "summary.json", "provenance.json"} <= files


class ToyConfig(PipelineConfig):
    presets: ClassVar[dict[str, dict[str, Any]]] = {"smoke": {}}
    lr: float = 0.1


def test_a_bench_is_a_parent_run_with_a_child_per_arm_and_seed(tmp_path, monkeypatch):
    """Two toy arms x two seeds; the runs are written as RunContext writes them, no Ray."""
    monkeypatch.setattr(registry, "load_all", lambda: None)
    monkeypatch.setattr(registry, "PIPELINES", dict(registry.PIPELINES))
    registry.pipeline("toybase", config=ToyConfig, headline=("acc", "max"))(lambda c, x: {})
    registry.pipeline("toymethod", config=ToyConfig, baseline="toybase", headline=("acc", "max"))(
        lambda c, x: {}
    )

    def execute(todo, out_dir, title, console=None, record=None):
        outcomes = []
        for run in todo:
            root = bench._runs_root(out_dir, run.arm)
            ctx = RunContext.create(run.spec.name, run.cfg, root, record=record)
            rows = [{"step": s, "time": 1.7e9, "acc": 0.1 * s + run.cfg.seed} for s in (1, 2)]
            ctx.metrics_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
            summary = {"acc": rows[-1]["acc"], "status": "completed", "wall_s": 1.0}
            ctx.write_summary(summary)
            outcomes.append(
                bench.Outcome(run.arm.name, run.cfg.seed, summary, None, ctx.metrics_path)
            )
        return outcomes

    monkeypatch.setattr(bench, "connect", lambda address=None: None)
    monkeypatch.setattr(bench, "execute", execute)
    uri = (tmp_path / "store").as_uri()
    result = bench.bench(
        "toymethod",
        seeds=2,
        runs_dir=tmp_path / "runs",
        tracking=TrackingConfig(backend="mlflow", uri=uri),
    )
    runs = _runs(uri)
    [parent] = [r for r in runs if r.data.tags.get("rayworks.kind") == "bench"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(
        (c.data.tags["rayworks.arm"], c.data.tags["rayworks.seed"]) for c in children
    ) == [("toybase", "0"), ("toybase", "1"), ("toymethod", "0"), ("toymethod", "1")]
    assert parent.data.metrics["mean/toymethod"] == pytest.approx(0.7)
    assert parent.data.params["seeds"] == "2"
    files = {f.path for f in _client(uri).list_artifacts(parent.info.run_id)}
    assert {"bench.md", "bench.json", "provenance.json"} <= files
    assert (result.out_dir / "provenance.json").is_file()
    assert all(c.info.status == "FINISHED" for c in children)
