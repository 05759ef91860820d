"""AQER Steps I-II on an MPS target (`mps.py`), for N beyond the state vector.

Same algorithm as `aqer.step_one` / `aqer.step_two`, only the state changes:
- Step I: the pair objective and Nelder-Mead are `aqer.optimise_pair` on the 4x4 pair RDM,
  now contracted from the MPS (`mps.pair_rdms_from`); the chosen block is applied with
  SWAP routing and SVD truncation (`max_bond`, `cutoff`), and the discarded weight summed.
  As in the state-vector code only pairs touching the last block's qubits are
  re-optimised; with truncation the other pairs' RDMs change by at most the discarded
  weight, which is reported (exact without truncation).
- Candidate pairs: all C(N, 2) pairs, or only those with |j - k| ≤ `pair_range`
  (reconstructed CPU restriction for large N; None = all pairs, the paper's search).
- Step II: closed form from the MPS single-site marginals (`aqer.angles_from_rdms`);
  infidelity 1 - |<W0|V v>|² against the reduced MPS (the Theorem 3.1 quantity, equal to
  the loader's infidelity up to truncation) and, honestly, the loader V† W|0> built as an
  MPS against the target MPS.
Step III (Adam on the full circuit) stays state-vector only (N ≤ 14).
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import torch

from rayworks.pipelines.aqer import mps
from rayworks.pipelines.aqer.aqer import StepOneResult, angles_from_rdms, optimise_pair
from rayworks.pipelines.aqer.blocks import N_STEP1_PARAMS, product_layer, step1_block_np
from rayworks.pipelines.aqer.entropy import renyi2


def candidate_pairs(n: int, pair_range: int | None) -> list[tuple[int, int]]:
    """All pairs j < k, or those with k - j ≤ pair_range."""
    return [
        (j, k) for j, k in combinations(range(n), 2) if pair_range is None or k - j <= pair_range
    ]


def pair_rdms_touching(m: mps.MPS, sites, pairs, envs) -> dict:
    """RDMs of the `pairs` that contain one of `sites`, one rightward sweep per left end."""
    wanted = [p for p in pairs if p[0] in sites or p[1] in sites]
    out = {}
    for j in sorted({p[0] for p in wanted}):
        out.update(mps.pair_rdms_from(m, j, [k for a, k in wanted if a == j], envs))
    return out


def step_one_mps(
    target: mps.MPS,
    n_blocks: int,
    tol: float = 1e-4,
    max_evals: int = 1000,
    init_step: float = 0.5,
    *,
    max_bond: int = 64,
    cutoff: float = 1e-12,
    pair_range: int | None = None,
) -> tuple[StepOneResult, mps.MPS, float]:
    """Greedy Step I on an MPS: (result with pairs/params/entropies, reduced MPS, discarded)."""
    m = target.copy()
    pairs = candidate_pairs(m.n, pair_range)
    envs = mps.environments(m)
    s_i = renyi2(mps.single_rdms(m, envs))
    out = StepOneResult([], np.zeros((0, N_STEP1_PARAMS)), None, [float(s_i.sum())])
    rdms = pair_rdms_touching(m, set(range(m.n)), pairs, envs)
    best: dict[tuple[int, int], tuple[float, np.ndarray]] = {}
    params, dropped = [], 0.0
    for _ in range(n_blocks):
        for p in pairs:
            if p not in best:
                after, x = optimise_pair(rdms[p], tol, max_evals, init_step)
                best[p] = (after - s_i[p[0]] - s_i[p[1]], x)
        j, k = min(pairs, key=lambda p: best[p][0])
        x = best[(j, k)][1]
        dropped += mps.apply_gate(m, step1_block_np(x), j, k, max_bond, cutoff)
        envs = mps.environments(m)
        s_i = renyi2(mps.single_rdms(m, envs))
        best = {p: v for p, v in best.items() if j not in p and k not in p}
        rdms.update(pair_rdms_touching(m, {j, k}, pairs, envs))
        out.pairs.append((j, k))
        params.append(x)
        out.entropy.append(float(s_i.sum()))
    out.params = np.array(params).reshape(-1, N_STEP1_PARAMS)
    return out, m, dropped


def step_two_mps(
    target: mps.MPS,
    reduced: mps.MPS,
    one: StepOneResult,
    max_bond: int = 64,
    cutoff: float = 1e-12,
) -> dict[str, float]:
    """Step II on the reduced MPS: infidelity vs V|v> and of the loader V†W|0> vs |v>."""
    beta, gamma = angles_from_rdms(mps.single_rdms(reduced))
    qubits = product_layer(torch.from_numpy(beta), torch.from_numpy(gamma)).numpy()
    prod = mps.product_mps(qubits)
    inf_reduced = 1.0 - abs(mps.overlap(reduced, prod)) ** 2
    loader, dropped = prod.copy(), 0.0
    for (j, k), x in zip(reversed(one.pairs), one.params[::-1], strict=True):
        dropped += mps.apply_gate(loader, step1_block_np(x).conj().T, j, k, max_bond, cutoff)
    return {
        "infidelity_step2": float(inf_reduced),
        "infidelity_step2_loader": float(1.0 - abs(mps.overlap(target, loader)) ** 2),
        "loader_discarded": dropped,
        "entropy_step1": float(renyi2(mps.single_rdms(reduced)).sum()),
    }
