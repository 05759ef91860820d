"""DPad suffix dropout (Chen et al., ICLR 2026, arXiv 2508.14148, section 3; `llada/sampler.py`).

For the current block [s_b, e_b), suffix token j >= e_b sits at distance i = j - e_b. The
**keep-probability profile** is

    p(i) = a * phi(k * i / (W - 1))   for i < W,      p(i) = 0   for i >= W,

with phi the standard normal density: the *sliding window* is the cut-off at W and the
*distance-decay dropout* the Gaussian (the window end sits at k sigma; a <= 2.5 keeps
p(0) <= 1). Expected kept count ~ a W / (2k). A keep mask is drawn **once per block** (the
decoder calls `sample` once per block, never per step). Kinds:

- `full`: every suffix token kept (vanilla diffusion decoding, full suffix attention).
- `gaussian`: the paper's stochastic rule, keep j iff u_j < p(j - e_b), u_j ~ U(0, 1).
- `deterministic` (reconstructed; the abstract calls the dropout deterministic, the code is
  stochastic): *cumulative-crossing* rule, keep distance i iff
  floor(C(i + 1) + 1/2) > floor(C(i) + 1/2) with C(i) = sum_{j<i} p(j), i.e. one token each
  time the expected count crosses a half-integer: density follows p(i), the count is the
  rounded expected count, and the mask is the same in every block and sample.
- `uniform` (the code's uniform sampler): round(sum_i p(i)) suffix tokens drawn uniformly
  without replacement inside the window, the Gaussian's expected count (rounded).
A window `W = 0` keeps no suffix at all (the "no scratchpad" ablation).

Near the end of the sequence the suffix is shorter than W; the profile is cut to the
suffix that exists (as in the code), so expected counts shrink there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

DropoutKind = Literal["full", "gaussian", "deterministic", "uniform"]
A_MAX = math.sqrt(2 * math.pi)  # a * phi(0) <= 1


def phi(x: Tensor) -> Tensor:
    """Standard normal density."""
    return torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def keep_profile(window: int, k: float, a: float) -> Tensor:
    """p(i) for i = 0..W-1 (float64 [W]); empty for W = 0, [a phi(0)] for W = 1."""
    if window < 0:
        raise ValueError(f"window={window} must be >= 0")
    if a > A_MAX:
        raise ValueError(f"a={a} gives p(0) = a*phi(0) > 1; a must be <= {A_MAX:.4f}")
    i = torch.arange(window, dtype=torch.float64)
    return a * phi(k * i / max(window - 1, 1))


def deterministic_keep(profile: Tensor) -> Tensor:
    """Cumulative-crossing keep mask (bool [W]) of a profile (reconstructed rule)."""
    c = torch.cat([torch.zeros(1, dtype=profile.dtype), profile.cumsum(0)])
    return torch.floor(c[1:] + 0.5) > torch.floor(c[:-1] + 0.5)


@dataclass(frozen=True)
class SuffixDropout:
    """Which suffix tokens a block attends to; `sample` is called once per block."""

    kind: DropoutKind = "full"
    window: int = 64
    k: float = 3.0
    a: float = 2.0

    def profile(self, n_suffix: int) -> Tensor:
        """p(i) for the first min(W, n_suffix) suffix distances."""
        return keep_profile(self.window, self.k, self.a)[:n_suffix]

    def expected_kept(self, n_suffix: int) -> float:
        if self.kind == "full":
            return float(n_suffix)
        return float(self.profile(n_suffix).sum())

    def sample(self, rows: int, n_suffix: int, generator: torch.Generator) -> Tensor:
        """Keep mask [rows, n_suffix] bool over suffix distances 0..n_suffix-1."""
        keep = torch.zeros(rows, n_suffix, dtype=torch.bool)
        if self.kind == "full":
            return keep.fill_(True)
        p = self.profile(n_suffix)
        w = p.numel()
        if w == 0:
            return keep
        if self.kind == "gaussian":
            keep[:, :w] = torch.rand(rows, w, generator=generator, dtype=torch.float64) < p
        elif self.kind == "deterministic":
            keep[:, :w] = deterministic_keep(p)
        elif self.kind == "uniform":
            n = min(w, round(float(p.sum())))
            order = torch.rand(rows, w, generator=generator).argsort(1)[:, :n]
            keep[:, :w] = torch.zeros(rows, w, dtype=torch.bool).scatter_(1, order, True)
        else:
            raise ValueError(f"unknown dropout kind {self.kind!r}")
        return keep
