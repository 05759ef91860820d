"""Mamba (S6) in pure PyTorch for CPU: the selective scan, the Mamba block with carried
state (streaming), and the bidirectional wrapper with the paper's fusion.

Selective scan (Mamba, Gu & Dao 2023, Alg. 2; MVC §3 uses it unchanged), per channel e and
state n:   h_t = exp(Δ_t A) ⊙ h_{t-1} + Δ_t B_t u_t,   y_t = C_t · h_t + D u_t.
We run it chunk by chunk (`chunk` steps at a time, state carried between chunks): the
discretisation (exp(ΔA), ΔBu) and the read-out (C·h) are vectorised over the chunk; the
recurrence inside it is either a step loop (`parallel=False`, the default: fastest on CPU
at our sizes, measured) or an associative scan (`parallel=True`: Hillis-Steele doubling
over (a, b) pairs, log2(chunk) full-width steps, the GPU-friendly form). Only products of
decays ≤ 1 appear (no exp/log rescaling that could overflow). Memory is O(B·chunk·E·N) for
the scan plus O(B·T·E) for its output: linear in T. No CUDA kernels and no `mambapy` (a
pure-PyTorch Mamba on PyPI): the scan is our own.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

State = tuple[torch.Tensor, torch.Tensor]  # (conv buffer (B, E, k-1), ssm state (B, E, N))


def _inclusive_scan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """h_t = a_t h_{t-1} + b_t with h_{-1} = 0 along dim 1, by log2(L) doubling steps."""
    offset, length = 1, a.shape[1]
    while offset < length:
        b = torch.cat([b[:, :offset], a[:, offset:] * b[:, :-offset] + b[:, offset:]], 1)
        a = torch.cat([a[:, :offset], a[:, offset:] * a[:, :-offset]], 1)
        offset *= 2
    return b


def _step_scan(a: torch.Tensor, b: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """h_t = a_t h_{t-1} + b_t along dim 1 from h (B, E, N), one step at a time."""
    hs = []
    for t in range(a.shape[1]):
        h = a[:, t] * h + b[:, t]
        hs.append(h)
    return torch.stack(hs, 1)


def selective_scan(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    h0: torch.Tensor | None = None,
    chunk: int = 64,
    parallel: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """u, delta: (B, T, E); A: (E, N); B, C: (B, T, N); D: (E,); h0: (B, E, N) or None.
    Returns y (B, T, E) and the last state h_T (B, E, N)."""
    batch, length, width = u.shape
    h = u.new_zeros(batch, width, A.shape[1]) if h0 is None else h0
    ys = []
    for start in range(0, length, chunk):
        sl = slice(start, start + chunk)
        dt = delta[:, sl, :, None]  # (B, L, E, 1)
        a = torch.exp(dt * A)  # (B, L, E, N)
        b = dt * B[:, sl, None, :] * u[:, sl, :, None]
        if parallel:
            hs = _inclusive_scan(a, b) + torch.cumprod(a, 1) * h[:, None]
        else:
            hs = _step_scan(a, b, h)
        ys.append(torch.einsum("blen,bln->ble", hs, C[:, sl]))
        h = hs[:, -1]
    y = torch.cat(ys, 1) if ys else u.new_zeros(batch, 0, width)
    return y + u * D, h


def selective_scan_loop(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    h0: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The naive recurrent loop (reference for tests): one time step at a time."""
    h = u.new_zeros(u.shape[0], u.shape[2], A.shape[1]) if h0 is None else h0
    ys = []
    for t in range(u.shape[1]):
        dt = delta[:, t, :, None]
        h = torch.exp(dt * A) * h + dt * B[:, t, None, :] * u[:, t, :, None]
        ys.append((h * C[:, t, None, :]).sum(-1) + D * u[:, t])
    return torch.stack(ys, 1), h


class Mamba(nn.Module):
    """One Mamba block (in_proj → causal depthwise conv → SiLU → S6 → ⊙ SiLU(z) → out_proj).
    `forward(x, state)` returns the carried state, so chunked calls equal one full call."""

    def __init__(
        self,
        d_model: int,
        d_state: int = 16,
        d_conv: int = 4,
        expand: int = 2,
        chunk: int = 64,
        parallel: bool = False,
    ) -> None:
        super().__init__()
        inner = expand * d_model
        self.d_conv, self.chunk, self.parallel = d_conv, chunk, parallel
        self.dt_rank = math.ceil(d_model / 16)
        self.in_proj = nn.Linear(d_model, 2 * inner)
        self.conv = nn.Conv1d(inner, inner, d_conv, groups=inner)
        self.x_proj = nn.Linear(inner, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, inner)
        dt = torch.exp(torch.rand(inner) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        with torch.no_grad():  # softplus(bias) = dt ∈ [1e-3, 0.1] (Mamba's init)
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, d_state + 1.0)).repeat(inner, 1))
        self.D = nn.Parameter(torch.ones(inner))
        self.out_proj = nn.Linear(inner, d_model)

    def forward(self, x: torch.Tensor, state: State | None = None) -> tuple[torch.Tensor, State]:
        """x: (B, T, d_model) -> (B, T, d_model), new state."""
        xi, z = self.in_proj(x).chunk(2, -1)
        xi = xi.transpose(1, 2)  # (B, E, T)
        buf = xi.new_zeros(*xi.shape[:2], self.d_conv - 1) if state is None else state[0]
        xc = torch.cat([buf, xi], -1)
        xi = F.silu(self.conv(xc)).transpose(1, 2)  # (B, T, E), causal
        dt, B, C = self.x_proj(xi).split([self.dt_rank, *(2 * [self.A_log.shape[1]])], -1)
        delta = F.softplus(self.dt_proj(dt))
        y, h = selective_scan(
            xi,
            delta,
            -torch.exp(self.A_log),
            B,
            C,
            self.D,
            None if state is None else state[1],
            self.chunk,
            self.parallel,
        )
        return self.out_proj(y * F.silu(z)), (xc[..., -(self.d_conv - 1) :], h)


def flip_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each sequence within its own length (padding stays at the end), so the
    backward direction never reads padding before real tokens. x: (B, T, C)."""
    t = torch.arange(x.shape[1], device=x.device)[None]
    idx = torch.where(t < lengths[:, None], lengths[:, None] - 1 - t, t)
    return x.gather(1, idx[..., None].expand_as(x))


class BiMamba(nn.Module):
    """Forward and backward Mamba over the same input, fused (MVC §3.1, §3.2):
    `gated=True`: h = (sigmoid(W_g[h_f; h_b]) ⊙ [h_f; h_b]) W_o (paper's gated fusion);
    `gated=False`: h = [h_f; h_b] W_o (concat-only / the temporal module's linear fusion)."""

    def __init__(self, d_model: int, gated: bool, **mamba: int) -> None:
        super().__init__()
        self.fwd, self.bwd = Mamba(d_model, **mamba), Mamba(d_model, **mamba)
        self.gate = nn.Linear(2 * d_model, 2 * d_model) if gated else None
        self.out = nn.Linear(2 * d_model, d_model)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        hf = self.fwd(x)[0]
        hb = flip_padded(self.bwd(flip_padded(x, lengths))[0], lengths)
        h = torch.cat([hf, hb], -1)
        if self.gate is not None:
            h = torch.sigmoid(self.gate(h)) * h
        return self.out(h)
