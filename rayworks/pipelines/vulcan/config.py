"""Configs of `vulcan` (train-then-prune) and its baselines `vulcan_prune_ft`, `vulcan_direct`.

    rayworks run vulcan --preset smoke
    rayworks bench vulcan --preset default --seeds 3 --no-ablations

Defaults follow our CPU reproduction recipe (reconstructed; `docs/vulcan.md`): a ViT with
16 patches + CLS, d = 64, depth 4, 4 heads (d_h = 16), FFN 256, pre-LN, GELU, trained on
all ten noisy digits; pruning rate r = 0.8; post-training for (6250 r² + 1250 r) / 10
steps at batch 64; λ ascent lr 0.05; widths rounded to a multiple of 2 (minimum 2).
Two deliberate departures from that recipe: the task is harder (S = {1, 2, 3, 5, 8, 9},
35% of the images held out for test and 20% for val, pixel noise 5 of 16), because on the
recipe's T2 with 108 test images every fine-tuned arm sat at 94-95%, within one image of
each other; and every trained arm picks its own peak lr from `post.lrs` on S-val
(the recipe fixes one lr, 3e-4, too small to close the prune gap in 500 steps).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from rayworks.core.config import Config, PipelineConfig
from rayworks.data.digits import DigitsConfig
from rayworks.models.vit import ViTSpec
from rayworks.models.vit_train import ClassifierTrainConfig

Method = Literal["vulcan", "prune_ft", "direct"]
WidthRule = Literal["adaptive", "uniform"]
AnchorRule = Literal["most_active", "random"]


def _recipe_model() -> ViTSpec:
    return ViTSpec(image_size=16, patch_size=4, d_model=64, n_layer=4, n_head=4, ffn_dim=256)


def _recipe_pretrain() -> ClassifierTrainConfig:
    return ClassifierTrainConfig(epochs=60, batch_size=64, lr=1e-3, weight_decay=0.05, threads=1)


def _hard_digits() -> DigitsConfig:
    """35% test / 20% val (S-test 378 images, 0.26 points each) and pixel noise 5 of 16 in
    training and evaluation: base + fine-tuning on S reaches about 85%, not the ceiling."""
    return DigitsConfig(test_fraction=0.35, val_fraction=0.2, noise_std=5.0, eval_noise_std=5.0)


class PostTrainConfig(Config):
    """Post-training on S: Vulcan's CE + collapse + TNNR, and every fine-tuning baseline."""

    steps: int | None = Field(
        None,
        ge=1,
        description="target optimizer steps; None = (6250 r² + 1250 r) / 10 (paper's formula "
        "scaled by 1/10); rounded up to whole epochs of S-train, identical for every arm",
    )
    batch_size: int = Field(64, ge=1, description="images per step (recipe: 64; paper: 256)")
    lrs: list[float] = Field(
        default_factory=lambda: [1e-3, 3e-3, 1e-2],
        min_length=1,
        description="peak AdamW lrs (cosine to 0) tried by every trained arm; each arm keeps "
        "the one whose deployed model is best on S-val (recipe: one lr, 3e-4)",
    )
    weight_decay: float = Field(0.05, ge=0, description="AdamW weight decay (paper: 0.05)")
    lambda_lr: float = Field(
        0.05,
        gt=0,
        description="gradient-ascent lr of the multipliers λ1, λ2 (paper: 1.0; reconstructed "
        "rescaling for our step counts)",
    )
    eval_every: int = Field(
        100, ge=1, description="steps between prune-a-copy evaluations (paper: 100)"
    )
    gap_tolerance: float = Field(
        1.0,
        ge=0,
        description="keep the best pruned checkpoint whose |acc - pruned acc| on S-val is "
        "below this many points (paper: 1)",
    )

    @model_validator(mode="after")
    def _check_lrs(self) -> PostTrainConfig:
        if len(set(self.lrs)) != len(self.lrs) or min(self.lrs) <= 0:
            raise ValueError(f"post.lrs={self.lrs} must be distinct positive learning rates")
        return self


