"""Validation curve of the VUDG-mini model on a split of the LODO training domains.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/vudg_validation.py \
        --n-train 300 --epochs 20 [--held-out cartoon] [--seed 0] [--lr 3e-3]

Builds (or reuses under `--cache`) the VUDG-mini dataset at the default settings with
`data.n_train = --n-train`, takes the train split of every domain but `--held-out` (the
training set of that LODO run), holds out 20% of those clips (numpy seed 123) as the
validation split, trains the pipeline's model with the pipeline's optimiser and schedule,
and prints per question type the training and validation accuracy at a few epochs. The
held-out domain's test clips are never read: this is where the recipe's data size and
epochs were chosen (docs/results.md, "vudg"). `model.val_fraction` gives the same kind of
split inside a pipeline run.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from rayworks.pipelines.vudg.annotate import TYPES
from rayworks.pipelines.vudg.config import VUDGConfig
from rayworks.pipelines.vudg.dataset import cached_dataset, load_clips, read_annotations
from rayworks.pipelines.vudg.model import VideoQAModel, vocabulary
from rayworks.pipelines.vudg.train import AdamW, clip_tensors, lr_at, predict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-train", type=int, default=300)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--held-out", default="cartoon")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, default=Path("runs/cache"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = VUDGConfig.model_validate({"data": {"n_train": args.n_train}})
    model = cfg.model.model_dump()
    folder = cached_dataset(
        args.cache,
        cfg.data.model_dump(mode="json"),
        cfg.annotation.model_dump(mode="json"),
        args.seed,
    )
    vocab = vocabulary()
    rows = [
        r
        for r in read_annotations(folder)
        if r["split"] == "train" and r["domain"] != args.held_out
    ]
    clips = sorted({r["clip"] for r in rows})
    val_clips = set(np.random.default_rng(123).choice(clips, len(clips) // 5, replace=False))
    train = clip_tensors([r for r in rows if r["clip"] not in val_clips], vocab)
    val = clip_tensors([r for r in rows if r["clip"] in val_clips], vocab)
    train_video = torch.from_numpy(load_clips(folder, train["clips"]))
    val_video = torch.from_numpy(load_clips(folder, val["clips"]))
    torch.manual_seed(args.seed)
    net = VideoQAModel(len(vocab), model["width"], model["hidden"])
    opt = AdamW(list(net.parameters()), model["weight_decay"])
    qtypes, gen = torch.arange(len(TYPES)), torch.Generator().manual_seed(args.seed)
    n, bs = len(train["clips"]), model["batch_size"]
    steps, step, started = args.epochs * -(-n // bs), 0, time.time()

    def accuracy(t: dict, video: torch.Tensor) -> str:
        right = predict(net, video, t["options"]) == t["answers"]
        return " ".join(
            f"{name}={right[:, k][t['valid'][:, k]].float().mean():.3f}"
            for k, name in enumerate(TYPES)
        )

    for epoch in range(args.epochs):
        net.train()
        losses = []
        for idx in torch.randperm(n, generator=gen).split(bs):
            logits = net(train_video[idx], qtypes.expand(len(idx), -1), train["options"][idx])
            mask = train["valid"][idx]
            loss = torch.nn.functional.cross_entropy(logits[mask], train["answers"][idx][mask])
            loss.backward()
            opt.step(lr_at(step, steps, args.lr))
            step += 1
            losses.append(loss.item())
        if epoch % max(1, args.epochs // 6) == 0 or epoch == args.epochs - 1:
            print(
                f"epoch {epoch + 1} loss {np.mean(losses):.3f} ({time.time() - started:.0f} s)"
                f" | train {accuracy(train, train_video)} | val {accuracy(val, val_video)}",
                flush=True,
            )


if __name__ == "__main__":
    main()
