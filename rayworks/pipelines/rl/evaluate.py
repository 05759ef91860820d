"""Held-out evaluation of a policy: what `rayworks run grpo` logs at every eval step.

`evaluate_split` takes any `generate(examples, n, sampling) -> [Rollout]`, so the same
numbers come from the run's engine actors (learner.StepDriver) and from an in-process
engine sampling another trainer's model (benchmarks/rl_learning.py scores TRL with it).

Metrics, each prefixed by the split (`val_`, `test_`):
- `accuracy`: greedy decoding's verifier score, also per difficulty (`accuracy_d<k>`) and
  the task's diagnostics (e.g. `traced`, `step_correct`);
- from k = `eval.samples_per_prompt` samples per prompt at the rollout temperature:
  `sampled_accuracy` (what GRPO at that temperature maximises), `pass_at_k` (some sample
  right), `informative` (the share of prompts whose k samples disagree: a GRPO group there
  carries signal), `response_len` (tokens per sampled response, EOS included), `entropy`
  (the policy's mean per-token entropy on those samples) and `kl_base` (exact per-token
  KL(policy || base) over the whole vocabulary on those samples), both at the sampling
  temperature, which is the policy the learner trains (rollout.py).
Sampling seeds are fixed, so every eval of a run (and every arm) draws with the same seed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rayworks.data.tasks import Example
from rayworks.pipelines.rl.batch import RolloutBatch, make_batch
from rayworks.pipelines.rl.prompts import PromptSet
from rayworks.platform.rollout import Rollout, SamplingConfig

Generate = Callable[[list[Example], int, SamplingConfig], list[Rollout]]
EVAL_SEED = 1  # sampling seed of every eval's samples


def response_logits(model: Any, batch: RolloutBatch, temperature: float = 1.0) -> torch.Tensor:
    """Logits of the scored policy at each response token: the model's divided by the
    sampling temperature, the distribution the engine drew from (rollout.py)."""
    out = model(**batch.model_inputs)
    return batch.response_slice(out.logits).float() / (temperature or 1.0)


@torch.no_grad()
def policy_vs_base(
    policy: torch.nn.Module,
    ref: torch.nn.Module,
    batch: RolloutBatch,
    temperature: float,
    rows: int = 64,
) -> dict[str, float]:
    """Mean per-token entropy of `policy` and exact KL(policy || ref), both over the whole
    vocabulary at the sampling temperature, on the batch's response tokens (`rows` at a
    time, which bounds the logits' memory for a large vocabulary)."""
    entropy = kl = count = 0.0
    n = batch.input_ids.shape[0]
    for start in range(0, n, rows):
        sub = batch.rows(list(range(start, min(start + rows, n))))
        logp = torch.log_softmax(response_logits(policy, sub, temperature), -1)
        logq = torch.log_softmax(response_logits(ref, sub, temperature), -1)
        p, mask = logp.exp(), sub.response_mask
        entropy += float((-(p * logp).sum(-1) * mask).sum())
        kl += float(((p * (logp - logq)).sum(-1) * mask).sum())
        count += float(mask.sum())
    count = max(count, 1.0)
    return {"entropy": entropy / count, "kl_base": kl / count}


def greedy_metrics(
    examples: list[Example], rollouts: list[Rollout], data: PromptSet, split: str
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Greedy accuracy (overall, per difficulty), the task's diagnostics, and sample rows."""
    scores: dict[int, list[float]] = {}
    extras: dict[str, list[float]] = {}
    samples = []
    for ex, r in zip(examples, rollouts, strict=True):
        score = data.verify(ex, r.text)
        scores.setdefault(ex.difficulty, []).append(score)
        for key, value in (data.diagnostics(ex, r.text) if data.diagnostics else {}).items():
            extras.setdefault(key, []).append(value)
        samples.append(
            {
                "split": split,
                "prompt": ex.prompt,
                "completion": r.text,
                "answer": ex.answer,
                "score": score,
            }
        )
    flat = [s for level in scores.values() for s in level]
    metrics = {"accuracy": sum(flat) / len(flat)}
    metrics.update({f"accuracy_d{k}": sum(v) / len(v) for k, v in sorted(scores.items())})
    metrics.update({k: sum(v) / len(v) for k, v in extras.items()})
    return metrics, samples


def sampled_metrics(
    examples: list[Example],
    drawn: list[Rollout],
    k: int,
    data: PromptSet,
    pad: int,
    policy: torch.nn.Module,
    ref: torch.nn.Module,
    temperature: float,
    pixels: torch.Tensor | None = None,
) -> dict[str, float]:
    """Sampled accuracy, pass@k, informative share, length, entropy and KL to the base from
    `drawn`: k rollouts per example, each example's contiguous (`pixels`: per rollout)."""
    right = torch.tensor([data.verify(examples[r.prompt_index], r.text) for r in drawn])
    right = right.view(-1, k)
    batch = make_batch(drawn, right.flatten().tolist(), pad, pixels)
    return {
        "sampled_accuracy": float(right.mean()),
        "pass_at_k": float((right.max(dim=1).values > 0).float().mean()),
        "informative": float((right.std(dim=1, unbiased=False) > 0).float().mean()),
        "response_len": float(batch.response_mask.sum()) / len(drawn),
        **policy_vs_base(policy, ref, batch, temperature),
    }


def evaluate_split(
    generate: Generate,
    data: PromptSet,
    split: str,
    sampling: SamplingConfig,
    k: int,
    pad: int,
    policy: torch.nn.Module,
    ref: torch.nn.Module,
    pixels: Callable[[list[Example], list[Rollout]], torch.Tensor | None] | None = None,
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Every metric of the module docstring for `split`, prefixed `<split>_`, and the greedy
    sample rows. `sampling` is the rollout's (its temperature and length); `pixels` gives
    a vision-language policy's pixel values per rollout."""
    examples = data.split(split)
    greedy = sampling.model_copy(update={"temperature": 0.0, "seed": 0})
    metrics, samples = greedy_metrics(examples, generate(examples, 1, greedy), data, split)
    if k:
        drawn = generate(examples, k, sampling.model_copy(update={"seed": EVAL_SEED}))
        metrics.update(
            sampled_metrics(
                examples,
                drawn,
                k,
                data,
                pad,
                policy,
                ref,
                sampling.temperature,
                pixels(examples, drawn) if pixels else None,
            )
        )
    return {f"{split}_{key}": v for key, v in metrics.items()}, samples
