"""LLaDA SFT of the masked diffusion LM, built once per config and shared by every arm.

The model folder is `ctx.cache_root / "dpad_model" / <hash>/` where the hash covers what
determines the weights (model size, tasks, training, gen lengths, seed), not the decoders:
`dpad`, `dpad_vanilla` and every ablation of one bench decode the very same model. The
build runs under a file lock (`locked_build`), logs its loss curve and progress in its own
run folder beside the model, and saves safetensors via `save_pretrained`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch

from rayworks.core.build_cache import digest, locked_build
from rayworks.models.diffusion_lm import build_diffusion_lm, diffusion_sft_loss
from rayworks.pipelines.dpad.config import DPadConfig
from rayworks.pipelines.dpad.tasks import BOS, EOS, MASK, PAD, VOCAB_SIZE, make_batch
from rayworks.platform.context import RunContext

LOG_EVERY = 25


def model_key(cfg: DPadConfig) -> str:
    """Hash of everything that determines the trained weights."""
    blob = {
        "model": cfg.model.model_dump(mode="json"),
        "data": cfg.data.model_dump(mode="json"),
        "train": cfg.train.model_dump(mode="json"),
        "gen_lengths": sorted(cfg.gen_lengths),
        "seed": cfg.seed,
    }
    return digest(json.dumps(blob, sort_keys=True))


def lr_at(step: int, cfg: DPadConfig) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    t = cfg.train
    if step < t.warmup:
        return t.lr * (step + 1) / t.warmup
    frac = (step - t.warmup) / max(1, t.steps - t.warmup)
    return t.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * frac)))


def train_model(cfg: DPadConfig, ctx: RunContext, out: Path) -> dict[str, float]:
    """SFT a fresh model with `cfg.train` and save it to `out`; returns the final losses."""
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    model = build_diffusion_lm(
        cfg.model, VOCAB_SIZE, MASK, BOS, EOS, PAD, init_std=cfg.train.init_std
    ).train()
    opt = torch.optim.AdamW(
        model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay
    )
    lengths = sorted(cfg.gen_lengths) if cfg.train.mixed_lengths else [max(cfg.gen_lengths)]
    lengths = sorted({*lengths, *cfg.train.extra_lengths})
    weights = np.array([1.0 / g if cfg.train.inverse_length else 1.0 for g in lengths])
    weights /= weights.sum()
    ctx.progress(cfg.train.steps, "dpad: LLaDA SFT of the masked diffusion LM")
    recent: list[float] = []
    for step in range(cfg.train.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        g = int(rng.choice(lengths, p=weights))
        x0, response = make_batch(cfg.train.batch_size, cfg.data, rng).sequences(g)
        loss = diffusion_sft_loss(model, x0, response, gen, cfg.train.stratified_t)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        recent = [*recent[-(LOG_EVERY - 1) :], float(loss.detach())]
        if (step + 1) % LOG_EVERY == 0 or step + 1 == cfg.train.steps:
            ctx.log(step + 1, loss=float(np.mean(recent)), lr=lr_at(step, cfg), gen_length=g)
    model.eval().save_pretrained(out, safe_serialization=True)
    return {"train_loss": float(np.mean(recent))}


def cached_model(cfg: DPadConfig, cache_root: Path) -> Path:
    """The trained model folder for `cfg` (trained on the first call, then reused)."""
    folder = cache_root / "dpad_model" / model_key(cfg)
    model_dir = folder / "artifacts" / "model"

    def build() -> None:
        ctx = RunContext(pipeline="dpad_model", run_dir=folder, seed=cfg.seed)
        for sub in (ctx.artifacts_dir, ctx.checkpoints_dir):
            sub.mkdir(parents=True, exist_ok=True)
        if ctx.metrics_path.exists():
            ctx.metrics_path.unlink()  # an interrupted earlier build
        ctx.write_config(cfg)
        summary = train_model(cfg, ctx, model_dir)
        ctx.write_summary(summary)

    locked_build(folder, model_dir / "config.json", build)
    return model_dir


def train_summary(model_dir: Path) -> dict[str, float]:
    """The cached build's summary (final training loss)."""
    path = model_dir.parent.parent / "summary.json"
    return json.loads(path.read_text()) if path.is_file() else {}
