"""End-to-end RL runs through `rayworks run` on the session's Ray head (smoke presets)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rayworks.models import load_causal_lm
from rayworks.pipelines.rl.critic import NAMESPACE, actor_name
from rayworks.platform.rollout import engine_actor_name


def _run_dirs(root: Path, name: str) -> list[Path]:
    return sorted((root / name).glob("*"))


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def base_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rl-cache")


@pytest.fixture
def cli_env(cli_env: dict[str, str], base_cache: Path) -> dict[str, str]:
    """conftest's `cli_env`, whose runs share one base-model cache (`runs/cache`): a base
    model is a pure function of its config (rl/base.py), so each is SFT'd once per module."""
    runs = Path(cli_env["RAYWORKS_RUNS_DIR"])
    runs.mkdir(parents=True, exist_ok=True)
    (runs / "cache").symlink_to(base_cache, target_is_directory=True)
    return cli_env


def _rewind(run_dir: Path, step: int) -> None:
    """Leave `run_dir` as a run killed right after its checkpoint at `step`: no later
    checkpoint or metric record, no summary, exported model or Ray Train run state."""
    for folder in (run_dir / "checkpoints").glob("step_*"):
        if int(folder.name.split("_")[1]) > step:
            shutil.rmtree(folder)
    kept = [r for r in _metrics(run_dir) if r["step"] <= step]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    (run_dir / "summary.json").unlink()
    shutil.rmtree(run_dir / "artifacts" / "model")
    shutil.rmtree(run_dir / "ray_train")


class FlakyScorer(BaseHTTPRequestHandler):
    """A batch scoring server whose every third call answers 503, as an overloaded one would."""

    calls = 0

    def do_POST(self) -> None:
        FlakyScorer.calls += 1
        items = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["items"]
        if FlakyScorer.calls % 3 == 0:
            status, reply = 503, b"busy"
        else:
            scores = [float(i["completion"].strip().endswith(i["answer"])) for i in items]
            status, reply = 200, json.dumps({"scores": scores}).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def flaky_scorer() -> Iterator[str]:
    FlakyScorer.calls = 0
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FlakyScorer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/score"
    httpd.shutdown()
    httpd.server_close()


