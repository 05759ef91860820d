"""Stage 2: the closed-form importance, monotone refit, and pruning to the exact budget."""

from __future__ import annotations

import torch

from rayworks.pipelines.lestd.hooi import Tucker, hooi, residual_sq
from rayworks.pipelines.lestd.lestd import (
    choose_ranks,
    oneshot_error,
    prune_oneshot,
    prune_refit,
    refit,
)
from rayworks.pipelines.lestd.storage import tucker_params


def weights(seed: int = 0) -> torch.Tensor:
    """A tensor with decaying spectra on modes 1, 2 (like trained attention weights)."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(24, 8, 4, 3, generator=gen, dtype=torch.float64)
    return w * torch.linspace(1, 0.1, 24, dtype=torch.float64)[:, None, None, None]


def test_pruning_one_entry_raises_error_by_exactly_its_square() -> None:
    w = weights()
    t = hooi(w, 10, 6)
    before = residual_sq(w, t)
    for idx in [(0, 0, 0, 0), (3, 2, 1, 2), (9, 5, 3, 1)]:
        core = t.core.clone()
        g = float(core[idx])
        core[idx] = 0
        after = residual_sq(w, Tucker(t.u1, t.u2, core))
        assert abs(after - before - g * g) < 1e-10 * max(1.0, before)
        assert g != 0


def test_refit_never_increases_the_masked_error_and_keeps_factors_orthonormal() -> None:
    w = weights(1)
    t = prune_oneshot(hooi(w, 10, 6), 300)
    mask = t.core != 0
    fitted = refit(w, t, mask, sweeps=3)
    assert residual_sq(w, fitted) < residual_sq(w, t) - 1e-9  # the factors moved
    assert not bool(((fitted.core != 0) & ~mask).any())  # pruned entries stay pruned
    assert torch.allclose(fitted.u1.T @ fitted.u1, torch.eye(10, dtype=torch.float64), atol=1e-10)
    assert torch.allclose(fitted.u2.T @ fitted.u2, torch.eye(6, dtype=torch.float64), atol=1e-10)


def test_prune_refit_hits_the_target_and_beats_oneshot() -> None:
    w = weights(2)
    base = hooi(w, 10, 6)
    for nnz in (400, 120):
        pruned, rounds = prune_refit(w, base, nnz, fraction=0.1, sweeps=2)
        assert int((pruned.core != 0).sum()) == nnz and rounds > 1
        one = prune_oneshot(base, nnz)
        assert int((one.core != 0).sum()) == nnz
        err_one = residual_sq(w, one)
        assert abs(err_one - oneshot_error(float(w.square().sum()), base, nnz)) < 1e-9
        assert residual_sq(w, pruned) < err_one


def test_choose_ranks_respects_the_budget() -> None:
    w = weights(3)
    memo: dict[tuple[int, int], Tucker] = {}

    def decompose(r1: int, r2: int) -> Tucker:
        return memo.setdefault((r1, r2), hooi(w, r1, r2))

    grid = [(r1, r2) for r1 in (3, 6, 12, 24) for r2 in (2, 4, 8)]
    for budget in (200, 800, 3000):
        r1, r2, nnz = choose_ranks(w, budget, grid, decompose)
        assert tucker_params(24, 8, 3, r1, r2, nnz) <= budget
    assert choose_ranks(w, 24 * 3 + 8 * 2, grid, decompose) is None  # factors alone fill it
