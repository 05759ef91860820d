"""`rayworks run vulcan` / `rayworks bench vulcan`: class-specific ViTs by train-then-prune.

Vulcan (OpenReview 0xE0kNdGIz; official code CGCL-codes/Vulcan): take a ViT pretrained
on all classes, a target subset S and a pruning rate r. Pick the pruned widths from S's
activations and the heads' effective ranks (`budget.py`); cluster each FFN's neurons by
k-means on their fc1 rows and anchor each cluster at its most active neuron
(`clustering.py`); post-train on S with CE + collapse loss + truncated nuclear norm, the
multipliers raised by gradient ascent (`losses.py`, `posttrain.py`); then merge each
cluster into its anchor and cut every head by SVD (`prune.py`), exactly when the collapse
and rank penalties have converged. Baselines at the same architecture (`baselines.py`):
direct prune, and prune + fine-tune for the same steps.

Every trained arm (Vulcan, prune_ft, base_ft) picks its own post-training lr from the grid
`post.lrs` on S-val. Reconstructed (named in docs/vulcan.md): the digits scale of the
recipe, a harder digits task than the recipe's (see `config.py`), λ ascent lr 0.05,
width multiple 2, fixed anchors (the official code's effective behaviour), checkpoint
selection on S-val, one base shared by all seeds (`pretrain.seed`), no softmax-scale
compensation (our ViT's scale never changes). Artifacts: `table.jsonl`, `table.md`,
`vulcan.png`, `lr_selection.jsonl`, `checkpoints/pruned/` (safetensors).
"""

from __future__ import annotations

from typing import Any

import torch

from rayworks.data.digits import load_digits_splits
from rayworks.models.vit import ViT, save_vit
from rayworks.models.vit_train import accuracy, load_pretrained, pretrained_vit
from rayworks.pipelines.vulcan.activations import mean_ffn_activations
from rayworks.pipelines.vulcan.baselines import base_fine_tuned, direct_prune, prune_then_fine_tune
from rayworks.pipelines.vulcan.budget import plan_budget, prunable_ratio
from rayworks.pipelines.vulcan.clustering import cluster_neurons
from rayworks.pipelines.vulcan.config import VulcanConfig
from rayworks.pipelines.vulcan.measure import latency_ms, size_of
from rayworks.pipelines.vulcan.posttrain import LrChoice, run_steps, vulcan_on_val
from rayworks.pipelines.vulcan.report import claim_checks, write_plot, write_table
from rayworks.pipelines.vulcan.subtask import s_logit_accuracy, subtask
from rayworks.platform.context import RunContext
from rayworks.platform.registry import Arm, pipeline

REPORT = (
    "prune_gap",
    "base_test_accuracy",
    "base_ft_test_accuracy",
    "param_ratio",
    "macs_ratio",
    "speedup",
)


def derive(cfg: VulcanConfig, ctx: RunContext) -> tuple[dict[str, ViT], dict[str, Any]]:
    """Every model of the run by name (base first, the derived model last) and extras.

    Every trained arm is run once per lr of `post.lrs` and keeps the lr best on S-val
    (`posttrain.choose_on_val`); the per-lr S-val scores go to `lr_selection.jsonl`.
    """
    folder = pretrained_vit(ctx.cache_root, cfg.model, cfg.pretrain, cfg.data)
    base, base_stats = load_pretrained(folder)
    task = subtask(load_digits_splits(cfg.data), cfg.classes)
    acts = mean_ffn_activations(base, task.train.x)
    budget = plan_budget(base, acts, cfg.rate, cfg.width_multiple, cfg.width_rule)
    steps = run_steps(cfg, len(task.train))
    ctx.progress(steps * len(cfg.post.lrs), f"{cfg.method} r={cfg.rate} S={cfg.classes}")
    models: dict[str, ViT] = {"base": base}
    extras: dict[str, Any] = {
        "task": task,
        "history": [],
        "post_steps": float(steps),
        "base_all_class_test_accuracy": base_stats["test_accuracy"],
    }
    choices: dict[str, LrChoice[Any]] = {}
    if cfg.reference_ft:
        choices["base_ft"] = base_fine_tuned(base, task, cfg)
        models["base_ft"] = choices["base_ft"].result
    models["direct"] = direct_prune(base, acts, budget)
    if cfg.method == "prune_ft":
        choices["prune_ft"] = prune_then_fine_tune(base, acts, budget, task, cfg)
        models["prune_ft"] = choices["prune_ft"].result
    elif cfg.method == "vulcan":
        clusters = [
            cluster_neurons(b.fc1.weight, a, k, cfg.anchors, cfg.seed)
            for b, a, k in zip(base.blocks, acts, budget.ffn_dims, strict=True)
        ]
        choices["vulcan"] = vulcan_on_val(base, task, clusters, budget, cfg, ctx.log)
        selection = choices["vulcan"].result
        twin = ViT(base.spec)
        twin.load_state_dict(selection.unpruned)
        models["vulcan_unpruned"], models["vulcan"] = twin, selection.pruned
        extras.update(
            history=selection.history,
            selected_step=float(selection.step),
            val_gap_ok=float(selection.gap_ok),
        )
    rows = []
    for name, choice in choices.items():
        extras[f"{name}_lr"] = choice.lr
        extras[f"{name}_val_accuracy"] = choice.val[choice.lr]
        rows += [
            {"arm": name, "lr": lr, "val_accuracy": v, "chosen": lr == choice.lr}
            for lr, v in choice.val.items()
        ]
    extras["lr_selection"] = rows
    return models, extras


