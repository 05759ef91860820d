"""The independent pieces of one `attnrow` run (each a pure function of its arguments, so
`fan_out` can run them as Ray tasks): s_λ vs norm scale (and of input b'), row error vs
landmarks per method and input (on b' also over small-cluster rows; a mean over
`landmark_draws` landmark draws), sampling error vs m (both estimators), error at m
sublinear in n, and per-query time / oracle calls vs n.

Methods (all at s landmarks or r = s random features):
- `analogue`: the full classical analogue (recursive-RLS landmarks, u and Z sampled from
  one shared sample, or independently with `estimator="independent"`);
- `rls_nystrom`: the same landmarks with exact D and Z;
- `uniform_nystrom`: uniform landmarks, exact D and Z;
- `performer`: positive random features, r = s (matched feature count).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from rayworks.pipelines.attnrow.baselines import (
    build_performer,
    exact_row,
    exact_rows,
    performer_ops,
)
from rayworks.pipelines.attnrow.config import AttnRowConfig, Method
from rayworks.pipelines.attnrow.inputs import clustered_tokens, imbalanced_tokens
from rayworks.pipelines.attnrow.kernel import (
    kernel_eigenvalues,
    kernel_points,
    recursive_rls,
    statistical_dimension,
)
from rayworks.pipelines.attnrow.structure import (
    AttentionRows,
    BuildOptions,
    RowOracle,
    build,
    classical_calls,
    modelled_quantum_calls,
    query_ops,
    query_row,
    sample_stages,
)
from rayworks.platform.stats import mean_ci

Row = dict[str, Any]
PLAN = {  # method -> (landmarks, normaliser, product)
    "analogue": ("rls", "sampled", "sampled"),
    "rls_nystrom": ("rls", "exact", "exact"),
    "uniform_nystrom": ("uniform", "exact", "exact"),
}


def options(
    cfg: AttnRowConfig,
    method: Method,
    n: int,
    s: int,
    m: int | None = None,
    estimator: str | None = None,
) -> BuildOptions:
    landmarks, norm, prod = PLAN[method]
    return BuildOptions(
        s=s,
        m=m or cfg.samples,
        lam=cfg.lambda_rel * 2 * n,
        landmarks=landmarks,
        normaliser=norm,
        product=prod,
        inverse=cfg.inverse,
        pinv_rcond=cfg.pinv_rcond,
        estimator=estimator or cfg.estimator,
        rls_oversample=cfg.rls.oversample,
        rls_leaf_size=cfg.rls.leaf_size,
    )


def build_method(cfg: AttnRowConfig, method: Method, q, k, v, s: int, seed: list[int]):
    """(structure with `query`/`query_many`, oracle or None, preprocessing seconds)."""
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    if method == "performer":
        return build_performer(k, v, s, rng), None, time.perf_counter() - started
    oracle = RowOracle(q, k, v)
    rows = build(oracle, options(cfg, method, len(k), s), rng)
    return rows, oracle, time.perf_counter() - started


def relative_errors(approx: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """Relative l2 row errors ‖â_i - a_i‖ / ‖a_i‖: (r,)."""
    return np.linalg.norm(approx - exact, axis=1) / np.linalg.norm(exact, axis=1)


def query_indices(n: int, count: int, seed: int) -> np.ndarray:
    return np.random.default_rng([seed, 7, n]).choice(n, size=min(count, n), replace=False)


def s_lambda_of(q: np.ndarray, k: np.ndarray, lam: float, exact_max: int, seed: int) -> float:
    """s_λ exactly (eigendecomposition) when 2n <= exact_max, else Σ of recursive-RLS
    scores (an over-estimate by a small factor)."""
    x = kernel_points(q, k)
    if len(x) <= exact_max:
        return statistical_dimension(kernel_eigenvalues(x), lam)
    return float(recursive_rls(x, lam, np.random.default_rng(seed), 4.0, 256).sum())


def landmark_counts(cfg: AttnRowConfig, s_lambda: float, n: int) -> dict[float, int]:
    """multiple -> s = ceil(multiple · s_λ), capped at 2n."""
    return {x: min(2 * n, math.ceil(x * s_lambda)) for x in cfg.landmark_multiples}


def spectrum_piece(cfg: AttnRowConfig, scale: float) -> Row:
    """s_λ of input (b) at `spectrum_n` tokens and norm scale `scale` (exact)."""
    n = cfg.spectrum_n
    q, k, _ = clustered_tokens(cfg.synthetic, n, cfg.seed, scale)
    ev = kernel_eigenvalues(kernel_points(q, k))
    lam = cfg.lambda_rel * 2 * n
    return {
        "table": "spectrum",
        "scale": scale,
        "n": n,
        "s_lambda": statistical_dimension(ev, lam),
        "top_eigenvalue": float(ev[-1]),
        "lambda": lam,
    }


def imbalanced_spectrum_piece(cfg: AttnRowConfig) -> Row:
    """s_λ of input (b') at `spectrum_n` tokens, norm scale 1 (exact)."""
    n = cfg.spectrum_n
    q, k, _, _ = imbalanced_tokens(cfg.synthetic, cfg.imbalanced, n, cfg.seed)
    ev = kernel_eigenvalues(kernel_points(q, k))
    lam = cfg.lambda_rel * 2 * n
    return {
        "table": "spectrum_imb",
        "n": n,
        "s_lambda": statistical_dimension(ev, lam),
        "top_eigenvalue": float(ev[-1]),
        "lambda": lam,
    }


def draw_seed(cfg: AttnRowConfig, s: int, draw: int) -> list[int]:
    """Seed of landmark draw `draw` at s landmarks (draw 0 is the single draw of old runs)."""
    return [cfg.seed, 11, s] if draw == 0 else [cfg.seed, 11, s, draw]


def _with_ci(row: Row, key: str, values: list[float]) -> None:
    """row[key] = mean over draws, key_lo / key_hi = its 95% t-interval, key_draws = values."""
    mean, lo, hi = mean_ci(values)
    row.update({key: mean, f"{key}_lo": lo, f"{key}_hi": hi, f"{key}_draws": values})


def error_piece(
    cfg: AttnRowConfig,
    data: str,
    method: Method,
    q,
    k,
    v,
    s_lambda: float,
    minor: np.ndarray | None = None,
) -> list[Row]:
    """Median / p90 relative row error of `method` for every landmark multiple, each a mean
    over `landmark_draws` landmark draws (with 95% t-intervals; per-draw values kept for
    paired comparisons); with `minor` (candidate query rows, e.g. those in the small
    clusters of input b') also `row_err_minor`, the median over up to `query_rows` of them."""
    n = len(k)
    rows = query_indices(n, cfg.query_rows, cfg.seed)
    exact = exact_rows(q[rows], k, v)
    if minor is not None and len(minor):
        pick = np.random.default_rng([cfg.seed, 19, n])
        minor = np.sort(pick.choice(minor, size=min(cfg.query_rows, len(minor)), replace=False))
        exact_minor = exact_rows(q[minor], k, v)
    out = []
    for mult, s in landmark_counts(cfg, s_lambda, n).items():
        med, p90, med_minor, build_s = [], [], [], 0.0
        for draw in range(cfg.landmark_draws):
            struct, _, secs = build_method(cfg, method, q, k, v, s, draw_seed(cfg, s, draw))
            err = relative_errors(struct.query_many(q[rows]), exact)
            med.append(float(np.median(err)))
            p90.append(float(np.quantile(err, 0.9)))
            build_s += secs
            if minor is not None and len(minor):
                err_minor = relative_errors(struct.query_many(q[minor]), exact_minor)
                med_minor.append(float(np.median(err_minor)))
        row = {
            "table": "error",
            "input": data,
            "method": method,
            "n": n,
            "s": s,
            "multiple": mult,
            "s_over_slambda": s / s_lambda,
            "draws": cfg.landmark_draws,
            "row_err_p90": float(np.mean(p90)),
            "build_s": build_s / cfg.landmark_draws,
        }
        _with_ci(row, "row_err", med)
        if minor is not None:
            if len(minor):
                _with_ci(row, "row_err_minor", med_minor)
            else:
                row["row_err_minor"] = math.nan
            row["minor_rows"] = len(minor)
        out.append(row)
    return out


def sampled_errors(
    cfg: AttnRowConfig,
    ref: AttentionRows,
    q,
    k,
    v,
    rows: np.ndarray,
    m: int,
    rep: int,
    estimator: str,
    exact: np.ndarray,
    ref_rows: np.ndarray,
) -> tuple[float, float]:
    """(median error vs the exact-D, Z rows of the same landmarks, median error vs exact
    attention) of one sampled u, Z of size m with `ref`'s landmarks."""
    n, s = len(k), len(ref.landmarks)
    rng = np.random.default_rng([cfg.seed, 13, m, rep])
    opts = options(cfg, "analogue", n, s, m, estimator)
    u, z, alpha = sample_stages(RowOracle(q, k, v), ref.landmarks, opts, rng)
    approx = AttentionRows(ref.landmarks, ref.m_inv, u, z, alpha).query_many(q[rows])
    return (
        float(np.median(relative_errors(approx, ref_rows))),
        float(np.median(relative_errors(approx, exact))),
    )


def sampling_piece(cfg: AttnRowConfig, q, k, v, s: int) -> list[Row]:
    """Error vs m with fixed RLS landmarks: the analogue's rows against the same landmarks
    with exact D, Z (the sampling error alone) and against exact attention, for the
    configured estimator (`sampling_err`, `row_err`) and the other one (`*_other`)."""
    n = len(k)
    rows = query_indices(n, cfg.query_rows, cfg.seed)
    exact = exact_rows(q[rows], k, v)
    ref, _, _ = build_method(cfg, "rls_nystrom", q, k, v, s, [cfg.seed, 11, s])
    ref_rows = ref.query_many(q[rows])
    other = "independent" if cfg.estimator == "shared" else "shared"
    out = []
    for m in cfg.sample_grid:
        row: Row = {
            "table": "sampling",
            "n": n,
            "s": s,
            "m": m,
            "estimator": cfg.estimator,
            "other": other,
        }
        for est, tag in ((cfg.estimator, ""), (other, "_other")):
            errs = [
                sampled_errors(cfg, ref, q, k, v, rows, m, rep, est, exact, ref_rows)
                for rep in range(cfg.sample_seeds)
            ]
            row[f"sampling_err{tag}"] = float(np.mean([e[0] for e in errs]))
            row[f"row_err{tag}"] = float(np.mean([e[1] for e in errs]))
        out.append(row)
    return out


def sublinear_m(cfg: AttnRowConfig, n: int, exponent: float) -> int:
    """m = ceil(m_at_min_n · (n / min n_grid)^β): sublinear in n for β < 1."""
    sub = cfg.sublinear
    return math.ceil(sub.m_at_min_n * (n / min(sub.n_grid)) ** exponent)


def sublinear_piece(cfg: AttnRowConfig, n: int, s: int) -> list[Row]:
    """Analogue row error on input (b) at n tokens with m = `sublinear_m(n, β)` samples
    (the configured estimator) for each β: one RLS landmark set per n, `sample_seeds`
    sample draws (mean, 95% t-interval). `landmark_err`: same landmarks, exact D and Z."""
    q, k, v = clustered_tokens(cfg.synthetic, n, cfg.seed)
    rows = query_indices(n, cfg.query_rows, cfg.seed)
    exact = exact_rows(q[rows], k, v)
    s = min(s, 2 * n)
    ref, _, _ = build_method(cfg, "rls_nystrom", q, k, v, s, [cfg.seed, 23, n])
    ref_rows = ref.query_many(q[rows])
    landmark_err = float(np.median(relative_errors(ref_rows, exact)))
    out = []
    for beta in cfg.sublinear.exponents:
        m = sublinear_m(cfg, n, beta)
        errs = [
            sampled_errors(cfg, ref, q, k, v, rows, m, rep, cfg.estimator, exact, ref_rows)[1]
            for rep in range(cfg.sample_seeds)
        ]
        row: Row = {
            "table": "sublinear",
            "n": n,
            "s": s,
            "exponent": beta,
            "m": m,
            "m_over_n": m / n,
            "landmark_err": landmark_err,
        }
        _with_ci(row, "row_err", errs)
        out.append(row)
    return out


def _time_queries(fn, q: np.ndarray, rows: np.ndarray) -> float:
    """Median wall-clock microseconds of single-row queries (two warm-up calls)."""
    for i in rows[:2]:
        fn(int(i))
    times = []
    for i in rows:
        started = time.perf_counter_ns()
        fn(int(i))
        times.append(time.perf_counter_ns() - started)
    return float(np.median(times)) / 1e3


PRE = ("landmarks", "normaliser", "product")


def method_timing(cfg: AttnRowConfig, method: Method, q, k, v, s: int, s_lambda: float) -> Row:
    """Per-query time, operation count, row error and oracle calls of one method at n."""
    n, d = len(k), q.shape[1]
    rows = query_indices(n, cfg.timing_rows, cfg.seed)
    struct, oracle, build_s = build_method(cfg, method, q, k, v, s, [cfg.seed, 17, n])
    err = float(np.median(relative_errors(struct.query_many(q[rows]), exact_rows(q[rows], k, v))))
    row: Row = {
        "table": "timing",
        "method": method,
        "n": n,
        "s": s,
        "row_err": err,
        "build_s": build_s,
    }
    if oracle is None:  # Performer: reads all K, V rows once, one Q row per query
        row.update(
            query_us=_time_queries(lambda i: struct.query(q[i]), q, rows),
            query_ops=performer_ops(s, d, d),
            calls_preprocess=2 * n,
            calls_query=1,
        )
        return row
    opts = options(cfg, method, n, s)
    pre, expected = oracle.stage_totals(), classical_calls(n, opts)
    query_row(struct, oracle, int(rows[0]))
    row.update(
        query_ops=query_ops(s, d, d),
        alpha=struct.alpha,
        calls_query=oracle.stage_totals()["query"],
        calls_preprocess=sum(pre[st] for st in PRE),
        calls_match=float(all(pre[st] == expected[st] for st in PRE)),
        **{f"calls_{st}": pre[st] for st in PRE},
    )
    row["query_us"] = _time_queries(lambda i: query_row(struct, oracle, i), q, rows)
    if method == "analogue":
        quantum = modelled_quantum_calls(n, opts, s_lambda)
        row.update({f"modelled_quantum_{st}": c for st, c in quantum.items()})
        row["modelled_quantum_preprocess"] = sum(quantum[st] for st in PRE)
    return row


def timing_piece(
    cfg: AttnRowConfig, methods: list[Method], n: int, s: int, s_lambda: float
) -> list[Row]:
    """`method_timing` at n for each method, after exact attention's O(nd) query."""
    q, k, v = clustered_tokens(cfg.synthetic, n, cfg.seed)
    d, rows = q.shape[1], query_indices(n, cfg.timing_rows, cfg.seed)
    exact = {
        "table": "timing",
        "method": "exact",
        "n": n,
        "s": 0,
        "row_err": 0.0,
        "query_us": _time_queries(lambda i: exact_row(q[i], k, v), q, rows),
        "query_ops": 2 * n * d + n,
        "calls_preprocess": 0,
        "calls_query": 2 * n + 1,
    }
    return [exact, *(method_timing(cfg, m, q, k, v, s, s_lambda) for m in methods)]


def lm_spectrum_piece(cfg: AttnRowConfig, q, k) -> Row:
    """s_λ of input (a) (exact when 2n <= exact_max_points, else the recursive-RLS sum)."""
    n = len(k)
    lam = cfg.lambda_rel * 2 * n
    s_lambda = s_lambda_of(q, k, lam, cfg.exact_max_points, cfg.seed)
    return {
        "table": "spectrum_lm",
        "n": n,
        "lambda": lam,
        "s_lambda": s_lambda,
        "exact": float(2 * n <= cfg.exact_max_points),
    }


PIECES = {
    "spectrum": spectrum_piece,
    "lm_spectrum": lm_spectrum_piece,
    "imb_spectrum": imbalanced_spectrum_piece,
    "error": error_piece,
    "sampling": sampling_piece,
    "sublinear": sublinear_piece,
    "timing": timing_piece,
}


def run_piece(kind: str, **kwargs: Any) -> Row | list[Row]:
    """Dispatch one piece by kind (one module-level entry point for `fan_out`)."""
    return PIECES[kind](**kwargs)
