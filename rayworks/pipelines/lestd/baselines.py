"""Baselines at matched MHA compression: per-matrix truncated SVD and dense-core Tucker.

- Per-matrix SVD (SVD-LLM / ASVD family without their data-aware whitening): each of
  W_Q, W_K, W_V, W_O gets the best rank-r approximation (Eckart-Young), with the largest r
  whose storage 4 · r · (d + H · d_h) meets the budget.
- Dense-core Tucker (TensorLLM-style): HOOI on the same 4th-order tensor as LeSTD with a
  dense core. For every R2 in 1..d_h the largest R1 that fits the budget is tried and the
  pair with the lowest HOOI error ‖W‖² - ‖G‖² is kept; the core's R1 · R2 · 4 · H
  entries are what caps the ratio. A budget no pair meets is unreachable (None).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from rayworks.pipelines.lestd.lestd import HOOIFn
from rayworks.pipelines.lestd.storage import svd_params


@dataclass
class LowRank:
    """W ≈ a @ b for one `nn.Linear` weight (out x in): a (out, r), b (r, in)."""

    a: Tensor
    b: Tensor

    def full(self) -> Tensor:
        return self.a @ self.b


def truncated_svd(w: Tensor, rank: int) -> LowRank:
    """Best rank-`rank` approximation of `w`, split as U_r S_r^½ and S_r^½ V_rᵀ."""
    u, s, vh = torch.linalg.svd(w, full_matrices=False)
    root = s[:rank].sqrt()
    return LowRank(u[:, :rank] * root, root[:, None] * vh[:rank])


def svd_rank(d: int, inner: int, budget: int) -> int | None:
    """Largest per-matrix rank whose storage fits `budget` (None: not even rank 1)."""
    rank = min(d, inner, budget // svd_params(d, inner, 1))
    return rank if rank >= 1 else None


def tucker_ranks(w: Tensor, budget: int, decompose: HOOIFn) -> tuple[int, int] | None:
    """(R1, R2) of the dense-core Tucker with the lowest HOOI error within `budget`."""
    d, hd, _, heads = w.shape
    best, best_fit = None, -math.inf
    for r2 in range(1, hd + 1):
        r1 = min(d, r2 * 4 * heads, (budget - hd * r2) // (d + r2 * 4 * heads))
        if r1 < 1 or r2 > r1 * 4 * heads:
            continue
        fit = float(decompose(r1, r2).core.square().sum())  # error = ‖W‖² - fit
        if fit > best_fit:
            best, best_fit = (r1, r2), fit
    return best
