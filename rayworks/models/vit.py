"""A tiny Vision Transformer (patch embedding, class token, pre-norm blocks), saved like the LMs.

Every block's widths are explicit per layer (`ffn_dims`, `qk_dims`, `vo_dims`) so a pruned
model (fewer FFN neurons, a lower per-head rank of W_Q W_Kᵀ or W_V W_O) is the same class
with a smaller spec, and saves and reloads as such. `save_vit` writes `config.json` (the
spec) and `model.safetensors`; `load_vit` reads them back, never unpickling anything.

Layout per block (pre-norm, as in ViT/DeiT): x + Attn(LN(x)), then x + FC2(GELU(FC1(LN(x)))).
Attention head h uses Q_h, K_h of width qk_dims[l] and V_h of width vo_dims[l]; the
logits are always scaled by 1/sqrt(d_model / n_head), the unpruned head width, so cutting
a head's rank never changes the scale of its logits.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from pydantic import Field, model_validator
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from rayworks.core.config import Config
from rayworks.core.errors import CheckpointNotFoundError


class ViTSpec(Config):
    """Size of a tiny ViT; per-layer widths default to the uniform ones."""

    image_size: int = Field(16, ge=2, description="input height = width in pixels")
    patch_size: int = Field(4, ge=1, description="square patch side (must divide image_size)")
    channels: int = Field(1, ge=1, description="input channels")
    d_model: int = Field(64, ge=4, description="embedding width")
    n_layer: int = Field(4, ge=1, le=48, description="transformer blocks")
    n_head: int = Field(4, ge=1, description="attention heads (must divide d_model)")
    ffn_dim: int = Field(256, ge=1, description="FFN hidden width")
    n_classes: int = Field(10, ge=2, description="classifier outputs")
    ffn_dims: list[int] | None = Field(None, description="per-layer FFN widths (pruned models)")
    qk_dims: list[int] | None = Field(None, description="per-layer Q/K head widths (pruned)")
    vo_dims: list[int] | None = Field(None, description="per-layer V head widths (pruned)")

    @model_validator(mode="after")
    def _shapes(self) -> ViTSpec:
        if self.image_size % self.patch_size:
            raise ValueError(
                f"patch_size={self.patch_size} does not divide image_size={self.image_size}"
            )
        if self.d_model % self.n_head:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_head={self.n_head}")
        for key in ("ffn_dims", "qk_dims", "vo_dims"):
            dims = getattr(self, key)
            if dims is not None and (len(dims) != self.n_layer or min(dims) < 1):
                raise ValueError(f"{key}={dims} must list {self.n_layer} positive widths")
        return self

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def n_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    def layer_dims(self, layer: int) -> tuple[int, int, int]:
        """(ffn width, Q/K head width, V head width) of `layer`."""
        return (
            self.ffn_dims[layer] if self.ffn_dims else self.ffn_dim,
            self.qk_dims[layer] if self.qk_dims else self.head_dim,
            self.vo_dims[layer] if self.vo_dims else self.head_dim,
        )


class Attention(nn.Module):
    def __init__(self, d: int, n_head: int, qk: int, vo: int, scale_dim: int) -> None:
        super().__init__()
        self.n_head, self.qk, self.vo = n_head, qk, vo
        self.scale = scale_dim**-0.5
        self.q = nn.Linear(d, n_head * qk)
        self.k = nn.Linear(d, n_head * qk)
        self.v = nn.Linear(d, n_head * vo)
        self.o = nn.Linear(n_head * vo, d)

    def forward(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.n_head, self.qk).transpose(1, 2)
        k = self.k(x).view(b, t, self.n_head, self.qk).transpose(1, 2)
        v = self.v(x).view(b, t, self.n_head, self.vo).transpose(1, 2)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=self.scale)
        return self.o(out.transpose(1, 2).reshape(b, t, self.n_head * self.vo))


class Block(nn.Module):
    def __init__(self, spec: ViTSpec, layer: int) -> None:
        super().__init__()
        ffn, qk, vo = spec.layer_dims(layer)
        self.norm1 = nn.LayerNorm(spec.d_model)
        self.attn = Attention(spec.d_model, spec.n_head, qk, vo, spec.head_dim)
        self.norm2 = nn.LayerNorm(spec.d_model)
        self.fc1 = nn.Linear(spec.d_model, ffn)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(ffn, spec.d_model)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(self.act(self.fc1(self.norm2(x))))


class ViT(nn.Module):
    """Images [B, C, H, W] -> class logits [B, n_classes] (from the class token)."""

    def __init__(self, spec: ViTSpec) -> None:
        super().__init__()
        self.spec = spec
        p = spec.patch_size
        self.patch = nn.Linear(spec.channels * p * p, spec.d_model)
        self.cls = nn.Parameter(torch.zeros(1, 1, spec.d_model))
        self.pos = nn.Parameter(torch.randn(1, spec.n_patches + 1, spec.d_model) * 0.02)
        self.blocks = nn.ModuleList(Block(spec, i) for i in range(spec.n_layer))
        self.norm = nn.LayerNorm(spec.d_model)
        self.head = nn.Linear(spec.d_model, spec.n_classes)

    def patches(self, images: Tensor) -> Tensor:
        """[B, C, H, W] -> [B, n_patches, C*p*p], row-major over the patch grid."""
        p = self.spec.patch_size
        b, c, h, w = images.shape
        x = images.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
        return x.reshape(b, (h // p) * (w // p), c * p * p)

    def encode(self, images: Tensor, keep: Tensor | None = None) -> Tensor:
        """Final-LayerNorm tokens [B, 1 + T', d_model]: the class token, then the patches
        that `keep` [B, T'] selects (an MAE encoder's visible patches; None keeps all)."""
        x = self.patch(self.patches(images)) + self.pos[:, 1:]
        if keep is not None:
            x = torch.gather(x, 1, keep[..., None].expand(-1, -1, x.shape[-1]))
        x = torch.cat([(self.cls + self.pos[:, :1]).expand(x.shape[0], -1, -1), x], 1)
        for block in self.blocks:
            x = block(x)
        return self.norm(x)

    def features(self, images: Tensor) -> Tensor:
        """The final class-token representation [B, d_model] (before the head)."""
        return self.encode(images)[:, 0]

    def forward(self, images: Tensor) -> Tensor:
        return self.head(self.features(images))


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def vit_macs(spec: ViTSpec) -> int:
    """Multiply-accumulates of one image's forward (linear layers and attention products)."""
    t, d = spec.n_patches + 1, spec.d_model
    macs = spec.n_patches * spec.channels * spec.patch_size**2 * d + d * spec.n_classes
    for layer in range(spec.n_layer):
        ffn, qk, vo = spec.layer_dims(layer)
        h = spec.n_head
        macs += t * d * h * (2 * qk + vo) + t * h * vo * d  # Q, K, V, O projections
        macs += h * t * t * (qk + vo)  # QKᵀ and attention x V
        macs += 2 * t * d * ffn
    return macs


def save_vit(model: ViT, directory: str | Path) -> Path:
    """`config.json` (the spec) + `model.safetensors` into `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(
        json.dumps({"rayworks_kind": "vit", **model.spec.model_dump(mode="json")}, indent=2)
    )
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(directory / "model.safetensors"))
    return directory


def load_vit(directory: str | Path) -> ViT:
    """A ViT saved by `save_vit` (safetensors only)."""
    directory = Path(directory)
    config = directory / "config.json"
    if not config.is_file() or not (directory / "model.safetensors").is_file():
        raise CheckpointNotFoundError(
            f"no ViT at {str(directory)!r}: expected config.json and model.safetensors"
        )
    data = json.loads(config.read_text())
    if data.pop("rayworks_kind", None) != "vit":
        raise CheckpointNotFoundError(f"{str(config)!r} is not a rayworks ViT config")
    model = ViT(ViTSpec(**data))
    model.load_state_dict(load_file(str(directory / "model.safetensors")))
    return model
