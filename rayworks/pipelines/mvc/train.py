"""Training one conditioning stack under the frozen decoder (one fan-out piece per arm),
with progress records and checkpoint save / resume.

Loss (paper weights, config `train.lambda_*`): λ_mel·L1(D(ids, d*, F̂0, v̂, Ê, e), mel)
+ λ_dur·MSE(log d̂, log d*) + λ_F0·L1 on voiced log-F0 + λ_norm·L1(Ê, E) + λ_v·BCE(v̂, v),
where d* are the alignment teacher's (MAS) durations — used for h_A = alpha·h_B in training
and dropped at inference. Batches and dropout are seeded by (seed, step), so a run resumed
from a checkpoint continues exactly as an uninterrupted one.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from rayworks.core import checkpoint as ckpt
from rayworks.pipelines.mvc.corpus import Corpus, read_corpus
from rayworks.pipelines.mvc.decoder import Batch, Decoder, collate, references, speaker_pools
from rayworks.pipelines.mvc.evaluate import evaluate_stack
from rayworks.pipelines.mvc.layers import length_mask, masked_l1
from rayworks.pipelines.mvc.shared import load_decoder, load_recognizer
from rayworks.pipelines.mvc.stacks import build_stack
from rayworks.platform.context import RunContext


def stack_losses(
    stack: torch.nn.Module, decoder: Decoder, batch: Batch, lam: dict[str, Any]
) -> dict[str, torch.Tensor]:
    """Every loss term of one teacher-forced batch, and their weighted sum ("loss")."""
    with torch.no_grad():
        style = decoder.style_encoder(batch.ref_mel, batch.ref_lengths)
    out = stack(batch.ids, batch.text_lengths, style, batch.durations)
    text_mask = length_mask(batch.text_lengths, batch.ids.shape[1])
    frames = length_mask(batch.frame_lengths, batch.mel.shape[1])
    voiced = frames & (batch.voiced > 0)
    log_d = torch.log(batch.durations.clamp_min(1).float())
    mel = decoder(
        batch.ids,
        batch.durations,
        out["lf0"],
        torch.sigmoid(out["voiced_logit"]),
        out["energy"],
        style,
        frames,
    )
    parts = {
        "mel": masked_l1(mel, batch.mel, frames),
        "dur": ((out["log_dur"] - log_d) ** 2 * text_mask).sum() / text_mask.sum(),
        "f0": masked_l1(out["lf0"], batch.lf0, voiced),
        "energy": masked_l1(out["energy"], batch.energy, frames),
        "voiced": (
            F.binary_cross_entropy_with_logits(out["voiced_logit"], batch.voiced, reduction="none")
            * frames
        ).sum()
        / frames.sum(),
    }
    parts["loss"] = sum(lam[f"lambda_{k}"] * v for k, v in parts.items())
    return parts


def _save(
    root: Path,
    step: int,
    stack: torch.nn.Module,
    opt: torch.optim.Optimizer,
    curve: list[list[float]],
) -> None:
    with ckpt.writing(ckpt.step_dir(root, step)) as tmp:
        ckpt.save_tree(tmp, "stack", dict(stack.state_dict()))
        ckpt.save_tree(tmp, "optimizer", opt.state_dict())
        ckpt.save_tree(tmp, "progress", {"step": step, "curve": curve})
    ckpt.prune(root, keep=1)


def _restore(root: Path, stack: torch.nn.Module, opt: torch.optim.Optimizer):
    latest = ckpt.latest_checkpoint(root)
    if latest is None:
        return 0, []
    stack.load_state_dict(ckpt.load_tree(latest, "stack"))
    opt.load_state_dict(ckpt.load_tree(latest, "optimizer"))
    progress = ckpt.load_tree(latest, "progress")
    return int(progress["step"]), [list(c) for c in progress["curve"]]


def train_stack(
    stack: torch.nn.Module,
    decoder: Decoder,
    corpus: Corpus,
    train_cfg: dict[str, Any],
    seed: int,
    root: Path,
    on_log=None,
) -> list[list[float]]:
    """Adam with a cosine learning rate over `steps`; resumes from `root` if a checkpoint is
    there. Returns the loss curve [[step, loss, val-free mel L1], ...]."""
    opt = torch.optim.Adam(stack.parameters(), lr=train_cfg["lr"])
    start, curve = _restore(root, stack, opt)
    train = corpus.index("train")
    pools, steps = speaker_pools(corpus, train), train_cfg["steps"]
    stack.train()
    for step in range(start + 1, steps + 1):
        rng = np.random.default_rng([seed, step])
        torch.manual_seed(seed * 1_000_003 + step)
        items = [
            int(i) for i in rng.choice(train, min(train_cfg["batch"], len(train)), replace=False)
        ]
        batch = collate(corpus, items, references(corpus, items, pools, rng))
        for group in opt.param_groups:
            group["lr"] = train_cfg["lr"] * 0.5 * (1 + math.cos(math.pi * (step - 1) / steps))
        parts = stack_losses(stack, decoder, batch, train_cfg)
        opt.zero_grad()
        parts["loss"].backward()
        torch.nn.utils.clip_grad_norm_(stack.parameters(), 1.0)
        opt.step()
        if step % train_cfg["log_every"] == 0 or step == steps:
            curve.append([step, parts["loss"].item(), parts["mel"].item()])
            if on_log is not None:
                on_log(step, {k: v.item() for k, v in parts.items()})
        if step % train_cfg["checkpoint_every"] == 0 or step == steps:
            _save(root, step, stack, opt, curve)
    return curve


def arm_piece(
    label: str, arm: str, cfg: dict[str, Any], corpus_folder: str, ctx: RunContext, seed: int
) -> dict[str, Any]:
    """Fan-out piece: train arm `arm` (labelled `label`), evaluate it, write its samples."""
    folder = Path(corpus_folder)
    corpus = read_corpus(folder)
    vocab = len(corpus.vocab)
    decoder = load_decoder(folder, cfg["decoder"], vocab)
    recognizer = load_recognizer(folder, cfg["recognizer"], vocab)
    torch.manual_seed(seed)
    stack = build_stack(arm, vocab, cfg["stack"], cfg["decoder"]["style_dim"])

    def log(step: int, parts: dict[str, float]) -> None:
        ctx.log(step, arm=label, **parts)

    start = time.perf_counter()
    curve = train_stack(
        stack, decoder, corpus, cfg["train"], seed, ctx.checkpoints_dir / label, log
    )
    seconds = time.perf_counter() - start
    samples = ctx.artifacts_dir / "samples"
    samples.mkdir(exist_ok=True)
    result = evaluate_stack(
        stack, decoder, recognizer, corpus, seed, samples, label, cfg["griffin_lim_iters"]
    )
    params = sum(p.numel() for p in stack.parameters())
    return {
        "kind": "arm",
        "label": label,
        "arm": arm,
        "params": params,
        "train_seconds": seconds,
        "curve": curve,
        **result,
    }
