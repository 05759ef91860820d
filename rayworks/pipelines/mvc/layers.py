"""Shared layers: masks, alignment expansion (alpha·h), style conditioning (AdaLN / concat),
grouped conv blocks, an explicit-softmax Transformer layer and a packed BiLSTM."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def length_mask(lengths: torch.Tensor, size: int | None = None) -> torch.Tensor:
    """(B, T) bool, True on real positions."""
    size = int(lengths.max()) if size is None else size
    return torch.arange(size, device=lengths.device)[None] < lengths[:, None]


def alignment(durations: torch.Tensor, n_frames: int | None = None) -> torch.Tensor:
    """Hard monotonic alignment alpha (B, T_frames, T_x) from integer durations (B, T_x):
    frame t belongs to phoneme i iff start_i ≤ t < end_i (MVC §3.2: h_A = alpha · h)."""
    ends = durations.cumsum(1)
    n_frames = int(ends[:, -1].max()) if n_frames is None else n_frames
    t = torch.arange(n_frames, device=durations.device)[None, :, None]
    return ((t >= (ends - durations)[:, None]) & (t < ends[:, None])).float()


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """x: (B, T, C), mask (B, T) -> (B, C)."""
    m = mask[..., None].float()
    return (x * m).sum(1) / m.sum(1).clamp_min(1.0)


class StyleNorm(nn.Module):
    """`adaln`: AdaLN(z, e) = (1 + gamma(e)) ⊙ LN(z) + β(e) (MVC §3.1; gamma starts at 0);
    `concat`: plain LayerNorm (style enters through `StyleInput` instead; ablation d)."""

    def __init__(self, d: int, style_dim: int, mode: str) -> None:
        super().__init__()
        self.adaln = mode == "adaln"
        self.norm = nn.LayerNorm(d, elementwise_affine=not self.adaln)
        self.affine = nn.Linear(style_dim, 2 * d) if self.adaln else None
        if self.affine is not None:
            nn.init.zeros_(self.affine.weight)
            nn.init.zeros_(self.affine.bias)

    def forward(self, x: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        if self.affine is None:
            return self.norm(x)
        gamma, beta = self.affine(style)[:, None].chunk(2, -1)
        return (1 + gamma) * self.norm(x) + beta


class StyleInput(nn.Module):
    """`concat`: x ← W [x; e] (style broadcast over time); `adaln`: identity."""

    def __init__(self, d: int, style_dim: int, mode: str) -> None:
        super().__init__()
        self.proj = nn.Linear(d + style_dim, d) if mode == "concat" else None

    def forward(self, x: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        if self.proj is None:
            return x
        return self.proj(torch.cat([x, style[:, None].expand(-1, x.shape[1], -1)], -1))


class MaskedGroupNorm(nn.Module):
    """GroupNorm whose statistics cover real frames only (padding never leaks in)."""

    def __init__(self, groups: int, d: int) -> None:
        super().__init__()
        self.groups = groups
        self.weight, self.bias = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d))

    def forward(self, x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        b, c, t = x.shape  # m: (B, 1, T)
        g = x.view(b, self.groups, -1, t)
        mg = m[:, :, None]
        n = (mg.sum(-1, keepdim=True) * g.shape[2]).clamp_min(1.0)
        mean = (g * mg).sum((2, 3), keepdim=True) / n
        var = (((g - mean) * mg) ** 2).sum((2, 3), keepdim=True) / n
        g = (g - mean) / torch.sqrt(var + 1e-5)
        return g.view(b, c, t) * self.weight[:, None] + self.bias[:, None]


class ConvBlocks(nn.Module):
    """n x [grouped Conv1d (k 5, groups C/4) + GroupNorm(4) + LeakyReLU(0.2) + Dropout],
    residual (MVC text encoder §3.1; residual added for trainability at our scale)."""

    def __init__(self, d: int, n: int, dropout: float) -> None:
        super().__init__()
        self.convs = nn.ModuleList(
            nn.Conv1d(d, d, 5, padding=2, groups=max(1, d // 4)) for _ in range(n)
        )
        self.norms = nn.ModuleList(MaskedGroupNorm(4, d) for _ in range(n))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = mask[:, None].float()
        h = x.transpose(1, 2) * m
        for conv, norm in zip(self.convs, self.norms, strict=True):
            h = (h + self.drop(F.leaky_relu(norm(conv(h), m), 0.2))) * m
        return h.transpose(1, 2)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor):
    """Explicit softmax(QKᵀ/√d)V with key padding `mask` (B, T): materialises the (T x T)
    scores like the StyleTTS2-era encoders (no fused/flash kernel)."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask[:, None, None], float("-inf"))
    return torch.softmax(scores, -1) @ v


class TransformerLayer(nn.Module):
    """Pre-norm self-attention + feed-forward (the baseline's text encoder layer)."""

    def __init__(self, d: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        h = attention(q, k, v, mask).transpose(1, 2).reshape(b, t, d)
        x = x + self.drop(self.out(h))
        return x + self.drop(self.ff(self.norm2(x)))


class BiLSTM(nn.Module):
    """Packed bidirectional LSTM, d → d (StyleTTS2's duration / prosody predictors)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(d, d // 2, batch_first=True, bidirectional=True)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        return pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0]


def masked_l1(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean |pred - target| over the positions where `mask` (broadcast over trailing dims)."""
    m = mask.float()
    while m.dim() < pred.dim():
        m = m[..., None]
    m = m.expand_as(pred)
    return ((pred - target).abs() * m).sum() / m.sum().clamp_min(1.0)
