"""Stage 2 of LeSTD (reconstructed): importance pruning of the core with refitting.

Given the stage-1 basis (U1, U2) and core G = W x1 U1ᵀ x2 U2ᵀ (see `hooi.py`):

- Importance (closed form). With orthonormal factors, zeroing core entry g raises the
  reconstruction error ‖W - G x1 U1 x2 U2‖²_F by exactly g², so I(g) = g² (data-free).
  The paper's "derived closed-form importance score" may be a different (e.g. functional)
  formula: this is our reading.
- Iterative pruning. Each round removes the fraction rho (`prune_fraction`) of surviving
  entries with the lowest I, then refits, until the target number of non-zeros.
- Refit (reconstructed). Block-coordinate descent on the masked objective
  min ‖W - (M ⊙ G) x1 U1 x2 U2‖² over U1, U2 (orthonormal) and the surviving entries:
  each factor update is the exact constrained minimiser, an orthogonal Procrustes step
  U1 = polar(unfold_1(W x2 U2ᵀ) unfold_1(G)ᵀ) (likewise U2), and the core update is the
  masked projection M ⊙ (W x1 U1ᵀ x2 U2ᵀ). So the error never increases. (A least-squares
  update followed by QR would only approximate that constrained step; Procrustes solves it.)
  With U fixed a core-only refit would be a no-op, which is why the factors move.
- Without refit (ablation `lestd_norefit`): one-shot magnitude pruning of the HOOI core;
  iterating without refit selects the same entries.

Ranks per compression ratio (reconstructed). A single fixed (R1, R2) = (64, 16)
at d = 128 would spend 8448 parameters on factors alone, above the 16x budget (4096), so ranks
are chosen per ratio from a grid: the (R1, R2) whose closed-form one-shot error
‖W‖² - ‖G‖² + Σ(pruned g²) at the budget's non-zero count is lowest.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from rayworks.pipelines.lestd.hooi import Tucker, project, unfold
from rayworks.pipelines.lestd.storage import max_nnz

HOOIFn = Callable[[int, int], Tucker]  # (R1, R2) -> stage-1 decomposition (memoised)


def importance(core: Tensor) -> Tensor:
    """Closed-form importance I(g) = g²: the exact error increase of removing g."""
    return core.square()


def top_mask(score: Tensor, keep: int, alive: Tensor | None = None) -> Tensor:
    """Boolean mask of the `keep` highest scores (among `alive` entries, if given)."""
    score = score if alive is None else score.masked_fill(~alive, -math.inf)
    mask = torch.zeros(score.numel(), dtype=torch.bool)
    mask[torch.topk(score.flatten(), keep).indices] = True
    return mask.view(score.shape)


def polar(m: Tensor) -> Tensor:
    """The orthonormal-column U maximising tr(Uᵀ m) (orthogonal Procrustes): P Qᵀ of svd(m)."""
    u, _, vh = torch.linalg.svd(m, full_matrices=False)
    return u @ vh


def refit(w: Tensor, t: Tucker, mask: Tensor, sweeps: int) -> Tucker:
    """`sweeps` rounds of exact block updates (U1, then U2, then the surviving core)."""
    u1, u2 = t.u1, t.u2
    core = project(w, u1, u2) * mask
    for _ in range(sweeps):
        w2 = torch.einsum("abmh,bj->ajmh", w, u2)  # W x2 U2ᵀ
        u1 = polar(unfold(w2, 0) @ unfold(core, 0).T)
        core = project(w, u1, u2) * mask
        w1 = torch.einsum("abmh,ai->ibmh", w, u1)  # W x1 U1ᵀ
        u2 = polar(unfold(w1, 1) @ unfold(core, 1).T)
        core = project(w, u1, u2) * mask
    return Tucker(u1, u2, core)


def prune_oneshot(t: Tucker, nnz: int) -> Tucker:
    """Keep the `nnz` core entries of highest importance (LeSTD without refit)."""
    return Tucker(t.u1, t.u2, t.core * top_mask(importance(t.core), nnz))


def prune_refit(
    w: Tensor, t: Tucker, nnz: int, fraction: float = 0.1, sweeps: int = 2
) -> tuple[Tucker, int]:
    """Iterative importance pruning + refit from the dense core down to `nnz` non-zeros.

    Returns the sparse decomposition and the number of prune rounds.
    """
    mask = torch.ones_like(t.core, dtype=torch.bool)
    rounds = 0
    while int(mask.sum()) > nnz:
        alive = int(mask.sum())
        keep = max(nnz, alive - max(1, math.ceil(fraction * alive)))
        mask = top_mask(importance(t.core), keep, alive=mask)
        t = refit(w, t, mask, sweeps)
        rounds += 1
    return t, rounds


def oneshot_error(w_sq: float, t: Tucker, nnz: int) -> float:
    """Closed-form ‖W - P(G) x1 U1 x2 U2‖² after one-shot pruning to `nnz` (no reconstruction)."""
    scores = importance(t.core).flatten()
    kept = float(torch.topk(scores, nnz).values.sum()) if nnz else 0.0
    return w_sq - kept


def choose_ranks(
    w: Tensor, budget: int, grid: list[tuple[int, int]], decompose: HOOIFn
) -> tuple[int, int, int] | None:
    """(R1, R2, nnz) of the grid with the lowest one-shot error within `budget`, or None."""
    d, hd, _, heads = w.shape
    w_sq, best, best_err = float(w.square().sum()), None, math.inf
    for r1, r2 in grid:
        factors = d * r1 + hd * r2
        if factors >= budget:
            continue
        nnz = max_nnz(budget - factors, r1 * r2 * 4 * heads)
        if nnz < 1:
            continue
        err = oneshot_error(w_sq, decompose(r1, r2), nnz)
        if err < best_err:
            best, best_err = (r1, r2, nnz), err
    return best
