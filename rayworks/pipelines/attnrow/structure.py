"""The attention-row data structure: the classical analogue of the paper's quantum one.

Paper: Song, Xue, Zhang, Zhang, "Quantum data structure for sublinear-time attention
rows" (ICLR 2026, arXiv 2602.00874; abstract only, no code). Input: row-query access to
Q, K, V ∈ R^{nxd}; target Att = D⁻¹AV, A = exp(QKᵀ/√d), D = diag(A1). Everything below
beyond the abstract is reconstructed (docs/attnrow.md), in steps 1-5:

1. landmarks: s points of X = [Q; K]/d^{1/4} drawn ∝ ridge leverage scores τ of the exp
   kernel (recursive RLS, `kernel.py`; the quantum version samples them by amplitude
   amplification, the source of √n), or uniformly (the baseline);
2. Nyström: A ≈ Φ_Q M Φ_Kᵀ, Φ_Q = exp(Q Sᵀ/√d), M = K_SS⁺ (or (K_SS + λI)⁻¹, `inverse`);
3.+4. normaliser and product from ONE shared sample (`estimator="shared"`, the default):
   [u, Z] = Φ_Kᵀ[1, V] by approximate matrix multiplication: m rows j drawn with
   p_j = leverage scores of W = [1_n, V] / rank W, reweighted by 1/(m p_j) (unbiased for
   both). Because u and Z share the draws, att_i ≈ tZ/tu = Σ_j ω_ij v_j with Σ_j ω_ij = 1
   (ω_ij ∝ (tφ_j)/p_j): the estimate self-normalises, e.g. V ≡ 1 gives rows ≡ 1 exactly.
   This is our reading (reconstructed) of the abstract's "mean estimation for D" and
   "leverage score sampling for the product with V" as one sampled product with [1, V];
   the quantum version would replace the m-sample mean by multivariate mean estimation
   (1/ε instead of 1/ε²). `estimator="independent"` keeps the first reconstruction:
   u = n·mean of m uniform K-row samples and Z from m further rows drawn ∝ leverage
   scores of V alone; each is unbiased but their ratio does not self-normalise;
5. query i: φ = exp(S q_i/√d) (O(sd)), t = φᵀM (O(s²)), att_i ≈ tZ / tu (O(sd)).

Every read of Q, K or V goes through a `RowOracle`, which counts rows per stage; the
classical counts are closed forms (`classical_calls`), and the quantum ones are only
*modelled* (`modelled_quantum_calls`): nothing quantum runs here.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from rayworks.pipelines.attnrow.kernel import (
    exp_kernel,
    recursive_rls,
    ridge_leverage_scores,
    sample_without_replacement,
)

Landmarks = Literal["rls", "rls_exact", "uniform"]
Estimate = Literal["sampled", "exact"]
Estimator = Literal["shared", "independent"]
Inverse = Literal["pinv", "ridge"]
STAGES = ("landmarks", "normaliser", "product", "query")


@dataclass
class RowOracle:
    """Row-query access to Q, K, V (the paper's input model); counts every row handed out
    per (stage, matrix). Repeated reads of one row count each time."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    stage: str = "landmarks"
    calls: Counter = field(default_factory=Counter)

    @property
    def n(self) -> int:
        return len(self.k)

    @property
    def d(self) -> int:
        return self.q.shape[1]

    def rows(self, which: Literal["q", "k", "v"], idx: np.ndarray) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.int64)
        self.calls[(self.stage, which)] += len(idx)
        return getattr(self, which)[idx]

    def stage_totals(self) -> dict[str, int]:
        return {s: sum(c for (st, _), c in self.calls.items() if st == s) for s in STAGES}


@dataclass(frozen=True)
class BuildOptions:
    """How each stage is done (all reconstructed; see the config's descriptions)."""

    s: int
    m: int
    lam: float
    landmarks: Landmarks = "rls"
    normaliser: Estimate = "sampled"
    product: Estimate = "sampled"
    inverse: Inverse = "pinv"
    pinv_rcond: float = 1e-10
    estimator: Estimator = "shared"
    rls_oversample: float = 4.0
    rls_leaf_size: int = 256


@dataclass
class AttentionRows:
    """The preprocessed structure: scaled landmarks (s, d), M (s, s), u (s,), Z (s, d_v)."""

    landmarks: np.ndarray
    m_inv: np.ndarray
    u: np.ndarray
    z: np.ndarray
    alpha: float

    def query(self, q_row: np.ndarray) -> np.ndarray:
        """att_i ≈ (φᵀM Z)/(φᵀM u) for one query row q_i (d,): O(s² + sd), no n anywhere."""
        phi = np.exp(self.landmarks @ (q_row / q_row.shape[0] ** 0.25))  # (s,)
        t = phi @ self.m_inv  # (s,)
        return (t @ self.z) / (t @ self.u)

    def query_many(self, q_rows: np.ndarray) -> np.ndarray:
        """`query` for a batch (r, d) -> (r, d_v), vectorised (for error evaluation)."""
        t = exp_kernel(q_rows / q_rows.shape[1] ** 0.25, self.landmarks) @ self.m_inv
        return (t @ self.z) / (t @ self.u)[:, None]


