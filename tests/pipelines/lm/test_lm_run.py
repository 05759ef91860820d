"""End to end: `rayworks run lm` through the real CLI on the session's Ray head."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

SMOKE = ["--preset", "smoke", "--no-progress"]
SMOKE_LR = [*SMOKE, "--set", "train.lr=3e-3"]  # the preset's lr, given: config.yaml keeps it


def _run_dir(root: Path) -> Path:
    (found,) = sorted((root / "lm").iterdir())
    return found


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _start_until_checkpoint(args: list[str], env: dict, pattern: str, **popen) -> subprocess.Popen:
    """Start `rayworks ARGS` and return once a checkpoint folder matching `pattern` exists."""
    proc = subprocess.Popen([sys.executable, "-m", "rayworks", *args], env=env, **popen)
    _wait_for_checkpoint(proc, env, pattern)
    return proc


def _wait_for_checkpoint(proc: subprocess.Popen, env: dict, pattern: str) -> None:
    root = Path(env["RAYWORKS_RUNS_DIR"]) / "lm"
    deadline = time.time() + 240
    while time.time() < deadline and not list(root.glob(f"*/checkpoints/{pattern}")):
        assert proc.poll() is None, "run ended before the checkpoint appeared"
        time.sleep(0.02)  # a smoke step takes tens of milliseconds


@pytest.fixture(scope="module")
def smoke_run(cli_at, tmp_path_factory) -> Path:
    """One uninterrupted smoke run: the smoke test checks it, the resume test matches it."""
    runs = tmp_path_factory.mktemp("lm-smoke") / "runs"
    _, run = cli_at(runs)
    run(["run", "lm", *SMOKE_LR])
    return _run_dir(runs)


def test_smoke_run_writes_a_complete_run_dir_and_learns(smoke_run):
    run_dir = smoke_run
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["pipeline"] == "lm"
    losses = [r["loss"] for r in _metrics(run_dir) if "loss" in r]
    assert losses[-1] < losses[0] - 0.3, losses
    assert summary["val_loss"] < losses[0]
    assert (
        summary["rows_in"] == 400 + 64 and summary["rows_rejected"] == 0
    )  # smoke: n_train + n_val
    cfg = (run_dir / "config.yaml").read_text()
    assert "lr: 0.003" in cfg
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    latest = sorted((run_dir / "checkpoints").glob("step_*"))[-1]
    assert latest.name == "step_00000030"
    for name in (
        "model.safetensors",
        "optimizer.safetensors",
        "rng_rank0.safetensors",
        "rng_rank1.safetensors",
        "trainer_state.json",
        "tokenizer.json",
        "config.json",
    ):
        assert (latest / name).is_file(), name
    state = json.loads((latest / "trainer_state.json").read_text())
    assert state["step"] == 30 and state["data"]["next_step"] == 30
    assert load_file(str(latest / "optimizer.safetensors"))  # optimizer moments stored as tensors
    assert (run_dir / "artifacts" / "model" / "model.safetensors").is_file()
    samples = (run_dir / "artifacts" / "samples.jsonl").read_text().splitlines()
    assert len(samples) == 16


def test_killed_run_resumes_from_its_last_checkpoint(
    cli, cli_env, smoke_run, ray_head, train_worker_pids
):
    """SIGKILL a run (driver and train workers) part-way; the resumed run matches the
    uninterrupted smoke run of the same config (`smoke_run`)."""
    keep_all = ["--set", "train.keep_checkpoints=0"]  # checkpoints at 10, 20, 30 (smoke)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rayworks", "run", "lm", *SMOKE_LR, *keep_all],
        env=cli_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    workers = train_worker_pids(ray_head, proc, want=2)
    _wait_for_checkpoint(proc, cli_env, "step_00000010")
    # The whole run dies at once: Ray would stop the workers only after noticing the
    # driver's death, and a smoke run's remaining steps take well under a second.
    os.killpg(proc.pid, signal.SIGKILL)
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)
    run_dir = _run_dir(Path(cli_env["RAYWORKS_RUNS_DIR"]))
    killed_at = int(sorted((run_dir / "checkpoints").glob("step_*"))[-1].name.split("_")[1])
    assert 10 <= killed_at < 30, "the run must be killed part-way"
    assert not (run_dir / "summary.json").exists()

    cli(["run", "lm", "--resume", str(run_dir), "--no-progress"])
    records = _metrics(run_dir)
    steps_logged = [r["step"] for r in records if "loss" in r]
    assert steps_logged == sorted(set(steps_logged)), "no step is logged twice after resume"
    assert steps_logged[-1] == 30
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    # Same data order, restored optimizer and RNG: the result matches the uninterrupted run.
    reference = json.loads((smoke_run / "summary.json").read_text())
    assert summary["val_loss"] == pytest.approx(reference["val_loss"], abs=0.02)
    assert summary["train_loss"] == pytest.approx(reference["train_loss"], abs=0.02)


@pytest.mark.slow
def test_deepspeed_zero2_on_two_cpu_workers(cli, cli_env):
    cli(
        ["run", "lm", *SMOKE, "--set", "train.strategy=deepspeed", "--set", "train.zero_stage=2"],
        timeout=900,
    )
    run_dir = _run_dir(Path(cli_env["RAYWORKS_RUNS_DIR"]))
    summary = json.loads((run_dir / "summary.json").read_text())
    losses = [r["loss"] for r in _metrics(run_dir) if "loss" in r]
    assert summary["status"] == "completed" and losses[-1] < losses[0] - 0.3
    latest = sorted((run_dir / "checkpoints").glob("step_*"))[-1]
    # ZeRO partitions the optimizer: one shard per rank, each without pickle.
    assert (latest / "optimizer_rank0.safetensors").is_file()
    assert (latest / "optimizer_rank1.safetensors").is_file()


def test_a_killed_worker_is_replaced_and_training_continues_from_the_checkpoint(
    cli_env, ray_head, train_worker_pids
):
    """FailureConfig(max_failures=1): Ray Train restarts the group; the loop restores step 20+."""
    args = [
        "run",
        "lm",
        *SMOKE,
        "--set",
        "train.max_steps=80",
        "--set",
        "train.checkpoint_every=10",
    ]
    proc = _start_until_checkpoint(
        args, cli_env, "step_0000002*", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    pids = train_worker_pids(ray_head, proc)
    assert len(pids) == 2, f"expected two train workers, found {pids}"
    os.kill(pids[-1], signal.SIGKILL)
    output, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, output[-3000:]
    run_dir = _run_dir(Path(cli_env["RAYWORKS_RUNS_DIR"]))
    records = _metrics(run_dir)
    resumed = [r["resumed_from_step"] for r in records if "resumed_from_step" in r]
    assert resumed and resumed[0] >= 20
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"
    assert max(r["step"] for r in records if "loss" in r) == 80
