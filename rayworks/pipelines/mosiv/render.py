"""Observation operators (emulating MOSIV's Stage-I output, as our CPU recipe does):
soft per-object silhouettes from two orthographic "cameras" and the Chamfer/EMD/IoU metrics.

View 0 is a resxres image of the xy plane, view 1 a 1D projection onto x (a camera looking
down). Occupancy is 1 - exp(-Σ_p G_sigmoid(u - x_p)) with an isotropic Gaussian splat per
particle, computed separably (image = Gxᵀ Gy), so it is differentiable in the positions.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment


def _splat(coord: torch.Tensor, res: int, sigma: float) -> torch.Tensor:
    """Gaussian profile of each coordinate on the res pixel centres of [0,1]: (N, res)."""
    centres = (torch.arange(res, dtype=coord.dtype) + 0.5) / res
    return torch.exp(-0.5 * ((centres[None] - coord[:, None]) / sigma) ** 2)


def silhouettes(x: torch.Tensor, res: int, sigma: float, gain: float):
    """Soft silhouettes of one point set x (..., N, 2) -> (image (..., res, res), 1D (..., res)).

    gain scales the splat so that a uniformly filled interior saturates near 1."""
    flat = x.reshape(-1, *x.shape[-2:])
    images, lines = [], []
    for pts in flat:
        gx, gy = _splat(pts[:, 0], res, sigma), _splat(pts[:, 1], res, sigma)
        images.append(1 - torch.exp(-gain * gx.T @ gy))
        lines.append(1 - torch.exp(-gain * gx.sum(0)))
    lead = x.shape[:-2]
    return torch.stack(images).reshape(*lead, res, res), torch.stack(lines).reshape(*lead, res)


def chamfer(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """CD(P, P') = d(P, P') + d(P', P), d the mean nearest-neighbour distance (Eq. 3).
    a (..., N, 2), b (..., M, 2) -> (...)."""
    dist = torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist")  # exact near 0
    return dist.min(-1).values.mean(-1) + dist.min(-2).values.mean(-1)


def emd(a: np.ndarray, b: np.ndarray) -> float:
    """Earth mover's distance of two equal-size point sets: mean matched distance of the
    optimal assignment (scipy linear_sum_assignment)."""
    cost = np.linalg.norm(a[:, None] - b[None], axis=-1)
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].mean())


def iou(a: torch.Tensor, b: torch.Tensor, threshold: float = 0.5) -> float:
    """Intersection over union of the hard silhouettes a > t and b > t (any shape)."""
    ha, hb = a > threshold, b > threshold
    union = (ha | hb).sum().item()
    return float((ha & hb).sum().item() / union) if union else 1.0
