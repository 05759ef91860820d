"""`rayworks run lssm` / `rayworks bench lssm`: sparse LSSMs by MAP-EM vs baselines.

MAP-EM (`map_em.py`; paper's Algorithm, reconstructed where docs/lssm.md says so) against
maximum-likelihood EM (same code, flat prior), ML-EM + the same threshold, N4SID and
Ho-Kalman (`subspace.py`). One run = one system family (`systems.py`) x `n_trials`
seeds x `noise_levels`; every (trial, sigma) is one piece fanned out as a Ray task pinned to
one thread (`trial.py`), logged as it finishes (step = piece number; compared methods'
keys prefixed `<method>_`). `lssm_mle` is declared in-run: the method run fits it on the
same trials (data and random start Θ0 shared by the EM arms) for the pass rule, so bench
reads its row from there (`mle_` keys) instead of fitting it twice; the other baselines
run on their own.

Summary: `success_rate` (headline: share of trials where Φ̂ is a generalised permutation,
pooled over sigma), `exact_support_rate`, `support_precision`, `support_recall`,
`support_f1`, `val_mre`, `test_mre`, `threshold` (chosen on validation), `em_iters`,
`em_converged`, `seconds` and per-sigma values `<key>_s<sigma>`, the same prefixed for
compared methods, and `pass_rule` in MAP-EM runs on S1 that fit `mle`.
Artifacts: `trials.jsonl`, `table.jsonl`, `table.md`, `success_rate.png`,
`heatmaps_A.png`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rayworks.pipelines.lssm.config import LSSMConfig
from rayworks.pipelines.lssm.report import (
    aggregate,
    pass_rule,
    write_heatmaps,
    write_success_plot,
    write_table,
)
from rayworks.pipelines.lssm.trial import run_trial
from rayworks.platform.context import RunContext
from rayworks.platform.fanout import fan_out
from rayworks.platform.registry import Arm, InRun, pipeline

HEADLINE = ("success_rate", "max")
REPORT = (
    "exact_support_rate",
    "support_precision",
    "support_recall",
    "test_mre",
    "threshold",
    "seconds",
    "mle_success_rate",
    "mle_test_mre",
)
SUMMARY_KEYS = {
    "success": "success_rate",
    "exact_support": "exact_support_rate",
    "support_precision": "support_precision",
    "support_recall": "support_recall",
    "support_f1": "support_f1",
    "offdiag_energy": "offdiag_energy",
    "val_mre": "val_mre",
    "test_mre": "test_mre",
    "test_mre_sim": "test_mre_sim",
    "threshold": "threshold",
    "em_iters": "em_iters",
    "em_converged": "em_converged",
    "seconds": "seconds",
}


def summarize(rows: list[dict[str, Any]], table: list[dict[str, Any]], cfg: LSSMConfig):
    """Pooled and per-sigma means for the method (plain keys) and compared methods (prefixed)."""
    summary: dict[str, float] = {}
    for method in [cfg.method, *cfg.compare]:
        prefix = "" if method == cfg.method else f"{method}_"
        mine = [r for r in rows if r["method"] == method]
        for key, name in SUMMARY_KEYS.items():
            summary[prefix + name] = float(np.mean([r[key] for r in mine]))
        for r in table:
            if r["method"] == method:
                for key, name in SUMMARY_KEYS.items():
                    summary[f"{prefix}{name}_s{r['sigma']:g}"] = r[key]
    summary["oracle_test_mre"] = float(np.mean([r["oracle_test_mre"] for r in rows]))
    summary.update(pass_rule(table, cfg.method, cfg.system))
    return summary


def run_lssm(cfg: LSSMConfig, ctx: RunContext) -> dict[str, float]:
    """Fan the (trial, sigma) pieces out, log each, then aggregate, tabulate and plot."""
    methods = [cfg.method, *cfg.compare]
    calls = [
        {"cfg": cfg.model_dump(), "trial": k, "sigma": s, "methods": methods}
        for s in cfg.noise_levels
        for k in range(cfg.n_trials)
    ]
    ctx.progress(len(calls), f"lssm {cfg.system} {'+'.join(methods)}")

    def on_done(i: int, result: dict) -> None:
        record = {}
        for row in result["rows"]:
            prefix = "" if row["method"] == cfg.method else f"{row['method']}_"
            record.update({prefix + k: v for k, v in row.items() if isinstance(v, float)})
        ctx.log(i + 1, trial=calls[i]["trial"], **record)

    results = fan_out(run_trial, calls, threads=1, on_done=on_done)
    rows = [row for res in results for row in res["rows"]]
    table = aggregate(rows)
    write_table(ctx, table, rows)
    write_success_plot(ctx.artifacts_dir / "success_rate.png", table, cfg.system)
    heat = next(res["heatmaps"] for res in results if res["heatmaps"])
    title = f"|Â|, {cfg.system}, trial {cfg.heatmap_trial}, sigma = {cfg.noise_levels[0]:g}"
    write_heatmaps(ctx.artifacts_dir / "heatmaps_A.png", heat, title)
    return summarize(rows, table, cfg)


@pipeline(
    "lssm",
    config=LSSMConfig,
    kind="task",
    arms={
        "lssm_mle": Arm(
            "Maximum-likelihood EM for linear state-space models (same code as MAP-EM, flat prior).",
            {"method": "mle", "compare": []},
            in_run=InRun(
                "fitted in the MAP-EM run on the same trials and start Θ0 for its pass rule",
                member="mle",
                prefix="mle_",
            ),
        ),
        "lssm_mle_threshold": Arm(
            "ML-EM plus the same threshold truncation as MAP-EM (the reviewers' baseline).",
            {"method": "mle_threshold", "compare": []},
        ),
        "lssm_n4sid": Arm(
            "N4SID subspace identification (own implementation) with EM-fitted noise covariances.",
            {"method": "n4sid", "compare": []},
        ),
        "lssm_hokalman": Arm(
            "Ho-Kalman realisation from least-squares Markov parameters.",
            {"method": "hokalman", "compare": []},
        ),
    },
    headline=HEADLINE,
    report=REPORT,
)
def run(cfg: LSSMConfig, ctx: RunContext) -> dict[str, float]:
    """MAP-EM for sparse linear state-space models (reconstructed) vs ML-EM on the same trials."""
    return run_lssm(cfg, ctx)
