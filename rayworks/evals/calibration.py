"""`rayworks eval calibration`: B-calibration (semantic calibration) of an LM checkpoint.

Nakkiran, Bradley, Golinski, Ndiaye, Kirchhof, Williamson, "Trained on Tokens, Calibrated
on Concepts: The Emergence of Semantic Calibration in LLMs" (ICLR 2026, arXiv 2511.04869).

    rayworks eval calibration --checkpoint runs/grpo/<id> --set task=bag_draw \\
        --set n_questions=300 --set diagram=docs/img/calibration_grpo.png --out cal.json

Protocol (the paper's, as the reviews give it): per question sample M = 50 completions at
temperature 1; collapse each with B (here an exact parser instead of the paper's LLM
extractor: `task` = the task's own `answer_class`, or `exact` / `numeric` / `first_token` /
`module:function`); conf = frequency of the top class, pred = that class; correct =
[B(gold) == pred]. Report SmoothECE (relplot), binned ECE, mean(conf - accuracy) and a
reliability diagram, for the plug-in estimator and for the held-out-split estimator
(arXiv 2605.08432: the plug-in max frequency is biased upward on spread questions).

Where the task knows its true answer law p*(k|x) (`task.distribution`, e.g. `bag_draw`),
`*_pstar` keys also score calibration against the *expected* correctness p*(pred|x)
instead of one sampled gold label (E[1{y = pred} | x] = p*(pred|x)): the same target with
less label noise (a reconstructed variance reduction, not in the paper).

The reusable piece for other code (the test-time-compute allocator) is
`b_confidence(answers, estimator="plugin", seed=0) -> (pred, conf)`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from rayworks.core.config import Config
from rayworks.core.errors import RayworksError
from rayworks.data.tasks import Example, Task, get_task
from rayworks.evals.calibration_math import (
    Collapse,
    Estimator,
    b_confidence,
    binned_ece,
    bootstrap_ci,
    extract_answer,
    get_collapse,
    mean_or_nan,
    reliability_diagram,
    smooth_ece,
)
from rayworks.platform.registry import evaluation

__all__ = ["CalibrationConfig", "b_confidence", "question_record", "summarize"]
ESTIMATORS: tuple[Estimator, ...] = ("plugin", "heldout")


class CalibrationConfig(Config):
    checkpoint: str = Field(description="run dir, checkpoint dir or HF model dir")
    task: str = Field("bag_draw", description="task whose held-out questions are asked")
    seed: int = Field(0, ge=0, description="seed of the task's splits (the run's seed)")
    split: Literal["val", "test"] = Field("test", description="held-out split of questions")
    n_questions: int = Field(200, ge=1, description="questions (rows of the calibration plot)")
    samples: int = Field(50, ge=2, description="completions per question (paper: M = 50)")
    temperature: float = Field(1.0, gt=0, description="sampling temperature (paper: T = 1)")
    max_new_tokens: int = Field(48, ge=1, description="generation budget per completion")
    collapse: str = Field(
        "task", description="B: task | exact | numeric | first_token | module.path:function"
    )
    answer_marker: str = Field("A:", description="answer = text after its last occurrence")
    estimator: Estimator = Field(
        "plugin", description="estimator of the headline keys: plugin or heldout (Sem2 split)"
    )
    n_bins: int = Field(10, ge=1, description="bins of the binned ECE")
    bootstrap: int = Field(0, ge=0, description="resamples of questions for 95% CIs (0 = none)")
    sample_seed: int = Field(0, ge=0, description="seed of the sampling stream and the splits")
    batch_rows: int = Field(2048, ge=1, description="completions sampled per batched decode")
    diagram: str | None = Field(None, description="write the reliability diagram PNG here")
    records: str | None = Field(None, description="write per-question records (jsonl) here")


def question_record(
    example: Example,
    completions: Sequence[str],
    collapse: Collapse,
    marker: str = "A:",
    task: Task | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """One question's B-confidence under both estimators, from its sampled completions."""
    classes = [collapse(extract_answer(c, marker)) for c in completions]
    gold = collapse(example.answer)
    if gold is None:
        raise RayworksError(
            f"the collapsing function gives no class for the gold answer {example.answer!r} "
            f"of {example.prompt!r}; pick a B that parses the task's answers"
        )
    law = task.distribution(example) if hasattr(task, "distribution") else None
    record: dict[str, Any] = {
        "prompt": example.prompt,
        "gold": gold,
        "difficulty": example.difficulty,
        "invalid": sum(c is None for c in classes) / len(classes),
        "classes": dict(Counter(c for c in classes if c is not None)),
    }
    for est in ESTIMATORS:
        pred, conf = b_confidence(classes, est, seed)
        record[f"{est}_pred"], record[f"{est}_conf"] = pred, conf
        record[f"{est}_correct"] = float(pred == gold)
        if law is not None:  # expected correctness under the true answer law
            record[f"{est}_pstar"] = float(law.get(pred, 0.0)) if pred is not None else 0.0
    return record


