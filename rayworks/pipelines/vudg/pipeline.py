"""`rayworks run vudg` / `rayworks bench vudg`: VUDG-mini, a video QA domain-generalisation
benchmark (arXiv 2505.24346; `docs/vudg.md`; the CPU recipe is reconstructed).

One run builds (or reuses from the cache) the dataset folder (`dataset.py`: 11 domain
renderers of shared scene graphs, four question types, six options, the simulated
multi-expert annotation), then fans out one Ray task per training run of its protocols
(`protocols.plan`, `train.train_piece`: frame CNN + GRU + option scoring), writes each
run's test predictions as a jsonl file and scores it with the `rayworks eval vudg` code.

The bench compares protocols, not models: `vudg` = multi-source leave-one-domain-out
(Avg_m), baselines `vudg_all` (all-domain training, the upper bound, scored on the same
held-out domains) and `vudg_single` (single-source, Avg_s). Each piece's result is cached
by its settings, so bench arms asking for the same training run share one. The baselines
are declared in-run: the method run trains and scores both on the same dataset and
held-out domains for its pass rule, so bench reads their rows from its summary (`all_` /
`single_` keys) instead of scoring them again.
Artifacts: `dataset.json`, `predictions_<run>.jsonl`, `table.jsonl`, `table.md`,
`accuracy_by_domain.png`, `accuracy_by_type.png`, `annotation_errors.png`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rayworks.core.build_cache import locked_build, settings_digest
from rayworks.pipelines.vudg.config import VUDGConfig
from rayworks.pipelines.vudg.dataset import cached_dataset
from rayworks.pipelines.vudg.evaluate import score_file
from rayworks.pipelines.vudg.protocols import avg_m, avg_s, plan
from rayworks.pipelines.vudg.report import pass_rule, write_plots, write_table
from rayworks.pipelines.vudg.train import train_piece
from rayworks.platform.context import RunContext
from rayworks.platform.fanout import fan_out
from rayworks.platform.registry import Arm, InRun, pipeline

IN_RUN = "trained and scored in the method run on the same dataset for its pass rule"
# the annotation counts belong to the one dataset every protocol shares
SHARED = ("e3_het_residual_errors", "e3_self_residual_errors")
REPORT = (
    "lodo_accuracy",
    "all_accuracy",
    "single_accuracy",
    "acc_action",
    "acc_attribute",
    "acc_object",
    "acc_temporal",
    "e3_het_residual_errors",
    "e3_self_residual_errors",
    "pass_rule",
)


def cached_piece(cache_dir: str, **piece: Any) -> dict[str, Any]:
    """`train_piece` once per settings (the dataset folder names the data settings):
    concurrent bench arms asking for the same training run wait for one result."""
    folder = Path(cache_dir) / f"piece-{settings_digest(piece)}"
    result = folder / "result.json"

    def build() -> None:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / "result.json.tmp"
        tmp.write_text(json.dumps(train_piece(**piece)))
        tmp.rename(result)

    locked_build(folder, result, build)
    return json.loads(result.read_text())


def headline(protocol: str, scores: dict[str, dict[str, float]], cfg: VUDGConfig) -> float:
    """The protocol's mean held-out accuracy: Avg_m (lodo), the all-domain model's mean over
    the same held-out domains (all), Avg_s (single)."""
    if protocol == "lodo":
        return avg_m({d: scores[f"lodo-{d}"][f"acc_{d}"] for d in cfg.held_out})
    if protocol == "all":
        return avg_m({d: scores["all"][f"acc_{d}"] for d in cfg.held_out})
    return avg_s(
        {
            s: {d: scores[f"single-{s}"][f"acc_{d}"] for d in cfg.data.domains if d != s}
            for s in cfg.sources
        }
    )


def run_vudg(cfg: VUDGConfig, ctx: RunContext) -> dict[str, float]:
    """Dataset (cached) → every training run of the protocols (fan-out) → scores, tables."""
    data_dir = cached_dataset(
        ctx.cache_root,
        cfg.data.model_dump(mode="json"),
        cfg.annotation.model_dump(mode="json"),
        cfg.seed,
    )
    report = json.loads((data_dir / "annotation_report.json").read_text())
    manifest = json.loads((data_dir / "manifest.json").read_text())
    (ctx.artifacts_dir / "dataset.json").write_text(
        json.dumps(
            {
                "dataset_dir": str(data_dir.resolve()),
                "questions": manifest["questions"],
                "clips": manifest["clips"],
            },
            indent=2,
        )
    )
    protocols = [cfg.protocol, *cfg.compare]
    pieces = [
        (p, run) for p in protocols for run in plan(p, cfg.data.domains, cfg.held_out, cfg.sources)
    ]
    model = cfg.model.model_dump(mode="json")
    cache = str(ctx.cache_root / "vudg" / "pieces")
    calls = [
        {
            "cache_dir": cache,
            "data_dir": str(data_dir.resolve()),
            "model": model,
            "seed": cfg.seed,
            **run,
        }
        for _, run in pieces
    ]
    ctx.progress(len(calls) + 1, f"vudg {cfg.protocol} ({len(calls)} training runs)")
    scores: dict[str, dict[str, float]] = {}
    tables: dict[str, Any] = {}
    results = {}

    def done(i: int, result: dict[str, Any]) -> None:
        label = result["label"]
        path = ctx.artifacts_dir / f"predictions_{label}.jsonl"
        path.write_text("".join(json.dumps(p) + "\n" for p in result["predictions"]))
        scores[label], tables[label] = score_file(data_dir, path, "test", result["test_domains"])
        results[label] = result
        curve = result.get("val_curve", [])
        if curve:  # validation split of the training domains (model.val_fraction)
            (ctx.artifacts_dir / f"val_curve_{label}.jsonl").write_text(
                "".join(json.dumps(c) + "\n" for c in curve)
            )
        ctx.log(
            i + 1,
            protocol=pieces[i][0],
            run=label,
            accuracy=scores[label]["accuracy"],
            train_loss=result["train_loss"],
            seconds=result["seconds"],
            **{k: v for k, v in (curve[-1] if curve else {}).items() if k != "epoch"},
        )

    fan_out(cached_piece, calls, threads=1, on_done=done)  # in-process inside a Tune trial
    summary: dict[str, float] = {f"{p}_accuracy": headline(p, scores, cfg) for p in protocols}
    summary["accuracy"] = summary[f"{cfg.protocol}_accuracy"]
    for p in protocols:  # per domain / type, each protocol's runs (compared ones prefixed)
        mine = [run["label"] for q, run in pieces if q == p]
        prefix = "" if p == cfg.protocol else f"{p}_"
        for key in {k for label in mine for k in scores[label] if k.startswith("acc_")}:
            values = [scores[label][key] for label in mine if key in scores[label]]
            summary[prefix + key] = sum(values) / len(values)
    summary["n_params"] = float(next(iter(results.values()))["n_params"])
    summary["train_seconds"] = sum(r["seconds"] for r in results.values())
    for branch in ("het", "self"):
        for key in (
            "items",
            "errors_E1",
            "errors_E2",
            "flagged",
            "caught",
            "missed",
            "fixed",
            "deleted",
            "kept",
        ):
            summary[f"e3_{branch}_{key}"] = float(report[branch][key])
        summary[f"e3_{branch}_residual_errors"] = float(report[branch]["errors_final"])
    summary.update(pass_rule(summary, protocols))
    ctx.log(len(calls) + 1, accuracy=summary["accuracy"])
    write_table(ctx, cfg, scores, tables, report, summary, protocols)
    write_plots(ctx.artifacts_dir, cfg, scores, report, protocols)
    return summary


@pipeline(
    "vudg",
    config=VUDGConfig,
    kind="task",
    arms={
        "vudg_all": Arm(
            "VUDG-mini all-domain training (upper bound), scored on the held-out domains.",
            {"protocol": "all", "compare": []},
            in_run=InRun(IN_RUN, member="all", prefix="all_", shared=(*SHARED, "all_accuracy")),
        ),
        "vudg_single": Arm(
            "VUDG-mini single-source training, scored on every other domain (Avg_s).",
            {"protocol": "single", "compare": []},
            in_run=InRun(
                IN_RUN, member="single", prefix="single_", shared=(*SHARED, "single_accuracy")
            ),
        ),
    },
    headline=("accuracy", "max"),
    report=REPORT,
)
def run(cfg: VUDGConfig, ctx: RunContext) -> dict[str, float]:
    """VUDG-mini multi-source leave-one-domain-out video QA (Avg_m), vs all-domain / single."""
    return run_vudg(cfg, ctx)
