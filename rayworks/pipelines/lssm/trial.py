"""One trial: simulate one (system, seed, sigma), fit every requested method, score each.

Scores per method: topology (`topology.py`), test MRE of the one-step-ahead Kalman
predictor (the filter runs over train + test, the test part is scored) and of a free
simulation from the filtered state at the end of training (the paper does not say which
it uses; both are reported), the final train log-likelihood and the fit time. The
oracle MRE of the true system is reported beside them. `run_trial` is the module-level
function `fan_out` ships to workers; it takes and returns plain values.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from rayworks.pipelines.lssm.config import LSSMConfig
from rayworks.pipelines.lssm.kalman import (
    LSSM,
    filtered_state,
    log_likelihood,
    predict_one_step,
    simulate_free,
    smooth,
)
from rayworks.pipelines.lssm.map_em import EMOptions, fit_em, random_init
from rayworks.pipelines.lssm.subspace import (
    fit_noise,
    ho_kalman,
    markov_parameters,
    n4sid,
    to_paper_form,
)
from rayworks.pipelines.lssm.systems import Dataset, make_dataset, make_system
from rayworks.pipelines.lssm.topology import estimate_phi, topology_metrics


def mre(y: np.ndarray, y_hat: np.ndarray) -> float:
    """MRE = (1/T) Σ_t ‖y_t - ŷ_t‖² / ‖y_t‖² (paper's metric)."""
    return float(np.mean(((y - y_hat) ** 2).sum(1) / (y**2).sum(1)))


def test_errors(model: LSSM, ds: Dataset) -> dict[str, float]:
    u = np.concatenate([ds.u_train, ds.u_test])
    y = np.concatenate([ds.y_train, ds.y_test])
    one_step = predict_one_step(model, u, y)[len(ds.y_train) :]
    x_end = filtered_state(model, ds.u_train, ds.y_train)
    free = simulate_free(model, ds.u_test, x_end)
    return {"test_mre": mre(ds.y_test, one_step), "test_mre_sim": mre(ds.y_test, free)}


def fit_method(method: str, ds: Dataset, cfg: LSSMConfig, init: LSSM) -> tuple[LSSM, int]:
    """(fitted model, EM iterations run) for one method."""
    u, y = ds.u_train, ds.y_train
    n = init.n
    if method == "n4sid":
        model = to_paper_form(*n4sid(u, y, n, cfg.n4sid_block_rows))
        return fit_noise(model, u, y, cfg.noise_em_iters), 0
    if method == "hokalman":
        model = to_paper_form(*ho_kalman(markov_parameters(u, y, cfg.markov_lags), n))
        return fit_noise(model, u, y, cfg.noise_em_iters), 0
    opts = EMOptions(
        prior=method == "map",
        threshold=cfg.threshold if method in ("map", "mle_threshold") else 0.0,
        a0=cfg.a0,
        b0=cfg.b0,
        max_iter=cfg.em_iters,
        tol=cfg.em_tol,
    )
    res = fit_em(init, u, y, opts)
    return res.model, len(res.objective)


def score(model: LSSM, truth: LSSM, ds: Dataset, cfg: LSSMConfig) -> dict[str, float]:
    x_hat = smooth(model, ds.u_train, ds.y_train).mean if truth.B.shape[0] != truth.B.shape[1] \
        else None  # fmt: skip
    phi = estimate_phi(model.B, truth.B, x_hat, ds.x_train)
    return {
        **topology_metrics(model.A, truth.A, phi, cfg.gp_tol, cfg.support_tol),
        **test_errors(model, ds),
        "train_loglik": log_likelihood(model, ds.u_train, ds.y_train),
        "nnz_A": float((np.abs(model.A) > cfg.support_tol * np.abs(model.A).max()).sum()),
    }


def run_trial(cfg: dict[str, Any], trial: int, sigma: float, methods: list[str]) -> dict:
    """Fit and score `methods` on trial `trial` at noise sigma; |Â| heatmaps on `heatmap_trial`
    (true, each method, and N4SID even when it is not among `methods`)."""
    c = LSSMConfig.model_validate({**cfg, "method": methods[0], "compare": methods[1:]})
    seed = 1000 * c.seed + trial
    truth = make_system(c.system, sigma, seed)
    ds = make_dataset(truth, c.T, c.train_fraction, seed)
    n, m, p = truth.n, truth.B.shape[1], truth.C.shape[0]
    if c.init == "n4sid":
        init = fit_method("n4sid", ds, c, truth)[0]
    else:
        init = random_init(n, m, p, seed, c.init_scale)
    oracle = test_errors(truth, ds)
    rows, heatmaps = [], {}
    for method in methods:
        start = time.perf_counter()
        model, iters = fit_method(method, ds, c, init)
        seconds = time.perf_counter() - start
        rows.append({"method": method, "trial": trial, "sigma": sigma, "em_iters": float(iters),
                     "seconds": seconds, **score(model, truth, ds, c),
                     "oracle_test_mre": oracle["test_mre"]})  # fmt: skip
        if trial == c.heatmap_trial:
            heatmaps[method] = np.abs(model.A).tolist()
    if heatmaps:
        heatmaps["true"] = np.abs(truth.A).tolist()
        if "n4sid" not in heatmaps:  # the heatmap figure always shows a subspace estimate
            heatmaps["n4sid"] = np.abs(fit_method("n4sid", ds, c, init)[0].A).tolist()
    return {"rows": rows, "heatmaps": heatmaps}
