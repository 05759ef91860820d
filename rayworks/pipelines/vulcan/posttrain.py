"""Post-training loops on S: Vulcan's penalised one and the plain fine-tuning of baselines.

Both use the platform's `train_classifier` (same data pipeline, AdamW, cosine schedule) for
the same number of steps: the target step count rounded up to whole epochs of S-train.
Vulcan's loop adds the penalty, one λ ascent step after every model step, and every
`eval_every` steps (and at the end) prunes a copy and scores both on S-val. The kept
result is the best pruned S-val accuracy among checkpoints whose |gap| is below the
tolerance (the official code's rule, with S-val instead of the test set: reconstructed);
if none qualifies, the best pruned S-val accuracy overall (ties: the later step).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from rayworks.data.digits import Digits
from rayworks.models.vit import ViT
from rayworks.models.vit_train import ClassifierTrainConfig, accuracy, train_classifier
from rayworks.pipelines.vulcan.budget import Budget
from rayworks.pipelines.vulcan.clustering import Clusters
from rayworks.pipelines.vulcan.config import VulcanConfig
from rayworks.pipelines.vulcan.losses import Penalty
from rayworks.pipelines.vulcan.prune import prune_vit

Logger = Callable[..., None]


def train_config(cfg: VulcanConfig, n_train: int) -> ClassifierTrainConfig:
    """The post-training run shared by every arm: whole epochs covering `post_steps()`."""
    per_epoch = math.ceil(n_train / cfg.post.batch_size)
    return ClassifierTrainConfig(
        epochs=math.ceil(cfg.post_steps() / per_epoch), batch_size=cfg.post.batch_size,
        lr=cfg.post.lr, weight_decay=cfg.post.weight_decay, seed=cfg.seed, threads=cfg.threads,
    )  # fmt: skip


def fine_tune(model: ViT, task: Digits, cfg: VulcanConfig) -> dict[str, float]:
    """Plain cross-entropy fine-tuning on S (all ten logits) for the shared step count."""
    return train_classifier(model, task, train_config(cfg, len(task.train)))


@dataclass
class Selection:
    """The kept checkpoint: pruned model, its unpruned twin, and the step it came from."""

    pruned: ViT | None = None
    unpruned: dict[str, torch.Tensor] | None = None
    step: int = 0
    val: float = -1.0
    gap_ok: bool = False
    history: list[dict[str, Any]] = field(default_factory=list)

    def offer(self, step: int, model: ViT, pruned: ViT, acc: float, pruned_acc: float,
              tolerance: float) -> None:  # fmt: skip
        ok = abs(acc - pruned_acc) * 100 < tolerance
        better = pruned_acc >= self.val if ok == self.gap_ok else ok
        if better or self.pruned is None:
            self.pruned, self.step, self.val, self.gap_ok = pruned, step, pruned_acc, ok
            self.unpruned = copy.deepcopy(model.state_dict())


def vulcan_post_train(
    model: ViT, task: Digits, clusters: list[Clusters], budget: Budget, cfg: VulcanConfig,
    log: Logger,
) -> Selection:  # fmt: skip
    """Post-train `model` in place with CE + collapse + TNNR; return the kept pruned model."""
    penalty = Penalty(clusters if cfg.collapse else None, budget if cfg.tnnr else None,
                      cfg.post.lambda_lr)  # fmt: skip
    train = train_config(cfg, len(task.train))
    total = train.epochs * math.ceil(len(task.train) / train.batch_size)
    selection = Selection()

    def loss_fn(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(m(x), y) + penalty.loss(m)

    def on_step(step: int, loss: float) -> None:
        penalty.ascend()
        if step % cfg.post.eval_every and step != total:
            return
        pruned = prune_vit(model, clusters, budget)
        acc, pruned_acc = accuracy(model, task.val), accuracy(pruned, task.val)
        selection.offer(step, model, pruned, acc, pruned_acc, cfg.post.gap_tolerance)
        row = {"loss": loss, "val_accuracy": acc, "pruned_val_accuracy": pruned_acc,
               "val_prune_gap": 100 * (acc - pruned_acc), **penalty.last}  # fmt: skip
        selection.history.append({"step": step, **row})
        log(step, **row)
        model.train()

    train_classifier(model, task, train, loss_fn=loss_fn, on_step=on_step)
    return selection
