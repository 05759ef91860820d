"""One fine-tuning setting (vanilla, WASI at one ε, WSI, ASI or LoRA) and its measurements.

Every setting loads the same cached base, gets a fresh 5-way head from the same seed and
trains through `train_classifier` (the shared data pipeline and loop); only the model
surgery and the parameter list differ. Each returns one flat record for the table.
"""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rayworks.data.digits import Digits, load_digits_splits
from rayworks.models.vit import ViT, load_vit, vit_macs
from rayworks.models.vit_train import accuracy, train_classifier
from rayworks.pipelines.wasi.config import Setting, UpdateRule, WASIConfig
from rayworks.pipelines.wasi.lora import apply_lora
from rayworks.pipelines.wasi.memory import (
    BYTES,
    activation_elements,
    layer_macs,
    peak_rss_probe,
    saved_bytes_by_type,
    saved_tensor_bytes,
    weight_elements,
)
from rayworks.pipelines.wasi.wasi_linear import WASILinear, target_modules, wrap_model


@dataclass(frozen=True)
class SettingSpec:
    """One row of the table: `kind`, for WASI / WSI the truncation threshold ε, and the
    weight rule `update` (full: the paper's; factors: L, R trained directly)."""

    kind: Setting
    eps: float | None = None
    update: UpdateRule = "full"

    @property
    def variant(self) -> str:
        """The `WASILinear` variant (wasi_factors is WASI with the factors rule)."""
        return "wasi" if self.kind == "wasi_factors" else self.kind

    @property
    def label(self) -> str:
        name = self.variant
        if self.update == "factors" and self.variant in ("wasi", "wsi"):
            name += "_factors"
        return name if self.eps is None else f"{name}_e{round(self.eps * 100):02d}"


def plan_settings(cfg: WASIConfig) -> list[SettingSpec]:
    """The settings of a run, in `cfg.settings` order (wasi expands over `eps_list`)."""
    out: list[SettingSpec] = []
    for kind in cfg.settings:
        if kind == "wasi":
            out += [SettingSpec("wasi", e, cfg.update) for e in cfg.eps_list]
        elif kind == "wasi_factors":
            out += [SettingSpec("wasi_factors", e, "factors") for e in cfg.eps_list]
        elif kind == "wsi":
            out.append(SettingSpec("wsi", cfg.ablation_eps, cfg.update))
        else:
            out.append(SettingSpec(kind))
    return out


def build_model(
    base: Path, spec: SettingSpec, cfg: WASIConfig, seed: int
) -> tuple[ViT, list[nn.Parameter], dict[str, nn.Module]]:
    """The base with a new head and `spec`'s surgery: (model, trainable params, wrapped
    layers by name)."""
    model = load_vit(base)
    torch.manual_seed(seed)
    model.head = nn.Linear(model.spec.d_model, len(cfg.target_classes))
    if spec.variant in ("wasi", "wsi", "asi"):
        wrap_model(
            model,
            spec.variant,  # type: ignore[arg-type]
            cfg.targets,
            spec.eps or 1.0,
            cfg.act_energy,
            seed,
            spec.update,
        )
    params = list(model.parameters())
    if spec.kind == "lora":
        params = apply_lora(model, cfg.targets, cfg.lora_rank, cfg.lora_alpha, seed)
    names = [f"{i}.{n}" for i in range(len(model.blocks)) for n in cfg.targets]
    layers = [getattr(p, n) for p, n in target_modules(model, cfg.targets)]
    return model, params, dict(zip(names, layers, strict=True))


def load_target_data(cfg: WASIConfig) -> Digits:
    return load_digits_splits(cfg.data).subset(cfg.target_classes)


