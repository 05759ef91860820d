"""`rayworks run lestd` / `rayworks bench lestd`: MHA compression sweeps of a stdlib char LM.

LeSTD (reconstructed; no official code): per attention layer, Q, K, V, Oᵀ of all heads
form a 4th-order tensor (`tensorize.py`); stage 1 finds a shared orthonormal basis by HOOI
(`hooi.py`); stage 2 prunes the core by the closed-form importance g² and refits the
survivors and factors down to the non-zero budget (`lestd.py`); inference runs in the
compressed domain (`compressed_attention.py`). Baselines at matched ratios: per-matrix
truncated SVD and dense-core Tucker (`baselines.py`, accounting in `storage.py`), and
LeSTD without refit.

One run trains (or reuses) the LM, then for every ratio evaluates `method` and each of
`compare` on the same held-out rows, logging one record per ratio (step = ratio; compared
methods' keys are prefixed `<method>_`). A ratio a method cannot meet is logged with
`reachable=0` and no metrics. Every bits/char carries a percentile-bootstrap interval over
the held-out rows (`val_bpc_lo`, `val_bpc_hi`), and every rival's bits/char minus
`method`'s a paired one (the same resampled rows for both models: `<rival>_diff`,
`<rival>_diff_lo`, `<rival>_diff_hi`; above 0 = `method` better). Artifacts: `table.jsonl`,
`table.md`, `bpc_vs_ratio.png`.

The baselines are declared in-run: the method run compresses the one trained LM (its HOOI
memos shared) with every method and scores them on the same held-out rows, so the paired
bootstrap differences hold; bench reads their rows from its summary (`tucker_` / `svd_`
keys, headline-ratio values unsuffixed) instead of compressing and scoring twice.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from rayworks.pipelines.lestd.compress import (
    Compressed,
    LayerMemo,
    Method,
    StageOptions,
    compress_model,
    layer_memos,
)
from rayworks.pipelines.lestd.config import EvalConfig, LeSTDConfig
from rayworks.pipelines.lestd.evaluate import (
    attention_logit_error,
    percentile_interval,
    resampled_bpc,
    row_nll,
    tokens_per_s,
)
from rayworks.pipelines.lestd.lm import cached_lm, load_lm
from rayworks.pipelines.lestd.report import pass_rule, write_plot, write_table
from rayworks.platform.context import RunContext
from rayworks.platform.registry import Arm, InRun, pipeline

REPORT = ("logit_err", "weight_err", "achieved_ratio", "speedup", "dense_val_bpc")


def bpc_with_interval(
    model: torch.nn.Module, val: torch.Tensor, ev: EvalConfig, seed: int
) -> tuple[dict[str, float], np.ndarray]:
    """Bits/char of `model` on `val`, its bootstrap interval, and the resampled statistics
    (kept for paired differences: the same `seed` and rows resample the same way)."""
    nll, counts = row_nll(model, val)
    stats = resampled_bpc(nll, counts, ev.bootstrap_resamples, seed)
    lo, hi = percentile_interval(stats, ev.ci_level)
    point = float(nll.sum() / (counts.sum() * math.log(2)))
    return {"val_bpc": point, "val_bpc_lo": lo, "val_bpc_hi": hi}, stats


def stage_options(cfg: LeSTDConfig) -> StageOptions:
    return StageOptions(
        hooi_iters=cfg.hooi_iters,
        prune_fraction=cfg.prune_fraction,
        refit_sweeps=cfg.refit_sweeps,
        r1_fractions=tuple(cfg.r1_fractions),
        r2_fractions=tuple(cfg.r2_fractions),
    )


@torch.no_grad()
def measure(
    model: torch.nn.Module, comp: Compressed, val: torch.Tensor, ev: EvalConfig, seed: int
) -> tuple[dict[str, float], np.ndarray]:
    """Quality (with its bootstrap statistics), exactness of the compressed domain, and
    tokens/s vs dense for one model."""
    probe = val[: ev.logit_rows]
    gap = (
        (
            comp.compressed(input_ids=probe, use_cache=False).logits
            - comp.reconstructed(input_ids=probe, use_cache=False).logits
        )
        .abs()
        .max()
    )
    quality, stats = bpc_with_interval(comp.compressed, val[: ev.val_rows], ev, seed)
    row = {
        "reachable": 1.0,
        **quality,
        "logit_err": attention_logit_error(model, comp.reconstructed, probe),
        "domain_gap": float(gap),
        **comp.stats,
    }
    if ev.throughput_reps:
        tps = tokens_per_s(
            {"dense": model, "compressed": comp.compressed},
            val[: ev.throughput_rows],
            ev.throughput_reps,
        )
        row.update(
            tokens_per_s=tps["compressed"],
            dense_tokens_per_s=tps["dense"],
            speedup=tps["compressed"] / tps["dense"],
        )
    return row, stats


def evaluate_method(
    model: torch.nn.Module,
    memos: list[LayerMemo],
    method: Method,
    ratio: int,
    cfg: LeSTDConfig,
    val: torch.Tensor,
) -> tuple[dict[str, float], np.ndarray | None]:
    comp = compress_model(model, memos, method, ratio, stage_options(cfg))
    if comp is None:
        return {"reachable": 0.0}, None
    return measure(model, comp, val, cfg.eval, cfg.seed)


def check_rows(cfg: LeSTDConfig, n_val: int) -> None:
    """The reported (test) rows and the LM's validation rows must be disjoint."""
    if cfg.eval.val_rows + cfg.lm.monitor_rows > n_val:
        raise ValueError(
            f"eval.val_rows={cfg.eval.val_rows} + lm.monitor_rows={cfg.lm.monitor_rows} "
            f"exceed the LM's {n_val} held-out rows: test rows would overlap validation rows"
        )


