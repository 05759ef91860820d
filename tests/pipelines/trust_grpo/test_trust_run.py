"""End-to-end `trust_grpo` through `rayworks run` (smoke preset): VLM policy, TRM actor, resume."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rayworks.models import load_causal_lm
from rayworks.models.vlm import load_processor


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_trust_grpo_smoke_run_logs_trust_and_resumes(cli, cli_env):
    two = ["--set", "learner.max_steps=2", "--set", "learner.checkpoint_every=2"]
    # half the smoke preset's 40 SFT steps: the base VLM's training is most of this run's
    # compute, and nothing here depends on how far it got
    cli(
        [
            "run",
            "trust_grpo",
            "--preset",
            "smoke",
            "--no-progress",
            *two,
            "--set",
            "trm.kind=hackable",
            "--set",
            "policy.sft.steps=20",
        ]
    )
    (run_dir,) = sorted((Path(cli_env["RAYWORKS_RUNS_DIR"]) / "trust_grpo").glob("*"))
    checkpoint = run_dir / "checkpoints" / "step_00000002"
    assert load_processor(checkpoint) is not None  # the processor travels with the weights
    cli(
        [
            "run",
            "trust_grpo",
            "--resume",
            str(run_dir),
            "--no-progress",
            "--set",
            "learner.max_steps=3",
        ]
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    for key in (
        "test_accuracy",
        "test_step_correct",
        "test_hack",
        "gamma_mean",
        "gamma_lt1_frac",
        "eff_weight",
        "reward/thinking",
        "reward/hack",
        "trm_mae",
        "trm_hack_trace_score",
        "base_sft_train_loss",
    ):
        assert isinstance(summary[key], float), key
    steps = [r for r in _metrics(run_dir) if "reward" in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    for r, horizon in zip(steps, (2, 2, 3), strict=True):  # T = the run's max_steps
        assert 0.0 <= r["reward/thinking"] <= 1.0 and 0.0 < r["gamma_mean"] <= 1.0
        assert r["rollout_logp_gap"] < 1e-4  # the learner sees each row's own image
        assert r["anneal"] == pytest.approx(math.exp(-(r["step"] - 1) / horizon))
    model = load_causal_lm(run_dir / "artifacts" / "model")
    assert type(model).__name__ == "LlavaForConditionalGeneration"
    assert load_processor(run_dir / "artifacts" / "model") is not None
