"""`rayworks run speckv` / `rayworks bench speckv`: draft-based KV dropping and prompt
compression (Galim et al., "Draft-based Approximate Inference for LLMs", ICLR 2026).

One `speckv` run trains (or reuses, by config hash) the target, the draft and the weak draft,
then evaluates every KV row (SpecKV, SnapKV, SpecKV-weak, oracle, H2O-lite, StreamingLLM,
random), every prompt-compression row (SpecPC with lookahead 1 / 0 / 8, recency, random,
target-attention oracle) and SpecKV-PC at every budget C on the same test prompts. It logs
one record per budget (step = C), writes `table.jsonl`, `table.md` and
`accuracy_vs_budget.png`, and its summary holds the headline (the `method` row's accuracy
at `budget`), per-budget accuracies and recalls, and paired SpecKV - SnapKV differences
with 95% CIs plus the methods file's pass rule. `snapkv` evaluates SnapKV alone.
"""

from __future__ import annotations

import json
import math
import time

import numpy as np
import torch

from rayworks.pipelines.speckv.config import SnapKVConfig, SpecKVConfig
from rayworks.pipelines.speckv.evaluate import PromptResult, evaluate_prompt
from rayworks.pipelines.speckv.report import paired_summary, table_rows, write_report
from rayworks.pipelines.speckv.tasks import encode, make_examples, make_tokenizer
from rayworks.pipelines.speckv.train import cached_models, load_models
from rayworks.platform.context import RunContext
from rayworks.platform.registry import pipeline

REPORT = ("accuracy_full", "speckv_minus_snapkv", "recall", "pass_rule", "draft_overhead")
TEST_SEED_OFFSET = 1_000_003  # test prompts come from a stream the training never draws


def run_grid(cfg: SpecKVConfig, ctx: RunContext) -> dict[str, float]:
    torch.set_num_threads(cfg.threads)
    t0 = time.perf_counter()
    ctx.progress(cfg.target_train.steps + cfg.draft_train.steps, "speckv: train target + draft")
    dirs = cached_models(
        cfg.target,
        cfg.draft,
        cfg.tasks,
        cfg.target_train,
        cfg.draft_train,
        cfg.weak_fraction,
        cfg.seed,
        ctx.cache_root,
        log=lambda step, rec: ctx.log(step, **rec),
    )
    train_seconds = time.perf_counter() - t0
    models = load_models(dirs)
    tok = make_tokenizer()
    examples = make_examples(cfg.tasks, cfg.n_prompts, cfg.seed + TEST_SEED_OFFSET)
    generator = torch.Generator().manual_seed(cfg.seed)
    cascade = {str(cfg.cascade_pc_budget): cfg.cascade_kv_budgets} if cfg.cascade_kv_budgets else {}
    ctx.progress(len(examples), f"speckv: evaluate {len(examples)} prompts")
    results: list[PromptResult] = []
    t0 = time.perf_counter()
    with torch.no_grad():
        for i, ex in enumerate(examples):
            prompt = torch.tensor([encode(tok, ex.prompt)])
            results.append(
                evaluate_prompt(
                    models,
                    prompt,
                    encode(tok, ex.answer),
                    ex.task,
                    sorted(cfg.budgets),
                    cfg.kv,
                    cfg.pc,
                    cfg.pc_rows,
                    cascade,
                    tok.eos_token_id,
                    generator,
                    cfg.kv_rows,
                )
            )
            if (i + 1) % max(1, len(examples) // 10) == 0:
                ctx.record(i + 1, prompts_done=i + 1)
    eval_seconds = time.perf_counter() - t0
    rows = table_rows(results)
    summary = paired_summary(results, cfg)
    for budget in sorted(cfg.budgets):
        at = {f"{r['row']}_accuracy": r["accuracy"] for r in rows if r["budget"] == budget}
        at.update(
            {
                f"{r['row']}_recall": r["recall"]
                for r in rows
                if r["budget"] == budget and not math.isnan(r["recall"])
            }
        )
        ctx.log(budget, accuracy=at[f"{cfg.method}_accuracy"], **at)
    write_report(ctx.artifacts_dir, rows, results, cfg)
    ctx.write_jsonl(
        "prompts.jsonl",
        [
            {
                "task": r.task,
                "n": r.n_prompt,
                "full_correct": r.full_correct,
                **{f"{k[0]}@{k[1]}": o.correct for k, o in r.outcomes.items()},
            }
            for r in results
        ],
    )
    (ctx.artifacts_dir / "models.json").write_text(json.dumps({k: str(v) for k, v in dirs.items()}))
    summary.update(
        train_seconds=train_seconds,
        eval_seconds=eval_seconds,
        n_prompts=float(len(results)),
        accuracy_full=float(np.mean([r.full_correct for r in results])),
        mean_prompt_tokens=float(np.mean([r.n_prompt for r in results])),
    )
    return summary


@pipeline(
    "speckv",
    config=SpecKVConfig,
    kind="task",
    baseline="snapkv",
    headline=("accuracy", "max"),
    resources={"CPU": 2},
    ablations={"no_pool": ("kv.pool=false",)},
    report=REPORT,
    curves=("accuracy",),
)
def run(cfg: SpecKVConfig, ctx: RunContext) -> dict[str, float]:
    """SpecKV (draft lookahead scores the KV cache) with SpecPC / SpecKV-PC and every baseline."""
    return run_grid(cfg, ctx)


@pipeline(
    "snapkv",
    config=SnapKVConfig,
    kind="task",
    headline=("accuracy", "max"),
    resources={"CPU": 2},
    report=("accuracy_full", "recall"),
    curves=("accuracy",),
)
def run_snapkv(cfg: SnapKVConfig, ctx: RunContext) -> dict[str, float]:
    """SnapKV (prompt-window attention scores the KV cache) on the same models and prompts."""
    return run_grid(cfg, ctx)
