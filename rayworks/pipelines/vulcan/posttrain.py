"""Post-training loops on S: Vulcan's penalised one and the plain fine-tuning of baselines.

Both use the platform's `train_classifier` (same data pipeline, AdamW, cosine schedule) for
the same number of steps: the target step count rounded up to whole epochs of S-train.
Vulcan's loop adds the penalty, one λ ascent step after every model step, and every
`eval_every` steps (and at the end) prunes a copy and scores both on S-val. The kept
result is the best pruned S-val accuracy among checkpoints whose |gap| is below the
tolerance (the official code's rule, with S-val instead of the test set: reconstructed);
if none qualifies, the best pruned S-val accuracy overall (ties: the later step).

Every arm's peak lr is chosen on S-val (`choose_on_val`): the arm is trained once per lr of
`post.lrs` from the same start, and the run keeps the model whose S-val accuracy is best
(ties: the smaller lr). The score is the accuracy of the model the arm deploys: the kept
pruned model for Vulcan, the fine-tuned model for base_ft and prune_ft. S-test is never
read here; the tests check that with a task whose S-test cannot be evaluated.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

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
T = TypeVar("T")


def train_config(cfg: VulcanConfig, n_train: int, lr: float) -> ClassifierTrainConfig:
    """The post-training run shared by every arm: whole epochs covering `post_steps()`."""
    per_epoch = math.ceil(n_train / cfg.post.batch_size)
    return ClassifierTrainConfig(
        epochs=math.ceil(cfg.post_steps() / per_epoch),
        batch_size=cfg.post.batch_size,
        lr=lr,
        weight_decay=cfg.post.weight_decay,
        seed=cfg.seed,
        threads=cfg.threads,
    )


def run_steps(cfg: VulcanConfig, n_train: int) -> int:
    """Optimizer steps of one post-training run (the target rounded up to whole epochs)."""
    train = train_config(cfg, n_train, cfg.post.lrs[0])
    return train.epochs * math.ceil(n_train / train.batch_size)


@dataclass
class LrChoice(Generic[T]):
    """The result kept at the chosen lr, and the S-val score of every lr tried."""

    result: T
    lr: float
    val: dict[float, float]


def choose_on_val(lrs: list[float], fit: Callable[[float], tuple[T, float]]) -> LrChoice[T]:
    """`fit(lr)` -> (result, S-val score) for every lr; keep the best (ties: smaller lr)."""
    order = sorted(lrs)
    result, score = fit(order[0])
    best = LrChoice(result, order[0], {order[0]: score})
    for lr in order[1:]:
        result, score = fit(lr)
        best.val[lr] = score
        if score > best.val[best.lr]:
            best.result, best.lr = result, lr
    return best


def fine_tune(model: ViT, task: Digits, cfg: VulcanConfig, lr: float) -> dict[str, float]:
    """Plain cross-entropy fine-tuning on S (all ten logits) for the shared step count."""
    return train_classifier(model, task, train_config(cfg, len(task.train), lr))


def fine_tune_on_val(model: ViT, task: Digits, cfg: VulcanConfig) -> LrChoice[ViT]:
    """A copy of `model` fine-tuned at each lr of `post.lrs`; the best on S-val is kept."""

    def fit(lr: float) -> tuple[ViT, float]:
        tuned = copy.deepcopy(model)
        fine_tune(tuned, task, cfg, lr)
        return tuned, accuracy(tuned, task.val)

    return choose_on_val(cfg.post.lrs, fit)


@dataclass
class Selection:
    """The kept checkpoint: pruned model, its unpruned twin, and the step it came from."""

    pruned: ViT | None = None
    unpruned: dict[str, torch.Tensor] | None = None
    step: int = 0
    val: float = -1.0
    gap_ok: bool = False
    history: list[dict[str, Any]] = field(default_factory=list)

    def offer(
        self, step: int, model: ViT, pruned: ViT, acc: float, pruned_acc: float, tolerance: float
    ) -> None:
        ok = abs(acc - pruned_acc) * 100 < tolerance
        better = pruned_acc >= self.val if ok == self.gap_ok else ok
        if better or self.pruned is None:
            self.pruned, self.step, self.val, self.gap_ok = pruned, step, pruned_acc, ok
            self.unpruned = copy.deepcopy(model.state_dict())


def vulcan_post_train(
    model: ViT,
    task: Digits,
    clusters: list[Clusters],
    budget: Budget,
    cfg: VulcanConfig,
    lr: float,
    log: Logger,
    step_offset: int = 0,
) -> Selection:
    """Post-train `model` in place with CE + collapse + TNNR at peak `lr`; keep a pruned model.

    Rows are logged at `step_offset + step` with the lr, so the runs of an lr grid follow
    each other in one metrics file.
    """
    penalty = Penalty(
        clusters if cfg.collapse else None, budget if cfg.tnnr else None, cfg.post.lambda_lr
    )
    train = train_config(cfg, len(task.train), lr)
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
        row = {
            "lr": lr,
            "loss": loss,
            "val_accuracy": acc,
            "pruned_val_accuracy": pruned_acc,
            "val_prune_gap": 100 * (acc - pruned_acc),
            **penalty.last,
        }
        selection.history.append({"step": step, **row})
        log(step_offset + step, **row)
        model.train()

    train_classifier(model, task, train, loss_fn=loss_fn, on_step=on_step)
    return selection


def vulcan_on_val(
    base: ViT,
    task: Digits,
    clusters: list[Clusters],
    budget: Budget,
    cfg: VulcanConfig,
    log: Logger,
) -> LrChoice[Selection]:
    """Vulcan's post-training from `base` at each lr; keep the best kept pruned S-val acc."""
    steps = run_steps(cfg, len(task.train))
    offsets = {lr: i * steps for i, lr in enumerate(sorted(cfg.post.lrs))}

    def fit(lr: float) -> tuple[Selection, float]:
        sel = vulcan_post_train(
            copy.deepcopy(base), task, clusters, budget, cfg, lr, log, offsets[lr]
        )
        return sel, sel.val

    return choose_on_val(cfg.post.lrs, fit)
