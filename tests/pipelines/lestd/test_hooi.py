"""Stage 1: HOOI recovers tensors of exact low multilinear rank; the fit identity holds."""

from __future__ import annotations

import torch

from rayworks.pipelines.lestd.hooi import hooi, project, reconstruct, residual_sq


def low_rank_tensor(d: int, hd: int, heads: int, r1: int, r2: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    core = torch.randn(r1, r2, 4, heads, generator=gen, dtype=torch.float64)
    u1, _ = torch.linalg.qr(torch.randn(d, r1, generator=gen, dtype=torch.float64))
    u2, _ = torch.linalg.qr(torch.randn(hd, r2, generator=gen, dtype=torch.float64))
    return reconstruct(core, u1, u2)


def test_exact_low_multilinear_rank_is_recovered_to_machine_precision() -> None:
    w = low_rank_tensor(24, 8, 3, r1=5, r2=3)
    t = hooi(w, 5, 3, iters=10)
    assert residual_sq(w, t) / float(w.square().sum()) < 1e-24
    eye1, eye2 = torch.eye(5, dtype=torch.float64), torch.eye(3, dtype=torch.float64)
    assert torch.allclose(t.u1.T @ t.u1, eye1, atol=1e-12)
    assert torch.allclose(t.u2.T @ t.u2, eye2, atol=1e-12)
    # one rank short of the truth cannot be exact
    assert residual_sq(w, hooi(w, 4, 3)) > 1e-3 * float(w.square().sum())


def test_fit_identity_and_hooi_improves_on_hosvd() -> None:
    w = torch.randn(16, 8, 4, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    one, ten = hooi(w, 6, 4, iters=1), hooi(w, 6, 4, iters=10)
    for t in (one, ten):
        via_core = float(w.square().sum() - t.core.square().sum())
        assert abs(residual_sq(w, t) - via_core) < 1e-9
        assert torch.allclose(t.core, project(w, t.u1, t.u2))
    assert residual_sq(w, ten) <= residual_sq(w, one) + 1e-12
