"""WASI linear layers: factored weights (WSI), Tucker-compressed activations (ASI), or both.

`CompressedLinear` is the custom autograd function of one wrapped layer (forward and
backward as in `main/custom_op/linear/linear_WASI.py` of the reference code
`Le-TrungNguyen/ICLR2026-WASI`; `docs/wasi.md`):
- forward: y = (x Rᵀ) Lᵀ + b with factored weights (k(I + O) MACs per token), or x Wᵀ + b;
- saved for backward: the Tucker core S [K1, K2, K3] and factors U1 [B, K1], U2 [N, K2],
  U3 [I, K3] when activations are compressed, else the input x itself;
- backward: ∂loss/∂x = (g L) R (or g W); ∂loss/∂b = Σ g; the weight gradient from the
  compressed form, ∇W = D U3ᵀ with D from `compressed_grad_core` (algorithm step 4).

Two weight update rules (`update`):
- `full` (the paper's rule, default): W ∈ R^{OxI} is the trained parameter and L, R are
  buffers. The backward returns the W-shaped gradient ∇W, the optimiser steps on W, and the
  next training forward projects W back to rank k with one warm-started subspace
  iteration (q = Wᵀ L_prev, L ← QR(W q), R ← Lᵀ W; step 5). Weight memory is O·I (plus the
  optimiser state on W) and k(O + I) for L, R, as in the authors' implementation.
- `factors` (our earlier variant, kept for comparison): L and R are the parameters and no
  full W exists; the backward returns ∂L = ∇W Rᵀ = D (R U3)ᵀ and ∂R = Lᵀ ∇W = (Lᵀ D) U3ᵀ
  without building an [O, I] tensor, and the per-step iteration on W = L R only
  re-orthonormalises L (L' R' = L R): the subspace moves through the gradient on L.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import Tensor, nn

from rayworks.pipelines.wasi.subspace import (
    compressed_grad_core,
    init_weight_factors,
    mode_ranks,
    power_iteration,
    tucker_core,
    weight_projection_iteration,
    weight_subspace_iteration,
)

Variant = Literal["wasi", "wsi", "asi"]
UpdateRule = Literal["full", "factors"]
UpdateMode = Literal["dense", "factors", "full"]
Target = Literal["fc1", "fc2", "q", "k", "v", "o"]


class ActivationCompressor:
    """Per-layer state of the activation Tucker factors (ranks fixed at the first call).

    The first call measures (K1, K2, K3) by explained variance `energy` (reconstructed rule)
    and starts every factor from a Gaussian of generator `seed`; later calls warm-start from
    the previous factors. A mode whose size changed (the last, smaller batch of an epoch)
    restarts from a fresh Gaussian, with its rank clipped to the new size.
    """

    def __init__(self, energy: float, seed: int) -> None:
        self.energy = energy
        self.gen = torch.Generator().manual_seed(seed)
        self.ranks: tuple[int, int, int] | None = None
        self.factors: list[Tensor | None] = [None, None, None]

    @torch.no_grad()
    def compress(self, x: Tensor) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor]]:
        """x [B, N, I] -> core [K1, K2, K3], factors (U1 [B, K1], U2 [N, K2], U3 [I, K3])."""
        if x.dim() != 3:
            raise ValueError(f"activation compression needs [B, N, I] inputs, got {tuple(x.shape)}")
        if self.ranks is None:
            self.ranks = mode_ranks(x, self.energy)
        new = []
        for mode, rank in enumerate(self.ranks):
            size, prev = x.shape[mode], self.factors[mode]
            if prev is None or prev.shape[0] != size:
                prev = torch.randn(size, min(rank, size), generator=self.gen, dtype=x.dtype)
            new.append(power_iteration(x, mode, prev))
        self.factors = list(new)
        factors = (new[0], new[1], new[2])
        return tucker_core(x, factors), factors


class CompressedLinear(torch.autograd.Function):
    """y = x Wᵀ + b; `mode` says which tensors `weights` holds and which get gradients:
    `dense` (W,), `factors` (L, R) -> ∂L, ∂R, `full` (W, L, R): forward with L R, ∂W only."""

    @staticmethod
    def forward(
        ctx: Any,
        x: Tensor,
        bias: Tensor | None,
        compressor: ActivationCompressor | None,
        mode: UpdateMode,
        *weights: Tensor,
    ) -> Tensor:
        used = weights[1:] if mode == "full" else weights  # (L, R) or (W,)
        out = x @ used[1].T @ used[0].T if len(used) == 2 else x @ used[0].T
        if bias is not None:
            out = out + bias
        ctx.mode, ctx.compressed = mode, compressor is not None
        ctx.has_bias = bias is not None
        if compressor is not None:
            core, factors = compressor.compress(x.detach())
            ctx.save_for_backward(*used, core, *factors)
        else:
            ctx.save_for_backward(*used, x)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        saved = ctx.saved_tensors
        n_w = 1 if ctx.mode == "dense" else 2
        weights, rest = saved[:n_w], saved[n_w:]
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = (grad_out @ weights[0]) @ weights[1] if n_w == 2 else grad_out @ weights[0]
        grad_b = grad_out.sum(dim=tuple(range(grad_out.dim() - 1))) if ctx.has_bias else None
        if ctx.compressed:
            core, factors = rest[0], (rest[1], rest[2], rest[3])
            d = compressed_grad_core(grad_out, core, factors)  # [O, K3]
            u3 = factors[2]
            if ctx.mode == "factors":
                left, right = weights
                grad_w: tuple[Tensor | None, ...] = (d @ (right @ u3).T, (left.T @ d) @ u3.T)
            else:
                grad_w = (d @ u3.T,)
        else:
            x = rest[0]
            g2, x2 = grad_out.reshape(-1, grad_out.shape[-1]), x.reshape(-1, x.shape[-1])
            if ctx.mode == "factors":
                left, right = weights
                grad_w = (g2.T @ (x2 @ right.T), (g2 @ left).T @ x2)
            else:
                grad_w = (g2.T @ x2,)
        if ctx.mode == "full":  # the gradient goes to W; the buffers L, R get none
            grad_w = (*grad_w, None, None)
        return (grad_x, grad_b, None, None, *grad_w)


class WASILinear(nn.Module):
    """A wrapped `nn.Linear`: variant `wasi` (both), `wsi` (weights only), `asi` (activations only).

    `eps` is the weight truncation threshold (share of σ² energy kept), `act_energy` the
    per-mode explained variance of the activation ranks, `update` the weight rule of the
    factored variants (`full`: the paper's full W projected to rank k every step;
    `factors`: L, R trained directly).
    """

    def __init__(
        self,
        linear: nn.Linear,
        variant: Variant,
        eps: float,
        act_energy: float,
        seed: int,
        update: UpdateRule = "full",
    ) -> None:
        super().__init__()
        if variant not in ("wasi", "wsi", "asi"):
            raise ValueError(f"variant={variant!r}; allowed: wasi, wsi, asi")
        if update not in ("full", "factors"):
            raise ValueError(f"update={update!r}; allowed: full, factors")
        self.variant = variant
        self.mode: UpdateMode = "dense" if variant == "asi" else update
        self.in_features, self.out_features = linear.in_features, linear.out_features
        w = linear.weight.detach()
        if self.mode in ("dense", "full"):
            self.weight = nn.Parameter(w.clone())
        if self.mode != "dense":
            left, right = init_weight_factors(w, eps)  # step 1
            if self.mode == "factors":
                self.left, self.right = nn.Parameter(left), nn.Parameter(right)
            else:
                self.register_buffer("left", left)
                self.register_buffer("right", right)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone())
        self.compressor = ActivationCompressor(act_energy, seed) if variant != "wsi" else None

    @property
    def rank(self) -> int:
        """Weight rank k (min(O, I) for the dense `asi` variant)."""
        return self.left.shape[1] if self.mode != "dense" else min(self.weight.shape)

    def weights(self) -> tuple[Tensor, ...]:
        """What `CompressedLinear` gets: (W,), (L, R) or (W, L, R) for mode dense / factors /
        full."""
        if self.mode == "dense":
            return (self.weight,)
        if self.mode == "factors":
            return (self.left, self.right)
        return (self.weight, self.left, self.right)

    def dense_weight(self) -> Tensor:
        """The weight the forward uses: W (dense) or L R."""
        return self.weight if self.mode == "dense" else self.left @ self.right

    def forward(self, x: Tensor) -> Tensor:
        if self.training and torch.is_grad_enabled():
            if self.mode != "dense":
                self.refresh()
            return CompressedLinear.apply(x, self.bias, self.compressor, self.mode, *self.weights())
        if self.mode == "dense":  # inference: the plain layer
            return nn.functional.linear(x, self.weight, self.bias)
        out = x @ self.right.T @ self.left.T  # inference: k(I + O) MACs per token
        return out if self.bias is None else out + self.bias

    @torch.no_grad()
    def refresh(self) -> None:
        """Step 5, in place: project the full W to rank k warm-started from L (`full`), or
        re-orthonormalise W = L R (`factors`)."""
        if self.mode == "full":
            left, right = weight_projection_iteration(self.weight, self.left)
        else:
            left, right = weight_subspace_iteration(self.left, self.right)
        self.left.copy_(left)
        self.right.copy_(right)

    def extra_repr(self) -> str:
        return (
            f"{self.in_features}->{self.out_features}, variant={self.variant}, "
            f"update={self.mode}, rank={self.rank}"
        )


def target_modules(model: nn.Module, targets: Sequence[str]) -> list[tuple[nn.Module, str]]:
    """(parent, attribute) of every linear layer named in `targets` in each ViT block."""
    found = []
    for block in model.blocks:
        for name in targets:
            parent = block.attn if name in ("q", "k", "v", "o") else block
            if not isinstance(getattr(parent, name, None), nn.Module):
                raise ValueError(f"targets: block has no layer {name!r}")
            found.append((parent, name))
    return found


def wrap_model(
    model: nn.Module,
    variant: Variant,
    targets: Sequence[str],
    eps: float,
    act_energy: float,
    seed: int,
    update: UpdateRule = "full",
) -> list[WASILinear]:
    """Replace the target linears of every block by `WASILinear` (in place); return them."""
    wrapped = []
    for i, (parent, name) in enumerate(target_modules(model, targets)):
        layer = WASILinear(getattr(parent, name), variant, eps, act_energy, seed + 1000 + i, update)
        setattr(parent, name, layer)
        wrapped.append(layer)
    return wrapped
