"""Seconds per RL step and generated tokens/s: `rayworks run grpo` against TRL's GRPOTrainer.

Both sides train the very same policy folder (one tiny Llama, SFT'd once by rayworks and
cached under `<runs-dir>/cache/base/`) on the same arithmetic prompts with the task's exact
verifier as the only reward, with the same group size G, prompts per step, generation length
(temperature 1, no top-k/top-p), no KL term, no entropy bonus, one optimizer step on all
prompts x G completions per RL step (our loss.ppo_epochs=1 loss.minibatches=1; TRL
num_iterations=1, steps_per_generation=1), measured in one script run on this CPU.

  ours  the `grpo` pipeline on embedded local Ray, one Ray Train learner worker, in four
        arms (`ARMS`; platform/rollout_group.py):
          colocated sync   the engine generates from the learner's own module in the
                           learner's process (2 torch threads, OMP passive): no weight copy;
          colocated async  step t+1 is generated on a background thread from a copy of
                           version t while step t trains (1 torch thread each);
          separate sync    one hf engine actor and the learner, 1 thread each: they take
                           turns (what this script measured before the colocated engine);
          separate async   the same actors, generation of step t+1 overlapping step t.
        step_s / gen_s / update_s / sync_s and tokens come from the run's metrics.jsonl
        (async: gen_s is the wait for rollouts that training did not hide).
  TRL   GRPOTrainer in one process (a subprocess of this script), with all cores' torch
        threads (and, unless --trl-threads says otherwise, again with 1 thread). A step
        (on_step_begin -> on_step_end) is generation + rewards + loss + optimizer step;
        tokens are counted from the completion ids its reward function receives.
        Multi-threaded runs get OMP_WAIT_POLICY=PASSIVE (--omp-wait): with OpenMP's default
        spinning, 2 threads on 2 cores that another process also uses stall for seconds per
        step (measured on our 2-core machines), which would time the shared machine rather
        than TRL.

Load from other processes slows every side; the 1-minute load average before each side is
written to the results, and medians are shown next to means.

The first --warmup steps of each side are left out (model load, allocator and thread-pool
warmup); the rest give the mean seconds per step, generated tokens per second of step time
(response tokens / step_s) and of generation time (response tokens / gen_s), and the ratios
ours / TRL as speeds (>1: ours faster). Two sizes: `small` is the RL pipeline's
default policy (d_model 64, 2 layers; 8 prompts x G=8, 80 new tokens), where a step is mostly
overhead; `large` (d_model 256, 4 layers; 8 x 8 rollouts of 64 tokens, briefly SFT'd: accuracy
does not matter for timing) is where compute weighs more.

    python benchmarks/rl_step.py [--size small|large|both] [--steps 20] [--warmup 3] [--quick]
                                 [--arms "colocated sync,separate async"]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import trl_peer  # sets HF_HUB_OFFLINE and friends before anything imports transformers

ROOT = Path(__file__).resolve().parent
DEFAULT_OUT = ROOT / "results" / "rl_step.json"

# Per size: the policy (built by rayworks) and the rollout shape; both sides get the same.
SIZES: dict[str, list[str]] = {
    # the pipeline's policy (d_model 64, 2 layers, 80 new tokens), 8 prompts x G=8 per step
    "small": ["rollout.prompts_per_step=8"],
    "large": [
        "policy.model.d_model=256",
        "policy.model.n_layer=4",
        "policy.model.n_head=4",
        "policy.sft.steps=150",
        "policy.sft.n_test=16",
        "rollout.prompts_per_step=8",
        "rollout.sampling.max_new_tokens=64",
    ],
}
# What makes our step the same work as one TRL optimizer step (see the module docstring).
# TRL with beta=0 computes no reference logprobs, so our KL monitor is off as well.
MATCHED = [
    "loss.ppo_epochs=1",
    "loss.minibatches=1",
    "loss.entropy_coef=0",
    "loss.kl_coef=0",
    "loss.kl_monitor_every=0",
]


# Our arms: overrides and environment (OMP_WAIT_POLICY for a 2-thread learner, as TRL's).
ARMS: dict[str, tuple[list[str], dict[str, str]]] = {
    "colocated sync": (
        ["rollout.placement=colocated", "rollout.mode=sync", "learner.threads_per_worker=2"],
        {"OMP_WAIT_POLICY": "PASSIVE"},
    ),
    "colocated async": (["rollout.placement=colocated", "rollout.mode=async"], {}),
    "separate sync": (["rollout.placement=separate", "rollout.mode=sync"], {}),
    "separate async": (["rollout.placement=separate", "rollout.mode=async"], {}),
}


def rl_config(size: str, extra: list[str]) -> Any:
    from rayworks.core.config import build_config
    from rayworks.pipelines.rl.config import RLConfig

    return build_config(RLConfig, None, (), [*SIZES[size], *extra])


def build_policy(size: str, runs_dir: Path) -> tuple[Path, float]:
    """The SFT'd policy folder of `size` (built once, then cached) and the seconds it took."""
    from rayworks.pipelines.rl.base import base_models

    started = time.perf_counter()
    policy_dir, _ = base_models(rl_config(size, []), runs_dir / "cache")
    return policy_dir, time.perf_counter() - started