def probe_batch(cfg: WASIConfig, data: Digits | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`mem_batch` training images (no augmentation; the training split repeated in order
    when it is smaller): the fixed batch of the memory measurements."""
    split = (data or load_target_data(cfg)).train
    index = torch.arange(cfg.mem_batch) % len(split)
    return split.x[index], split.y[index]


def setting_lr(cfg: WASIConfig, spec: SettingSpec) -> float:
    """The setting's peak learning rate: `setting_lr[kind]`, else `finetune.lr`."""
    return cfg.setting_lr.get(spec.kind, cfg.finetune.lr)


def _layer_dims(layer: nn.Module) -> tuple[int, int]:
    """(I, O) of a wrapped, LoRA or plain linear layer."""
    base = getattr(layer, "base", layer)
    return base.in_features, base.out_features


def analytic_costs(
    model: ViT, layers: dict[str, nn.Module], spec: SettingSpec, cfg: WASIConfig, b: int
) -> dict[str, Any]:
    """Analytic bytes and MACs per wrapped layer and for the whole model (one step)."""
    n = model.spec.n_patches + 1
    rows, wrapped_fwd_dense, dense_act = [], 0, 0
    for name, layer in layers.items():
        i, o = _layer_dims(layer)
        wrapped = isinstance(layer, WASILinear) and layer.mode != "dense"
        rank = layer.rank if wrapped else None
        full = wrapped and layer.mode == "full"
        comp = getattr(layer, "compressor", None)
        ranks = comp.ranks if comp is not None else None
        macs = layer_macs(b, n, i, o, rank, ranks, full)
        if spec.kind == "lora":  # adapter forward, input and adapter-weight gradients
            extra = b * n * cfg.lora_rank * (i + o)
            macs = {"forward": macs["forward"] + extra, "train": 2 * macs["forward"] + 4 * extra}
        rows.append(
            {
                "layer": name,
                "in": i,
                "out": o,
                "weight_rank": rank,
                "act_ranks": list(ranks) if ranks else None,
                "act_bytes": BYTES * activation_elements(b, n, i, ranks),
                "weight_bytes": BYTES * weight_elements(o, i, rank, full),
                "fwd_macs": macs["forward"],
                "train_macs": macs["train"],
            }
        )
        wrapped_fwd_dense += b * n * i * o
        dense_act += BYTES * b * n * i
    rest_fwd = b * vit_macs(model.spec) - wrapped_fwd_dense
    rest_train = (2 if spec.kind == "lora" else 3) * rest_fwd  # LoRA: no frozen-weight grads
    return {
        "layers": rows,
        "act_bytes_per_layer": sum(r["act_bytes"] for r in rows) / len(rows),
        "act_bytes_dense_per_layer": dense_act / len(rows),
        "weight_bytes_per_layer": sum(r["weight_bytes"] for r in rows) / len(rows),
        "fwd_macs_wrapped": sum(r["fwd_macs"] for r in rows),
        "fwd_macs_wrapped_dense": wrapped_fwd_dense,
        "train_macs_wrapped": sum(r["train_macs"] for r in rows),
        "infer_macs_per_image": (rest_fwd + sum(r["fwd_macs"] for r in rows)) / b,
        "train_macs_per_step": rest_train + sum(r["train_macs"] for r in rows),
    }


def _latency_ms(model: nn.Module, x: torch.Tensor, reps: int) -> float:
    model.eval()
    times = []
    with torch.no_grad():
        for _ in range(reps):
            start = time.perf_counter()
            model(x)
            times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def run_setting(
    base: Path,
    spec: SettingSpec,
    cfg: WASIConfig,
    data: Digits,
    seed: int,
    on_step: Any = None,
) -> dict[str, Any]:
    """Fine-tune one setting and measure it; returns the table row."""
    model, params, layers = build_model(base, spec, cfg, seed)
    lr = setting_lr(cfg, spec)
    train_cfg = cfg.finetune.model_copy(update={"seed": seed, "lr": lr})
    cpu, wall = [time.process_time()], [time.perf_counter()]

    def step_hook(step: int, loss: float) -> None:
        cpu.append(time.process_time())
        wall.append(time.perf_counter())
        if on_step is not None:
            on_step(step, loss)

    metrics = train_classifier(model, data, train_cfg, params=params, on_step=step_hook)
    cpu_steps = [b - a for a, b in itertools.pairwise(cpu)]  # median: robust to the
    wall_steps = [b - a for a, b in itertools.pairwise(wall)]  # first step's setup
    row: dict[str, Any] = {
        "setting": spec.label,
        "kind": spec.kind,
        "eps": spec.eps,
        "update": spec.update if spec.variant in ("wasi", "wsi") else None,
        "lr": lr,
        "val_accuracy": metrics["val_accuracy"],
        "test_accuracy": accuracy(model, data.test),
        "train_loss": metrics["train_loss"],
        "steps": metrics["steps"],
        "cpu_s_per_step": statistics.median(cpu_steps),
        "wall_s_per_step": statistics.median(wall_steps),
        "trainable_params": sum(p.numel() for p in params),
        "infer_ms": _latency_ms(model, data.test.x[: cfg.finetune.batch_size], cfg.latency_reps),
    }
    row.update(analytic_costs(model, layers, spec, cfg, cfg.finetune.batch_size))
    x, y = probe_batch(cfg, data)  # memory: the large probe batch, analytic and measured
    mem = analytic_costs(model, layers, spec, cfg, len(y))
    for key in ("act_bytes_per_layer", "act_bytes_dense_per_layer"):
        row[key] = mem[key]
    for layer_row, mem_row in zip(row["layers"], mem["layers"], strict=True):
        layer_row["act_bytes"] = mem_row["act_bytes"]
    row["mem_batch"] = len(y)
    model.train()  # after evaluation: the refresh is one more projection, ranks are fixed
    total, per_layer = saved_tensor_bytes(
        model, lambda: nn.functional.cross_entropy(model(x), y), layers
    )
    _, by_type = saved_bytes_by_type(model, lambda: nn.functional.cross_entropy(model(x), y))
    model.eval()
    row["saved_bytes_total"] = total
    row["saved_bytes_per_layer"] = sum(per_layer.values()) / len(per_layer)
    row["saved_bytes_wrapped"] = sum(per_layer.values())
    row["saved_bytes_by_type"] = by_type
    for layer_row in row["layers"]:
        layer_row["saved_bytes"] = per_layer[layer_row["layer"]]
    if cfg.measure_rss:
        request = {
            "base": str(base),
            "setting": asdict(spec),
            "steps": cfg.rss_steps,
            "lr": lr,
            "act_ranks": {
                name: list(comp.ranks)
                for name, layer in layers.items()
                if (comp := getattr(layer, "compressor", None)) is not None and comp.ranks
            },
            "config": {**cfg.model_dump(mode="json"), "seed": seed},
        }
        row.update(peak_rss_probe(request))
    return row
