"""Class-conditional DiT and DiT^DH over patch-1 latent tokens [B, T, n] (RAE §5, class
`DiTwDDTHead` of the official code).

Blocks are DiT's adaLN-Zero blocks (LayerNorm without affine, modulation shift/scale/gate
from the conditioning). Simplification (reconstructed): GELU MLP, LayerNorm and a learned
absolute position embedding instead of LightningDiT's SwiGLU, RMSNorm and RoPE.

- Conditioning c = SiLU(t_emb + y_emb) [B, D]; class dropout (label `n_classes` = null).
- `DiT`: x_t → linear n → D → blocks(c) → final adaLN layer → linear D → n. The output lies in
  an affine d-dimensional subspace, which is what Theorem 1's width bound is about.
- `DiTDH`: a narrow body (width D_b, as `DiT` without output) gives per-token s [B, T, D_b];
  the head conditions on SiLU(t_emb' + s) mapped to its width D_h per token, re-embeds x_t
  at width D_h and runs `head_depth` wide blocks with per-token adaLN, then a per-token adaLN
  final layer → n.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from pydantic import Field
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from rayworks.core.config import Config


class DiTSpec(Config):
    """Sizes of a DiT (head_width = 0) or DiT^DH (head_width > 0)."""

    tokens: int = Field(16, ge=1, description="latent tokens T (4 x 4 grid)")
    channels: int = Field(64, ge=1, description="token dimension n")
    width: int = Field(96, ge=4, description="body hidden width d")
    depth: int = Field(4, ge=1, description="body blocks")
    heads: int = Field(4, ge=1, description="body attention heads (must divide width)")
    head_width: int = Field(0, ge=0, description="DiT^DH head width (0 = plain DiT)")
    head_depth: int = Field(2, ge=1, description="DiT^DH head blocks (paper: 2)")
    head_heads: int = Field(4, ge=1, description="DiT^DH head attention heads")
    mlp_ratio: float = Field(4.0, gt=0, description="MLP hidden = mlp_ratio x width")
    n_classes: int = Field(10, ge=1, description="classes (+1 null label for dropout)")
    class_dropout: float = Field(0.1, ge=0, lt=1, description="label dropout (paper: 0.1)")


def timestep_embedding(t: Tensor, dim: int) -> Tensor:
    """Sinusoidal embedding of t ∈ [0, 1] (scaled by 1000 as in DiT) → [B, dim]."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
    args = 1000 * t[:, None].float() * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], -1)
    return nn.functional.pad(emb, (0, dim % 2))