def run_vulcan(cfg: VulcanConfig, ctx: RunContext) -> dict[str, float]:
    """Derive `cfg.method`'s model for S, score every model of the run, write the table."""
    torch.set_num_threads(cfg.threads)
    ctx.seed_everything()
    models, extras = derive(cfg, ctx)
    task, derived, base = extras.pop("task"), models[cfg.method], models["base"]
    history, lr_rows = extras.pop("history"), extras.pop("lr_selection")
    ctx.write_jsonl("lr_selection.jsonl", lr_rows)
    speeds = latency_ms({"base": base, cfg.method: derived}, task.test.x, cfg.latency)
    rows = []
    for name, model in models.items():
        row = {"model": name, "test_accuracy": accuracy(model, task.test), **size_of(model)}
        if name in speeds:
            row["latency_ms"] = speeds[name]
        rows.append(row)
    acc = {r["model"]: r["test_accuracy"] for r in rows}
    mine, first = rows[-1], rows[0]
    summary: dict[str, float] = {
        "test_accuracy": mine["test_accuracy"],
        **{f"{name}_test_accuracy": a for name, a in acc.items() if name != cfg.method},
        "base_s_logit_test_accuracy": s_logit_accuracy(base, task.test, cfg.classes),
        "params": mine["params"],
        "macs": mine["macs"],
        "param_ratio": mine["params"] / first["params"],
        "macs_ratio": mine["macs"] / first["macs"],
        "prunable_ratio": prunable_ratio(base.spec, derived.spec),
        **extras,
    }
    if speeds:
        summary.update(
            latency_ms_per_1000=speeds[cfg.method],
            base_latency_ms_per_1000=speeds["base"],
            speedup=speeds["base"] / speeds[cfg.method],
        )
    if cfg.method == "vulcan":
        summary["prune_gap"] = 100 * (acc["vulcan_unpruned"] - acc["vulcan"])
        summary.update(claim_checks(summary, cfg.post.gap_tolerance))
    spec = derived.spec
    header = (
        f"{cfg.method}: S={cfg.classes}, r={cfg.rate}, widths={cfg.width_rule}, "
        f"seed={cfg.seed}; FFN {spec.ffn_dims}, QK {spec.qk_dims}, VO {spec.vo_dims}; "
        f"{summary['post_steps']:.0f} post-training steps."
    )
    write_table(ctx, rows, header)
    write_plot(ctx.artifacts_dir / "vulcan.png", rows, history)
    save_vit(derived, ctx.checkpoints_dir / "pruned")
    return summary


@pipeline(
    "vulcan",
    config=VulcanConfig,
    kind="task",
    arms={
        "vulcan_prune_ft": Arm(
            "Prune directly to Vulcan's architecture, then fine-tune on S for the same steps.",
            {"method": "prune_ft", "reference_ft": False},
        ),
        "vulcan_direct": Arm(
            "Prune directly (top-activation neurons + SVD truncation), no retraining.",
            {"method": "direct", "reference_ft": False},
        ),
    },
    headline=("test_accuracy", "max"),
    resources={"CPU": 1},
    ablations={
        "no_collapse": ("collapse=false", "reference_ft=false"),
        "no_tnnr": ("tnnr=false", "reference_ft=false"),
        "random_anchors": ("anchors=random", "reference_ft=false"),
        "uniform_width": ("width_rule=uniform", "reference_ft=false"),
    },
    report=REPORT,
)
def run(cfg: VulcanConfig, ctx: RunContext) -> dict[str, float]:
    """Vulcan: class-specific ViT by post-training (collapse + TNNR) then exact pruning."""
    return run_vulcan(cfg, ctx)
