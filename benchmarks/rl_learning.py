"""Held-out accuracy vs RL step: `rayworks run grpo` against TRL's GRPOTrainer, same everything.

The peer on LEARNING (benchmarks/rl_step.py is the one on speed). Both sides train the very
same base folder (`base_models(cfg, <runs-dir>/cache)`, built once before either side) on
the same prompts in the same order with the same reward and hyperparameters, all taken from
one `RLConfig`: the `grpo` pipeline's defaults (its learning preset) plus `--set` overrides,
so the benchmark follows the preset when it changes. Both are scored by OUR evaluator
(`rl/evaluate.evaluate_split`) at step 0, every `learner.eval_every` steps and the last
step, on the same val/test prompts with the same sampling seeds: greedy `test_accuracy`,
`test_sampled_accuracy` (k = eval.samples_per_prompt samples at the rollout temperature),
`test_pass_at_k`, `test_kl_base`, `test_entropy`, `test_response_len`, ... over `--seeds`
seeds, reported as means with 95% t-intervals.

  ours  `python -m rayworks run grpo --set seed=S --set policy.init_from=<base> --runs-dir D
        --no-progress` (plus every --set), one subprocess per seed (embedded Ray: one hf
        engine actor and one Ray Train learner, 1 torch thread each by default); the eval
        records come from the run's metrics.jsonl. (`rayworks run` has no --seed flag:
        the seed is the config's `seed` key, as `rayworks bench` sets it.)
  TRL   GRPOTrainer in a subprocess of this script (`--trl-worker`, no Ray), with
        learner.threads_per_worker torch threads (1 by default). A TrainerCallback builds
        one `HFEngine(base)` and a frozen `load_causal_lm(base)` reference in the same
        process before training; at each eval step it points `engine.model` at the live
        `trainer.model` (eval mode while evaluating, then restored) and calls
        `evaluate_split` on every `eval.splits` split exactly as our learner does.

Knob mapping (ours -> TRL 1.16, checked against trl/trainer/grpo_trainer.py; benchmarks/
trl_peer.py `grpo_args` builds it; the output lists the values TRL actually received):

  rollout.group_size G                -> num_generations = G; the train dataset holds our
                                         run's prompt sequence (step s: pool rows
                                         `batch_rows(len(pool), prompts_per_step, seed, s)`,
                                         learner.StepDriver.prompts) with shuffle_dataset=False:
                                         RepeatSampler then yields rows in order, each G times
                                         in a row, prompts_per_step unique rows per generation.
                                         The worker checks that the reward function saw exactly
                                         that sequence, one call per RL step, G-row groups.
  prompts_per_step x G rows per step  -> per_device_train_batch_size = rows / minibatches,
                                         steps_per_generation = loss.minibatches,
                                         gradient_accumulation_steps = 1: one generation per RL
                                         step; with minibatches=1 (the default) ONE optimizer
                                         step sees all rows, as ours.
  loss.ppo_epochs                     -> num_iterations; max_steps = learner.max_steps x
                                         ppo_epochs x minibatches optimizer steps.
  loss.agg token-mean                 -> loss_type="dapo": sum over the batch's tokens / the
                                         active tokens of the (global, accumulated) generation
                                         batch, i.e. our token mean over the optimizer step's
                                         rows ("bnpo", the local batch's tokens, is the same
                                         here and is used when minibatches > 1; "grpo" is
                                         per-sequence means, our seq-mean-token-mean).
  loss.grpo_scale=true                -> scale_rewards="group" (false -> "none").
  loss.eps_low / eps_high             -> epsilon / epsilon_high (clip-higher).
  loss.kl_coef                        -> beta (TRL's KL is k3 against a frozen copy of the
                                         base; 0 loads no reference, like ours).
  loss.entropy_coef                   -> entropy_coef: TRL 1.16 has one (loss -= coef x the
                                         mean per-token entropy at the sampling temperature,
                                         our token-mean bonus).
  rollout.sampling.temperature        -> temperature: TRL samples at it and scores
                                         logprobs of logits / temperature (add_fused_lm_head),
                                         as our engine and learner do.
  rollout.sampling.top_p              -> top_p (1 by default); top_k = 0 (off);
                                         repetition_penalty = 1.
  rollout.sampling.max_new_tokens     -> max_completion_length (EOS counted in both).
  learner.lr, warmup_steps, schedule  -> our own LambdaLR over our `learner.lr_at`, one value
                                         per RL step (HF's warmup starts at lr 0, ours at
                                         lr / warmup_steps); learning_rate /
                                         lr_scheduler_type / warmup_steps are set to HF's
                                         nearest built-ins for the record. The worker checks
                                         the lr of every optimizer step.
  learner.weight_decay                -> our AdamW: torch.optim.AdamW(all parameters, lr,
                                         weight_decay), passed as `optimizers=` (HF's own
                                         AdamW would exempt biases and norms from decay).
  learner.grad_clip                   -> max_grad_norm (0 = off on both sides).
  seed S                              -> GRPOConfig(seed=S); TRL's train dataset is built
                                         from seed S's prompt order.
  also                                   use_cpu=True, bf16=False (fp32 like ours),
                                         use_vllm=False, report_to="none", save_strategy="no",
                                         gradient_checkpointing=False, mask_truncated_
                                         completions=False, importance_sampling_level="token".

Mismatches that remain (also written to the output, with any that the config adds):
  - group std: TRL divides by the Bessel-corrected std + 1e-4, ours by the population std +
    1e-6, so TRL's advantages are sqrt((G-1)/G) (0.935 at G=8) times ours, uniformly. Adam
    makes a uniform loss scale nearly irrelevant; it moves where grad clipping starts, and a
    KL or entropy term weighs 1/0.935 more relative to the policy term in TRL.
  - sampling streams are not transferable: ours seeds its engine per step
    (seed x 1_000_003 + step), TRL samples from torch's global RNG (seeded by
    GRPOConfig(seed)); same distribution, different draws. Evaluation draws are identical
    on both sides (our evaluator's fixed seeds).
  - generation code: TRL `model.generate` vs our KV-cache loop (same tempered softmax, same
    EOS ids); TRL's loss forward passes no position_ids, so left-padded prompts sit at
    shifted positions, harmless for our RoPE decoder (relative positions unchanged).
  - pi_old: with one update per generation TRL uses the current logprobs, detached
    (ratio exactly 1); ours uses the engine's logprobs (gap ~1e-7, rollout_logp_gap).

The final comparison is not paired (different sampling streams): "ours within TRL's
interval or above" asks whether our mean at the last step is >= the lower end of TRL's
95% t-interval.

    python benchmarks/rl_learning.py [--seeds 3] [--set KEY=VALUE ...] [--only both|ours|trl]
        [--runs-dir runs/bench-rl-learning] [--out benchmarks/results/rl_learning.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import trl_peer

from rayworks.platform.stats import mean_ci

ROOT = Path(__file__).resolve().parent
DEFAULT_OUT = ROOT / "results" / "rl_learning.json"
# --quick: the script end to end in a few minutes (user --set overrides still win)
QUICK = [
    "learner.max_steps=3",
    "learner.eval_every=2",
    "learner.checkpoint_every=3",
    "rollout.prompts_per_step=4",
    "eval.n_val=8",
    "eval.n_test=16",
    "eval.samples_per_prompt=2",
    "eval.samples=2",
]
TABLES = ["test_accuracy", "test_sampled_accuracy"]  # a table per eval step for each
FINAL = [
    "test_accuracy",
    "test_sampled_accuracy",
    "test_pass_at_k",
    "test_kl_base",
    "test_entropy",
    "test_response_len",
    "val_accuracy",
    "val_sampled_accuracy",
]
SIDES = ("ours", "trl")
LABEL = {"ours": "ours", "trl": "TRL"}


# --- statistics and report (pure; tests/test_bench_rl_learning.py) ------------------------


def t_interval(values: list[float]) -> dict[str, Any]:
    """Mean and two-sided 95% Student-t interval of `values` (no interval for one value)."""
    finite = [v for v in values if isinstance(v, int | float) and math.isfinite(v)]
    out: dict[str, Any] = {"values": values, "n": len(finite), "mean": None, "ci95": None}
    if not finite:
        return out
    out["mean"] = statistics.fmean(finite)
    if len(finite) > 1:
        _, lo, hi = mean_ci(finite)
        out["ci95"] = [lo, hi]
    return out


def fmt(stat: dict[str, Any] | None, digits: int = 3) -> str:
    if not stat or stat["mean"] is None:
        return "-"
    if stat["ci95"] is None:
        return f"{stat['mean']:.{digits}f} (n={stat['n']})"
    lo, hi = stat["ci95"]
    return f"{stat['mean']:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def curve_stats(runs: dict[str, dict], metric: str) -> dict[str, dict[str, Any]]:
    """{step: t_interval over seeds} of `metric` from per-seed eval curves."""
    steps = sorted({int(s) for run in runs.values() for s in run["curve"]})
    return {
        str(s): t_interval(
            [
                run["curve"][str(s)][metric]
                for run in runs.values()
                if metric in run["curve"].get(str(s), {})
            ]
        )
        for s in steps
    }


def verdict(ours: dict[str, Any] | None, trl: dict[str, Any] | None) -> str:
    """'ours within TRL's interval or above' at one step (not paired)."""
    if not ours or not trl or ours["mean"] is None or trl["mean"] is None:
        return "n/a (a side is missing)"
    m = ours["mean"]
    if trl["ci95"] is None:
        ok = m >= trl["mean"]
        return (
            f"{'yes' if ok else 'no'}: ours {m:.3f} {'>=' if ok else '<'} TRL "
            f"{trl['mean']:.3f} (1 seed: no interval)"
        )
    lo, hi = trl["ci95"]
    if m > hi:
        return f"yes: ours {m:.3f} is above TRL's [{lo:.3f}, {hi:.3f}]"
    if m >= lo:
        return f"yes: ours {m:.3f} is within TRL's [{lo:.3f}, {hi:.3f}]"
    return f"no: ours {m:.3f} is below TRL's [{lo:.3f}, {hi:.3f}]"


