"""Run files whole or absent: atomic writes, a kill during the model save, a
torn last metrics line, and the progress follower after a resume truncated the log."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from rich.progress import Progress

from rayworks.core.config import build_config
from rayworks.models import resolve_model_dir
from rayworks.pipelines.lm.config import LMConfig
from rayworks.platform.atomic import atomic_dir, save_model_dir, write_text_atomic
from rayworks.platform.context import RunContext
from rayworks.platform.progress import _Follower


@pytest.fixture
def ctx(tmp_path: Path) -> RunContext:
    return RunContext.create("lm", build_config(LMConfig, "smoke"), runs_dir=tmp_path / "runs")


def test_write_text_atomic_replaces_whole_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "summary.json"
    write_text_atomic(path, "old")
    inode = path.stat().st_ino
    write_text_atomic(path, "new")
    assert path.read_text() == "new" and path.stat().st_ino != inode  # renamed, not rewritten

    def crash(*_: object) -> None:  # the kill lands between the write and the rename
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        write_text_atomic(path, "torn")
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temp file left


class _Part:
    """Writes one file per save; `fail=True` makes the save die after writing it."""

    def __init__(self, name: str, fail: bool = False) -> None:
        self.name, self.fail = name, fail

    def save_pretrained(self, folder: Path) -> None:
        (Path(folder) / self.name).write_text("{}")
        if self.fail:
            raise KeyboardInterrupt("killed during the save")


def test_kill_during_model_save_leaves_no_torn_model(ctx: RunContext) -> None:
    """A run killed while writing artifacts/model resolves to its last checkpoint, never
    to a folder with config.json beside missing weights."""
    step = ctx.checkpoint_dir(10)
    step.mkdir(parents=True)
    (step / "config.json").write_text("{}")
    final = ctx.artifacts_dir / "model"
    with pytest.raises(KeyboardInterrupt):
        save_model_dir(final, _Part("config.json"), _Part("model.safetensors", fail=True))
    assert not final.exists()
    assert list(ctx.artifacts_dir.iterdir()) == []  # the temporary folder is gone too
    assert resolve_model_dir(ctx.run_dir) == step
    save_model_dir(final, _Part("config.json"), _Part("model.safetensors"))
    assert resolve_model_dir(ctx.run_dir) == final
    assert sorted(p.name for p in final.iterdir()) == ["config.json", "model.safetensors"]


def test_atomic_dir_replaces_an_older_folder(tmp_path: Path) -> None:
    final = tmp_path / "model"
    final.mkdir()
    (final / "stale.bin").write_text("x")
    with atomic_dir(final) as tmp:
        (tmp / "fresh.bin").write_text("y")
        assert (final / "stale.bin").exists()  # readers still see the old one meanwhile
    assert [p.name for p in final.iterdir()] == ["fresh.bin"]
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_config_and_summary_are_renamed_into_place(ctx: RunContext) -> None:
    before = ctx.config_path.stat().st_ino
    ctx.write_config(build_config(LMConfig, "smoke", overrides=["seed=3"]))
    assert ctx.config_path.stat().st_ino != before
    assert "seed: 3" in ctx.config_path.read_text()
    ctx.write_summary({"status": "completed", "x": 1.5})
    assert json.loads(ctx.summary_path.read_text()) == {"status": "completed", "x": 1.5}


def test_torn_last_metrics_line_is_skipped_and_reported(ctx: RunContext) -> None:
    ctx.record(1, loss=2.0)
    ctx.record(2, loss=1.5)
    with ctx.metrics_path.open("a") as fh:
        fh.write('{"step": 3, "lo')  # the kill landed mid-write
    with pytest.warns(UserWarning, match="torn last line"):
        assert [r["step"] for r in ctx.metrics()] == [1, 2]
    with pytest.warns(UserWarning):
        ctx.truncate_metrics(after_step=1)  # what a resume from step 1 does
    assert [r["step"] for r in ctx.metrics()] == [1]
    ctx.metrics_path.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(ValueError, match="line 2: not JSON"):
        ctx.metrics()  # corruption inside the log is not silently dropped


def test_progress_follower_reads_a_truncated_log_anew(ctx: RunContext) -> None:
    for step in range(1, 6):
        ctx.record(step, loss=1.0 / step)
    progress = Progress(disable=True)
    task = progress.add_task("lm", total=10, stats="")
    follower = _Follower(ctx.run_dir, progress, task)
    follower.poll()
    assert progress.tasks[0].completed == 5
    ctx.truncate_metrics(after_step=2)  # a resume restored step 2
    follower.poll()
    assert progress.tasks[0].completed == 2
    ctx.record(3, loss=0.3)
    follower.poll()
    assert progress.tasks[0].completed == 3
