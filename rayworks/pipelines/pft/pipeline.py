"""`rayworks run pft` / `rayworks bench pft`: personalised feature translation for source-free
adaptation to one target subject from its neutral frames (`docs/pft.md`; reconstructed
CPU benchmark: digits as expressions, procedural subjects, `subjects.py`).

One run fans out one `target_piece` per (replicate, target subject), replicate-first: the
piece finds or builds the replicate's source model and, for PFT, the source-pre-trained
translator (each built once under `ctx.cache_root` as safetensors, so every arm of a bench
reuses them), then adapts every arm of the run on that subject's unlabelled neutral frames
and scores it on the subject's test frames. Aggregates are means with 95% t-intervals
over subjects x seeds. Artifacts: `table.jsonl`, `table.md`, `per_subject.png`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rayworks.pipelines.pft.arms import target_piece
from rayworks.pipelines.pft.config import PFTConfig
from rayworks.pipelines.pft.report import aggregate, pass_rule, summary_of, write_plot, write_table
from rayworks.pipelines.pft.subjects import check_sizes, held_out_subjects
from rayworks.platform.context import RunContext
from rayworks.platform.fanout import fan_out
from rayworks.platform.registry import Arm, pipeline

HEADLINE = ("target_accuracy", "max")
REPORT = ("macro_f1", "expressive_recall", "neutral_recall", "pass_rule")


class _Logger:
    """One metrics record per finished piece (moves the progress bar)."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx, self.step = ctx, 0

    def target(self, _i: int, out: dict[str, Any]) -> None:
        self.step += 1
        flat = {
            f"{r['arm']}_{m}": r[m]
            for r in out["rows"]
            for m in ("accuracy", "macro_f1", "expressive_recall")
        }
        self.ctx.log(self.step, replicate=out["replicate"], subject=out["subject"], **flat)


def run_pft(cfg: PFTConfig, ctx: RunContext) -> dict[str, float]:
    """All arms of `cfg` on every (replicate, target subject); table, plot, pass rule."""
    dump = cfg.model_dump(mode="json")
    check_sizes(dump["data"], cfg.adapt.oracle_frames_per_class)
    cache = str(ctx.cache_root)
    reps, subjects = range(cfg.replicates), range(held_out_subjects(dump["data"]))
    ctx.progress(len(reps) * len(subjects), f"pft {cfg.arm} ({len(cfg.arms())} arms)")
    calls = [
        {"cfg": dump, "replicate": r, "t": t, "cache_root": cache} for t in subjects for r in reps
    ]
    outs = fan_out(target_piece, calls, threads=1, on_done=_Logger(ctx).target)
    rows = [row for out in outs for row in out["rows"]]
    agg = aggregate(rows, cfg.arms())
    summary = summary_of(agg, cfg.arm)
    for key in ("source_train_accuracy", "source_seconds", "pretrain_seconds", "pretrain_style"):
        values = [o["prepare"][key] for o in outs if key in o["prepare"] and o["subject"] == 0]
        if values:
            summary[key] = float(np.mean(values))
    summary.update(pass_rule(agg, cfg.arm, cfg.pass_gain, cfg.pass_recall_drop))
    write_table(ctx, rows, agg, len(outs))
    write_plot(ctx.artifacts_dir, rows, cfg.arms())
    return summary


@pipeline(
    "pft",
    config=PFTConfig,
    kind="task",
    arms={
        "pft_source": Arm(
            "Source-only: the frozen source model on each target subject.",
            {"arm": "source", "compare": []},
        ),
        "pft_adabn": Arm(
            "AdaBN: BN statistics re-estimated on the target's neutral frames.",
            {"arm": "adabn", "compare": []},
        ),
        "pft_tent": Arm(
            "Tent: entropy minimisation of the BN affine parameters on the neutral frames.",
            {"arm": "tent", "compare": []},
        ),
        "pft_shot": Arm(
            "SHOT-IM: information maximisation + centroid pseudo-labels, F and B adapted.",
            {"arm": "shot", "compare": []},
        ),
        "pft_neutral_ce": Arm(
            "Naive neutral-CE fine-tune of the classifier C (the collapse baseline).",
            {"arm": "neutral_ce", "compare": []},
        ),
        "pft_oracle": Arm(
            "Target oracle: labelled fine-tune of F, B, C on the target subject (upper bound).",
            {"arm": "oracle", "compare": []},
        ),
    },
    headline=HEADLINE,
    ablations={
        "no_style": ("pft.lambda_style=0", "compare=[source]"),
        "pooled_mlp": ("pft.translator=pooled_mlp", "pft.lambda_style=0", "compare=[source]"),
        "conv_copy": (
            "pft.translator=conv_copy",
            "pft.style_layers=[0, 1, 2]",
            "pft.style_norm=chw",
            "pft.lambda_style=1",
            "compare=[source]",
        ),
        "mild_bias": ("data.bias_range=[0.1, 0.3]",),
    },
    report=REPORT,
)
def run(cfg: PFTConfig, ctx: RunContext) -> dict[str, float]:
    """PFT (reconstructed): translator pre-trained on source pairs, adapted on neutral frames."""
    return run_pft(cfg, ctx)
