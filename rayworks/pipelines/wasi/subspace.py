"""WASI's subspace math: pure torch functions, no modules, no I/O.

Notation (arXiv 2510.09160; `docs/wasi.md`): a wrapped linear layer has
W ∈ R^{OxI}; its input activation is X ∈ R^{BxNxI} (batch, tokens, features).

- Weights (algorithm step 1): W = U S Vᵀ, keep the smallest rank k whose cumulative σ²
  share reaches the truncation threshold ε; L = U_k (Oxk), R = S_k V_kᵀ (kxI).
- Weights (step 5), the paper's rule (`update="full"`): the optimiser updates a full W with
  the W-shaped gradient; before the next training forward one warm-started subspace
  iteration projects it back to rank k: q = Wᵀ L_prev, L ← QR(W q), R ← Lᵀ W, so that the
  forward uses L R = L Lᵀ W, the orthogonal projection of the updated W onto the refreshed
  rank-k column space (`weight_projection_iteration`).
- Weights (step 5), our factor-training variant (`update="factors"`): L and R themselves
  are trained and the same iteration runs on W = L R without building W; it only
  re-orthonormalises L (L' R' = L R, `weight_subspace_iteration`).
- Activations (step 3): Tucker / HOSVD with fixed per-mode ranks (K1, K2, K3); each factor
  from one warm-started power iteration U_n ← QR(X_(n) X_(n)ᵀ U_n^prev), the first one from
  a seeded Gaussian; core S = X x1 U1ᵀ x2 U2ᵀ x3 U3ᵀ.
- Activation ranks (step 6, reconstructed replacement): the paper picks one ε per layer by
  a knapsack DP over measured gradient errors; we use the smallest per-mode rank whose
  explained variance (eigenvalues of X_(n) X_(n)ᵀ) reaches `act_energy`, measured once.
"""

from __future__ import annotations

import torch
from torch import Tensor


def energy_rank(values: Tensor, share: float) -> int:
    """Smallest k with Σ_{j<k} v_j / Σ v ≥ `share` for non-negative `values` (any order).

    `values` are σ² (weights) or Gram eigenvalues (activations); share=1 keeps them all.
    """
    if not 0 < share <= 1:
        raise ValueError(f"energy share must be in (0, 1], got {share}")
    v = values.detach().double().clamp_min(0).sort(descending=True).values
    total = float(v.sum())
    if total == 0.0:
        return 1
    cumulative = torch.cumsum(v, 0) / total
    k = int((cumulative < share - 1e-12).sum()) + 1
    return min(k, v.numel())