def summarize(
    records: Sequence[dict[str, Any]],
    estimator: Estimator = "plugin",
    n_bins: int = 10,
    bootstrap: int = 0,
    seed: int = 0,
) -> dict[str, float]:
    """smECE, binned ECE, mean conf, accuracy and conf - acc of one estimator's records."""
    conf = [r[f"{estimator}_conf"] for r in records]
    targets = {"": [r[f"{estimator}_correct"] for r in records]}
    if records and all(f"{estimator}_pstar" in r for r in records):
        targets["_pstar"] = [r[f"{estimator}_pstar"] for r in records]
    out: dict[str, float] = {"conf": mean_or_nan(conf)}
    for suffix, outcome in targets.items():
        acc = mean_or_nan(outcome)
        out[f"acc{suffix}"] = acc
        out[f"conf_minus_acc{suffix}"] = out["conf"] - acc
        out[f"smece{suffix}"] = smooth_ece(conf, outcome)
        out[f"ece{suffix}"] = binned_ece(conf, outcome, n_bins)
        if bootstrap:
            lo, hi = bootstrap_ci(smooth_ece, conf, outcome, n_boot=bootstrap, seed=seed)
            out[f"smece{suffix}_lo"], out[f"smece{suffix}_hi"] = lo, hi
    return out


def sample_completions(
    model_dir: Path, prompts: list[str], cfg: CalibrationConfig
) -> list[list[str]]:
    """`cfg.samples` completions per prompt from the `hf` rollout engine, in batches."""
    from rayworks.platform.rollout import HFEngine, SamplingConfig

    engine = HFEngine(model_dir, threads=1)
    per_batch = max(1, cfg.batch_rows // cfg.samples)
    out: list[list[str]] = []
    for start in range(0, len(prompts), per_batch):
        sampling = SamplingConfig(
            temperature=cfg.temperature,
            max_new_tokens=cfg.max_new_tokens,
            seed=cfg.sample_seed + start,
        )
        rollouts = engine.generate(prompts[start : start + per_batch], cfg.samples, sampling)
        for i in range(0, len(rollouts), cfg.samples):
            out.append([r.text for r in rollouts[i : i + cfg.samples]])
    return out


def calibration_report(
    task: Task,
    examples: list[Example],
    completions: list[list[str]],
    cfg: CalibrationConfig,
    label: str = "",
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Records and metrics of sampled completions (any source: a model, a simulator)."""
    collapse = get_collapse(cfg.collapse, task)
    records = [
        question_record(ex, comps, collapse, cfg.answer_marker, task, cfg.sample_seed + i)
        for i, (ex, comps) in enumerate(zip(examples, completions, strict=True))
    ]
    metrics: dict[str, Any] = {}
    for est in ESTIMATORS:
        boot = cfg.bootstrap if est == cfg.estimator else 0
        for key, value in summarize(records, est, cfg.n_bins, boot, cfg.sample_seed).items():
            metrics[f"{est}/{key}"] = value
            if est == cfg.estimator:
                metrics[key] = value  # headline keys: the chosen estimator's
    metrics["invalid_rate"] = mean_or_nan([r["invalid"] for r in records])
    metrics["n_questions"], metrics["samples"] = len(records), cfg.samples
    if cfg.diagram:
        conf = [r[f"{cfg.estimator}_conf"] for r in records]
        right = [r[f"{cfg.estimator}_correct"] for r in records]
        title = f"{label or cfg.task}: B-confidence ({cfg.estimator}), M={cfg.samples}"
        metrics["diagram"] = str(reliability_diagram(conf, right, cfg.diagram, title))
    if cfg.records:
        path = Path(cfg.records)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return metrics, records


@evaluation("calibration", config=CalibrationConfig)
def evaluate_calibration(cfg: CalibrationConfig) -> dict[str, Any]:
    """B-calibration (semantic calibration): smECE, ECE and conf - acc of sampled answers."""
    from rayworks.models import resolve_model_dir

    model_dir = resolve_model_dir(cfg.checkpoint)
    task = get_task(cfg.task)
    collapse = get_collapse(cfg.collapse, task)  # fail on a bad B before sampling
    examples = task.examples(cfg.n_questions, cfg.split, cfg.seed)
    if collapse(examples[0].answer) is None:
        raise RayworksError(
            f"collapse={cfg.collapse!r} gives no class for {cfg.task!r}'s gold answer "
            f"{examples[0].answer!r}; pick a B that parses this task's answers"
        )
    completions = sample_completions(model_dir, [e.prompt for e in examples], cfg)
    metrics, _ = calibration_report(task, examples, completions, cfg)
    return {**metrics, "model_dir": str(model_dir)}
