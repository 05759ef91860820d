"""The VLM policy Trust-GRPO starts from: a tiny LLaVA SFT'd on the task's traces.

As for the text policies (`rl/base.py`), RL from random weights on an exact-answer reward
gets no signal, so the VLM is first fine-tuned on (image, question, reference completion)
triples, loss on completion tokens only, which leaves it partially competent. The SFT
data keep the task's share of shortcut traces ("<think>ok ok ok</think>A: 5"), so the base
policy emits the hack pattern now and then, and RL can amplify or suppress it.

A base is a pure function of (task, model spec, SFT config): built once, cached under
`<cache root>/base/vlm-<hash>/` (summary.json beside artifacts/model holds its test exact
match, step correctness and hack rate), shared by every arm and seed of a bench.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import torch

from rayworks.core.build_cache import digest, locked_build
from rayworks.data.tasks import Example, get_task
from rayworks.models import TokenizerSpec, train_tokenizer
from rayworks.models.vlm import IMAGE_TOKEN, VLMSpec, build_vlm, pixel_values
from rayworks.pipelines.rl.config import SFTConfig
from rayworks.platform.rollout import HFEngine, SamplingConfig

Rows = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # ids, attention mask, labels
IGNORE = -100


def encode_rows(processor: Any, examples: list[Example], completions: list[str]) -> Rows:
    """Right-padded (ids, mask, labels): `<image>`+prompt then completion + EOS; labels
    only on the completion tokens (the prompt and image tokens are context)."""
    tok = processor.tokenizer
    rows, targets = [], []
    for ex, completion in zip(examples, completions, strict=True):
        prompt = processor(text=IMAGE_TOKEN + ex.prompt, images=ex.image).input_ids[0]
        answer = [*tok(completion).input_ids, tok.eos_token_id]
        rows.append([*map(int, prompt), *answer])
        targets.append([IGNORE] * len(prompt) + answer)
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (row, target) in enumerate(zip(rows, targets, strict=True)):
        ids[i, : len(row)], labels[i, : len(row)], mask[i, : len(row)] = (
            torch.tensor(row),
            torch.tensor(target),
            1,
        )
    return ids, mask, labels


def optimizer_step(model: Any, optimizer: Any, loss: torch.Tensor, lr: float) -> None:
    """One AdamW step on `loss` at `lr`, gradients clipped to norm 1 (SFT and TRM training)."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()


def evaluate_policy(model_dir: Path, task: Any, test: list[Example], max_new: int) -> dict:
    """Greedy exact match, step correctness and hack rate of a saved policy on `test`."""
    engine = HFEngine(model_dir)
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=max_new, seed=0)
    out = engine.generate([e.prompt for e in test], 1, sampling, [e.image for e in test])
    scores = {"exact_match": 0.0, "step_correct": 0.0, "hack": 0.0}
    for ex, r in zip(test, out, strict=True):
        scores["exact_match"] += task.verify(ex, r.text) / len(test)
        diag = task.diagnostics(ex, r.text)
        scores["step_correct"] += diag["step_correct"] / len(test)
        scores["hack"] += diag["hack"] / len(test)
    return scores


def sft_vlm(out: Path, task_name: str, spec: VLMSpec, sft: SFTConfig, max_new: int) -> None:
    """Train the tokenizer, build the VLM and fine-tune it; writes `out/artifacts/model`."""
    task = get_task(task_name)
    train = task.examples(sft.n_train, "train", sft.seed)
    test = task.examples(sft.n_test, "test", sft.seed) if sft.n_test else []
    torch.manual_seed(sft.seed)
    tokenizer = train_tokenizer(
        TokenizerSpec(kind="char"), [e.text for e in train] + ["0123456789"]
    )
    model, processor = build_vlm(spec, tokenizer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=sft.lr, weight_decay=0.0)
    rng, warmup = random.Random(sft.seed), max(1, sft.steps // 10)
    log = []
    model.train()
    for step in range(sft.steps):
        batch = rng.sample(train, min(sft.batch_size, len(train)))
        ids, mask, labels = encode_rows(processor, batch, [e.completion for e in batch])
        pixels = pixel_values(processor, [e.image for e in batch])
        scale = min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * step / sft.steps))
        loss = model(input_ids=ids, attention_mask=mask, pixel_values=pixels, labels=labels).loss
        optimizer_step(model, optimizer, loss, sft.lr * max(scale, 0.05))
        if (step + 1) % max(1, sft.steps // 10) == 0:
            log.append({"step": step + 1, "loss": float(loss.detach())})
    model_dir = out / "artifacts" / "model"
    model.eval().save_pretrained(model_dir)
    processor.save_pretrained(model_dir)
    summary = {"train_loss": log[-1]["loss"] if log else float("nan"), "steps": sft.steps}
    if test:
        summary.update(evaluate_policy(model_dir, task, test, max_new))
    (out / "sft_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    (out / "summary.json").write_text(json.dumps(summary, indent=2))


def vlm_policy(cache_root: Path, task: str, spec: VLMSpec, sft: SFTConfig, max_new: int) -> Path:
    """The cached SFT'd VLM policy folder for (task, spec, sft), built on first use."""
    blob = json.dumps([task, spec.model_dump(mode="json"), sft.model_dump(mode="json"), max_new])
    out = cache_root / "base" / f"vlm-{digest(blob)}"
    model_dir = out / "artifacts" / "model"
    locked_build(out, out / "summary.json", lambda: sft_vlm(out, task, spec, sft, max_new))
    return model_dir


def policy_summary(model_dir: Path) -> dict[str, float]:
    """The base policy's SFT metrics, prefixed `base_sft_` (empty for a given policy)."""
    path = model_dir.parent.parent / "summary.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return {f"base_sft_{k}": float(v) for k, v in data.items() if isinstance(v, int | float)}
