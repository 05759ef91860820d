"""B-calibration study: do the paper's three predictions hold for our tiny policies?

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/calibration_study.py

Nakkiran et al., "Trained on Tokens, Calibrated on Concepts" (ICLR 2026) predict that
(1) a model trained with a proper loss is B-calibrated, (2) reward tuning breaks this and
makes it overconfident while SFT continuation does not, (3) answering through a sampled
chain of thought degrades calibration. Our pass rules (reconstructed from them):
(1) base smECE <= 0.05; (2) smECE(RL) - smECE(base) has a 95% CI above zero and
mean(conf - acc) > 0, while the SFT control does not; (3) reported, not gated.

Arms, all on the same held-out questions of `bag_draw` (p*(colour) = share of the bag):
  oracle      answers sampled from p* itself: the noise floor of the estimates
  base        the SFT'd policy (cross-entropy on answers sampled from p*)      [prediction 1]
  base_T0.5   the same policy sampled at temperature 0.5 (sanity: must miscalibrate)
  sft_cont    base + more cross-entropy steps on fresh samples (control)       [prediction 2]
  grpo        base + GRPO on reward 1[answer == one sampled gold label]         [prediction 2]
  cot_base    the SFT'd policy of `bag_draw_cot` (4 draws without replacement   [prediction 3]
              before the answer; same prompts and gold labels)
Reconstructed choices (not in the paper): the task, model size, SFT/RL budgets and
learning rates below, the exact parser B, and the p*-expected-correctness columns.
CIs: percentile bootstrap over questions (paired across arms: the questions are shared).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # throwaway local Ray (token auth off)

from rayworks.data.tasks import get_task
from rayworks.evals.calibration import (
    CalibrationConfig,
    calibration_report,
    sample_completions,
)
from rayworks.evals.calibration_math import bootstrap_ci, smooth_ece
from rayworks.models import resolve_model_dir


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=int, default=1000, help="held-out questions per arm")
    p.add_argument("--samples", type=int, default=50, help="M, completions per question")
    p.add_argument("--sft-steps", type=int, default=3000, help="SFT steps of the base policies")
    p.add_argument("--cont-steps", type=int, default=300, help="SFT-continuation steps")
    p.add_argument("--cont-lr", type=float, default=5e-4, help="SFT-continuation peak lr")
    p.add_argument("--rl-steps", type=int, default=60, help="GRPO steps")
    p.add_argument("--rl-lr", type=float, default=2e-4, help="GRPO learning rate")
    p.add_argument("--boot", type=int, default=300, help="bootstrap resamples of questions")
    p.add_argument("--runs-dir", default="runs/calibration_study")
    p.add_argument("--img-dir", default="docs/img", help="reliability diagrams go here")
    p.add_argument("--arms", default="oracle,base,base_T0.5,sft_cont,grpo,cot_base")
    return p.parse_args(argv)


def rl_overrides(task: str, args: argparse.Namespace) -> list[str]:
    """The GRPO run's settings; its `policy.sft` part also keys the cached base policy."""
    max_new = 40 if task.endswith("_cot") else 24
    return [
        f"task={task}",
        f"policy.sft.steps={args.sft_steps}",
        f"rollout.sampling.max_new_tokens={max_new}",
        "rollout.prompts_per_step=16",
        f"learner.max_steps={args.rl_steps}",
        f"learner.lr={args.rl_lr}",
        f"learner.eval_every={args.rl_steps}",
        f"learner.checkpoint_every={args.rl_steps}",
        "eval.n_test=64",
    ]


def base_policy(task: str, args: argparse.Namespace) -> Path:
    """The SFT'd policy of `task`, built once into the study's cache (as `grpo` would)."""
    from rayworks.core.config import build_config
    from rayworks.pipelines.rl.base import base_models
    from rayworks.pipelines.rl.config import RLConfig

    cfg = build_config(RLConfig, None, (), rl_overrides(task, args))
    policy, _ = base_models(cfg, Path(args.runs_dir) / "cache")
    return policy


def sft_continuation(base: Path, task: str, args: argparse.Namespace) -> Path:
    """`lm` from the base weights: more cross-entropy on fresh answer samples (seed 1)."""
    from rayworks.platform import launch

    steps = args.cont_steps
    overrides = [
        "seed=1",
        f"model.init_from={base}",
        "model.max_seq_len=128",
        f"tokenizer.init_from={base}",
        f"data.task={task}",
        "data.n_val=64",
        "data.n_test=0",
        "data.seq_len=112",
        "data.packing=false",
        "data.loss_on=completion",
        "train.num_workers=1",
        "train.batch_size=32",
        f"train.max_steps={steps}",
        f"train.lr={args.cont_lr}",
        "train.warmup_steps=10",
        f"train.eval_every={steps}",
        f"train.checkpoint_every={steps}",
        "train.log_every=50",
        "eval.exact_match=false",
        "eval.val_batches=2",
    ]
    result = launch.run("lm", overrides=overrides, runs_dir=args.runs_dir, progress=False)
    return resolve_model_dir(result.run_dir)


def grpo_policy(task: str, args: argparse.Namespace) -> tuple[Path, dict[str, Any]]:
    from rayworks.platform import launch

    result = launch.run(
        "grpo", overrides=rl_overrides(task, args), runs_dir=args.runs_dir, progress=False
    )
    return resolve_model_dir(result.run_dir), result.summary


def oracle_completions(task: Any, examples: list, samples: int, seed: int) -> list[list[str]]:
    """M answers per question drawn from the true law p*: a perfectly B-calibrated model."""
    rng = random.Random(seed)
    out = []
    for ex in examples:
        law = task.distribution(ex)
        out.append([f"A: {c}" for c in rng.choices(list(law), list(law.values()), k=samples)])
    return out