class Condition(nn.Module):
    """c = t_emb + y_emb (DiT), width `dim`; label `n_classes` is the dropped (null) label."""

    def __init__(self, dim: int, n_classes: int) -> None:
        super().__init__()
        self.freq = 64
        self.t_mlp = nn.Sequential(nn.Linear(self.freq, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.y_emb = nn.Embedding(n_classes + 1, dim)

    def forward(self, t: Tensor, y: Tensor) -> Tensor:
        return self.t_mlp(timestep_embedding(t, self.freq)) + self.y_emb(y)


def modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    return x * (1 + scale) + shift


def _per_token(c: Tensor) -> Tensor:
    """A [B, D] conditioning broadcast as [B, 1, D]; a per-token [B, T, D] one unchanged."""
    return c[:, None] if c.dim() == 2 else c


class AdaLNBlock(nn.Module):
    """adaLN-Zero block: x + g1·Attn(mod(LN x)), then x + g2·MLP(mod(LN x)); c is [B, D]
    (global) or [B, T, D] (per token, the DiT^DH head)."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"width {dim} is not divisible by heads {heads}")
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU("tanh"), nn.Linear(hidden, dim))
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))
        nn.init.zeros_(self.ada[1].weight)
        nn.init.zeros_(self.ada[1].bias)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        b, t, d = x.shape
        sh1, sc1, g1, sh2, sc2, g2 = _per_token(self.ada(c)).chunk(6, -1)
        h = modulate(self.norm1(x), sh1, sc1)
        q, k, v = self.qkv(h).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = nn.functional.scaled_dot_product_attention(q, k, v)
        x = x + g1 * self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + g2 * self.mlp(modulate(self.norm2(x), sh2, sc2))


class FinalLayer(nn.Module):
    """mod(LN x) → linear to n channels (zero-initialised, as in DiT)."""

    def __init__(self, dim: int, out: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(dim, 2 * dim))
        self.out = nn.Linear(dim, out)
        for layer in (self.ada[1], self.out):
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        shift, scale = _per_token(self.ada(c)).chunk(2, -1)
        return self.out(modulate(self.norm(x), shift, scale))


class Trunk(nn.Module):
    """Embed x_t [B, T, n] at `dim` (+ position), run `depth` blocks under c; → [B, T, dim]."""

    def __init__(self, spec: DiTSpec, dim: int, depth: int, heads: int) -> None:
        super().__init__()
        self.embed = nn.Linear(spec.channels, dim)
        self.pos = nn.Parameter(torch.randn(1, spec.tokens, dim) * 0.02)
        self.blocks = nn.ModuleList(AdaLNBlock(dim, heads, spec.mlp_ratio) for _ in range(depth))

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        h = self.embed(x) + self.pos
        for block in self.blocks:
            h = block(h, c)
        return h


class DiT(nn.Module):
    """Plain DiT (`head_width == 0`) or DiT^DH; forward(x_t, t, y) → velocity [B, T, n]."""

    def __init__(self, spec: DiTSpec) -> None:
        super().__init__()
        self.spec = spec
        self.cond = Condition(spec.width, spec.n_classes)
        self.body = Trunk(spec, spec.width, spec.depth, spec.heads)
        if spec.head_width:
            self.head_t = nn.Linear(spec.width, spec.width)  # t' for SiLU(t + s)
            self.to_head = nn.Linear(spec.width, spec.head_width)
            self.head = Trunk(spec, spec.head_width, spec.head_depth, spec.head_heads)
            self.final = FinalLayer(spec.head_width, spec.channels)
        else:
            self.final = FinalLayer(spec.width, spec.channels)

    def drop_labels(self, y: Tensor, gen: torch.Generator | None = None) -> Tensor:
        """Training-time class dropout: replace labels by the null label with p=class_dropout."""
        drop = torch.rand(y.shape, generator=gen) < self.spec.class_dropout
        return torch.where(drop, torch.full_like(y, self.spec.n_classes), y)

    def forward(self, x: Tensor, t: Tensor, y: Tensor) -> Tensor:
        c = self.cond(t, y)
        s = self.body(x, c)
        if not self.spec.head_width:
            return self.final(s, c)
        c_head = self.to_head(nn.functional.silu(self.head_t(c)[:, None] + s))  # [B, T, D_h]
        return self.final(self.head(x, c_head), c_head)


def forward_flops(model: DiT) -> int:
    """FLOPs of one single-sample forward, counted by torch's FlopCounterMode (matmuls and
    attention: 2 per multiply-accumulate)."""
    from torch.utils.flop_counter import FlopCounterMode

    spec = model.spec
    x = torch.zeros(1, spec.tokens, spec.channels)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x, torch.full((1,), 0.5), torch.zeros(1, dtype=torch.long))
    return int(counter.get_total_flops())


def save_dit(model: DiT, directory: str | Path) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "dit.json").write_text(json.dumps(model.spec.model_dump(mode="json")))
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(directory / "dit.safetensors"))
    return directory


def load_dit(directory: str | Path) -> DiT:
    directory = Path(directory)
    model = DiT(DiTSpec(**json.loads((directory / "dit.json").read_text())))
    model.load_state_dict(load_file(str(directory / "dit.safetensors")))
    return model