def summarize(rows: list[dict[str, float]], n_rollouts: int) -> dict[str, float]:
    """Means over the measured steps: step_s, gen_s, update_s, sync_s, tokens and rates."""
    mean = lambda key: statistics.fmean(r[key] for r in rows)  # noqa: E731
    step_s, gen_s, tokens = mean("step_s"), mean("gen_s"), mean("tokens")
    out = {
        "measured_steps": len(rows),
        "step_s": step_s,
        "step_s_median": statistics.median(r["step_s"] for r in rows),
        "step_s_stdev": statistics.stdev(r["step_s"] for r in rows) if len(rows) > 1 else 0.0,
        "gen_s": gen_s,
        "tokens_per_step": tokens,
        "response_len": tokens / n_rollouts,
        "tokens_per_step_s": tokens / step_s,
        "tokens_per_gen_s": tokens / gen_s,
    }
    out["rest_s"] = step_s - gen_s
    for key in ("update_s", "sync_s"):
        if all(key in r for r in rows):
            out[key] = mean(key)
            out["rest_s"] -= out[key]
    return out


# --- ours ---------------------------------------------------------------------------------


def run_ours(
    size: str, arm: str, policy_dir: Path, runs_dir: Path, steps: int, warmup: int
) -> dict:
    import ray

    from rayworks.platform import launch

    arm_overrides, env = ARMS[arm]
    overrides = [
        *SIZES[size],
        *MATCHED,
        *arm_overrides,
        f"policy.init_from={policy_dir}",
        f"learner.max_steps={steps}",
        f"learner.eval_every={steps}",  # evaluations only at step 0 and after the last step
        f"learner.checkpoint_every={steps}",
        "eval.n_test=8",
        "eval.samples=0",
    ]
    cfg = rl_config(size, overrides[len(SIZES[size]) :])  # the same config launch builds
    load = os.getloadavg()[0]
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # inherited by the Ray this run starts, and so by its workers
    started = time.perf_counter()
    try:
        result = launch.run("grpo", overrides=overrides, runs_dir=runs_dir, progress=False)
        wall = time.perf_counter() - started
    finally:
        ray.shutdown()  # the Ray this script started; the next arm gets the cores
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        time.sleep(3)  # let its worker processes exit
    records = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    every = cfg.learner.eval_every
    evals = {0, steps} | {s for s in range(every, steps + 1, every)}
    train = [r for r in records if "reward" in r]
    n = cfg.rollout.prompts_per_step * cfg.rollout.group_size
    rows = [
        {
            "step_s": r["step_s"],
            "gen_s": r["gen_s"],
            "sync_s": r["sync_s"],
            "update_s": r["update_s"],
            "tokens": r["response_len"] * n,
        }
        for r in train
        if r["step"] > warmup and r["step"] - 1 not in evals
    ]
    out = summarize(rows, n)
    out.update(
        wall_s=wall,
        steps=steps,
        load_avg_1m_before=load,
        arm=arm,
        overrides=arm_overrides,
        run_dir=str(result.run_dir),
        accuracy=statistics.fmean(r["accuracy"] for r in train),
    )
    return out


# --- TRL (runs in a subprocess: its own torch threads, no Ray in the process) -------------


def run_trl(
    policy_dir: Path, cfg: Any, steps: int, warmup: int, threads: int, omp_wait: str
) -> dict:
    spec = {
        "model": str(policy_dir),
        "cfg": cfg.model_dump(mode="json"),
        "steps": steps,
        "warmup": warmup,
    }
    load = os.getloadavg()[0]
    out, wall = trl_peer.launch_worker(__file__, spec, threads, omp_wait)
    out.update(wall_s=wall, load_avg_1m_before=load)
    return out


