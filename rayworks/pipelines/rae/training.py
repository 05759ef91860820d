"""A resumable AdamW loop and the shared-component cache of the `rae` pipelines.

`fit` runs `steps` optimizer steps of `loss_at(step, gen)` (gen is seeded from the step, so
a resumed run draws exactly what an unbroken one would), with linear warm-up then cosine
decay to 10% and gradient clipping 1.0 (stage-2 recipe, reconstructed schedule). Every
`every` steps it writes models + optimizer + loss curve as one pickle-free safetensors tree
under `root/step_XXXXXXXX/` and restores from the latest on start.

`cached(root, kind, key, build)` trains a component at most once per key: the result tree
lives under `root/<kind>-<hash>/`, written atomically; a file lock makes a concurrent run
(another arm of the same bench) wait for it instead of training it twice.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from rayworks.core import checkpoint as ckpt


def lr_at(step: int, steps: int, lr: float, warmup: float = 0.05) -> float:
    warm = max(1, int(warmup * steps))
    if step < warm:
        return lr * (step + 1) / warm
    progress = (step - warm) / max(1, steps - warm)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def fit(
    modules: dict[str, nn.Module],
    loss_at: Callable[[int, torch.Generator], Tensor],
    steps: int,
    lr: float,
    seed: int,
    root: Path | None = None,
    every: int = 250,
) -> list[float]:
    """Train the parameters of `modules` for `steps` steps; returns the per-step losses."""
    params = [p for m in modules.values() for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    losses: list[float] = []
    start = 0
    latest = ckpt.latest_checkpoint(root) if root is not None else None
    if latest is not None:
        state = ckpt.load_tree(latest, "train")
        for name, module in modules.items():
            module.load_state_dict(state["models"][name])
        opt.load_state_dict(state["optimizer"])
        start, losses = int(state["step"]), list(state["losses"])
    for m in modules.values():
        m.train()
    for step in range(start, steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr)
        loss = loss_at(step, torch.Generator().manual_seed(seed * 1_000_003 + step))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        done = step + 1
        if root is not None and (done % every == 0 and done < steps):
            tree = {
                "models": {k: m.state_dict() for k, m in modules.items()},
                "optimizer": opt.state_dict(),
                "step": done,
                "losses": losses,
            }
            with ckpt.writing(ckpt.step_dir(root, done)) as tmp:
                ckpt.save_tree(tmp, "train", tree)
            ckpt.prune(root, 1)
    for m in modules.values():
        m.eval()
    return losses


def cache_key(kind: str, key: dict[str, Any]) -> str:
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return f"{kind}-{digest}"


def cached(root: Path, kind: str, key: dict[str, Any], build: Callable[[], Any]) -> Any:
    """`build()`'s tree, computed once per (kind, key) under `root` and reloaded after."""
    root.mkdir(parents=True, exist_ok=True)
    name = cache_key(kind, key)
    folder = root / name
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not (folder / "tree.json").is_file():
                tree = build()
                with ckpt.writing(folder) as tmp:
                    ckpt.save_tree(tmp, "tree", tree)
                    (tmp / "key.json").write_text(json.dumps(key, indent=1, sort_keys=True))
                return tree
            return ckpt.load_tree(folder, "tree")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