def markdown(results: dict[str, Any]) -> str:
    stats, lines = results["stats"], []
    n = {side: len(results["runs"].get(side, {})) for side in SIDES}
    lines.append(
        f"## RL learning: ours (`grpo`) vs TRL {results['versions'].get('trl', '-')} GRPOTrainer\n"
    )
    lines.append(f"Seeds: ours {n['ours']}, TRL {n['trl']}; mean [95% t-interval] over seeds.")
    lines.append(f"Config: RLConfig defaults + {results['overrides'] or 'no overrides'}.\n")
    for metric in TABLES:
        lines += [f"### {metric}\n", "| step | ours | TRL |", "|---:|---|---|"]
        steps = sorted({int(s) for side in SIDES for s in stats.get(side, {}).get(metric, {})})
        for s in steps:
            row = [fmt(stats.get(side, {}).get(metric, {}).get(str(s))) for side in SIDES]
            lines.append(f"| {s} | {row[0]} | {row[1]} |")
        lines.append("")
    final = results["final"]
    lines += [
        f"### Final step ({final['step']}): ours within TRL's interval or above?\n",
        "| metric | ours | TRL | ours within TRL's interval or above |",
        "|---|---|---|---|",
    ]
    for metric, row in final["metrics"].items():
        lines.append(f"| {metric} | {fmt(row['ours'])} | {fmt(row['trl'])} | {row['verdict']} |")
    lines += [
        "",
        "### Wall time per run\n",
        "| side | seed | wall s | train s/step | eval s (all evals) | load 1m before |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for side in SIDES:
        for seed, run in results["runs"].get(side, {}).items():
            lines.append(
                f"| {LABEL[side]} | {seed} | {run['wall_s']:.0f} | {run['step_s']:.2f} | "
                f"{_num(run.get('eval_s'))} | {run['load_avg_1m_before']:.1f} |"
            )
    lines += ["", "### Notes\n", *[f"- {note}" for note in results["notes"]]]
    return "\n".join(lines)


def _num(value: Any) -> str:
    return f"{value:.0f}" if isinstance(value, int | float) else "-"


def plot(path: Path, results: dict[str, Any]) -> None:
    """Test greedy and sampled accuracy and train reward vs step, mean and 95% band per side."""
    from matplotlib.figure import Figure

    panels = [*TABLES, "train_reward"]
    fig = Figure(figsize=(15, 4))
    for i, metric in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        for side in SIDES:
            curve = results["stats"].get(side, {}).get(metric, {})
            steps = [s for s in sorted(curve, key=int) if curve[s]["mean"] is not None]
            if not steps:
                continue
            x = [int(s) for s in steps]
            (line,) = ax.plot(
                x,
                [curve[s]["mean"] for s in steps],
                marker="o",
                markersize=3,
                label=LABEL[side],
                linewidth=1.5 if metric != "train_reward" else 1,
            )
            if all(curve[s]["ci95"] for s in steps):
                lo, hi = ([curve[s]["ci95"][j] for s in steps] for j in (0, 1))
                ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_xlabel("RL step")
        ax.set_ylabel(metric)
        ax.set_title(f"{metric}: mean and 95% t-interval")
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# --- ours ---------------------------------------------------------------------------------


def run_ours(overrides: list[str], seed: int, base: Path, runs_dir: Path) -> dict[str, Any]:
    """One `rayworks run grpo` subprocess; its eval and train records from metrics.jsonl."""
    sets = [*overrides, f"seed={seed}", trl_peer.policy_override(base)]
    cmd = [
        sys.executable,
        "-m",
        "rayworks",
        "run",
        "grpo",
        "--runs-dir",
        str(runs_dir),
        "--no-progress",
        *[x for s in sets for x in ("--set", s)],
    ]
    root = runs_dir / "grpo"
    before = set(root.iterdir()) if root.is_dir() else set()
    load = os.getloadavg()[0]
    started = time.perf_counter()
    trl_peer.run_logged(cmd, dict(os.environ), runs_dir / "logs" / f"ours-seed{seed}.log")
    wall = time.perf_counter() - started
    new = [d for d in set(root.iterdir()) - before if (d / "metrics.jsonl").is_file()]
    if len(new) != 1:
        raise RuntimeError(f"expected one new run under {root}, found {sorted(map(str, new))}")
    run_dir = new[0]
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x]
    curve = {
        str(r["step"]): {k: v for k, v in r.items() if k.startswith(("test_", "val_"))}
        for r in records
        if any(k.endswith("_accuracy") and k.startswith(("test_", "val_")) for k in r)
    }
    train = {
        str(r["step"]): {
            "train_reward": r["reward"],
            "train_accuracy": r.get("accuracy"),
            "response_len": r.get("response_len"),
            "entropy": r.get("entropy"),
            "clip_frac": r.get("clip_frac"),
            "step_s": r.get("step_s"),
        }
        for r in records
        if "reward" in r
    }
    step_s = [t["step_s"] for t in train.values() if t["step_s"] is not None]
    return {
        "run_dir": str(run_dir),
        "wall_s": wall,
        "load_avg_1m_before": load,
        "step_s": statistics.fmean(step_s[1:] or step_s),
        "curve": curve,
        "train": train,
        "eval_s": None,
        "threads": "engine + learner, 1 torch thread each (defaults)",
    }