def trl_worker(spec: dict[str, Any]) -> None:
    """One TRL GRPOTrainer run with `spec`'s settings; writes its per-step timings."""
    import torch

    torch.set_num_threads(spec["threads"])
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from rayworks.models import load_tokenizer
    from rayworks.pipelines.rl.config import RLConfig
    from rayworks.pipelines.rl.prompts import prompt_set
    from rayworks.pipelines.rl.rewards import CombinedReward

    cfg = RLConfig.model_validate(spec["cfg"])
    pool = prompt_set(cfg).train  # our training prompt pool, in our run's order
    rows = trl_peer.step_rows(len(pool), cfg.rollout.prompts_per_step, cfg.seed, spec["steps"])
    examples = [pool[i] for i in rows]
    prompts = trl_peer.trl_prompts(cfg, load_tokenizer(spec["model"]), [e.prompt for e in examples])
    dataset = Dataset.from_dict({"prompt": prompts, "row": list(range(len(rows)))})
    calls: list[dict[str, Any]] = []  # one per generation: rows, rewards, completion tokens
    reward = trl_peer.reward_function(examples, CombinedReward(cfg.reward_specs()), calls)
    times: dict[str, list[float]] = {"step_s": [], "gen_s": []}

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.started = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            times["step_s"].append(time.perf_counter() - self.started)

    class TimedGRPO(GRPOTrainer):
        def _generate(self, prompts: list) -> Any:  # tokenize, generate, decode
            started = time.perf_counter()
            out = super()._generate(prompts)
            times["gen_s"].append(time.perf_counter() - started)
            return out

    # one optimizer step = one generation of prompts x G completions, used once (MATCHED)
    args = trl_peer.grpo_args(cfg, spec["output_dir"], cfg.seed, max_steps=spec["steps"])
    trainer = TimedGRPO(
        model=spec["model"],
        reward_funcs=reward,
        args=args,
        train_dataset=dataset,
        callbacks=[StepTimer()],
    )
    trainer.train()
    n = len(times["step_s"])
    if not (len(times["gen_s"]) == len(calls) == n == spec["steps"]):
        raise RuntimeError(
            f"expected one generation per step: {n} steps, {len(times['gen_s'])} generations, "
            f"{len(calls)} reward calls"
        )
    rows_per_step = cfg.rollout.prompts_per_step * cfg.rollout.group_size
    step_rows = [
        {"step_s": times["step_s"][i], "gen_s": times["gen_s"][i], "tokens": calls[i]["tokens"]}
        for i in range(spec["warmup"], n)
    ]
    out = summarize(step_rows, rows_per_step)
    out.update(
        steps=n,
        threads=f"{torch.get_num_threads()} (one process)",
        accuracy=statistics.fmean(r for c in calls for r in c["rewards"]),  # the verifier
    )
    Path(spec["out"]).write_text(json.dumps(out))


# --- report -------------------------------------------------------------------------------


