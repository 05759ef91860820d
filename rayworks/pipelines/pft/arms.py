"""The pieces of a `pft` run that `fan_out` sends to Ray tasks (pure functions of their
arguments; no Ray here):

- `target_piece(cfg, replicate, t)`: every requested arm adapted on target subject t's
  neutral frames and scored on its test frames. Its first step, `prepare_piece`, finds (or
  builds) the replicate's source model (step 1) and, when a PFT arm runs, the
  source-pre-trained translator (steps 2-3): both are built once under `cache_root`
  (safetensors, file lock) so every piece, arm and ablation of one bench shares them. The
  pipeline orders pieces replicate-first, so the first pieces build different replicates
  side by side and later ones only load.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from rayworks.core.build_cache import locked_build, settings_digest
from rayworks.pipelines.pft import baselines
from rayworks.pipelines.pft.evaluate import scores
from rayworks.pipelines.pft.model import SourceModel, cached_source, train_source
from rayworks.pipelines.pft.pft import (
    Translator,
    adapt_translator,
    load_translator,
    pft_logits,
    pretrain_translator,
    translator_state,
)
from rayworks.pipelines.pft.subjects import source_frames, target_subject


def replicate_seed(seed: int, replicate: int) -> int:
    """Training seed of replicate r of run seed s: 1000·s + r (disjoint across bench seeds)."""
    return 1000 * seed + replicate


TARGET_ONLY = (
    "bias_range",
    "n_target_subjects",
    "adapt_frames",
    "test_frames_per_class",
    "split",
    "n_val_subjects",
)


def _source_key(cfg: dict[str, Any], replicate: int) -> dict[str, Any]:
    """What determines the source frames and weights (target-only data keys left out, so
    e.g. a bias-range ablation reuses the same source model)."""
    data = {k: v for k, v in cfg["data"].items() if k not in TARGET_ONLY}
    return {"data": data, "source": cfg["source"], "seed": replicate_seed(cfg["seed"], replicate)}


def source_model(cfg: dict[str, Any], replicate: int, cache_root: Path) -> tuple[SourceModel, Any]:
    """The cached source model of this replicate (trained on the first call)."""
    k = len(cfg["data"]["classes"])

    def fit() -> tuple[SourceModel, dict[str, Any]]:
        frames, _ = source_frames(cfg["data"])
        start = time.perf_counter()
        model, losses = train_source(
            frames.x, frames.y, cfg["source"], k, replicate_seed(cfg["seed"], replicate)
        )
        with torch.no_grad():
            acc = float((model(torch.from_numpy(frames.x)).argmax(1).numpy() == frames.y).mean())
        return model, {
            "source_train_loss": losses[-1],
            "source_train_accuracy": acc,
            "source_seconds": time.perf_counter() - start,
        }

    return cached_source(cache_root, _source_key(cfg, replicate), fit, cfg["source"], k)


def pretrained_translator(
    cfg: dict[str, Any], replicate: int, cache_root: Path, model: SourceModel
) -> tuple[Translator, dict[str, Any]]:
    """The cached source-pre-trained translator of this replicate and `pft` config."""
    key = {**_source_key(cfg, replicate), "pft": cfg["pft"]}
    folder = cache_root / "pft_translator" / settings_digest(key)
    weights, meta = folder / "translator.safetensors", folder / "info.json"

    def build() -> None:
        frames, subject = source_frames(cfg["data"])
        start = time.perf_counter()
        T, history = pretrain_translator(
            model,
            frames.x,
            frames.y,
            subject,
            cfg["pft"],
            cfg["source"]["batch_size"],
            replicate_seed(cfg["seed"], replicate),
        )
        folder.mkdir(parents=True, exist_ok=True)
        save_file(translator_state(T), str(weights))
        last = history[-1] if history else {}
        meta.write_text(
            json.dumps(
                {
                    **{f"pretrain_{k}": v for k, v in last.items()},
                    "pretrain_seconds": time.perf_counter() - start,
                }
            )
        )

    locked_build(folder, meta, build)
    return load_translator(model, load_file(str(weights)), cfg["pft"]), json.loads(meta.read_text())


def prepare_piece(cfg: dict[str, Any], replicate: int, cache_root: str) -> dict[str, Any]:
    """Build (or find) the replicate's source model and, for PFT arms, its translator."""
    root = Path(cache_root)
    model, info = source_model(cfg, replicate, root)
    if "pft" in [cfg["arm"], *cfg["compare"]]:
        info = {**info, **pretrained_translator(cfg, replicate, root, model)[1]}
    return {"replicate": replicate, **info}


def _n_trainable(params: Any) -> int:
    return int(sum(p.numel() for p in params))


def _adapt(
    arm: str,
    model: SourceModel,
    target: Any,
    cfg: dict[str, Any],
    replicate: int,
    root: Path,
    seed: int,
) -> tuple[Any, int]:
    """Adapt one arm; returns (predict function x -> logits, adapted parameter count)."""
    x, adapt = target.adapt.x, cfg["adapt"]
    if arm == "source":
        return model, 0
    if arm == "adabn":
        return baselines.adabn(model, x), 0
    if arm == "tent":
        adapted = baselines.tent(model, x, adapt, seed)
        bn = [p for m in adapted.modules() if isinstance(m, baselines.BN) for p in m.parameters()]
        return adapted, _n_trainable(bn)
    if arm == "shot":
        adapted = baselines.shot(model, x, adapt, seed)
        return adapted, _n_trainable([*adapted.F.parameters(), *adapted.B.parameters()])
    if arm == "neutral_ce":
        adapted = baselines.neutral_ce(model, x, adapt, seed)
        return adapted, _n_trainable(adapted.C.parameters())
    if arm == "oracle":
        adapted = baselines.oracle(model, target.oracle.x, target.oracle.y, adapt, seed)
        return adapted, _n_trainable(adapted.parameters())
    T0, _ = pretrained_translator(cfg, replicate, root, model)
    T = adapt_translator(model, T0, x, cfg["pft"], adapt, seed)
    return (lambda xt: pft_logits(model, T, xt)), _n_trainable(
        p for p in T.parameters() if p.requires_grad
    )


def target_piece(cfg: dict[str, Any], replicate: int, t: int, cache_root: str) -> dict[str, Any]:
    """Every arm of the run on target subject t: scores on its test frames and, for the
    neutral-frame diagnostic, the share of its adaptation frames predicted neutral."""
    root = Path(cache_root)
    info = prepare_piece(cfg, replicate, cache_root)
    model, _ = source_model(cfg, replicate, root)
    target = target_subject(cfg["data"], t, cfg["adapt"]["oracle_frames_per_class"])
    k = len(cfg["data"]["classes"])
    seed = replicate_seed(cfg["seed"], replicate) * 100 + t + 1
    rows = []
    for arm in [cfg["arm"], *cfg["compare"]]:
        start = time.perf_counter()
        predict, n_params = _adapt(arm, model, target, cfg, replicate, root, seed)
        seconds = time.perf_counter() - start
        with torch.no_grad():
            pred = predict(torch.from_numpy(target.test.x)).argmax(1).numpy()
            adapt_pred = predict(torch.from_numpy(target.adapt.x)).argmax(1).numpy()
        rows.append(
            {
                "arm": arm,
                "subject": t,
                "replicate": replicate,
                **scores(target.test.y, pred, k),
                "adapt_predicted_neutral": float(np.mean(adapt_pred == 0)),
                "adapt_seconds": seconds,
                "adapted_params": n_params,
                "resting_bias": target.style.bias,
            }
        )
    return {"replicate": replicate, "subject": t, "rows": rows, "prepare": info}
