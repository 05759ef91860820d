"""Memory and FLOPs of the wrapped layers: analytic counts and two measurements.

Analytic (float32, per wrapped layer, one training step of batch B, N tokens, W ∈ R^{OxI}):
- stored activations: B·N·I (vanilla, WSI) vs K1·K2·K3 + B·K1 + N·K2 + I·K3 (ASI, WASI);
- weights: O·I (vanilla, ASI); O·I + k(O + I) for WSI / WASI with the paper's `full` rule
  (the trained W plus the L, R the forward uses); k(O + I) with the `factors` rule;
- MACs: forward, input gradient, weight gradient, compression (power iterations, core,
  weight subspace iteration), following `CompressedLinear.backward`'s contraction order.

Measured:
- `saved_tensor_bytes`: every tensor autograd saves for backward during one training
  forward, caught by `torch.autograd.graph.saved_tensors_hooks`, deduplicated by storage,
  parameters excluded, attributed to the module whose forward saved it;
- `saved_tensor_bytes` covers the whole model: every op's saved tensors (linear inputs,
  GELU inputs, LayerNorm inputs and statistics, attention's q, k, v, output and
  log-sum-exp, softmax / cross-entropy outputs...), measured on a large batch (`mem_batch`)
  where activations dominate memory;
- `peak_rss_probe`: peak resident memory of a fresh Python process per setting that loads
  the base, builds the setting and trains `steps` steps on that batch (VmHWM after a reset
  through /proc/self/clear_refs, minus VmRSS before the first step), so settings' peaks
  never mix. It is whole-process memory: gradients, optimiser state, allocator slack and
  temporaries included.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

BYTES = 4  # float32


def activation_elements(b: int, n: int, i: int, ranks: tuple[int, int, int] | None) -> int:
    """Elements a wrapped layer stores for backward: X itself, or S and U1, U2, U3."""
    if ranks is None:
        return b * n * i
    k1, k2, k3 = min(ranks[0], b), min(ranks[1], n), min(ranks[2], i)  # a mode's rank ≤ its size
    return k1 * k2 * k3 + b * k1 + n * k2 + i * k3


def weight_elements(o: int, i: int, rank: int | None, full: bool = False) -> int:
    """Weight elements held (bias excluded): O·I dense, k(O + I) factored, and O·I + k(O + I)
    with the `full` rule (trained W plus the forward's L, R)."""
    if rank is None:
        return o * i
    return rank * (o + i) + (o * i if full else 0)


def layer_macs(
    b: int,
    n: int,
    i: int,
    o: int,
    rank: int | None,
    ranks: tuple[int, int, int] | None,
    full: bool = False,
) -> dict[str, int]:
    """Forward and training MACs of one wrapped layer for one step (rank None: dense W,
    ranks None: activations stored as they are; `full`: the paper's rule, a W-shaped
    gradient and the subspace iteration on the full W)."""
    t = b * n
    fwd = t * i * o if rank is None else t * rank * (i + o)
    grad_x = fwd
    dense_grad = rank is None or full
    if ranks is None:
        grad_w = t * i * o if dense_grad else 2 * t * rank * (i + o)
        compress = 0
    else:
        k1, k2, k3 = ranks
        core_grad = t * o * k1 + n * k1 * o * k2 + o * k1 * k2 * k3
        grad_w = core_grad + (o * k3 * i if dense_grad else 2 * rank * k3 * (i + o))
        power = sum(2 * t * i * k + 2 * d * k * k for d, k in zip((b, n, i), ranks, strict=True))
        compress = power + t * i * k3 + b * n * k3 * k2 + b * k2 * k3 * k1
    if rank is not None and full:  # q = Wᵀ L, W q, QR, R = Lᵀ W
        compress += 3 * o * i * rank + 2 * o * rank * rank
    elif rank is not None:
        compress += (4 * o + 3 * i) * rank * rank  # weight subspace iteration on L R
    return {"forward": fwd, "train": fwd + grad_x + grad_w + compress}


def saved_tensor_bytes(
    model: nn.Module, forward: Callable[[], torch.Tensor], modules: dict[str, nn.Module]
) -> tuple[int, dict[str, int]]:
    """Bytes autograd saves for backward in `forward()` (whole model, and per named module).

    A storage counts once, for the innermost named module running when it was first saved;
    parameters and buffers are not activations and are skipped.
    """
    skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen: dict[int, tuple[str | None, int]] = {}
    stack: list[str] = []
    handles = []

    def leave(module: nn.Module, args: Any, out: Any) -> None:
        stack.pop()

    for name, module in modules.items():
        handles.append(module.register_forward_pre_hook(lambda m, a, name=name: stack.append(name)))
        handles.append(module.register_forward_hook(leave))

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in skip and ptr not in seen:
            seen[ptr] = (stack[-1] if stack else None, storage.nbytes())
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            forward()
    finally:
        for h in handles:
            h.remove()
    per_module = {name: 0 for name in modules}
    for owner, nbytes in seen.values():
        if owner is not None:
            per_module[owner] += nbytes
    return sum(n for _, n in seen.values()), per_module


def saved_bytes_by_type(
    model: nn.Module, forward: Callable[[], torch.Tensor]
) -> tuple[int, dict[str, int]]:
    """`saved_tensor_bytes` of the whole model grouped by the class of the innermost module
    that saved each storage (`Attention`, `LayerNorm`, `GELU`, `Linear`, `WASILinear`, ...);
    what runs outside every submodule (patch embedding, the loss) is grouped as `other`."""
    modules = {name: m for name, m in model.named_modules() if name}
    total, per_module = saved_tensor_bytes(model, forward, modules)
    by_type: dict[str, int] = {}
    for name, nbytes in per_module.items():
        if nbytes:
            kind = type(modules[name]).__name__
            by_type[kind] = by_type.get(kind, 0) + nbytes
    by_type["other"] = total - sum(by_type.values())
    return total, by_type


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> bool:
    """Reset VmHWM (Linux ≥ 4.0); False where the kernel refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_probe(request: dict[str, Any], timeout: float = 300) -> dict[str, float]:
    """Run `python -m rayworks.pipelines.wasi.memory REQUEST` and return its JSON answer."""
    proc = subprocess.run(
        [sys.executable, "-m", "rayworks.pipelines.wasi.memory", json.dumps(request)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"RSS probe failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _probe(request: dict[str, Any]) -> dict[str, float]:
    """Child side: build the setting, train `steps` steps on the `mem_batch` probe batch with
    the setting's optimiser (SGD with momentum: its buffers are part of the peak), report the
    peak RSS increase."""
    from rayworks.models.vit_train import make_optimizer
    from rayworks.pipelines.wasi.config import WASIConfig
    from rayworks.pipelines.wasi.finetune import SettingSpec, build_model, probe_batch

    torch.set_num_threads(1)
    cfg = WASIConfig.model_validate(request["config"])
    spec = SettingSpec(**request["setting"])
    model, params, layers = build_model(Path(request["base"]), spec, cfg, cfg.seed)
    for name, ranks in request.get("act_ranks", {}).items():  # the ranks training measured
        layers[name].compressor.ranks = tuple(ranks)
    x, y = probe_batch(cfg)
    train_cfg = cfg.finetune.model_copy(update={"lr": request.get("lr", cfg.finetune.lr)})
    opt = make_optimizer([p for p in params if p.requires_grad], train_cfg)
    model.train()
    base_kb = _status_kb("VmRSS")
    reset = _reset_peak()
    for _ in range(request["steps"]):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    peak_kb = _status_kb("VmHWM")
    return {
        "rss_base_mb": base_kb / 1024,
        "rss_peak_mb": peak_kb / 1024,
        "rss_train_mb": (peak_kb - base_kb) / 1024,
        "rss_peak_reset": float(reset),
    }


if __name__ == "__main__":
    print(json.dumps(_probe(json.loads(sys.argv[1]))))