def table(size: str, shape: str, ours: dict[str, dict], trls: dict[str, dict]) -> str:
    """One row per side; every arm of ours gets its speed against every TRL run."""
    lines = [f"== {size}: {shape}"]
    head = f"{'':<18}{'s/step':>8}{'median':>8}{'tok/s step':>12}{'tok/s gen':>11}{'resp len':>10}"
    lines.append(head + "  speed vs " + ", ".join(trls) + " (mean step; median step)")
    for name, side in {**ours, **trls}.items():
        line = (
            f"{name:<18}{side['step_s']:>8.3f}{side['step_s_median']:>8.3f}"
            f"{side['tokens_per_step_s']:>12.0f}{side['tokens_per_gen_s']:>11.0f}"
            f"{side['response_len']:>10.1f}"
        )
        if name in ours:
            line += "  " + ", ".join(
                f"{trl['step_s'] / side['step_s']:.2f}x; {trl['step_s_median'] / side['step_s_median']:.2f}x"
                for trl in trls.values()
            )
        lines.append(line)
    for name, side in ours.items():
        lines.append(
            f"{name} per step: generation wait {side['gen_s']:.3f} s, update "
            f"{side.get('update_s', float('nan')):.3f} s, sync {side['sync_s']:.3f} s, other "
            f"(rewards, batching, Ray calls) {side['rest_s']:.3f} s"
        )
    for name, trl in trls.items():
        lines.append(
            f"{name} per step: gen {trl['gen_s']:.3f} s ({trl['gen_s'] / trl['step_s']:.0%}), "
            f"rest (rewards, loss forward+backward, optimizer) {trl['rest_s']:.3f} s"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=["small", "large", "both"], default="both")
    parser.add_argument("--steps", type=int, default=20, help="RL steps per side (incl. warmup)")
    parser.add_argument("--warmup", type=int, default=3, help="first steps left out per side")
    parser.add_argument(
        "--trl-threads",
        default=f"{os.cpu_count()},1",
        help="comma-separated torch thread counts to run TRL with (default: all cores, then 1)",
    )
    parser.add_argument(
        "--omp-wait",
        default="PASSIVE",
        help="OMP_WAIT_POLICY of multi-threaded TRL runs ('' = OpenMP's default spinning, which "
        "stalls for seconds when another process shares the cores: measured on 2 shared cores)",
    )
    parser.add_argument(
        "--arms", default=",".join(ARMS), help=f"comma-separated arms of ours ({', '.join(ARMS)})"
    )
    parser.add_argument("--quick", action="store_true", help="short check: 4 steps, 1 warmup")
    parser.add_argument(
        "--runs-dir",
        type=Path,
        default=Path("runs/bench-rl-step"),
        help="our runs and the cached base policies (reused across runs)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--trl-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trl_worker:
        trl_worker(trl_peer.read_spec(args.trl_worker))
        return
    if args.quick:
        args.steps, args.warmup = 4, 1
    if args.steps - args.warmup < 2:
        parser.error("--steps must exceed --warmup by at least 2")
    runs_dir = args.runs_dir.absolute()
    sizes = ["small", "large"] if args.size == "both" else [args.size]
    thread_counts = [int(t) for t in args.trl_threads.split(",") if t.strip()]
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if unknown := [a for a in arms if a not in ARMS]:
        parser.error(f"unknown arms {unknown}; known: {', '.join(ARMS)}")

    import torch
    import transformers
    import trl

    results: dict[str, Any] = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "trl": trl.__version__,
        },
        "steps": args.steps,
        "warmup": args.warmup,
        "trl_omp_wait_policy": args.omp_wait,
        "sizes": {},
    }
    reports = []
    for size in sizes:
        print(f"[{size}] building/finding the SFT'd policy under {runs_dir}/cache/base ...")
        policy_dir, build_s = build_policy(size, runs_dir)
        cfg = rl_config(size, MATCHED)
        spec = cfg.policy.model
        shape = (
            f"d_model {spec.d_model}, {spec.n_layer} layers; {cfg.rollout.prompts_per_step} prompts"
            f" x G={cfg.rollout.group_size}, max {cfg.rollout.sampling.max_new_tokens} new tokens"
        )
        print(f"[{size}] policy {policy_dir} ({build_s:.0f} s); {shape}")
        ours = {}
        for arm in arms:
            print(f"[{size}] ours ({arm}): grpo, {args.steps} steps ...")
            ours[arm] = run_ours(size, arm, policy_dir, runs_dir, args.steps, args.warmup)
        trls = {}
        for threads in thread_counts:
            print(f"[{size}] TRL GRPOTrainer, {threads} torch thread(s), {args.steps} steps ...")
            name = f"TRL {threads} thr" + (f" {args.omp_wait.lower()}" if threads > 1 else "")
            trls[name.strip()] = run_trl(
                policy_dir, cfg, args.steps, args.warmup, threads, args.omp_wait
            )
        results["sizes"][size] = {
            "shape": shape,
            "policy_dir": str(policy_dir),
            "policy_params": ours_params(next(iter(ours.values()))["run_dir"]),
            "ours": ours,
            "trl": trls,
            "ratios": {
                arm: {
                    name: {
                        "step_speed": trl["step_s"] / side["step_s"],
                        "step_speed_median": trl["step_s_median"] / side["step_s_median"],
                        "tokens_per_step_s": side["tokens_per_step_s"] / trl["tokens_per_step_s"],
                        "tokens_per_gen_s": side["tokens_per_gen_s"] / trl["tokens_per_gen_s"],
                    }
                    for name, trl in trls.items()
                }
                for arm, side in ours.items()
            },
        }
        reports.append(table(size, shape, ours, trls))
        print(reports[-1])
    print()
    print("\n\n".join(reports))
    print(
        f"(means over steps {args.warmup + 1}..{args.steps} of each side; ratio > 1: ours faster;"
        f" load avg 1m now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"written to {args.out}")


def ours_params(run_dir: str) -> float | None:
    path = Path(run_dir) / "summary.json"
    return json.loads(path.read_text()).get("policy_params") if path.is_file() else None


if __name__ == "__main__":
    main()