IN_RUN = "compressed from the same trained LM and scored on the same rows in the method run"


def run_lestd(cfg: LeSTDConfig, ctx: RunContext) -> dict[str, float]:
    """Sweep `cfg.ratios` for `cfg.method` (and `cfg.compare`) on the cached stdlib LM."""
    torch.set_num_threads(cfg.lm.threads)
    folder, lm_stats = cached_lm(cfg.lm, cfg.seed, ctx.cache_root)
    model, val = load_lm(folder)
    check_rows(cfg, len(val))
    dense, _ = bpc_with_interval(model, val[: cfg.eval.val_rows], cfg.eval, cfg.seed)
    dense_bpc = dense["val_bpc"]
    memos = layer_memos(model, cfg.hooi_iters)
    methods: list[Method] = [cfg.method, *cfg.compare]
    ctx.progress(max(cfg.ratios), f"lestd {cfg.method} ({len(methods)} methods)")
    table: list[dict[str, Any]] = []
    summary: dict[str, float] = {f"dense_{k}": v for k, v in dense.items()} | lm_stats
    for ratio in sorted(cfg.ratios):
        record: dict[str, float] = {}
        boot: dict[str, np.ndarray] = {}
        for method in methods:
            row, stats = evaluate_method(model, memos, method, ratio, cfg, val)
            if stats is not None:
                boot[method] = stats
            prefix = "" if method == cfg.method else f"{method}_"
            if method != cfg.method and method in boot and cfg.method in boot:
                # rival minus method on the same resampled rows: > 0 means method is better
                diff = boot[method] - boot[cfg.method]
                lo, hi = percentile_interval(diff, cfg.eval.ci_level)
                row.update(diff=row["val_bpc"] - record["val_bpc"], diff_lo=lo, diff_hi=hi)
            table.append({"method": method, "ratio": ratio, **row})
            record.update({prefix + k: v for k, v in row.items()})
            summary[f"{prefix}reachable_r{ratio}"] = row["reachable"]
            if row["reachable"]:
                for key in ("val_bpc", "val_bpc_lo", "val_bpc_hi", "logit_err"):
                    summary[f"{prefix}{key}_r{ratio}"] = row[key]
                for key in ("diff", "diff_lo", "diff_hi"):
                    if key in row:
                        summary[f"{prefix}{key}_r{ratio}"] = row[key]
            if ratio == cfg.headline_ratio:  # a compared method's as its own run gives it
                summary.update({prefix + k: v for k, v in row.items() if k != "reachable"})
        ctx.log(ratio, **record)
    summary.setdefault("val_bpc", math.nan)
    summary.update(pass_rule(table, cfg.method))
    write_table(ctx, table, dense_bpc)
    write_plot(ctx.artifacts_dir / "bpc_vs_ratio.png", table, dense_bpc)
    return summary


@pipeline(
    "lestd",
    config=LeSTDConfig,
    kind="task",
    arms={
        "lestd_tucker": Arm(
            "Dense-core Tucker (TensorLLM-style) compression of MHA at matched ratios.",
            {"method": "tucker", "compare": []},
            in_run=InRun(IN_RUN, member="tucker", prefix="tucker_", shared=("dense_val_bpc",)),
        ),
        "lestd_svd": Arm(
            "Per-matrix truncated SVD compression of MHA at matched ratios.",
            {"method": "svd", "compare": []},
            in_run=InRun(IN_RUN, member="svd", prefix="svd_", shared=("dense_val_bpc",)),
        ),
    },
    headline=("val_bpc", "min"),
    ablations={"norefit": ("method=lestd_norefit", "compare=[]")},
    report=REPORT,
)
def run(cfg: LeSTDConfig, ctx: RunContext) -> dict[str, float]:
    """LeSTD (reconstructed): shared HOOI basis + sparse core of MHA weights vs baselines."""
    return run_lestd(cfg, ctx)