class LatencyConfig(Config):
    """CPU latency of base vs pruned model, measured interleaved in the same process."""

    images: int = Field(1000, ge=1, description="images per timed pass (latency per 1000)")
    batch_size: int = Field(250, ge=1, description="images per forward")
    reps: int = Field(5, ge=0, description="timed passes per model, median kept (0 = skip)")
    threads: int = Field(1, ge=1, description="torch threads while timing")


class VulcanConfig(PipelineConfig):
    """Derive a class-specific ViT for subset S at pruning rate r, and compare at one size."""

    presets = {
        "smoke": {
            "model": {"d_model": 32, "n_layer": 2, "n_head": 2, "ffn_dim": 64},
            "pretrain": {"epochs": 4},
            "post": {"steps": 24, "eval_every": 8, "lrs": [3e-3, 1e-2]},
            "latency": {"images": 200, "batch_size": 100, "reps": 1},
        },
    }

    method: Method = Field("vulcan", description="what this run derives: vulcan or a baseline")
    model: ViTSpec = Field(
        default_factory=_recipe_model, description="base ViT (recipe: d 64, 4 x 4 heads, FFN 256)"
    )
    pretrain: ClassifierTrainConfig = Field(
        default_factory=_recipe_pretrain,
        description="base training on all ten classes (recipe: AdamW 1e-3, 60 epochs); cached",
    )
    data: DigitsConfig = Field(
        default_factory=_hard_digits,
        description="digits splits/noise (harder than the recipe: 35% test, 20% val, noise 5)",
    )
    classes: list[int] = Field(
        default_factory=lambda: [1, 2, 3, 5, 8, 9],
        description="target subset S (recipe tasks: T1 [0,1,2], T2 [3,5,8], T3 [0..4]; default: "
        "the six most confusable digits, so S-test has 378 images and no arm sits at 100%)",
    )
    rate: float = Field(0.8, gt=0, lt=1, description="pruning rate r (recipe: 0.6 or 0.8)")
    width_rule: WidthRule = Field(
        "adaptive",
        description="FFN widths: adaptive (z-scored activation, global r-quantile; paper) or "
        "uniform (every layer keeps (1 - r) of its neurons); MHA ranks likewise erank-based "
        "or uniform",
    )
    width_multiple: int = Field(2, ge=1, description="widths rounded down to this (paper: 8)")
    anchors: AnchorRule = Field(
        "most_active", description="cluster anchor: most active neuron on S (paper) or random"
    )
    collapse: bool = Field(True, description="collapse loss on FFN clusters (off = ablation)")
    tnnr: bool = Field(True, description="truncated nuclear norm on Ŵ_Q, Ŵ_V (off = ablation)")
    reference_ft: bool = Field(
        True, description="also fine-tune the unpruned base on S (the table's base_ft row)"
    )
    post: PostTrainConfig = Field(default_factory=PostTrainConfig, description="post-training")
    latency: LatencyConfig = Field(default_factory=LatencyConfig, description="CPU timing")
    threads: int = Field(1, ge=1, description="torch threads of post-training and evaluation")

    @model_validator(mode="after")
    def _check(self) -> VulcanConfig:
        if len(set(self.classes)) != len(self.classes) or not all(
            0 <= c <= 9 for c in self.classes
        ):
            raise ValueError(f"classes={self.classes} must be distinct digits 0-9")
        if not 2 <= len(self.classes) <= 9:
            raise ValueError(f"classes={self.classes} must name 2 to 9 digits (a strict subset)")
        if self.model.n_classes != 10:
            raise ValueError(
                f"model.n_classes={self.model.n_classes} must be 10: the base is trained on all "
                "digits and keeps its full head (accuracy = argmax over all logits)"
            )
        if self.width_multiple > min(self.model.head_dim, self.model.ffn_dim):
            raise ValueError(
                f"width_multiple={self.width_multiple} exceeds the head width "
                f"{self.model.head_dim} or ffn_dim {self.model.ffn_dim}"
            )
        if self.model.ffn_dims or self.model.qk_dims or self.model.vo_dims:
            raise ValueError("model.ffn_dims/qk_dims/vo_dims must be unset: the base is uniform")
        return self

    def post_steps(self) -> int:
        """Target post-training steps: `post.steps` or the paper's formula / 10."""
        r = self.rate
        return self.post.steps or max(1, math.ceil((6250 * r * r + 1250 * r) / 10))
