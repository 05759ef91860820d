"""AQER: approximate quantum loading by entanglement reduction (arXiv 2602.02165), whole.

Loader: U_AQER(θ) = V(alpha)† W(β, gamma), with V(alpha) = V_{I_T}(alpha_T) ⋯ V_{I_1}(alpha_1) a product of
T two-qubit blocks (`blocks.py`) and W a layer of single-qubit RZ·RY rotations, so that
|v_load> = U_AQER(θ)|0>^{⊗N}.

Step I  (greedy entanglement reduction): |v_0> = |v>; for t = 1..T pick the pair I_t and
        block parameters alpha_t minimising S(V_I(alpha)|v_{t-1}>), S = Σ_i Rényi-2 entropies;
        |v_t> = V_{I_t}(alpha_t)|v_{t-1}>. alpha by Nelder-Mead from zero (tolerance 1e-4, as the
        secondary source says), pair by exhaustive search over all C(N, 2) pairs.
        Exact CPU shortcut (reconstructed): V touches only qubits j, k, so only S_j, S_k
        change and the objective needs only the 4x4 pair RDM rho_jk. A pair's best reduction
        depends only on rho_jk, which a block on other qubits leaves unchanged, so only the
        2N-3 pairs touching the last block's qubits are re-optimised (same argmin).
Step II (Corollary 3.2, closed form): W|0> = ⊗_i (top eigenvector of rho_i of |v_T>), i.e.
        gamma_i = arccos(r_z/|r|), β_i = atan2(r_y, r_x) from the Bloch vector r_i.
        Theorem 3.1: its infidelity lies in [f1(S_T), f2(S_T)] (`entropy.py`).
Step III (fine-tuning): Adam on 1 - |<v|U_AQER(θ)|0>|^2 over θ = (alpha, β, gamma), starting from
        Steps I-II; the best θ seen is kept, so it never ends worse than it started.

Ablations (config `pair_order`, `init`): random pair order in Step I; Step III from a
random θ on the same architecture.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

import numpy as np
import torch
from scipy.optimize import minimize

from rayworks.pipelines.aqer.blocks import (
    N_PARAMS,
    N_STEP1_PARAMS,
    block_matrices,
    product_layer,
    step1_block_np,
)
from rayworks.pipelines.aqer.entropy import (
    bloch_vectors,
    pair_rdm,
    qubit_entropies,
    single_rdms,
    total_entropy,
)
from rayworks.pipelines.aqer.optim import adam_best
from rayworks.pipelines.aqer.statevector import apply_2q, product_state


@dataclass
class StepOneResult:
    """Step I's architecture and parameters, and the state it leaves behind."""

    pairs: list[tuple[int, int]]  # I_1..I_T
    params: np.ndarray  # (T, 5) Step-I parameters per block
    reduced: np.ndarray  # |v_T>, shape (2,)*N
    entropy: list[float] = field(default_factory=list)  # S(|v_t>) for t = 0..T


def pair_objective(p: np.ndarray, rho: np.ndarray) -> float:
    """S_j + S_k after the block: the Step-I objective on the 4x4 pair RDM only.

    Hand-unrolled (it runs ~10^5 times per target): rho' = V rho V†, reshaped (2, 2, 2, 2);
    Tr rho_j² = Σ |Σ_b rho'_{ab,cb}|², Tr rho_k² likewise; S = -log2 of each."""
    v = step1_block_np(p)
    r = (v @ rho @ v.conj().T).reshape(2, 2, 2, 2)
    rho_j = r[:, 0, :, 0] + r[:, 1, :, 1]
    rho_k = r[0, :, 0, :] + r[1, :, 1, :]
    pj = (rho_j.real**2 + rho_j.imag**2).sum()
    pk = (rho_k.real**2 + rho_k.imag**2).sum()
    return float(-np.log2(pj * pk))


def optimise_pair(rho: np.ndarray, tol: float, max_evals: int, init_step: float) -> tuple:
    """Nelder-Mead from alpha = 0 on one pair: (S_j + S_k after, best 5 parameters)."""
    x0 = np.zeros(N_STEP1_PARAMS)
    simplex = np.vstack([x0, x0 + init_step * np.eye(N_STEP1_PARAMS)])
    res = minimize(
        pair_objective,
        x0,
        args=(rho,),
        method="Nelder-Mead",
        options={"xatol": tol, "fatol": tol, "maxfev": max_evals, "initial_simplex": simplex},
    )
    return float(res.fun), np.asarray(res.x)


def apply_block_np(psi: np.ndarray, v: np.ndarray, j: int, k: int) -> np.ndarray:
    """V (4x4) on qubits (j, k) of a numpy state."""
    return apply_2q(torch.from_numpy(psi), torch.from_numpy(v), j, k).numpy()


def step_one(
    target: np.ndarray,
    n_blocks: int,
    tol: float = 1e-4,
    max_evals: int = 1000,
    init_step: float = 0.5,
    pair_order: str = "greedy",
    rng: np.random.Generator | None = None,
) -> StepOneResult:
    """Greedy entanglement reduction (Step I) for `n_blocks` blocks."""
    n = target.ndim
    psi = np.array(target, dtype=complex)
    s_i = qubit_entropies(psi)
    out = StepOneResult([], np.zeros((0, N_STEP1_PARAMS)), psi, [float(s_i.sum())])
    best: dict[tuple[int, int], tuple[float, np.ndarray]] = {}  # pair -> (ΔS, params)
    all_pairs = list(combinations(range(n), 2))
    params = []
    for _ in range(n_blocks):
        if pair_order == "random":
            pair = all_pairs[rng.integers(len(all_pairs))]
            pairs = [pair]
        else:
            pairs = all_pairs
        for j, k in pairs:
            if (j, k) not in best:
                after, x = optimise_pair(pair_rdm(psi, j, k), tol, max_evals, init_step)
                best[(j, k)] = (after - s_i[j] - s_i[k], x)
        j, k = min(pairs, key=lambda p: best[p][0])
        x = best[(j, k)][1]
        psi = apply_block_np(psi, step1_block_np(x), j, k)
        s_i = qubit_entropies(psi)
        best = {p: v for p, v in best.items() if j not in p and k not in p}
        out.pairs.append((j, k))
        params.append(x)
        out.entropy.append(float(s_i.sum()))
    out.params = np.array(params).reshape(-1, N_STEP1_PARAMS)
    out.reduced = psi
    return out