def test_grpo_smoke_run_logs_samples_and_exports_the_policy(cli, cli_env, flaky_scorer):
    """Also: a weight-0 `http` reward (a monitor: logged, not rewarded, so the run trains as
    the verifier alone would) on a server that fails every third call; the run completes
    and counts the retries."""
    monitor = {"name": "http", "weight": 0, "kwargs": {"url": flaky_scorer, "backoff_s": 0.01}}
    rewards = json.dumps([{"name": "verifier"}, monitor])
    cli(["run", "grpo", "--preset", "smoke", "--no-progress", "--set", f"rewards={rewards}"])
    (run_dir,) = _run_dirs(Path(cli_env["RAYWORKS_RUNS_DIR"]), "grpo")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    held_out = (
        "sampled_accuracy",
        "pass_at_k",
        "informative",
        "response_len",
        "entropy",
        "kl_base",
    )
    for key in (
        "test_accuracy",
        "base_test_accuracy",
        "reward",
        "entropy",
        "kl",
        "informative_groups",
        *(f"{s}_{k}" for s in ("val", "test") for k in held_out),
        "test_accuracy_gain",
        "test_sampled_accuracy_gain",
    ):
        assert isinstance(summary[key], float), key
    assert summary["base_test_kl_base"] == 0.0  # step 0: the policy is the base
    assert FlakyScorer.calls >= 4  # a call per step, the third failed once
    assert summary["reward_retries"] == float(FlakyScorer.calls // 3) >= 1.0
    records = _metrics(run_dir)
    assert [r["step"] for r in records if "reward" in r] == [1, 2, 3]
    assert [r["step"] for r in records if "test_accuracy" in r] == [0, 2, 3]
    logged = {"reward/verifier", "reward/http", "entropy", "kl", "clip_frac", "gen_tokens_per_s"}
    assert logged <= set(records[1])
    samples = sorted((run_dir / "artifacts" / "samples").glob("step_*.jsonl"))
    assert [p.name for p in samples] == [
        "step_000000.jsonl",
        "step_000002.jsonl",
        "step_000003.jsonl",
    ]
    rows = [json.loads(line) for line in samples[-1].read_text().splitlines()]
    assert {r["split"] for r in rows} == {"val", "test", "train"}
    load_causal_lm(run_dir / "artifacts" / "model")  # HF format, loads with transformers


def test_ppo_resume_reproduces_the_uninterrupted_run(cli, cli_env):
    """Checkpoint at step 2, resume to 4: the same rollouts, policy, critic and metrics.

    The interrupted run is a copy of the uninterrupted one rewound to its step-2 checkpoint
    (what a run killed right after it leaves), so one pipeline run serves both sides."""
    four = ["--set", "learner.max_steps=4", "--set", "learner.checkpoint_every=2"]
    cli(["run", "ppo", "--preset", "smoke", "--no-progress", *four])
    (reference,) = _run_dirs(Path(cli_env["RAYWORKS_RUNS_DIR"]), "ppo")
    run_dir = reference.with_name(f"{reference.name}-resumed")
    shutil.copytree(reference, run_dir)
    _rewind(run_dir, 2)
    assert (run_dir / "checkpoints" / "step_00000002" / "critic_0" / "state.json").is_file()
    cli(["run", "ppo", "--resume", str(run_dir), "--no-progress", "--set", "learner.max_steps=4"])
    keys = ("reward", "policy_loss", "critic_loss", "entropy", "value_mean")
    want = {r["step"]: r for r in _metrics(reference) if "reward" in r}
    records = _metrics(run_dir)
    assert [r["resumed_from_step"] for r in records if "resumed_from_step" in r] == [2]
    got = {r["step"]: r for r in records if "reward" in r}
    assert [r["step"] for r in records if "reward" in r] == [1, 2, 3, 4]
    for step in (3, 4):
        for key in keys:
            assert got[step][key] == pytest.approx(want[step][key], rel=1e-4, abs=1e-6), (step, key)


def test_sigkilled_ppo_run_resumes_with_no_step_duplicated_or_skipped(
    cli, cli_env, ray_head, train_worker_pids
):
    """SIGKILL the driver and the Train worker part-way (not a simulated kill): the resumed
    run restarts from its last checkpoint and logs every step once."""
    runs = Path(cli_env["RAYWORKS_RUNS_DIR"])
    every = ["--set", "learner.max_steps=8", "--set", "learner.checkpoint_every=2"]
    every += ["--set", "learner.keep_checkpoints=0", "--set", "learner.eval_every=4"]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rayworks",
            "run",
            "ppo",
            "--preset",
            "smoke",
            "--no-progress",
            *every,
        ],
        env=cli_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    workers = train_worker_pids(ray_head, proc, want=1)
    deadline = time.time() + 300
    while time.time() < deadline and not list(runs.glob("ppo/*/checkpoints/step_00000002")):
        assert proc.poll() is None, "the run ended before its first checkpoint"
        time.sleep(0.02)  # a smoke step takes a fraction of a second
    os.killpg(proc.pid, signal.SIGKILL)  # the whole run at once, workers too
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)
    (run_dir,) = _run_dirs(runs, "ppo")
    killed_at = int(sorted((run_dir / "checkpoints").glob("step_*"))[-1].name.split("_")[1])
    assert 2 <= killed_at < 8 and not (run_dir / "summary.json").exists()

    cli(["run", "ppo", "--resume", str(run_dir), "--no-progress"])
    records = _metrics(run_dir)
    assert [r["resumed_from_step"] for r in records if "resumed_from_step" in r] == [killed_at]
    assert [r["step"] for r in records if "reward" in r] == list(range(1, 9))
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"


