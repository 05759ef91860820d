"""B-calibration study: do the paper's three predictions hold for our tiny policies?

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/calibration_study.py

Nakkiran et al., "Trained on Tokens, Calibrated on Concepts" (ICLR 2026) predict that
(1) a model trained with a proper loss is B-calibrated, (2) reward tuning breaks this and
makes it overconfident while SFT continuation does not, (3) answering through a sampled
chain of thought degrades calibration. Our pass rules (reconstructed from them):
(1) base smECE <= 0.05; (2) smECE(RL) - smECE(base) has a 95% CI above zero and
mean(conf - acc) > 0, while the SFT control does not; (3) reported, not gated.

The chain-of-thought rerun (prediction 3) on `bag_sum` / `bag_sum_cot`, whose answer (the
sum mod 5 of 4 sampled draws) has a law the prompt does not show, known only at the end
of the trace (docs/calibration.md), three training seeds per arm:

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/calibration_study.py \
        --task bag_sum --cot-task bag_sum_cot --arms oracle,base,cot_base --seeds 0,1,2 \
        --tag sum_ --runs-dir runs/calibration_sum

Arms, all on the same held-out questions of `--task` (default `bag_draw`: p*(colour) =
share of the bag):
  oracle      answers sampled from p* itself: the noise floor of the estimates
  base        the SFT'd policy (cross-entropy on answers sampled from p*)      [prediction 1]
  base_T0.5   the same policy sampled at temperature 0.5 (sanity: must miscalibrate)
  sft_cont    base + more cross-entropy steps on fresh samples (control)       [prediction 2]
  grpo        base + GRPO on reward 1[answer == one sampled gold label]         [prediction 2]
  cot_base    the SFT'd policy of `--cot-task` (default `bag_draw_cot`: 4 draws  [prediction 3]
              without replacement before the answer; same prompts and gold labels)
Reconstructed choices (not in the paper): the task, model size, SFT/RL budgets and
learning rates below, the exact parser B, and the p*-expected-correctness columns.
Every training seed (`--seeds`) builds its own SFT (data draws and initialisation) and
GRPO run; the oracle's seed is its sampling stream. CIs: per seed, percentile bootstrap
over questions (paired across arms: the questions are shared); across seeds, Student-t
intervals of the mean and of the same-seed difference to `base`. `--split val` runs the
same arms on validation questions, for choosing knobs.
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
from rayworks.platform.stats import mean_ci, paired_ci
from rayworks.platform.tables import Column, Table, write_table


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
    p.add_argument("--task", default="bag_draw", help="direct-answer task of every arm but cot")
    p.add_argument("--cot-task", default="bag_draw_cot", help="task of the cot_base arm")
    p.add_argument("--seeds", default="0", help="training seeds, comma list (SFT and GRPO)")
    p.add_argument(
        "--split", default="test", choices=["val", "test"], help="questions (val: for knobs)"
    )
    p.add_argument(
        "--jobs", type=int, default=1, help="parallel processes over (seed, direct | cot arms)"
    )
    p.add_argument("--tag", default="", help="prefix of the diagram names (calibration_<tag>..)")
    args = p.parse_args(argv)
    args.seed_list = [int(s) for s in str(args.seeds).split(",")]
    return args


# generation budgets: the longest completion of each task plus a margin
MAX_NEW = {"bag_draw": 24, "bag_draw_cot": 40, "bag_sum": 24, "bag_sum_cot": 56}


# SFT row length of the new tasks: the longest prompt + completion + EOS fits (28 and 62
# tokens); rows are padded after their end, so a shorter row only saves compute
SEQ_LEN = {"bag_sum": 32, "bag_sum_cot": 64}


def max_new_tokens(task: str) -> int:
    if task not in MAX_NEW:
        raise ValueError(f"task {task!r} has no generation budget here; known: {list(MAX_NEW)}")
    return MAX_NEW[task]


def rl_overrides(task: str, args: argparse.Namespace, seed: int = 0) -> list[str]:
    """The GRPO run's settings; its `policy.sft` part also keys the cached base policy
    (`seed` is the training seed of both the SFT and the GRPO run)."""
    return [
        f"task={task}",
        f"seed={seed}",
        f"policy.sft.seed={seed}",
        f"policy.sft.steps={args.sft_steps}",
        *([f"policy.sft.seq_len={SEQ_LEN[task]}"] if task in SEQ_LEN else []),
        f"rollout.sampling.max_new_tokens={max_new_tokens(task)}",
        "rollout.prompts_per_step=16",
        f"learner.max_steps={args.rl_steps}",
        f"learner.lr={args.rl_lr}",
        f"learner.eval_every={args.rl_steps}",
        f"learner.checkpoint_every={args.rl_steps}",
        "eval.n_test=64",
    ]


def base_policy(task: str, args: argparse.Namespace, seed: int = 0) -> Path:
    """The SFT'd policy of `task`, built once into the study's cache (as `grpo` would)."""
    from rayworks.core.config import build_config
    from rayworks.pipelines.rl.base import base_models
    from rayworks.pipelines.rl.config import RLConfig

    cfg = build_config(RLConfig, None, (), rl_overrides(task, args, seed))
    policy, _ = base_models(cfg, Path(args.runs_dir) / "cache")
    return policy


def sft_continuation(base: Path, task: str, args: argparse.Namespace, seed: int = 0) -> Path:
    """`lm` from the base weights: more cross-entropy on fresh answer samples (seed + 1)."""
    from rayworks.platform import launch

    steps = args.cont_steps
    overrides = [
        f"seed={seed + 1}",
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


def grpo_policy(task: str, args: argparse.Namespace, seed: int = 0) -> tuple[Path, dict[str, Any]]:
    from rayworks.platform import launch

    result = launch.run(
        "grpo", overrides=rl_overrides(task, args, seed), runs_dir=args.runs_dir, progress=False
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
    name: str,
    task_name: str,
    model: Path | None,
    args: argparse.Namespace,
    temperature: float,
    seed: int = 0,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One arm's calibration on the shared questions (split seed 0); the sampling stream
    is the training seed's. Only the first seed draws a reliability diagram."""
    diagram = Path(args.img_dir) / f"calibration_{args.tag}{name.replace('.', '')}.png"
    cfg = CalibrationConfig(
        checkpoint=str(model or "oracle"),
        task=task_name,
        split=args.split,
        n_questions=args.questions,
        samples=args.samples,
        temperature=temperature,
        bootstrap=args.boot,
        sample_seed=seed,
        max_new_tokens=max_new_tokens(task_name),
        batch_rows=4096,
        diagram=str(diagram) if seed == args.seed_list[0] else None,
        records=str(Path(args.runs_dir) / "records" / f"{name}_s{seed}.jsonl"),
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


def ci_text(m: dict[str, Any], key: str, lo: str, hi: str, sign: str = "") -> str:
    return f"{m[key]:{sign}.3f} [{m[lo]:{sign}.3f}, {m[hi]:{sign}.3f}]"


def delta_text(m: dict[str, Any]) -> str:
    d = m.get("delta")
    return f"{d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}]" if d else "-"


PER_SEED = [
    Column("arm"),
    Column("seed", spec="d"),
    Column("task"),
    Column("acc", spec=".3f"),
    Column("conf", spec=".3f"),
    Column("conf_minus_acc", "conf - acc", spec="+.3f"),
    Column(
        "smece",
        "smECE [95% CI, questions]",
        render=lambda m: ci_text(m, "smece", "smece_lo", "smece_hi"),
    ),
    Column("ece", "ECE", spec=".3f"),
    Column("delta", "smECE - base [95% CI, questions]", render=delta_text),
    Column("heldout/conf_minus_acc", "held-out: conf - acc", spec="+.3f"),
    Column("heldout/smece", "held-out: smECE", spec=".3f"),
    Column("smece_pstar", "smECE vs p*", spec=".3f"),
    Column("heldout/smece_pstar", "held-out: smECE vs p*", spec=".3f"),
    Column("invalid_rate", "invalid", spec=".3f"),
]
# (key, header, sign) of the across-seed table: mean [95% Student-t CI over training seeds]
ACROSS = [
    ("smece", "smECE", ""),
    ("conf_minus_acc", "conf - acc", "+"),
    ("heldout/smece", "held-out: smECE", ""),
    ("heldout/conf_minus_acc", "held-out: conf - acc", "+"),
    ("smece_pstar", "smECE vs p*", ""),
]
PAIRED = [
    ("smece", "smECE - base", "+"),
    ("heldout/conf_minus_acc", "held-out conf - acc - base", "+"),
]


def across_seeds(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per arm: means with 95% intervals over training seeds, and the paired
    (same seed) difference to the base arm, also over seeds (`rayworks.platform.stats`)."""
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_arm.setdefault(r["arm"], []).append(r)
    base = {r["seed"]: r for r in by_arm.get("base", [])}
    out = []
    for arm, rs in by_arm.items():
        row: dict[str, Any] = {"arm": arm, "task": rs[0]["task"], "seeds": len(rs)}
        for key, header, sign in ACROSS:
            mean, lo, hi = mean_ci([r[key] for r in rs])
            row[header] = f"{mean:{sign}.3f} [{lo:{sign}.3f}, {hi:{sign}.3f}]"
        for key, header, sign in PAIRED:
            shared = [r for r in rs if r["seed"] in base]
            if arm == "base" or not shared:
                row[header] = "-"
                continue
            mean, lo, hi = paired_ci(
                [r[key] for r in shared], [base[r["seed"]][key] for r in shared]
            )
            row[header] = f"{mean:{sign}.3f} [{lo:{sign}.3f}, {hi:{sign}.3f}]"
        out.append(row)
    return out


DIRECT_ARMS = ("oracle", "base", "base_T0.5", "sft_cont", "grpo")


def run_seed(
    seed: int, args: argparse.Namespace, group: str = "all"
) -> tuple[list[dict[str, Any]], dict[tuple[str, int], list[dict]], dict[str, float]]:
    """The arms of one training seed: (metric rows, per-question records, timings);
    `group` "direct" runs the direct-answer arms only, "cot" the CoT arm only."""
    import torch

    torch.set_num_threads(1)
    arms = args.arms.split(",")
    if group != "all":
        arms = run_seed_arms(args, group)
    direct, cot = args.task, args.cot_task
    rows: list[dict[str, Any]] = []
    records: dict[tuple[str, int], list[dict]] = {}
    timings: dict[str, float] = {}

    def run_arm(name: str, task: str, model: Path | None, temp: float = 1.0) -> None:
        started = time.perf_counter()
        metrics, recs = evaluate_arm(name, task, model, args, temp, seed)
        rows.append({"arm": name, "seed": seed, "task": task, **metrics})
        records[name, seed] = recs
        timings[f"eval_{name}_s{seed}"] = time.perf_counter() - started
        print(
            f"[{name} s{seed}] smECE={metrics['smece']:.4f} acc={metrics['acc']:.3f} "
            f"conf={metrics['conf']:.3f} ({timings[f'eval_{name}_s{seed}']:.0f}s)",
            flush=True,
        )

    def timed(label: str, fn: Any, *a: Any) -> Any:
        started = time.perf_counter()
        out = fn(*a)
        timings[f"{label}_s{seed}"] = time.perf_counter() - started
        print(f"[{label} s{seed}] {timings[f'{label}_s{seed}']:.0f}s", flush=True)
        return out

    if "oracle" in arms:
        run_arm("oracle", direct, None)
    if set(arms) & {"base", "base_T0.5", "sft_cont", "grpo"}:
        base = timed("sft_base", base_policy, direct, args, seed)
        if "base" in arms:
            run_arm("base", direct, base)
        if "base_T0.5" in arms:
            run_arm("base_T0.5", direct, base, 0.5)
        if "sft_cont" in arms:
            run_arm(
                "sft_cont", direct, timed("sft_cont", sft_continuation, base, direct, args, seed)
            )
        if "grpo" in arms:
            rl_model, summary = timed("grpo", grpo_policy, direct, args, seed)
            run_arm("grpo", direct, rl_model)
            rows[-1]["rl_test_accuracy"] = summary.get("test_accuracy")
    if "cot_base" in arms:
        run_arm("cot_base", cot, timed("sft_cot", base_policy, cot, args, seed))
    return rows, records, timings


def run_seed_arms(args: argparse.Namespace, group: str) -> list[str]:
    """The arms of `--arms` that `run_seed(..., group)` runs."""
    return [a for a in args.arms.split(",") if (a in DIRECT_ARMS) == (group == "direct")]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.runs_dir = str(Path(args.runs_dir).resolve())  # Ray workers run in other folders
    rows: list[dict[str, Any]] = []
    records: dict[tuple[str, int], list[dict]] = {}
    timings: dict[str, float] = {}
    if args.jobs > 1:  # (seed, direct | cot) units in parallel processes, single-threaded
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        groups = [g for g in ("direct", "cot") if run_seed_arms(args, g)]
        units = [(seed, g) for seed in args.seed_list for g in groups]
        ctx = mp.get_context("spawn")
        with ProcessPoolExecutor(min(args.jobs, len(units)), mp_context=ctx) as pool:
            parts = list(
                pool.map(
                    run_seed, [u[0] for u in units], [args] * len(units), [u[1] for u in units]
                )
            )
    else:
        parts = [run_seed(seed, args) for seed in args.seed_list]
    for seed_rows, seed_records, seed_timings in parts:
        rows += seed_rows
        records.update(seed_records)
        timings.update(seed_timings)
    order = args.arms.split(",")
    rows.sort(key=lambda r: (order.index(r["arm"]), r["seed"]))
    for row in rows:
        if row["arm"] != "base" and ("base", row["seed"]) in records:
            recs, base_recs = records[row["arm"], row["seed"]], records["base", row["seed"]]
            row["delta"] = paired_delta(recs, base_recs, args.boot)
    command = " ".join([Path(sys.executable).name, *sys.argv])
    summary_rows = across_seeds(rows)
    summary_cols = [Column("arm"), Column("task"), Column("seeds", spec="d")]
    summary_cols += [Column(h) for _, h, _ in ACROSS] + [Column(h) for _, h, _ in PAIRED]
    path = write_table(
        Path(args.runs_dir),
        rows,
        PER_SEED,
        name="calibration_study",
        title=f"Per training seed ({args.split} questions, M = {args.samples})",
        more=[Table(summary_rows, summary_cols, "Across training seeds: mean [95% t CI]")],
        footer=f"command: {command}",
    )
    print("\n" + path.read_text())
    out = Path(args.runs_dir) / "calibration_study.json"
    out.write_text(
        json.dumps(
            {"args": vars(args), "rows": rows, "across_seeds": summary_rows, "timings": timings},
            indent=2,
            default=str,
        )
    )
    print(f"timings (s): {json.dumps({k: round(v) for k, v in timings.items()})}\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
