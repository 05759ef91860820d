"""RunContext: run folders, the metric log, TensorBoard, rank-0-only writes, pickling."""

from __future__ import annotations

import json
import math
import pickle
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from rayworks.core.config import build_config
from rayworks.core.errors import CheckpointNotFoundError
from rayworks.pipelines.lm.config import LMConfig
from rayworks.platform.context import RUNS_DIR_ENV, RunContext


@pytest.fixture
def cfg() -> LMConfig:
    return build_config(LMConfig, "smoke", overrides=["seed=7"])


@pytest.fixture
def ctx(tmp_path: Path, cfg: LMConfig) -> RunContext:
    return RunContext.create("lm", cfg, runs_dir=tmp_path / "runs")


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def event_files(ctx: RunContext) -> list[Path]:
    return sorted((ctx.run_dir / "tensorboard").glob("events.out.tfevents.*"))


# ------------------------------------------------------------------ creation


def test_create_writes_config_and_folders(tmp_path: Path, cfg: LMConfig, ctx: RunContext) -> None:
    assert ctx.run_dir.parent == (tmp_path / "runs" / "lm").absolute()
    assert ctx.run_dir.is_absolute()
    assert ctx.artifacts_dir.is_dir()
    assert ctx.checkpoints_dir.is_dir()
    assert ctx.seed == 7
    assert ctx.pipeline == "lm"
    assert ctx.run_id == ctx.run_dir.name
    saved = yaml.safe_load(ctx.config_path.read_text())
    assert LMConfig.model_validate(saved) == cfg
    assert not ctx.metrics_path.exists()  # nothing logged yet


def test_create_gives_each_run_its_own_folder(tmp_path: Path, cfg: LMConfig) -> None:
    first = RunContext.create("lm", cfg, runs_dir=tmp_path)
    second = RunContext.create("lm", cfg, runs_dir=tmp_path)
    assert first.run_dir != second.run_dir
    assert sorted(p.name for p in (tmp_path / "lm").iterdir()) == sorted(
        [first.run_id, second.run_id]
    )


def test_create_honours_runs_dir_env(
    tmp_path: Path, cfg: LMConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RUNS_DIR_ENV, str(tmp_path / "from-env"))
    ctx = RunContext.create("lm_plain", cfg)
    assert ctx.run_dir.parent == tmp_path / "from-env" / "lm_plain"
    assert ctx.config_path.is_file()


def test_explicit_runs_dir_beats_env(
    tmp_path: Path, cfg: LMConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RUNS_DIR_ENV, str(tmp_path / "from-env"))
    ctx = RunContext.create("lm", cfg, runs_dir=tmp_path / "given")
    assert ctx.run_dir.parent == tmp_path / "given" / "lm"
    assert not (tmp_path / "from-env").exists()


def test_open_reopens_a_run(ctx: RunContext) -> None:
    reopened = RunContext.open(ctx.run_dir)
    assert reopened.run_dir == ctx.run_dir
    assert reopened.pipeline == "lm"
    assert RunContext.open(ctx.run_dir, pipeline="other").pipeline == "other"


def test_open_without_config_raises_naming_the_path(tmp_path: Path) -> None:
    folder = tmp_path / "not-a-run"
    folder.mkdir()
    with pytest.raises(CheckpointNotFoundError) as err:
        RunContext.open(folder)
    assert str(folder) in str(err.value)
    assert "config.yaml" in str(err.value)
    with pytest.raises(CheckpointNotFoundError, match="missing"):
        RunContext.open(tmp_path / "missing")


# ------------------------------------------------------------------ logging


def test_log_appends_json_lines_with_step_and_time(ctx: RunContext) -> None:
    ctx.log(1, loss=2.5, lr=0.1, note="warmup")
    ctx.log(2, loss=2.0)
    records = lines(ctx.metrics_path)
    assert [r["step"] for r in records] == [1, 2]
    assert records[0]["loss"] == 2.5
    assert records[0]["note"] == "warmup"
    assert "lr" not in records[1]
    assert all(isinstance(r["time"], float) for r in records)
    assert records[0]["time"] <= records[1]["time"]
    assert ctx.metrics() == records


def test_log_converts_tensors_and_numpy(ctx: RunContext) -> None:
    ctx.log(
        np.int64(3),
        t=torch.tensor(1.25),
        t1=torch.tensor([4]),
        vec=torch.tensor([1, 2]),
        npf=np.float32(0.5),
        npi=np.int64(9),
        flag=True,
    )
    (record,) = lines(ctx.metrics_path)
    assert record["step"] == 3
    assert record["t"] == 1.25
    assert record["t1"] == 4
    assert record["vec"] == [1, 2]
    assert record["npf"] == 0.5
    assert record["npi"] == 9
    assert record["flag"] is True