def _kill_an_actor_mid_run(
    cli_env: dict[str, str], pipeline: str, args: list[str], name: Callable[[str], str], skip=()
) -> Path:
    """Run `rayworks run PIPELINE --preset smoke ARGS`; once its first step is logged, kill
    (with restart) the named actor of the run (`name(run_id)`); return the run dir after
    checking the run still completed."""
    import ray

    runs = Path(cli_env["RAYWORKS_RUNS_DIR"])
    command = [sys.executable, "-m", "rayworks", "run", pipeline, "--preset", "smoke"]
    proc = subprocess.Popen(
        [*command, "--no-progress", *args],
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline, killed, run_dir = time.time() + 300, False, None
    while not killed and time.time() < deadline and proc.poll() is None:
        dirs = [d for d in _run_dirs(runs, pipeline) if d not in skip]
        run_dir = dirs[0] if dirs else None
        metrics = run_dir / "metrics.jsonl" if run_dir else None
        if metrics and metrics.is_file() and '"reward"' in metrics.read_text():
            ray.kill(ray.get_actor(name(run_dir.name), namespace=NAMESPACE), no_restart=False)
            killed = True
        time.sleep(0.05)
    output, _ = proc.communicate(timeout=300)
    assert killed, "the run ended before its actor could be killed:\n" + output[-3000:]
    assert proc.returncode == 0, output[-3000:]
    return run_dir


def test_asyppo_finishes_when_a_mini_critic_actor_is_killed(ray_session, cli_env):
    args = ["--set", "learner.max_steps=10", "--set", "learner.eval_every=5"]
    run_dir = _kill_an_actor_mid_run(cli_env, "asyppo", args, lambda run: actor_name(run, 1))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["critic_restarts"] == 1
    steps = [r["step"] for r in _metrics(run_dir) if "reward" in r]
    assert steps == list(range(1, 11))


def test_async_rollouts_survive_a_killed_engine_and_match_the_colocated_run(
    cli, ray_session, cli_env
):
    """Async GRPO, colocated and then with separate engine actors, one of them killed
    mid-run. Step 0 trains on its own version and every later step on the previous one
    (lag 1). The killed engine is restarted and reloaded, and the rows it lost are
    generated again from the version they were meant to see: every step of the two runs
    sampled the same responses (same lengths, same rewards)."""
    runs = Path(cli_env["RAYWORKS_RUNS_DIR"])
    args = ["--set", "learner.max_steps=8", "--set", "learner.eval_every=4"]
    args += ["--set", "rollout.mode=async"]
    cli(["run", "grpo", "--preset", "smoke", "--no-progress", *args])
    (colocated,) = _run_dirs(runs, "grpo")
    assert json.loads((colocated / "summary.json").read_text())["colocated"] == 1.0

    separate = _kill_an_actor_mid_run(
        cli_env,
        "grpo",
        [*args, "--set", "rollout.placement=separate"],
        lambda run: engine_actor_name(run, 0),
        skip=(colocated,),
    )
    summary = json.loads((separate / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["colocated"] == 0.0
    assert summary["engine_restarts"] >= 1

    keys = ("step", "rollout_lag", "rollout_lag_max", "response_len", "reward")
    want = [tuple(r[k] for k in keys) for r in _metrics(colocated) if "reward" in r]
    got = [tuple(r[k] for k in keys) for r in _metrics(separate) if "reward" in r]
    assert [w[:3] for w in want] == [(1, 0.0, 0.0)] + [(s, 1.0, 1.0) for s in range(2, 9)]
    assert got == want


@pytest.mark.slow
def test_grpo_learner_on_two_deepspeed_zero2_workers(cli, cli_env):
    """Rank 0 drives the engines and broadcasts each batch; both ranks train their slices."""
    cli(
        [
            "run",
            "grpo",
            "--preset",
            "smoke",
            "--no-progress",
            "--set",
            "learner.strategy=deepspeed",
            "--set",
            "learner.num_workers=2",
            "--set",
            "learner.cpus_per_worker=0.5",
        ],
        timeout=900,
    )
    (run_dir,) = _run_dirs(Path(cli_env["RAYWORKS_RUNS_DIR"]), "grpo")
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"
    latest = sorted((run_dir / "checkpoints").glob("step_*"))[-1]
    assert (latest / "optimizer_rank0.safetensors").is_file()
    assert (latest / "optimizer_rank1.safetensors").is_file()
    assert [r["step"] for r in _metrics(run_dir) if "reward" in r] == [1, 2, 3]


def test_a_run_the_cluster_can_never_hold_fails_naming_the_resource(cli):
    proc = cli(
        [
            "run",
            "asyppo",
            "--preset",
            "smoke",
            "--no-progress",
            "--set",
            "rollout.num_engines=8",
            "--set",
            "rollout.placement=separate",
        ],
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    out = proc.stderr + proc.stdout
    assert "needs 4.6 CPU" in out and "rollout.num_engines" in out  # 1 + 8 x 0.4 + 2 x 0.2
