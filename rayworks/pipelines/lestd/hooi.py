"""Stage 1 of LeSTD (reconstructed): a shared orthonormal Tucker basis by HOOI.

For W ∈ R^{d x d_h x 4 x H} we fit W ≈ G x1 U1 x2 U2 with orthonormal U1 ∈ R^{dxR1}
(shared by Q, K, V, Oᵀ and by all heads) and U2 ∈ R^{d_hxR2}; modes 3 (matrix type) and 4
(head) stay full, as in TensorLLM. Higher-order orthogonal iteration alternates

    U1 ← top-R1 left singular vectors of unfold_1(W x2 U2ᵀ)
    U2 ← top-R2 left singular vectors of unfold_2(W x1 U1ᵀ)

from the truncated HOSVD, and the core is the projection G = W x1 U1ᵀ x2 U2ᵀ. With
orthonormal factors ‖W - G x1 U1 x2 U2‖² = ‖W‖² - ‖G‖², so the fit needs no reconstruction.
All functions are pure torch (float64 in the pipeline) with shapes in the docstrings.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Tucker:
    """W ≈ core x1 u1 x2 u2; `core` may hold zeros (a pruned, sparse core)."""

    u1: Tensor  # (d, R1), orthonormal columns
    u2: Tensor  # (d_h, R2), orthonormal columns
    core: Tensor  # (R1, R2, 4, H)

    def full(self) -> Tensor:
        """The reconstruction G x1 U1 x2 U2, shape (d, d_h, 4, H)."""
        return reconstruct(self.core, self.u1, self.u2)


def unfold(t: Tensor, mode: int) -> Tensor:
    """Mode-`mode` unfolding (0-based): (t.shape[mode], product of the other sizes)."""
    return t.movedim(mode, 0).reshape(t.shape[mode], -1)


def project(w: Tensor, u1: Tensor, u2: Tensor) -> Tensor:
    """W x1 U1ᵀ x2 U2ᵀ: (d, d_h, 4, H) -> (R1, R2, 4, H)."""
    return torch.einsum("abmh,ai,bj->ijmh", w, u1, u2)


def reconstruct(core: Tensor, u1: Tensor, u2: Tensor) -> Tensor:
    """G x1 U1 x2 U2: (R1, R2, 4, H) -> (d, d_h, 4, H)."""
    return torch.einsum("ijmh,ai,bj->abmh", core, u1, u2)


def leading_left(m: Tensor, r: int) -> Tensor:
    """Top-`r` left singular vectors of `m` (rows, cols) -> (rows, r)."""
    u, _, _ = torch.linalg.svd(m, full_matrices=False)
    if u.shape[1] >= r:
        return u[:, :r]
    # r exceeds the rank of m: complete the basis with an orthonormal complement
    q, _ = torch.linalg.qr(torch.cat([u, torch.eye(m.shape[0], dtype=m.dtype)], dim=1))
    return q[:, :r]


def hooi(w: Tensor, r1: int, r2: int, iters: int = 10, tol: float = 1e-12) -> Tucker:
    """Higher-order orthogonal iteration for ranks (R1, R2) on modes 1, 2 of W (d, d_h, 4, H).

    Starts from the truncated HOSVD; stops after `iters` sweeps or when the fit
    ‖G‖² improves by less than `tol` relative to ‖W‖².
    """
    d, hd = w.shape[:2]
    if not (1 <= r1 <= d and 1 <= r2 <= hd):
        raise ValueError(f"HOOI ranks (R1={r1}, R2={r2}) must lie in [1, {d}] x [1, {hd}]")
    u1 = leading_left(unfold(w, 0), r1)
    u2 = leading_left(unfold(w, 1), r2)
    total, last = float(w.square().sum()), -1.0
    for _ in range(iters):
        u1 = leading_left(unfold(torch.einsum("abmh,bj->ajmh", w, u2), 0), r1)
        u2 = leading_left(unfold(torch.einsum("abmh,ai->ibmh", w, u1), 1), r2)
        fit = float(project(w, u1, u2).square().sum())
        if last >= 0 and fit - last <= tol * max(total, 1e-300):
            break
        last = fit
    return Tucker(u1, u2, project(w, u1, u2))


def residual_sq(w: Tensor, t: Tucker) -> float:
    """‖W - G x1 U1 x2 U2‖²_F, computed by reconstruction (no orthonormality assumed)."""
    return float((w - t.full()).square().sum())