# --- TRL (a subprocess: its own torch threads, no Ray) -------------------------------------


def run_trl(cfg: Any, seed: int, base: Path, runs_dir: Path) -> dict[str, Any]:
    spec = {"cfg": cfg.model_dump(mode="json"), "base": str(base), "seed": seed}
    load = os.getloadavg()[0]
    out, wall = trl_peer.launch_worker(
        __file__,
        spec,
        threads=cfg.learner.threads_per_worker,
        log=runs_dir / "logs" / f"trl-seed{seed}.log",
    )
    out.update(wall_s=wall, load_avg_1m_before=load)
    return out


def trl_worker(spec: dict[str, Any]) -> None:
    """One GRPOTrainer run of `spec["cfg"]`, scored by our evaluator; writes its curves."""
    import torch

    torch.set_num_threads(spec["threads"])
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from rayworks.models import load_causal_lm, load_tokenizer
    from rayworks.pipelines.rl.config import RLConfig
    from rayworks.pipelines.rl.evaluate import evaluate_split
    from rayworks.pipelines.rl.learner import lr_at
    from rayworks.pipelines.rl.prompts import prompt_set
    from rayworks.pipelines.rl.rewards import CombinedReward
    from rayworks.platform.rollout import HFEngine

    cfg = RLConfig.model_validate(spec["cfg"])
    base, seed = spec["base"], spec["seed"]
    p, g, steps = cfg.rollout.prompts_per_step, cfg.rollout.group_size, cfg.learner.max_steps
    k = trl_peer.updates_per_step(cfg)
    data = prompt_set(cfg)  # the same pool, val and test as our run
    rows = trl_peer.step_rows(len(data.train), p, cfg.seed, steps)
    examples = [data.train[i] for i in rows]
    tokenizer = load_tokenizer(base)
    prompts = trl_peer.trl_prompts(cfg, tokenizer, [e.prompt for e in examples])
    dataset = Dataset.from_dict({"prompt": prompts, "row": list(range(len(rows)))})
    calls: list[dict[str, Any]] = []
    shuffle = (lambda i: cfg.seed * 1_000_003 + i) if cfg.shuffle_rewards else None
    reward = trl_peer.reward_function(examples, CombinedReward(cfg.reward_specs()), calls, shuffle)

    # our evaluator's pieces, built before the trainer (which seeds torch's RNG)
    chat = getattr(cfg.policy, "chat_template", True)  # as driver.run_rl passes it
    engine = HFEngine(base, threads=spec["threads"], chat_template=chat)
    ref = load_causal_lm(base).eval()
    model = load_causal_lm(base)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=cfg.learner.lr, weight_decay=cfg.learner.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: lr_at(i // k, cfg) / cfg.learner.lr
    )

    def generate(batch: list, n: int, sampling: Any) -> list:
        return engine.generate([e.prompt for e in batch], n, sampling)

    class OurEvaluator(TrainerCallback):
        """Our held-out metrics of the live TRL model at step 0, every eval_every, the last."""

        def __init__(self) -> None:
            self.trainer: Any = None
            self.curve: dict[str, dict[str, float]] = {}
            self.lrs: list[float] = []
            self.step_s: list[float] = []
            self.eval_s = 0.0
            self.started = 0.0

        def evaluate(self, step: int) -> None:
            started = time.perf_counter()
            live = self.trainer.model
            was_training = live.training
            live.eval()
            engine.model = live
            metrics: dict[str, float] = {}
            try:
                for split in cfg.eval.splits:
                    found, _ = evaluate_split(
                        generate,
                        data,
                        split,
                        cfg.rollout.sampling,
                        cfg.eval.samples_per_prompt,
                        engine.pad,
                        live,
                        ref,
                    )
                    metrics.update(found)
            finally:
                live.train(was_training)
            self.curve[str(step)] = metrics
            self.eval_s += time.perf_counter() - started

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.evaluate(0)

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step % k == 0:
                self.started = time.perf_counter()
            self.lrs.append(self.trainer.optimizer.param_groups[0]["lr"])

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step % k:
                return
            self.step_s.append(time.perf_counter() - self.started)
            done = state.global_step // k
            if done % cfg.learner.eval_every == 0 or done == steps:
                self.evaluate(done)

    evaluator = OurEvaluator()
    args = trl_peer.grpo_args(cfg, spec["output_dir"], seed)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[evaluator],
        optimizers=(optimizer, scheduler),
    )
    evaluator.trainer = trainer
    trainer.train()

    # the prompts, groups and lrs TRL actually used
    expected = [s * p + j for s in range(steps) for j in range(p) for _ in range(g)]
    seen = [r for call in calls for r in call["rows"]]
    if len(calls) != steps or seen != expected:
        first = next(
            (i for i, (a, b) in enumerate(zip(seen, expected, strict=False)) if a != b), None
        )
        raise RuntimeError(
            f"TRL did not train on our prompt sequence: {len(calls)} reward calls for {steps} "
            f"steps, {len(seen)} rows for {len(expected)}, first difference at row {first}: "
            f"saw {seen[: 2 * g]}..., expected {expected[: 2 * g]}..."
        )
    want = [lr_at(i // k, cfg) for i in range(steps * k)]
    if (
        len(evaluator.lrs) != len(want)
        or max(abs(a - b) for a, b in zip(evaluator.lrs, want, strict=True)) > 1e-12
    ):
        raise RuntimeError(f"TRL's lrs {evaluator.lrs[:5]}... differ from ours {want[:5]}...")
    logs = {int(e["step"]): e for e in trainer.state.log_history if "step" in e and "loss" in e}
    train = {}
    for s, call in enumerate(calls):
        entry = logs.get((s + 1) * k, {})
        train[str(s + 1)] = {
            "train_reward": statistics.fmean(call["rewards"]),
            "response_len": call["tokens"] / len(call["rows"]),
            "entropy": entry.get("entropy"),
            "clip_frac": entry.get("clip_ratio/region_mean"),
            "grad_norm": entry.get("grad_norm"),
            "step_s": evaluator.step_s[s] if s < len(evaluator.step_s) else None,
        }
    received = {
        key: getattr(args, key)
        for key in (
            "num_generations",
            "per_device_train_batch_size",
            "steps_per_generation",
            "generation_batch_size",
            "gradient_accumulation_steps",
            "num_iterations",
            "max_steps",
            "shuffle_dataset",
            "max_completion_length",
            "temperature",
            "top_p",
            "top_k",
            "epsilon",
            "epsilon_high",
            "beta",
            "loss_type",
            "scale_rewards",
            "entropy_coef",
            "learning_rate",
            "lr_scheduler_type",
            "warmup_steps",
            "weight_decay",
            "max_grad_norm",
            "seed",
            "bf16",
            "use_cpu",
        )
    }
    out = {
        "curve": evaluator.curve,
        "train": train,
        "step_s": statistics.fmean(evaluator.step_s[1:] or evaluator.step_s),
        "eval_s": evaluator.eval_s,
        "threads": f"{torch.get_num_threads()} (one process)",
        "checks": {
            "prompt_order_and_groups": "ok: one reward call per step, rows in our "
            "order, each prompt's G completions contiguous",
            "lr_per_optimizer_step": "ok: equal to learner.lr_at",
        },
        "grpo_config": received,
    }
    Path(spec["out"]).write_text(json.dumps(out))


# --- main ---------------------------------------------------------------------------------


def notes_for(cfg: Any) -> list[str]:
    """The mismatches that remain for `cfg` (module docstring), and what the config adds."""
    g = cfg.rollout.group_size
    notes = [
        f"group std: TRL uses the Bessel-corrected std + 1e-4, ours the population std + 1e-6: "
        f"TRL's advantages are {math.sqrt((g - 1) / g):.3f} x ours at G={g} (uniform; nearly "
        "neutral under Adam, shifts where grad clipping starts).",
        "sampling streams differ (ours: engine seeded by seed x 1_000_003 + step; TRL: torch's "
        "global RNG from GRPOConfig(seed)); evaluation draws are identical (our evaluator).",
        "TRL generates with model.generate and scores with no position_ids (left-padded prompts "
        "shifted; harmless for RoPE); pi_old = current logprobs detached (ratio 1) vs our "
        "engine's logprobs (gap ~1e-7).",
    ]
    lo = cfg.loss
    if lo.entropy_coef:
        notes.append(
            f"loss.entropy_coef={lo.entropy_coef} is non-zero: TRL 1.16 gets "
            f"entropy_coef={lo.entropy_coef} (a token-mean entropy bonus)"
            + ("" if lo.agg == "token-mean" else "; ours aggregates it per sequence")
        )
    else:
        notes.append("entropy bonus: off on both sides (loss.entropy_coef=0 -> entropy_coef=0).")
    if lo.kl_coef and lo.kl_estimator != "k3":
        notes.append(f"KL: ours {lo.kl_estimator}, TRL always k3.")
    if lo.minibatches > 1:
        notes.append(
            "minibatches > 1: TRL shuffles the generation batch once and reuses that "
            "split every iteration; ours reshuffles each epoch."
        )
    if cfg.learner.num_workers > 1:
        notes.append(
            "learner.num_workers > 1: ours averages per-rank token means (TRL: 1 process)."
        )
    if cfg.rollout.engine != "hf":
        notes.append(
            f"ours samples with rollout.engine={cfg.rollout.engine}; TRL with HF generate."
        )
    return notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 per side")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        dest="overrides",
        metavar="KEY=VALUE",
        help="RLConfig override (as `rayworks run --set`)",
    )
    parser.add_argument(
        "--runs-dir",
        type=Path,
        default=Path("runs/bench-rl-learning"),
        help="our runs, logs and the cached base policy (reused across runs)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--only", choices=["both", "ours", "trl"], default="both")
    parser.add_argument(
        "--quick", action="store_true", help=f"check end to end: 1 seed, {' '.join(QUICK)}"
    )
    parser.add_argument("--trl-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trl_worker:
        trl_worker(trl_peer.read_spec(args.trl_worker))
        return
    overrides = [*(QUICK if args.quick else []), *args.overrides]
    seeds = list(range(1 if args.quick else args.seeds))
    if not seeds:
        parser.error("--seeds must be at least 1")
    sides = list(SIDES) if args.only == "both" else [args.only]
    runs_dir = args.runs_dir.absolute()
    cfg = trl_peer.rl_config(overrides)
    problems = trl_peer.unmappable(cfg)
    if problems and "trl" in sides:
        parser.error("TRL's GRPOTrainer cannot run " + "; ".join(problems))

    import torch
    import transformers

    from rayworks.pipelines.rl.base import base_models, base_summary

    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    if "trl" in sides:
        import trl

        versions["trl"] = trl.__version__
    print(f"building/finding the base policy under {runs_dir / 'cache'} ...", flush=True)
    started = time.perf_counter()
    base, _ = base_models(cfg, runs_dir / "cache")
    print(f"base {base} ({time.perf_counter() - started:.0f} s): {base_summary(base)}", flush=True)
    results: dict[str, Any] = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "versions": versions,
        "overrides": overrides,
        "seeds": seeds,
        "base": str(base),
        "base_summary": base_summary(base),
        "config": cfg.model_dump(mode="json"),
        "notes": notes_for(cfg),
        "runs": {side: {} for side in sides},
    }
    for seed in seeds:  # sides alternate per seed, so load drift hits both
        seed_cfg = trl_peer.rl_config([*overrides, f"seed={seed}"])
        for side in sides:
            print(
                f"[seed {seed}] {LABEL[side]}: {seed_cfg.learner.max_steps} steps ...", flush=True
            )
            if side == "ours":
                run = run_ours(overrides, seed, base, runs_dir)
            else:
                run = run_trl(seed_cfg, seed, base, runs_dir)
                results.setdefault("trl_grpo_config", run.pop("grpo_config"))
                results.setdefault("trl_checks", run.pop("checks"))
            results["runs"][side][str(seed)] = run
            last = run["curve"][max(run["curve"], key=int)]
            print(
                f"[seed {seed}] {LABEL[side]}: {run['wall_s']:.0f} s; final test_accuracy "
                f"{last.get('test_accuracy', float('nan')):.3f}, test_sampled_accuracy "
                f"{last.get('test_sampled_accuracy', float('nan')):.3f}",
                flush=True,
            )
    stats: dict[str, dict[str, Any]] = {}
    for side in sides:
        runs = results["runs"][side]
        metrics = sorted({m for run in runs.values() for rec in run["curve"].values() for m in rec})
        stats[side] = {m: curve_stats(runs, m) for m in metrics}
        trains = {seed: {"curve": run["train"]} for seed, run in runs.items()}
        stats[side]["train_reward"] = curve_stats(trains, "train_reward")
    results["stats"] = stats
    common = [set(stats[side].get("test_accuracy", {})) for side in sides]
    final_step = (
        max(set.intersection(*common), key=int) if common and set.intersection(*common) else None
    )
    results["final"] = {
        "step": final_step,
        "metrics": {
            m: {
                "ours": stats.get("ours", {}).get(m, {}).get(str(final_step)),
                "trl": stats.get("trl", {}).get(m, {}).get(str(final_step)),
                "verdict": verdict(
                    stats.get("ours", {}).get(m, {}).get(str(final_step)),
                    stats.get("trl", {}).get(m, {}).get(str(final_step)),
                )
                if m.endswith(("accuracy", "pass_at_k"))
                else "- (descriptive)",
            }
            for m in FINAL
        },
    }
    if "trl" in sides:
        results["notes"].append(
            "TRL received: " + ", ".join(f"{k}={v}" for k, v in results["trl_grpo_config"].items())
        )
        results["notes"] += [f"checked in the TRL run: {v}" for v in results["trl_checks"].values()]
        norms = [
            t["grad_norm"]
            for run in results["runs"]["trl"].values()
            for t in run["train"].values()
            if t.get("grad_norm") is not None
        ]
        if norms and cfg.learner.grad_clip:
            clipped = sum(x > cfg.learner.grad_clip for x in norms)
            results["notes"].append(
                f"TRL's pre-clip grad norm: median {statistics.median(norms):.3g}, max "
                f"{max(norms):.3g} vs max_grad_norm {cfg.learner.grad_clip:g}: clipped in "
                f"{clipped} of {len(norms)} optimizer steps (with no clipping, the group-std "
                "scale difference is absorbed by Adam)"
            )
    text = markdown(results)
    print()
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    args.out.with_suffix(".md").write_text(text + "\n")
    plot(args.out.with_suffix(".png"), results)
    print(f"\nwritten: {args.out}, {args.out.with_suffix('.md')}, {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
