"""Size and speed of a model: parameters, MACs per image and CPU latency per 1000 images.

Latency is wall-clock and noisy on a shared machine, so models are timed interleaved in
the same process (one warm-up pass, then `reps` rounds over all models, median kept) and
reported as ratios to the base measured in the same run.
"""

from __future__ import annotations

import statistics
import time

import torch

from rayworks.models.vit import ViT, n_params, vit_macs
from rayworks.pipelines.vulcan.config import LatencyConfig


def size_of(model: ViT) -> dict[str, float]:
    return {"params": float(n_params(model)), "macs": float(vit_macs(model.spec))}


@torch.inference_mode()
def _one_pass(model: ViT, images: torch.Tensor, batch_size: int) -> float:
    start = time.perf_counter()
    for i in range(0, images.shape[0], batch_size):
        model(images[i : i + batch_size])
    return time.perf_counter() - start


def latency_ms(
    models: dict[str, ViT], images: torch.Tensor, cfg: LatencyConfig
) -> dict[str, float]:
    """Median milliseconds per 1000 images for each model (empty when `reps` is 0)."""
    if not cfg.reps:
        return {}
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    reps = max(1, -(-cfg.images // images.shape[0]))
    batch = images.repeat(reps, 1, 1, 1)[: cfg.images]
    times: dict[str, list[float]] = {name: [] for name in models}
    try:
        for model in models.values():
            model.eval()
            _one_pass(model, batch[: cfg.batch_size], cfg.batch_size)
        for _ in range(cfg.reps):
            for name, model in models.items():
                times[name].append(_one_pass(model, batch, cfg.batch_size))
    finally:
        torch.set_num_threads(threads)
    return {name: statistics.median(t) * 1000 * 1000 / cfg.images for name, t in times.items()}
