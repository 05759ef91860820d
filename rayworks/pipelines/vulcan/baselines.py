"""Baselines at Vulcan's final architecture (same budget, data, seed and S).

- direct: keep each layer's K_l most active FFN neurons on S (fc1 rows, fc2 columns) and
  cut attention by truncated SVD to the same ranks; no retraining (baseline (3) of our
  recipe, reconstructed).
- prune_ft: the direct-pruned model fine-tuned on S with cross-entropy for as many steps
  as Vulcan's post-training (baseline (4)).
- base_ft: the unpruned base fine-tuned on S for the same steps (reference (2)).

Each fine-tuned arm gets its own lr, chosen on S-val from `post.lrs` (`fine_tune_on_val`),
exactly as Vulcan's post-training lr is.
"""

from __future__ import annotations

import torch

from rayworks.data.digits import Digits
from rayworks.models.vit import ViT
from rayworks.pipelines.vulcan.budget import Budget
from rayworks.pipelines.vulcan.clustering import top_neurons
from rayworks.pipelines.vulcan.config import VulcanConfig
from rayworks.pipelines.vulcan.posttrain import LrChoice, fine_tune_on_val
from rayworks.pipelines.vulcan.prune import prune_vit


def direct_prune(base: ViT, acts: list[torch.Tensor], budget: Budget) -> ViT:
    """Top-activation neurons + SVD truncation of W_QK / W_VO to `budget`."""
    keep = [top_neurons(a, k) for a, k in zip(acts, budget.ffn_dims, strict=True)]
    return prune_vit(base, keep, budget)


def prune_then_fine_tune(
    base: ViT, acts: list[torch.Tensor], budget: Budget, task: Digits, cfg: VulcanConfig
) -> LrChoice[ViT]:
    """The direct-pruned model fine-tuned on S at the lr of `post.lrs` best on S-val."""
    return fine_tune_on_val(direct_prune(base, acts, budget), task, cfg)


def base_fine_tuned(base: ViT, task: Digits, cfg: VulcanConfig) -> LrChoice[ViT]:
    """The unpruned base fine-tuned on S at the lr of `post.lrs` best on S-val."""
    return fine_tune_on_val(base, task, cfg)
