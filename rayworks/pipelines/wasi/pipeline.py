"""The `wasi`, `wasi_vanilla` and `wasi_lora` pipelines (one Ray task each).

A run pretrains (or reuses the cached) ViT on digits 0-4, then fine-tunes every setting of
its config on digits 5-9 with a new head, one after the other in the same process (so CPU
time ratios come from one process), and writes `artifacts/settings.jsonl` (one record per
setting, per-layer details included), `artifacts/table.md` (and its rows as
`artifacts/table.jsonl`) and `artifacts/wasi.png`.
`wasi_vanilla` and `wasi_lora` are declared in-run: the method run fine-tunes them from the
same base in the same process (its time ratios and pass rule need that), so bench reads
their rows from its summary (`vanilla_` / `lora_` keys) instead of fine-tuning them twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rayworks.models.vit_train import pretrained_vit
from rayworks.pipelines.wasi.config import WASIConfig
from rayworks.pipelines.wasi.finetune import (
    SettingSpec,
    load_target_data,
    plan_settings,
    run_setting,
)
from rayworks.pipelines.wasi.report import plot, summarize, write_table
from rayworks.platform.context import RunContext
from rayworks.platform.registry import Arm, InRun, pipeline

REPORT = ("act_ratio", "train_gmacs", "cpu_s_per_step", "acc_gap_vs_vanilla", "pass_rule")
ONE_SETTING = ("settings=[wasi]", "eps_list=[0.8]", "headline_eps=0.8")  # ablation arms
IN_RUN = "fine-tuned in the method run from the same base, in one process (time ratios)"
LOG_KEYS = (
    "test_accuracy",
    "val_accuracy",
    "cpu_s_per_step",
    "act_bytes_per_layer",
    "weight_bytes_per_layer",
    "saved_bytes_per_layer",
    "saved_bytes_total",
    "saved_bytes_wrapped",
    "train_macs_per_step",
    "infer_macs_per_image",
    "rss_train_mb",
)


def base_model(cfg: WASIConfig, ctx: RunContext) -> Path:
    """The cached ViT pretrained on `source_classes` (shared by every arm of a bench)."""
    spec = cfg.model.model_copy(update={"n_classes": len(cfg.source_classes)})
    train = cfg.pretrain.model_copy(update={"seed": cfg.seed})
    return pretrained_vit(ctx.cache_root, spec, train, cfg.data, cfg.source_classes)


def run_wasi(cfg: WASIConfig, ctx: RunContext) -> dict[str, float]:
    base = base_model(cfg, ctx)
    data = load_target_data(cfg)
    settings = plan_settings(cfg)
    steps_each = cfg.finetune.epochs * -(-len(data.train) // cfg.finetune.batch_size)
    ctx.progress(steps_each * len(settings), f"{ctx.pipeline}: {len(settings)} settings")
    rows: list[dict[str, Any]] = []
    for index, spec in enumerate(settings):
        offset = index * steps_each

        def on_step(step: int, loss: float, offset: int = offset) -> None:
            if step % 10 == 0 or step == steps_each:
                ctx.record(offset + step, train_loss=loss)

        row = run_setting(base, spec, cfg, data, cfg.seed, on_step)
        ctx.log(
            offset + steps_each, setting=row["setting"], **{k: row[k] for k in LOG_KEYS if k in row}
        )
        rows.append(row)
    ctx.write_jsonl("settings.jsonl", rows)
    write_table(ctx.artifacts_dir, rows)
    plot(rows, ctx.artifacts_dir / "wasi.png")
    method = cfg.method
    eps = {"wasi": cfg.headline_eps, "wasi_factors": cfg.headline_eps, "wsi": cfg.ablation_eps}
    update = "factors" if method == "wasi_factors" else cfg.update
    label = SettingSpec(method, eps.get(method), update).label
    return summarize(rows, label)


@pipeline(
    "wasi",
    config=WASIConfig,
    kind="task",
    arms={
        "wasi_vanilla": Arm(
            "Vanilla fine-tuning of every parameter: WASI's baseline (same base, data, seed).",
            {"settings": ["vanilla"]},
            in_run=InRun(IN_RUN, member="vanilla", prefix="vanilla_", field="settings"),
        ),
        "wasi_lora": Arm(
            "LoRA (r=4 on fc1 / fc2, base frozen): WASI's parameter-efficient baseline.",
            {"settings": ["lora"]},
            in_run=InRun(IN_RUN, member="lora", prefix="lora_", field="settings"),
        ),
    },
    headline=("test_accuracy", "max"),
    resources={"CPU": 1},
    ablations={
        "attn": ("targets=[fc1,fc2,q,k,v,o]", *ONE_SETTING),
        "act95": ("act_energy=0.95", *ONE_SETTING),
        "factors": ("update=factors", *ONE_SETTING),
    },
    report=REPORT,
)
def run(cfg: WASIConfig, ctx: RunContext) -> dict[str, float]:
    """WASI on-device fine-tuning (factored weights + Tucker activations) of a digits ViT."""
    return run_wasi(cfg, ctx)