def test_log_writes_non_finite_floats_as_strings(ctx: RunContext) -> None:
    ctx.log(1, a=float("nan"), b=float("inf"), c=torch.tensor(float("nan")), d=np.float64("-inf"))
    text = ctx.metrics_path.read_text()
    assert "NaN" not in text and "Infinity" not in text  # strict JSON
    record = json.loads(text.strip(), parse_constant=_reject)
    assert record["a"] == "nan"
    assert record["b"] == "inf"
    assert record["c"] == "nan"
    assert record["d"] == "-inf"


def _reject(name: str) -> float:
    raise AssertionError(f"non-strict JSON constant {name} in metrics.jsonl")


def test_log_writes_tensorboard_events(ctx: RunContext) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ctx.log(1, loss=3.0, note="text is skipped", flag=True)
    ctx.log(2, loss=1.5, acc=0.25)
    files = event_files(ctx)
    assert files
    acc = EventAccumulator(str(ctx.run_dir / "tensorboard"))
    acc.Reload()
    scalars = acc.Tags()["scalars"]
    assert sorted(scalars) == ["acc", "loss"]
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(1, 3.0), (2, 1.5)]
    assert math.isclose(acc.Scalars("acc")[0].value, 0.25)


def test_progress_and_summary(ctx: RunContext) -> None:
    ctx.progress(30)
    assert json.loads(ctx.progress_path.read_text()) == {"total": 30, "description": "lm"}
    ctx.progress(5, "eval")
    assert json.loads(ctx.progress_path.read_text())["description"] == "eval"
    ctx.write_summary({"val_loss": torch.tensor(0.5), "acc": np.float32(1.0), "bad": float("nan")})
    assert json.loads(ctx.summary_path.read_text()) == {"acc": 1.0, "bad": "nan", "val_loss": 0.5}


def test_worker_of_nonzero_rank_writes_nothing(ctx: RunContext) -> None:
    before = sorted(p.relative_to(ctx.run_dir) for p in ctx.run_dir.rglob("*"))
    worker = ctx.worker("none", 1)
    assert worker.rank == 1 and worker.reporter == "none"
    assert worker.run_dir == ctx.run_dir and worker.seed == ctx.seed
    worker.log(1, loss=1.0)
    worker.progress(10)
    worker.truncate_metrics(0)
    after = sorted(p.relative_to(ctx.run_dir) for p in ctx.run_dir.rglob("*"))
    assert after == before
    assert ctx.rank == 0  # the original is unchanged


def test_rank_zero_worker_writes(ctx: RunContext) -> None:
    ctx.worker("none", 0).log(4, loss=1.0)
    assert [r["step"] for r in ctx.metrics()] == [4]


def test_truncate_metrics_drops_records_past_step(ctx: RunContext) -> None:
    for step in (1, 2, 3, 4):
        ctx.log(step, loss=float(step))
    ctx.truncate_metrics(2)
    assert [r["step"] for r in ctx.metrics()] == [1, 2]
    ctx.log(3, loss=0.0)  # the resumed run appends after the kept records
    assert [(r["step"], r["loss"]) for r in ctx.metrics()] == [(1, 1.0), (2, 2.0), (3, 0.0)]


def test_truncate_metrics_without_log_is_a_no_op(ctx: RunContext) -> None:
    ctx.truncate_metrics(5)
    assert not ctx.metrics_path.exists()
    assert ctx.metrics() == []


def test_checkpoint_paths(ctx: RunContext) -> None:
    assert ctx.latest_checkpoint() is None
    ctx.checkpoint_dir(10).mkdir()
    ctx.checkpoint_dir(3).mkdir()
    assert ctx.checkpoint_dir(10).parent == ctx.checkpoints_dir
    assert ctx.latest_checkpoint() == ctx.checkpoint_dir(10)


def test_context_pickles_after_tensorboard_was_used(ctx: RunContext) -> None:
    ctx.log(1, loss=1.0)
    assert ctx._tb is not None  # the writer is open
    clone = pickle.loads(pickle.dumps(ctx))
    assert clone == ctx
    assert clone._tb is None
    assert ctx._tb is not None  # pickling did not close the original's writer
    clone.log(2, loss=0.5)  # the copy opens its own writer
    assert [r["step"] for r in ctx.metrics()] == [1, 2]


def test_seed_everything_is_reproducible(ctx: RunContext) -> None:
    ctx.seed_everything()
    first = (torch.rand(2).tolist(), np.random.rand(2).tolist())
    ctx.seed_everything()
    assert (torch.rand(2).tolist(), np.random.rand(2).tolist()) == first
    ctx.seed_everything(offset=1)
    assert torch.rand(2).tolist() != first[0]


def test_cache_root_defaults_beside_the_pipeline_folders_and_can_be_shared(tmp_path: Path):
    cfg = build_config(LMConfig, "smoke")
    ctx = RunContext.create("lm", cfg, tmp_path / "runs")
    assert ctx.cache_root == tmp_path / "runs" / "cache"
    nested = RunContext.create("lm", cfg, tmp_path / "runs" / "ablation" / "x")
    shared = replace(nested, cache_dir=tmp_path / "runs" / "cache")
    assert pickle.loads(pickle.dumps(shared)).cache_root == ctx.cache_root  # travels to workers
