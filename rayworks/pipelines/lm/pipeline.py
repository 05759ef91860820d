"""The `lm` driver: data and tokenizer on the driver, training on a Ray Train worker group."""

from __future__ import annotations

from typing import Any

from rayworks.models import load_tokenizer
from rayworks.pipelines.lm.config import LMConfig
from rayworks.pipelines.lm.data import LMData, prepare
from rayworks.pipelines.lm.train_loop import train_loop
from rayworks.platform.context import RunContext
from rayworks.platform.registry import pipeline
from rayworks.platform.trainer import fit_metrics, torch_trainer


def prepare_run(cfg: LMConfig, ctx: RunContext) -> tuple[Any, LMData]:
    """Tokenizer + tensors; a resumed run reuses its saved tokenizer so ids stay the same."""
    tok_dir = ctx.artifacts_dir / "tokenizer"
    tokenizer, data = prepare(cfg, load_tokenizer(tok_dir) if tok_dir.is_dir() else None)
    tokenizer.save_pretrained(tok_dir)
    if data.rejects:
        ctx.write_jsonl("rejects.jsonl", data.rejects)
    return tokenizer, data


def data_counts(data: LMData) -> dict[str, float]:
    """Reconciling counts: rows read = rows kept + rows rejected (with reasons on disk)."""
    return {
        "rows_in": data.rows_in,
        "rows_rejected": len(data.rejects),
        "train_rows": len(data.train_ids),
        "val_rows": len(data.val_ids),
    }


@pipeline("lm", config=LMConfig, kind="job", baseline="lm_plain", headline=("val_loss", "min"))
def run(cfg: LMConfig, ctx: RunContext) -> dict[str, float]:
    """Tiny Llama LM trained with Ray Train (DDP/gloo or DeepSpeed ZeRO), resumable."""
    import ray

    _, data = prepare_run(cfg, ctx)
    ctx.progress(cfg.train.max_steps, "lm")
    trainer = torch_trainer(
        train_loop,
        {"cfg": cfg.model_dump(mode="json"), "data": ray.put(data)},
        ctx,
        num_workers=cfg.train.num_workers,
        use_gpu=cfg.train.use_gpu,
        cpus_per_worker=cfg.train.cpus_per_worker,
        max_failures=cfg.train.max_failures,
    )
    metrics = fit_metrics(trainer)
    return {**metrics, **data_counts(data)}