def evaluate_arm(
    name: str, task_name: str, model: Path | None, args: argparse.Namespace, temperature: float
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    cfg = CalibrationConfig(
        checkpoint=str(model or "oracle"),
        task=task_name,
        n_questions=args.questions,
        samples=args.samples,
        temperature=temperature,
        bootstrap=args.boot,
        max_new_tokens=40 if task_name.endswith("_cot") else 24,
        batch_rows=4096,
        diagram=str(Path(args.img_dir) / f"calibration_{name.replace('.', '')}.png"),
        records=str(Path(args.runs_dir) / "records" / f"{name}.jsonl"),
    )
    task = get_task(task_name)
    examples = task.examples(cfg.n_questions, cfg.split, cfg.seed)
    prompts = [e.prompt for e in examples]
    if model is None:
        completions = oracle_completions(task, examples, cfg.samples, cfg.sample_seed)
    else:
        completions = sample_completions(model, prompts, cfg)
    return calibration_report(task, examples, completions, cfg, label=name)


def paired_delta(records: list[dict], base: list[dict], boot: int) -> tuple[float, float, float]:
    """smECE(arm) - smECE(base) on the same questions, with a paired bootstrap 95% CI."""
    if [r["prompt"] for r in records] != [r["prompt"] for r in base]:
        raise ValueError("arms must be scored on the same questions for a paired difference")
    cols = [[r[k] for r in rs] for rs in (records, base) for k in ("plugin_conf", "plugin_correct")]

    def delta(fa: np.ndarray, ya: np.ndarray, fb: np.ndarray, yb: np.ndarray) -> float:
        return smooth_ece(fa, ya) - smooth_ece(fb, yb)

    lo, hi = bootstrap_ci(delta, *cols, n_boot=boot, seed=1)
    return delta(*(np.asarray(c) for c in cols)), lo, hi


def table(results: dict[str, dict[str, Any]]) -> str:
    """One row per arm: plug-in keys first, then held-out and p*-expected-correctness ones."""
    head = (
        "| arm | task | acc | conf | conf - acc | smECE [95% CI] | ECE | smECE - base [95% CI] "
        "| held-out: conf - acc | held-out: smECE | smECE vs p* | held-out: smECE vs p* "
        "| invalid |"
    )
    lines = [head, "|" + "---|" * 13]
    for name, m in results.items():
        delta = m.get("delta")
        lines.append(
            f"| {name} | {m['task']} | {m['acc']:.3f} | {m['conf']:.3f} | "
            f"{m['conf_minus_acc']:+.3f} | {m['smece']:.3f} [{m['smece_lo']:.3f}, "
            f"{m['smece_hi']:.3f}] | {m['ece']:.3f} | "
            + (f"{delta[0]:+.3f} [{delta[1]:+.3f}, {delta[2]:+.3f}]" if delta else "-")
            + f" | {m['heldout/conf_minus_acc']:+.3f} | {m['heldout/smece']:.3f} | "
            f"{m['smece_pstar']:.3f} | {m['heldout/smece_pstar']:.3f} | {m['invalid_rate']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import torch

    torch.set_num_threads(1)
    args = parse_args(argv)
    args.runs_dir = str(Path(args.runs_dir).resolve())  # Ray workers run in other folders
    arms = args.arms.split(",")
    results: dict[str, dict[str, Any]] = {}
    records: dict[str, list[dict]] = {}
    timings: dict[str, float] = {}

    def run_arm(name: str, task: str, model: Path | None, temperature: float = 1.0) -> None:
        started = time.perf_counter()
        metrics, recs = evaluate_arm(name, task, model, args, temperature)
        results[name], records[name] = {**metrics, "task": task}, recs
        timings[f"eval_{name}"] = time.perf_counter() - started
        print(
            f"[{name}] smECE={metrics['smece']:.4f} acc={metrics['acc']:.3f} "
            f"conf={metrics['conf']:.3f} ({timings[f'eval_{name}']:.0f}s)",
            flush=True,
        )

    def timed(label: str, fn: Any, *a: Any) -> Any:
        started = time.perf_counter()
        out = fn(*a)
        timings[label] = time.perf_counter() - started
        print(f"[{label}] {timings[label]:.0f}s", flush=True)
        return out

    if "oracle" in arms:
        run_arm("oracle", "bag_draw", None)
    base = timed("sft_base", base_policy, "bag_draw", args)
    if "base" in arms:
        run_arm("base", "bag_draw", base)
    if "base_T0.5" in arms:
        run_arm("base_T0.5", "bag_draw", base, 0.5)
    if "sft_cont" in arms:
        run_arm("sft_cont", "bag_draw", timed("sft_cont", sft_continuation, base, "bag_draw", args))
    if "grpo" in arms:
        rl_model, summary = timed("grpo", grpo_policy, "bag_draw", args)
        run_arm("grpo", "bag_draw", rl_model)
        results["grpo"]["rl_test_accuracy"] = summary.get("test_accuracy")
    if "cot_base" in arms:
        run_arm("cot_base", "bag_draw_cot", timed("sft_cot", base_policy, "bag_draw_cot", args))
    if "base" in records:
        for name in results:
            if name != "base":
                results[name]["delta"] = paired_delta(records[name], records["base"], args.boot)
    print("\n" + table(results))
    print("\ncommand: " + " ".join([Path(sys.executable).name, *sys.argv]))
    out = Path(args.runs_dir) / "calibration_study.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {"args": vars(args), "results": results, "timings": timings}, indent=2, default=str
        )
    )
    print(f"timings (s): {json.dumps({k: round(v) for k, v in timings.items()})}\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
