"""Training and caching the tiny ViTs on the digits images.

`train_classifier` is the one supervised loop (AdamW or SGD, cosine schedule, augmentation
per batch, optional gradient clipping) that pretraining and every fine-tuning baseline
share, so methods compared side by side see the same data pipeline. `pretrained_vit`
trains a base once per (spec, training settings, data settings, classes) and caches it
under `<cache root>/vit/<hash>/`, so every bench arm starts from the same weights.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field
from torch import nn

from rayworks.core.build_cache import locked_build, settings_digest
from rayworks.core.config import Config
from rayworks.data.digits import Digits, DigitsConfig, DigitSplit, augment, load_digits_splits
from rayworks.models.vit import ViT, ViTSpec, load_vit, save_vit


class ClassifierTrainConfig(Config):
    """One supervised training run of a digits classifier."""

    epochs: int = Field(40, ge=1, description="passes over the training split")
    batch_size: int = Field(64, ge=1, description="images per step")
    optimizer: Literal["adamw", "sgd"] = Field("adamw", description="optimizer")
    lr: float = Field(1e-3, gt=0, description="peak learning rate (cosine to 0)")
    weight_decay: float = Field(0.05, ge=0, description="decoupled weight decay")
    momentum: float = Field(0.9, ge=0, lt=1, description="SGD momentum")
    grad_clip: float = Field(0.0, ge=0, description="max gradient norm (0 = off)")
    seed: int = Field(0, ge=0, description="init, batch order and augmentation seed")
    threads: int = Field(2, ge=1, description="torch intra-op threads")


def make_optimizer(
    params: Iterable[nn.Parameter], cfg: ClassifierTrainConfig
) -> torch.optim.Optimizer:
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(
            params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
        )
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


@torch.no_grad()
def accuracy(model: nn.Module, split: DigitSplit, batch_size: int = 512) -> float:
    """Top-1 accuracy of `model` on `split` (eval mode, restored afterwards)."""
    was_training = model.training
    model.eval()
    correct = 0
    for i in range(0, len(split), batch_size):
        correct += int(
            (model(split.x[i : i + batch_size]).argmax(-1) == split.y[i : i + batch_size]).sum()
        )
    model.train(was_training)
    return correct / max(len(split), 1)


def batches(
    split: DigitSplit, batch_size: int, data: DigitsConfig, gen: torch.Generator
) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
    """One epoch of shuffled, augmented batches."""
    order = torch.randperm(len(split), generator=gen)
    for i in range(0, len(split), batch_size):
        idx = order[i : i + batch_size]
        yield augment(split.x[idx], data, gen), split.y[idx]


def train_classifier(
    model: nn.Module,
    data: Digits,
    cfg: ClassifierTrainConfig,
    params: Iterable[nn.Parameter] | None = None,
    loss_fn: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> dict[str, float]:
    """Train `model` (only `params`, default all) with cross-entropy or `loss_fn(model, x, y)`.

    Returns the final train loss and val accuracy. `on_step(step, loss)` is called after
    every optimizer step (progress bars, logging).
    """
    torch.set_num_threads(cfg.threads)
    gen = torch.Generator().manual_seed(cfg.seed)
    trainable = [
        p for p in (params if params is not None else model.parameters()) if p.requires_grad
    ]
    opt = make_optimizer(trainable, cfg)
    steps = cfg.epochs * math.ceil(len(data.train) / cfg.batch_size)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps))
    )
    loss_fn = loss_fn or (lambda m, x, y: nn.functional.cross_entropy(m(x), y))
    model.train()
    step, loss = 0, float("nan")
    for _ in range(cfg.epochs):
        for x, y in batches(data.train, cfg.batch_size, data.cfg, gen):
            value = loss_fn(model, x, y)
            opt.zero_grad(set_to_none=True)
            value.backward()
            if cfg.grad_clip:
                nn.utils.clip_grad_norm_(trainable, cfg.grad_clip)
            opt.step()
            sched.step()
            step, loss = step + 1, float(value.detach())
            if on_step is not None:
                on_step(step, loss)
    model.eval()
    return {"train_loss": loss, "val_accuracy": accuracy(model, data.val), "steps": step}


def pretrained_vit(
    cache_root: Path,
    spec: ViTSpec,
    train: ClassifierTrainConfig,
    data: DigitsConfig,
    classes: Sequence[int] = tuple(range(10)),
    on_step: Callable[[int, float], None] | None = None,
) -> Path:
    """The folder of a ViT of `spec` trained on `classes` (built once, then reused).

    The spec's `n_classes` must equal `len(classes)`; labels are the classes' positions.
    The folder holds the model (`save_vit`) and `train.json` with its accuracies.
    """
    if spec.n_classes != len(classes):
        raise ValueError(f"spec.n_classes={spec.n_classes} but {len(classes)} classes given")
    settings = [
        spec.model_dump(mode="json"),
        train.model_dump(mode="json"),
        data.model_dump(mode="json"),
        list(classes),
    ]
    folder = cache_root / "vit" / f"vit-{settings_digest(settings)}"

    def build() -> None:
        torch.manual_seed(train.seed)
        digits = load_digits_splits(data).subset(classes)
        model = ViT(spec)
        metrics = train_classifier(model, digits, train, on_step=on_step)
        metrics["test_accuracy"] = accuracy(model, digits.test)
        tmp = folder.with_name(folder.name + ".tmp")
        save_vit(model, tmp)
        (tmp / "train.json").write_text(json.dumps({**metrics, "classes": list(classes)}))
        tmp.rename(folder)

    return locked_build(folder, folder / "train.json", build)


def load_pretrained(folder: Path) -> tuple[ViT, dict[str, float]]:
    """The cached model and its training metrics."""
    return load_vit(folder), json.loads((folder / "train.json").read_text())
