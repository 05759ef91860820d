"""One trial: simulate one (system, seed, sigma), fit every requested method, score each.

Data: fit | val | test segments (`systems.make_dataset`). Every model is fitted on the fit
segment only. MAP-EM sweeps the truncation threshold and keeps the fit with the lowest
validation MRE (`selection.py`); MLE + threshold runs at that same threshold; ML-EM and the
subspace methods need no validation data.

Scores per method: topology (`topology.py`: Φ̂ a generalised permutation, support
precision / recall / F1 / exact recovery of Â), validation MRE, test MRE of the one-step-
ahead Kalman predictor (the filter runs over fit + val + test, the test part is scored) and
of a free simulation from the filtered state at the end of the validation segment (the
paper does not say which it uses; both are reported), the final fit-segment
log-likelihood, the EM iterations and whether EM met its tolerance, and the fit time (for
MAP-EM: the whole sweep). MAP-EM rows also carry `sweep`, the same scores for every
threshold of the grid (diagnostic; not used for any choice). The oracle MRE of the true
system is reported beside them. `run_trial` is the module-level function `fan_out` ships
to workers; it takes and returns plain values.
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
from rayworks.pipelines.lssm.map_em import EMOptions, EMResult, fit_em, random_init
from rayworks.pipelines.lssm.selection import ThresholdSweep, mre, sweep_threshold, validation_mre
from rayworks.pipelines.lssm.subspace import (
    fit_noise,
    ho_kalman,
    markov_parameters,
    n4sid,
    to_paper_form,
)
from rayworks.pipelines.lssm.systems import Dataset, make_dataset, make_system
from rayworks.pipelines.lssm.topology import estimate_phi, topology_metrics


def test_errors(model: LSSM, ds: Dataset) -> dict[str, float]:
    """One-step and free-simulation MRE on the test segment (which follows fit + val)."""
    u_seen = np.concatenate([ds.u_train, ds.u_val])
    y_seen = np.concatenate([ds.y_train, ds.y_val])
    u = np.concatenate([u_seen, ds.u_test])
    y = np.concatenate([y_seen, ds.y_test])
    one_step = predict_one_step(model, u, y)[len(y_seen) :]
    free = simulate_free(model, ds.u_test, filtered_state(model, u_seen, y_seen))
    return {"test_mre": mre(ds.y_test, one_step), "test_mre_sim": mre(ds.y_test, free)}


def em_options(cfg: LSSMConfig, prior: bool, threshold: float) -> EMOptions:
    return EMOptions(
        prior=prior,
        threshold=threshold,
        a0=cfg.a0,
        b0=cfg.b0,
        max_iter=cfg.em_iters,
        tol=cfg.em_tol,
    )


def fit_subspace(method: str, ds: Dataset, cfg: LSSMConfig) -> LSSM:
    u, y, n = ds.u_train, ds.y_train, ds.x_train.shape[1]
    if method == "n4sid":
        model = to_paper_form(*n4sid(u, y, n, cfg.n4sid_block_rows))
    else:
        model = to_paper_form(*ho_kalman(markov_parameters(u, y, cfg.markov_lags), n))
    return fit_noise(model, u, y, cfg.noise_em_iters)


def score(model: LSSM, truth: LSSM, ds: Dataset, cfg: LSSMConfig) -> dict[str, float]:
    x_hat = (
        smooth(model, ds.u_train, ds.y_train).mean if truth.B.shape[0] != truth.B.shape[1] else None
    )
    phi = estimate_phi(model.B, truth.B, x_hat, ds.x_train)
    return {
        **topology_metrics(model.A, truth.A, phi, cfg.gp_tol, cfg.support_tol),
        **test_errors(model, ds),
        "val_mre": validation_mre(model, ds) if len(ds.y_val) else float("nan"),
        "train_loglik": log_likelihood(model, ds.u_train, ds.y_train),
        "nnz_A": float((np.abs(model.A) > cfg.support_tol * np.abs(model.A).max()).sum()),
    }


def _em_row(fit: EMResult, threshold: float) -> dict[str, float]:
    return {
        "em_iters": float(len(fit.objective)),
        "em_converged": float(fit.converged),
        "threshold": threshold,
    }


def _sweep_rows(sweep: ThresholdSweep, truth: LSSM, ds: Dataset, cfg: LSSMConfig) -> list[dict]:
    keys = ("success", "support_precision", "support_recall", "exact_support", "test_mre")
    out = []
    for t, fit in zip(sweep.thresholds, sweep.fits, strict=True):
        s = score(fit.model, truth, ds, cfg)
        out.append({**_em_row(fit, t), "val_mre": s["val_mre"], **{k: s[k] for k in keys}})
    return out


def fit_methods(methods: list[str], truth: LSSM, ds: Dataset, c: LSSMConfig, init: LSSM):
    """[(method, model, extra row fields)] in `methods` order; the MAP sweep runs once."""
    fitted: dict[str, tuple[LSSM, dict[str, Any]]] = {}
    sweep = None
    if "map" in methods or "mle_threshold" in methods:
        start = time.perf_counter()
        sweep = sweep_threshold(init, ds, c.thresholds, em_options(c, True, 0.0))
        extra = {
            **_em_row(sweep.chosen, sweep.threshold),
            "seconds": time.perf_counter() - start,
            "sweep": _sweep_rows(sweep, truth, ds, c),
        }
        fitted["map"] = (sweep.chosen.model, extra)
    for method in methods:
        start = time.perf_counter()
        if method in ("n4sid", "hokalman"):
            model, extra = (
                fit_subspace(method, ds, c),
                {"em_iters": 0.0, "em_converged": 1.0, "threshold": 0.0},
            )
        elif method in ("mle", "mle_threshold"):
            thr = sweep.threshold if method == "mle_threshold" else 0.0
            fit = fit_em(init, ds.u_train, ds.y_train, em_options(c, False, thr))
            model, extra = fit.model, _em_row(fit, thr)
        else:
            continue
        fitted[method] = (model, {**extra, "seconds": time.perf_counter() - start})
    return [(m, *fitted[m]) for m in methods]


def run_trial(cfg: dict[str, Any], trial: int, sigma: float, methods: list[str]) -> dict:
    """Fit and score `methods` on trial `trial` at noise sigma; |Â| heatmaps on `heatmap_trial`
    (true, each method, and N4SID even when it is not among `methods`)."""
    c = LSSMConfig.model_validate({**cfg, "method": methods[0], "compare": methods[1:]})
    seed = 1000 * c.seed + trial
    truth = make_system(c.system, sigma, seed)
    ds = make_dataset(truth, c.T, c.train_fraction, seed, c.val_fraction)
    n, m, p = truth.n, truth.B.shape[1], truth.C.shape[0]
    init = (
        fit_subspace("n4sid", ds, c)
        if c.init == "n4sid"
        else random_init(n, m, p, seed, c.init_scale)
    )
    oracle = test_errors(truth, ds)
    rows, heatmaps = [], {}
    for method, model, extra in fit_methods(methods, truth, ds, c, init):
        rows.append(
            {
                "method": method,
                "trial": trial,
                "sigma": sigma,
                **extra,
                **score(model, truth, ds, c),
                "oracle_test_mre": oracle["test_mre"],
            }
        )
        if trial == c.heatmap_trial:
            heatmaps[method] = np.abs(model.A).tolist()
    if heatmaps:
        heatmaps["true"] = np.abs(truth.A).tolist()
        if "n4sid" not in heatmaps:  # the heatmap figure always shows a subspace estimate
            heatmaps["n4sid"] = np.abs(fit_subspace("n4sid", ds, c).A).tolist()
    return {"rows": rows, "heatmaps": heatmaps}
