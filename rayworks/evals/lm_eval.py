"""Evaluations of language-model checkpoints and task predictions.

`lm`: validation loss, perplexity and exact-match accuracy of a saved checkpoint on a
task's held-out splits (the same generators and seed the training run used).
`task_accuracy`: the task's exact verifier over a predictions file (jsonl rows with
`prompt` and `completion`), for completions produced anywhere (a served endpoint, vLLM,
another framework). Malformed rows are set aside with a reason; counts reconcile.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from pydantic import Field

from rayworks.core.config import Config
from rayworks.core.errors import RayworksError
from rayworks.data.tasks import Example, get_task
from rayworks.evals.lm_metrics import exact_match, loss_sum, perplexity
from rayworks.models import load_causal_lm, load_tokenizer, resolve_model_dir
from rayworks.platform.registry import evaluation


class LMEvalConfig(Config):
    checkpoint: str = Field(description="run dir, checkpoint dir or HF model dir")
    task: str = Field("arithmetic", description="task whose held-out splits are scored")
    seed: int = Field(0, ge=0, description="seed of the task's splits (the run's seed)")
    n_val: int = Field(200, ge=1, description="validation examples for loss/perplexity")
    n_test: int = Field(100, ge=0, description="test prompts for exact match")
    max_new_tokens: int = Field(64, ge=1, description="generation budget per prompt")
    batch_size: int = Field(32, ge=1, description="rows per forward pass")


@evaluation("lm", config=LMEvalConfig)
def evaluate_lm(cfg: LMEvalConfig) -> dict[str, float]:
    """Validation loss, perplexity and exact match of an LM checkpoint on a task."""
    model_dir = resolve_model_dir(cfg.checkpoint)
    task = get_task(cfg.task)
    model, tokenizer = load_causal_lm(model_dir).eval(), load_tokenizer(model_dir)
    val = task.examples(cfg.n_val, "val", cfg.seed)
    enc = tokenizer([e.text + tokenizer.eos_token for e in val], add_special_tokens=False)[
        "input_ids"
    ]
    width = min(max(len(x) for x in enc), model.config.max_position_embeddings)
    ids = torch.full((len(enc), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full_like(ids, -100)
    for i, row in enumerate(enc):
        row = row[:width]
        ids[i, : len(row)] = torch.tensor(row)
        labels[i, : len(row)] = torch.tensor(row)
    total, count = loss_sum(model, ids, labels, cfg.batch_size)
    metrics = {"val_loss": total / max(1, count), "model_dir": str(model_dir)}
    metrics["val_ppl"] = perplexity(metrics["val_loss"])
    if cfg.n_test:
        em, _ = exact_match(
            model, tokenizer, task, task.examples(cfg.n_test, "test", cfg.seed), cfg.max_new_tokens
        )
        metrics.update(em)
    return metrics


class TaskAccuracyConfig(Config):
    predictions: str = Field(description="jsonl file: one {prompt, completion} object per line")
    task: str = Field("arithmetic", description="task whose verifier scores the completions")
    rejects: str | None = Field(
        None, description="where to write malformed rows (default: beside the file)"
    )


def _answer_for(task_name: str, prompt: str) -> str:
    """The exact answer of an arithmetic-style prompt, recomputed from the prompt itself."""
    if task_name != "arithmetic":
        raise RayworksError(
            f"task_accuracy can recompute answers for 'arithmetic' only, not {task_name!r}."
        )
    expr = prompt.strip().removeprefix("Q:").strip().rstrip("=").strip()
    for op in "+-":
        left, sep, right = expr.partition(op)
        if sep and left.isdigit() and right.isdigit():
            return str(int(left) + int(right) if op == "+" else int(left) - int(right))
    raise ValueError(f"prompt {prompt!r} is not an arithmetic question")


@evaluation("task_accuracy", config=TaskAccuracyConfig)
def task_accuracy(cfg: TaskAccuracyConfig) -> dict[str, float]:
    """Exact-verifier accuracy over a predictions file; malformed rows kept aside."""
    path = Path(cfg.predictions)
    if not path.is_file():
        raise RayworksError(f"predictions file {str(path)!r} does not exist.")
    task = get_task(cfg.task)
    scores, rejects = [], []
    lines = path.read_text(errors="replace").splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            prompt, completion = row["prompt"], row["completion"]
            answer = str(row["answer"]) if "answer" in row else _answer_for(cfg.task, prompt)
        except (ValueError, KeyError, TypeError) as exc:
            rejects.append(
                {"line": number, "reason": f"{type(exc).__name__}: {exc}", "text": line[:200]}
            )
            continue
        scores.append(task.verify(Example(prompt, "", answer, 0), str(completion)))
    rejects_path = Path(cfg.rejects) if cfg.rejects else path.with_suffix(".rejects.jsonl")
    if rejects:
        rejects_path.write_text("".join(json.dumps(r) + "\n" for r in rejects))
    rows_in = len(scores) + len(rejects)
    return {
        "accuracy": sum(scores) / len(scores) if scores else float("nan"),
        "rows_in": rows_in,
        "rows_scored": len(scores),
        "rows_rejected": len(rejects),
    }
