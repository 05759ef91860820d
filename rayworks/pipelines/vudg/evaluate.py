"""`rayworks eval vudg --predictions FILE --set dataset=DIR`: score any model on VUDG-mini.

Predictions: jsonl, one object per line, `{"id": "<question id>", "prediction": P}` with P
the option index (0-5) or the option's exact text. Every non-blank line is either scored
or set aside in a rejects file with its reason (datatrove-style keep-or-drop): bad JSON,
not an object, no/unknown/out-of-scope/duplicate id, missing or invalid prediction.
Counts reconcile: lines = scored + rejected; questions in scope = answered + unanswered,
and unanswered questions count as wrong in `accuracy` (`accuracy_answered` leaves them
out). Accuracy is reported overall, per domain, per question type and per (domain, type).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from rayworks.core.config import Config
from rayworks.core.errors import RayworksError
from rayworks.pipelines.vudg.dataset import read_annotations
from rayworks.platform.registry import evaluation

BAD_JSON, NOT_OBJECT, NO_ID, UNKNOWN_ID = "bad_json", "not_an_object", "missing_id", "unknown_id"
OUT_OF_SCOPE, DUPLICATE, NO_PREDICTION, BAD_PREDICTION = (
    "out_of_scope",
    "duplicate_id",
    "missing_prediction",
    "invalid_prediction",
)


class VUDGEvalConfig(Config):
    predictions: str = Field(description="jsonl file: one {id, prediction} object per line")
    dataset: str = Field(description="VUDG-mini folder (annotations.jsonl + videos/)")
    split: Literal["train", "test", "all"] = Field("test", description="questions in scope")
    domains: list[str] | None = Field(None, description="domains in scope (default: all)")
    rejects: str | None = Field(None, description="rejects file (default: beside predictions)")


def _choice(row: dict[str, Any], value: Any) -> int | None:
    """The option index a prediction names (index or exact option text), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value < len(row["options"]) else None
    if isinstance(value, str) and value in row["options"]:
        return row["options"].index(value)
    return None


def score_lines(
    questions: dict[str, dict[str, Any]], lines: list[str], known: set[str]
) -> tuple[dict[str, bool], list[dict[str, Any]]]:
    """(correct per answered question id, rejects with line number and reason).

    `questions` are the in-scope questions by id, `known` every id in the dataset."""
    answered: dict[str, bool] = {}
    rejects: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        reason, detail = None, ""
        try:
            record = json.loads(line)
        except ValueError as exc:
            record, reason, detail = None, BAD_JSON, str(exc)
        if reason is None and not isinstance(record, dict):
            reason = NOT_OBJECT
        elif reason is None:
            qid = record.get("id")
            if not isinstance(qid, str):
                reason = NO_ID
            elif qid not in known:
                reason, detail = UNKNOWN_ID, qid
            elif qid not in questions:
                reason, detail = OUT_OF_SCOPE, qid
            elif qid in answered:
                reason, detail = DUPLICATE, qid
            elif "prediction" not in record:
                reason, detail = NO_PREDICTION, qid
            elif (choice := _choice(questions[qid], record["prediction"])) is None:
                reason, detail = BAD_PREDICTION, repr(record["prediction"])[:80]
            else:
                answered[qid] = choice == questions[qid]["answer"]
        if reason is not None:
            rejects.append({"line": number, "reason": reason, "detail": detail, "text": line[:200]})
    return answered, rejects


def accuracy_table(
    questions: dict[str, dict[str, Any]], answered: dict[str, bool]
) -> dict[tuple[str, str], tuple[int, int]]:
    """(domain, type) -> (correct, questions); unanswered questions count as wrong."""
    cells: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for qid, row in questions.items():
        cell = cells[row["domain"], row["type"]]
        cell[0] += int(answered.get(qid, False))
        cell[1] += 1
    return {k: (v[0], v[1]) for k, v in cells.items()}


def summarize(table: dict[tuple[str, str], tuple[int, int]]) -> dict[str, float]:
    """accuracy, acc_<domain>, acc_<type>, acc_<domain>_<type> from the cell counts."""
    out: dict[str, float] = {}
    groups: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for (domain, qtype), (c, n) in table.items():
        for key in ("accuracy", f"acc_{domain}", f"acc_{qtype}", f"acc_{domain}_{qtype}"):
            groups[key][0] += c
            groups[key][1] += n
    for key, (c, n) in groups.items():
        out[key] = c / n if n else float("nan")
    return out


def in_scope(
    rows: list[dict[str, Any]], split: str, domains: list[str] | None
) -> dict[str, dict[str, Any]]:
    return {
        r["id"]: r
        for r in rows
        if (split == "all" or r["split"] == split) and (not domains or r["domain"] in domains)
    }


def score_file(
    dataset: Path,
    predictions: Path,
    split: str = "test",
    domains: list[str] | None = None,
    rejects: Path | None = None,
) -> tuple[dict[str, float], dict[tuple[str, str], tuple[int, int]]]:
    """Score a predictions file; write rejects (if any); return (metrics, cell table)."""
    if not (dataset / "annotations.jsonl").is_file():
        raise RayworksError(f"dataset={str(dataset)!r} has no annotations.jsonl (not VUDG-mini).")
    if not predictions.is_file():
        raise RayworksError(f"predictions={str(predictions)!r} does not exist.")
    rows = read_annotations(dataset)
    questions = in_scope(rows, split, domains)
    if not questions:
        raise RayworksError(f"split={split!r}, domains={domains} selects no question.")
    lines = predictions.read_text(errors="replace").splitlines()
    answered, rejected = score_lines(questions, lines, {r["id"] for r in rows})
    path = rejects or predictions.with_suffix(".rejects.jsonl")
    if rejected:
        path.write_text("".join(json.dumps(r) + "\n" for r in rejected))
    table = accuracy_table(questions, answered)
    metrics = summarize(table)
    correct = sum(answered.values())
    reasons = defaultdict(int)
    for r in rejected:
        reasons[f"rejected_{r['reason']}"] += 1
    metrics |= {
        "lines_in": len(answered) + len(rejected),
        "lines_scored": len(answered),
        "lines_rejected": len(rejected),
        "questions": len(questions),
        "answered": len(answered),
        "unanswered": len(questions) - len(answered),
        "accuracy_answered": correct / len(answered) if answered else float("nan"),
        **reasons,
    }
    return metrics, table


@evaluation("vudg", config=VUDGEvalConfig)
def evaluate_vudg(cfg: VUDGEvalConfig) -> dict[str, float]:
    """VUDG-mini multiple-choice accuracy (overall, per domain and type) of a predictions file."""
    metrics, _ = score_file(
        Path(cfg.dataset),
        Path(cfg.predictions),
        cfg.split,
        cfg.domains,
        Path(cfg.rejects) if cfg.rejects else None,
    )
    return metrics