def choose_landmarks(
    oracle: RowOracle, opts: BuildOptions, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Stage 1: (indices into X = [Q; K], scaled landmark rows (s, d)).

    RLS variants read all 2n rows (classically the scores need every point); uniform
    reads only the s chosen rows.
    """
    n, scale = oracle.n, oracle.d**0.25
    if opts.landmarks == "uniform":
        idx = np.sort(rng.choice(2 * n, size=opts.s, replace=False))
    else:
        x = np.vstack([oracle.rows("q", np.arange(n)), oracle.rows("k", np.arange(n))]) / scale
        if opts.landmarks == "rls":
            tau = recursive_rls(x, opts.lam, rng, opts.rls_oversample, opts.rls_leaf_size)
        else:
            tau = ridge_leverage_scores(exp_kernel(x, x), opts.lam)
        idx = sample_without_replacement(tau, opts.s, rng)
        return idx, x[idx]
    is_q = idx < n
    rows = np.empty((opts.s, oracle.d))
    rows[is_q] = oracle.rows("q", idx[is_q])
    rows[~is_q] = oracle.rows("k", idx[~is_q] - n)
    return idx, rows / scale


def landmark_inverse(landmarks: np.ndarray, opts: BuildOptions) -> np.ndarray:
    """Stage 2: M = K_SS⁺ (eigenvalues below rcond·sig_max dropped) or (K_SS + λI)⁻¹."""
    k_ss = exp_kernel(landmarks, landmarks)
    if opts.inverse == "ridge":
        return np.linalg.inv(k_ss + opts.lam * np.eye(len(k_ss)))
    sig, u = np.linalg.eigh(k_ss)
    keep = sig > opts.pinv_rcond * sig.max()
    return (u[:, keep] / sig[keep]) @ u[:, keep].T


def normaliser(
    oracle: RowOracle, landmarks: np.ndarray, opts: BuildOptions, rng: np.random.Generator
) -> np.ndarray:
    """Stage 3: u = Φ_Kᵀ1 (s,), exactly (n K rows) or as n·mean of m uniform samples."""
    n, scale = oracle.n, oracle.d**0.25
    if opts.normaliser == "exact":
        return exp_kernel(landmarks, oracle.rows("k", np.arange(n)) / scale).sum(axis=1)
    picks = rng.integers(0, n, size=opts.m)
    return n * exp_kernel(landmarks, oracle.rows("k", picks) / scale).mean(axis=1)


def value_leverage(v: np.ndarray) -> np.ndarray:
    """Leverage scores of V's rows, v_jᵀ(VᵀV)⁺v_j = ‖U_j‖² from a thin SVD: (n,)."""
    u, sig, _ = np.linalg.svd(v, full_matrices=False)
    rank = int(np.sum(sig > sig.max() * max(v.shape) * np.finfo(float).eps))
    return np.sum(u[:, :rank] ** 2, axis=1)


def row_distortion(v: np.ndarray, p: np.ndarray) -> float:
    """alpha = max_j (‖v_j‖²/‖V‖_F²) / p_j (step 4 above, our reading; ≤ d/srank(V))."""
    share = np.sum(v**2, axis=1) / np.sum(v**2)
    live = p > 0
    return float(np.max(share[live] / p[live]))


def product(
    oracle: RowOracle, landmarks: np.ndarray, opts: BuildOptions, rng: np.random.Generator
) -> tuple[np.ndarray, float]:
    """Stage 4: (Z = Φ_KᵀV (s, d_v), alpha). Exact: n K and n V rows. Sampled: n V rows for the
    leverage scores, then m (K, V) row pairs drawn ∝ p_j and reweighted by 1/(m p_j)."""
    n, scale = oracle.n, oracle.d**0.25
    v_all = oracle.rows("v", np.arange(n))
    p = value_leverage(v_all)
    p = p / p.sum()
    alpha = row_distortion(v_all, p)
    if opts.product == "exact":
        phi = exp_kernel(landmarks, oracle.rows("k", np.arange(n)) / scale)
        return phi @ v_all, alpha
    picks = rng.choice(n, size=opts.m, p=p)
    phi = exp_kernel(landmarks, oracle.rows("k", picks) / scale)  # (s, m)
    v_rows = oracle.rows("v", picks) / (opts.m * p[picks])[:, None]
    return phi @ v_rows, alpha


def shared_product(
    oracle: RowOracle, landmarks: np.ndarray, opts: BuildOptions, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, float]:
    """Stages 3+4 from one sample: (u (s,), Z (s, d_v), alpha). Reads n V rows for the
    leverage scores of W = [1_n, V], then m (K, V) row pairs drawn ∝ p_j, and estimates
    Φ_KᵀW = Σ_j φ(k_j) w_jᵀ by Σ_{j in sample} φ(k_j) w_jᵀ / (m p_j). u and Z are its first
    and remaining columns, so tZ/tu is a weighted mean of the sampled v_j (weights sum
    to 1 for every query). alpha is the row distortion of W under p."""
    n, scale = oracle.n, oracle.d**0.25
    v_all = oracle.rows("v", np.arange(n))
    w_all = np.hstack([np.ones((n, 1)), v_all])
    p = value_leverage(w_all)
    p = p / p.sum()
    picks = rng.choice(n, size=opts.m, p=p)
    phi = exp_kernel(landmarks, oracle.rows("k", picks) / scale)  # (s, m)
    weights = 1.0 / (opts.m * p[picks])  # (m,)
    w_rows = np.hstack([np.ones((opts.m, 1)), oracle.rows("v", picks)]) * weights[:, None]
    joint = phi @ w_rows  # (s, 1 + d_v)
    return joint[:, 0], joint[:, 1:], row_distortion(w_all, p)


def is_shared(opts: BuildOptions) -> bool:
    """Whether u and Z come from one shared sample (both sampled, `estimator="shared"`)."""
    return opts.estimator == "shared" and opts.normaliser == opts.product == "sampled"


def build(oracle: RowOracle, opts: BuildOptions, rng: np.random.Generator) -> AttentionRows:
    """Preprocess (stages 1-4) through `oracle`, which counts the rows each stage reads.
    With a shared sample the normaliser stage reads nothing: u comes out of the product."""
    if not 1 <= opts.s <= 2 * oracle.n:
        raise ValueError(f"s={opts.s} landmarks: need 1 <= s <= 2n = {2 * oracle.n}")
    oracle.stage = "landmarks"
    _, landmarks = choose_landmarks(oracle, opts, rng)
    m_inv = landmark_inverse(landmarks, opts)
    u, z, alpha = sample_stages(oracle, landmarks, opts, rng)
    oracle.stage = "query"
    return AttentionRows(landmarks=landmarks, m_inv=m_inv, u=u, z=z, alpha=alpha)


def sample_stages(
    oracle: RowOracle, landmarks: np.ndarray, opts: BuildOptions, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, float]:
    """Stages 3-4 for given landmarks (`build` runs them; the error-vs-m sweeps reuse
    fixed landmarks): (u, Z, alpha), one shared sample or two independent ones."""
    if is_shared(opts):
        oracle.stage = "product"
        return shared_product(oracle, landmarks, opts, rng)
    oracle.stage = "normaliser"
    u = normaliser(oracle, landmarks, opts, rng)
    oracle.stage = "product"
    z, alpha = product(oracle, landmarks, opts, rng)
    return u, z, alpha


def query_row(structure: AttentionRows, oracle: RowOracle, i: int) -> np.ndarray:
    """Answer row i: one Q-row read plus the O(s² + sd) arithmetic of `AttentionRows.query`."""
    oracle.stage = "query"
    return structure.query(oracle.rows("q", np.array([i]))[0])


def classical_calls(n: int, opts: BuildOptions) -> dict[str, int]:
    """Rows each stage reads classically (closed form; `RowOracle` counts must match)."""
    landmarks = opts.s if opts.landmarks == "uniform" else 2 * n
    if is_shared(opts):  # n V rows for the scores of [1, V], then m (K, V) pairs
        return {"landmarks": landmarks, "normaliser": 0, "product": n + 2 * opts.m, "query": 1}
    norm = n if opts.normaliser == "exact" else opts.m
    prod = 2 * n if opts.product == "exact" else n + 2 * opts.m
    return {"landmarks": landmarks, "normaliser": norm, "product": prod, "query": 1}


def query_ops(s: int, d: int, d_v: int) -> int:
    """Multiply-adds of one query: S q (sd) + φᵀM (s²) + tZ (s d_v) + tu (s)."""
    return s * d + s * s + s * d_v + s


def modelled_quantum_calls(n: int, opts: BuildOptions, s_lambda: float) -> dict[str, float]:
    """MODELLED, not measured: oracle calls of the quantum structure, constants and log
    factors dropped (reconstructed reading of the abstract's Õ(ε⁻¹ n^{0.5} ...) bound).

    landmarks: s amplitude-amplified draws ∝ τ over 2n points, √(2n/s_λ) calls each;
    normaliser: mean estimation to the accuracy of m classical samples in √m calls
    (1/ε vs 1/ε²); product: amplitude-amplified leverage sampling of V (√n) plus mean
    estimation of the reweighted outer products (√m); query: one Q row, as classically.
    With a shared sample, u is a column of that one mean estimation (normaliser: 0).
    """
    return {
        "landmarks": opts.s * math.sqrt(2 * n / max(s_lambda, 1.0)),
        "normaliser": 0.0 if is_shared(opts) else math.sqrt(opts.m),
        "product": math.sqrt(n) + math.sqrt(opts.m),
        "query": 1.0,
    }