def step_two(reduced: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Closed-form product layer (Corollary 3.2): (β, gamma) of the marginals' top eigenvectors."""
    return angles_from_rdms(single_rdms(reduced))


def angles_from_rdms(rhos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Step II from the single-qubit RDMs (N, 2, 2) alone (shared with the MPS path)."""
    r = bloch_vectors(rhos)
    norm = np.linalg.norm(r, axis=1)
    gamma = np.where(
        norm > 1e-12, np.arccos(np.clip(r[:, 2] / np.maximum(norm, 1e-300), -1, 1)), 0.0
    )
    beta = np.arctan2(r[:, 1], r[:, 0])
    return beta, gamma


def loaded_state(
    alpha: torch.Tensor, beta: torch.Tensor, gamma: torch.Tensor, pairs: list[tuple[int, int]]
) -> torch.Tensor:
    """U_AQER(θ)|0> = V(alpha)† W(β, gamma)|0>: the product layer, then V_T†, ..., V_1†."""
    psi = product_state(product_layer(beta, gamma))
    mats = block_matrices(alpha).conj().transpose(-1, -2)
    for (j, k), m in zip(reversed(pairs), mats.flip(0), strict=True):
        psi = apply_2q(psi, m, j, k)
    return psi


def step_three(
    target: np.ndarray,
    pairs: list[tuple[int, int]],
    theta0: tuple[np.ndarray, np.ndarray, np.ndarray],
    steps: int,
    lr: float,
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], list[float]]:
    """Adam fine-tuning of θ = (alpha (T, 11), β (N,), gamma (N,)); returns the best θ and the losses."""
    v = torch.from_numpy(np.asarray(target, dtype=complex))

    def loss(alpha: torch.Tensor, beta: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
        return 1.0 - torch.sum(v.conj() * loaded_state(alpha, beta, gamma, pairs)).abs() ** 2

    init = [torch.as_tensor(np.asarray(t, dtype=float)) for t in theta0]
    best, losses = adam_best(loss, init, steps, lr)
    return tuple(t.numpy() for t in best), losses


def full_alpha(step1_params: np.ndarray) -> np.ndarray:
    """Step-I parameters (T, 5) as full block parameters (T, 11), the U3 layer at zero."""
    out = np.zeros((step1_params.shape[0], N_PARAMS))
    out[:, :N_STEP1_PARAMS] = step1_params
    return out


def reduced_by(target: np.ndarray, alpha: np.ndarray, pairs: list[tuple[int, int]]) -> np.ndarray:
    """V(alpha)|v>: the target after the (fine-tuned) blocks, for the Theorem-3.1 lower bound."""
    mats = block_matrices(torch.from_numpy(alpha)).numpy()
    psi = np.array(target, dtype=complex)
    for (j, k), m in zip(pairs, mats, strict=True):
        psi = apply_block_np(psi, m, j, k)
    return psi


def steps_two_three(
    target: np.ndarray,
    pairs: list[tuple[int, int]],
    step1_params: np.ndarray,
    *,
    adam_steps: int,
    lr: float,
    init: str = "step_one",
    seed: int = 0,
) -> dict[str, float]:
    """Steps II-III on the architecture Step I found (a prefix of its blocks): infidelity
    after Step II (closed form) and after Step III, and the entropies the bounds need."""
    reduced = reduced_by(target, full_alpha(step1_params), pairs)
    beta, gamma = step_two(reduced)
    prod = product_state(product_layer(torch.from_numpy(beta), torch.from_numpy(gamma)))
    inf2 = 1.0 - abs(np.vdot(reduced, prod.numpy())) ** 2
    theta0 = (full_alpha(step1_params), beta, gamma)
    if init == "random":
        rng = np.random.default_rng(seed)
        theta0 = tuple(rng.uniform(-np.pi, np.pi, size=np.shape(t)) for t in theta0)
    (alpha, beta, gamma), losses = step_three(target, pairs, theta0, adam_steps, lr)
    return {
        "infidelity": float(min(losses)),
        "infidelity_step2": float(inf2),
        "finetune_start": float(losses[0]),
        "entropy_step1": total_entropy(reduced),
        "entropy_final": total_entropy(reduced_by(target, alpha, pairs)),
    }


def aqer(
    target: np.ndarray,
    n_blocks: int,
    *,
    adam_steps: int,
    lr: float,
    nm_tol: float = 1e-4,
    nm_max_evals: int = 1000,
    nm_init_step: float = 0.5,
    pair_order: str = "greedy",
    init: str = "step_one",
    seed: int = 0,
) -> dict[str, float]:
    """Steps I-III on one target with T = `n_blocks` blocks."""
    rng = np.random.default_rng(seed)
    one = step_one(target, n_blocks, nm_tol, nm_max_evals, nm_init_step, pair_order, rng)
    out = steps_two_three(
        target, one.pairs, one.params, adam_steps=adam_steps, lr=lr, init=init, seed=seed
    )
    return {"entropy_target": one.entropy[0], **out}