def init_weight_factors(weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """Algorithm step 1: W [O, I] -> L = U_k [O, k], R = S_k V_kᵀ [k, I] at ε energy."""
    u, s, vh = torch.linalg.svd(weight.detach().float(), full_matrices=False)
    k = energy_rank(s**2, eps)
    return u[:, :k].contiguous(), (s[:k, None] * vh[:k]).contiguous()


def orthonormal_basis(a: Tensor) -> Tensor:
    """Q of a = Q R with sign(diag R) ≥ 0, so a basis that barely moved keeps its column
    signs from step to step (LAPACK's QR leaves them arbitrary; optimiser state needs them)."""
    q, r = torch.linalg.qr(a)
    signs = torch.sign(torch.diagonal(r))
    return q * torch.where(signs == 0, torch.ones_like(signs), signs)


def weight_projection_iteration(weight: Tensor, left: Tensor) -> tuple[Tensor, Tensor]:
    """Step 5 of the paper on a full W [O, I]: q = Wᵀ L_prev, L = QR(W q), R = Lᵀ W.

    The warm start `left` [O, k] is the previous step's basis. L R = L Lᵀ W is the
    orthogonal projection of W onto span(L), i.e. W projected back to rank k after the
    optimiser's step on W. The authors' code takes R = qᵀ = L_prevᵀ W (one iteration behind);
    we take R from the refreshed L so that L R is a projection (a named choice).
    Returns L [O, k], R [k, I].
    """
    q = weight.T @ left  # [I, k]
    new_left = orthonormal_basis(weight @ q)  # [O, k]
    return new_left, new_left.T @ weight


def weight_subspace_iteration(left: Tensor, right: Tensor) -> tuple[Tensor, Tensor]:
    """Step 5 on W = L R (never built): q = Wᵀ L, L' = QR(W q), R' = L'ᵀ W.

    Warm start is the current L (the previous step's L after its optimiser update). Because
    our W is exactly L R (rank k), L' spans the same column space and L' R' = L R up to
    round-off: the iteration re-orthonormalises L and moves the scale into R. The
    reference instead iterates on a full W that the optimiser updated, and takes
    R = L_prevᵀ W (one iteration behind); see docs/wasi.md.
    Shapes: left [O, k], right [k, I] -> same shapes.
    """
    gram = left.T @ left  # [k, k]
    q = right.T @ gram  # [I, k] = Wᵀ L
    wq = left @ (right @ q)  # [O, k] = W q
    new_left = orthonormal_basis(wq)
    new_right = (new_left.T @ left) @ right  # [k, I] = L'ᵀ W
    return new_left, new_right


def unfold(x: Tensor, mode: int) -> Tensor:
    """Mode-n unfolding X_(n): [d_n, Π_{m≠n} d_m] of a 3-way tensor."""
    return x.movedim(mode, 0).reshape(x.shape[mode], -1)


def mode_ranks(x: Tensor, energy: float) -> tuple[int, int, int]:
    """Per-mode ranks (K1, K2, K3) at explained variance `energy` (reconstructed rule)."""
    ranks = []
    for mode in range(3):
        xn = unfold(x.detach().double(), mode)
        ranks.append(energy_rank(torch.linalg.eigvalsh(xn @ xn.T), energy))
    return ranks[0], ranks[1], ranks[2]


def power_iteration(x: Tensor, mode: int, previous: Tensor) -> Tensor:
    """One warm-started subspace iteration: U_n = QR(X_(n) X_(n)ᵀ U_prev), [d_n, K_n]."""
    xn = unfold(x, mode)
    return orthonormal_basis(xn @ (xn.T @ previous))


def tucker_core(x: Tensor, factors: tuple[Tensor, Tensor, Tensor]) -> Tensor:
    """S = X x1 U1ᵀ x2 U2ᵀ x3 U3ᵀ: [B, N, I] -> [K1, K2, K3] (feature mode first: cheapest)."""
    u1, u2, u3 = factors
    t = x @ u3  # [B, N, K3]
    t = torch.einsum("bnk,nl->blk", t, u2)  # [B, K2, K3]
    return torch.einsum("blk,bj->jlk", t, u1)  # [K1, K2, K3]


def tucker_reconstruct(core: Tensor, factors: tuple[Tensor, Tensor, Tensor]) -> Tensor:
    """X~ = S x1 U1 x2 U2 x3 U3: [K1, K2, K3] -> [B, N, I] (tests and error checks only)."""
    u1, u2, u3 = factors
    return torch.einsum("jlk,bj,nl,ik->bni", core, u1, u2, u3)


def compressed_grad_core(grad_out: Tensor, core: Tensor, factors: tuple[Tensor, ...]) -> Tensor:
    """D [O, K3] with ∇W = D U3ᵀ, where ∇W = Σ_{b,n} g_{b,n}ᵀ x~_{b,n} (step 4).

    D[o, k3] = Σ_{b,n,k1,k2} g[b,n,o] U1[b,k1] U2[n,k2] S[k1,k2,k3]: the paper's
    Z1 / Z3 contraction regrouped so that no [K1, I, N] or [O, I] tensor is built.
    """
    u1, u2, _ = factors
    t = torch.einsum("bno,bj->njo", grad_out, u1)  # [N, K1, O]  (Z1 of the paper)
    t = torch.einsum("njo,nl->ojl", t, u2)  # [O, K1, K2]
    return torch.einsum("ojl,jlk->ok", t, core)  # [O, K3]


def reference_compressed_grad(
    grad_out: Tensor, core: Tensor, factors: tuple[Tensor, Tensor, Tensor]
) -> Tensor:
    """∇W [O, I] by the paper's literal Z1 / Z3 formula (step 4), for tests only."""
    u1, u2, u3 = factors
    z1 = torch.einsum("bno,bj->noj", grad_out, u1)  # Z1[n, o, k1]
    z3 = torch.einsum("jlk,nl,ik->jin", core, u2, u3)  # Z3[k1, i, n]
    return torch.einsum("noj,jin->oi", z1, z3)
