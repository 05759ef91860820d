"""One protocol piece: train the video QA model on some domains, predict on others.

`train_piece` is the unit `fan_out` sends to a Ray task (one thread each): it reads the
dataset folder, trains on the train split of `train_domains`, and returns one prediction
per test question of `test_domains` (the `rayworks eval vudg` predictions format), which
the pipeline scores with the same code as the CLI evaluation.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rayworks.pipelines.vudg.annotate import TYPES
from rayworks.pipelines.vudg.dataset import load_clips, read_annotations
from rayworks.pipelines.vudg.model import VideoQAModel, encode_option, vocabulary


def clip_tensors(rows: list[dict[str, Any]], vocab: dict[str, int]) -> dict[str, Any]:
    """Group question rows by clip into fixed slots (one per type):
    options (N, 4, 6, L) int64, answers (N, 4) int64, valid (N, 4) bool, ids (N, 4)."""
    clips = sorted({r["clip"] for r in rows})
    where = {c: i for i, c in enumerate(clips)}
    n, q = len(clips), len(TYPES)
    options = torch.zeros(n, q, 6, len(encode_option("", vocab)), dtype=torch.long)
    answers = torch.zeros(n, q, dtype=torch.long)
    valid = torch.zeros(n, q, dtype=torch.bool)
    ids = [[""] * q for _ in range(n)]
    for r in rows:
        i, k = where[r["clip"]], TYPES.index(r["type"])
        options[i, k] = torch.tensor([encode_option(t, vocab) for t in r["options"]])
        answers[i, k], valid[i, k], ids[i][k] = r["answer"], True, r["id"]
    return {"clips": clips, "options": options, "answers": answers, "valid": valid, "ids": ids}


class AdamW:
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019), written out because
    `torch.optim`'s constructor imports `torch._dynamo`, seconds of start-up in every fresh
    Ray worker. The learning rate is set per step by `lr_at`."""

    def __init__(
        self,
        params: list[torch.Tensor],
        weight_decay: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        self.params, self.wd, self.betas, self.eps, self.t = params, weight_decay, betas, eps, 0
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]

    @torch.no_grad()
    def step(self, lr: float) -> None:
        self.t += 1
        b1, b2 = self.betas
        for p, m, v in zip(self.params, self.m, self.v, strict=True):
            if p.grad is None:
                continue
            p.mul_(1 - lr * self.wd)
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            denom = (v / (1 - b2**self.t)).sqrt_().add_(self.eps)
            p.addcdiv_(m, denom, value=-lr / (1 - b1**self.t))
            p.grad = None


def lr_at(step: int, total: int, peak: float, warmup: float = 0.1) -> float:
    """Linear warm-up over the first `warmup` share of the steps, then cosine to zero."""
    rise = max(1, int(warmup * total))
    if step < rise:
        return peak * (step + 1) / rise
    return 0.5 * peak * (1 + math.cos(math.pi * (step - rise) / max(1, total - rise)))


def train_piece(
    data_dir: str,
    train_domains: list[str],
    test_domains: list[str],
    model: dict[str, Any],
    seed: int,
    label: str,
) -> dict[str, Any]:
    """Train on `train_domains`' train split; predict every test question of `test_domains`.

    With `model["val_fraction"]` > 0 a seeded share of the training clips is held out as a
    validation split of the training domains (never the test domains): the model trains on
    the rest and the result adds `val_curve`, per-type validation accuracy after every
    epoch, the record the recipe's epochs and learning rate are chosen on.

    Returns {label, train_domains, test_domains, predictions: [{id, prediction}], seconds,
    train_loss, n_params[, val_curve]}."""
    started = time.time()
    folder = Path(data_dir)
    rows = read_annotations(folder)
    vocab = vocabulary()
    mine = [r for r in rows if r["split"] == "train" and r["domain"] in train_domains]
    val_share = model.get("val_fraction", 0.0)
    held = set()
    if val_share > 0:
        clips = sorted({r["clip"] for r in mine})
        order = np.random.default_rng([seed, 7]).permutation(len(clips))
        held = {clips[i] for i in order[: max(1, int(val_share * len(clips)))]}
    train = clip_tensors([r for r in mine if r["clip"] not in held], vocab)
    val = clip_tensors([r for r in mine if r["clip"] in held], vocab) if held else None
    test = clip_tensors(
        [r for r in rows if r["split"] == "test" and r["domain"] in test_domains], vocab
    )
    train_video = torch.from_numpy(load_clips(folder, train["clips"]))
    test_video = torch.from_numpy(load_clips(folder, test["clips"]))
    val_video = torch.from_numpy(load_clips(folder, val["clips"])) if val else None
    torch.manual_seed(seed)
    net = VideoQAModel(len(vocab), model["width"], model["hidden"])
    opt = AdamW(list(net.parameters()), model["weight_decay"])
    qtypes = torch.arange(len(TYPES))
    gen = torch.Generator().manual_seed(seed)
    n, bs = len(train["clips"]), model["batch_size"]
    steps = model["epochs"] * max(1, -(-n // bs))
    losses, curve = [], []
    for epoch in range(model["epochs"]):
        net.train()
        for idx in torch.randperm(n, generator=gen).split(bs):
            logits = net(train_video[idx], qtypes.expand(len(idx), -1), train["options"][idx])
            mask = train["valid"][idx]
            loss = torch.nn.functional.cross_entropy(logits[mask], train["answers"][idx][mask])
            loss.backward()
            opt.step(lr_at(len(losses), steps, model["lr"]))
            losses.append(loss.item())
        if val is not None:
            right = predict(net, val_video, val["options"]) == val["answers"]
            curve.append(
                {"epoch": epoch + 1}
                | {
                    f"val_acc_{t}": right[:, k][val["valid"][:, k]].float().mean().item()
                    for k, t in enumerate(TYPES)
                }
            )
    choices = predict(net, test_video, test["options"]).tolist()
    preds = [
        {"id": test["ids"][i][k], "prediction": row[k]}
        for i, row in enumerate(choices)
        for k in range(len(TYPES))
        if test["valid"][i, k]
    ]
    return {
        "label": label,
        "train_domains": train_domains,
        "test_domains": test_domains,
        "predictions": preds,
        "seconds": time.time() - started,
        "train_loss": float(np.mean(losses[-max(1, len(losses) // 10) :])),
        "n_params": sum(p.numel() for p in net.parameters()),
        "clips": {"train": n, "val": len(held)},
    } | ({"val_curve": curve} if curve else {})


@torch.no_grad()
def predict(net: torch.nn.Module, video: torch.Tensor, options: torch.Tensor) -> torch.Tensor:
    """The chosen option per (clip, question type): (N, 4) int64, in eval mode."""
    net.eval()
    qtypes = torch.arange(len(TYPES))
    out = [
        net(video[idx], qtypes.expand(len(idx), -1), options[idx]).argmax(-1)
        for idx in torch.arange(len(video)).split(256)
    ]
    return torch.cat(out) if out else torch.zeros(0, len(TYPES), dtype=torch.long)
