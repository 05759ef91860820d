"""Validation loss / perplexity and exact-match accuracy of greedy generations.

Used inside the lm pipeline's training loop and by `rayworks eval lm` on a saved checkpoint.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import torch

from rayworks.data.tasks import Example, Task


@torch.no_grad()
def loss_sum(
    model: Any, ids: torch.Tensor, labels: torch.Tensor, batch_size: int
) -> tuple[float, int]:
    """(summed next-token NLL, number of predicted tokens) over rows of `ids`."""
    total, count = 0.0, 0
    for start in range(0, len(ids), batch_size):
        x, y = ids[start : start + batch_size], labels[start : start + batch_size]
        logits = model(input_ids=x).logits[:, :-1]  # (B, T-1, V)
        target = y[:, 1:]
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)).float(),
            target.reshape(-1),
            ignore_index=-100,
            reduction="sum",
        )
        total += float(nll)
        count += int((target != -100).sum())
    return total, count


def perplexity(loss: float) -> float:
    return math.exp(min(loss, 50.0))


@torch.no_grad()
def generate(
    model: Any, tokenizer: Any, prompts: list[str], max_new_tokens: int, batch_size: int = 32
) -> list[str]:
    """Greedy completions of `prompts` (left-padded batches, stop at EOS)."""
    tokenizer.padding_side = "left"
    outs: list[str] = []
    for start in range(0, len(prompts), batch_size):
        enc = tokenizer(
            prompts[start : start + batch_size],
            return_tensors="pt",
            padding=True,
            add_special_tokens=False,
        )
        limit = model.config.max_position_embeddings - enc["input_ids"].shape[1]
        gen = model.generate(
            **enc,
            max_new_tokens=max(1, min(max_new_tokens, limit)),
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        new = gen[:, enc["input_ids"].shape[1] :]
        outs.extend(tokenizer.batch_decode(new, skip_special_tokens=True))
    return outs


def exact_match(
    model: Any, tokenizer: Any, task: Task, examples: list[Example], max_new_tokens: int
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Accuracy (overall and per difficulty) of the task's verifier on greedy completions."""
    was_training = model.training
    model.eval()
    completions = generate(model, tokenizer, [e.prompt for e in examples], max_new_tokens)
    model.train(was_training)
    by_level: dict[int, list[float]] = defaultdict(list)
    samples = []
    for ex, completion in zip(examples, completions, strict=True):
        score = task.verify(ex, completion)
        by_level[ex.difficulty].append(score)
        samples.append(
            {"prompt": ex.prompt, "completion": completion, "answer": ex.answer, "score": score}
        )
    scores = [s["score"] for s in samples]
    metrics = {"exact_match": sum(scores) / max(1, len(scores))}
    for level, vals in sorted(by_level.items()):
        metrics[f"exact_match_d{level}"] = sum(vals) / len(vals)
    return metrics, samples
