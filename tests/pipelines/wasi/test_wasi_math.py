"""WASI's math: ε -> rank, Tucker exactness, factored gradients against dense autograd."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from rayworks.pipelines.wasi.subspace import (
    compressed_grad_core,
    energy_rank,
    init_weight_factors,
    power_iteration,
    reference_compressed_grad,
    tucker_core,
    tucker_reconstruct,
    weight_subspace_iteration,
)
from rayworks.pipelines.wasi.wasi_linear import ActivationCompressor, WASILinear

B, N, D_IN, D_OUT = 6, 5, 7, 9


def test_energy_rank_is_the_smallest_rank_reaching_the_share() -> None:
    s2 = torch.tensor([1.0, 4.0, 0.0, 5.0])  # sorted: 5, 4, 1, 0 -> shares 0.5, 0.9, 1.0, 1.0
    assert energy_rank(s2, 0.5) == 1
    assert energy_rank(s2, 0.51) == 2
    assert energy_rank(s2, 0.9) == 2
    assert energy_rank(s2, 0.95) == 3
    assert energy_rank(s2, 1.0) == 3
    with pytest.raises(ValueError, match="share"):
        energy_rank(s2, 0.0)


def test_weight_factors_keep_the_energy_and_the_iteration_keeps_the_product() -> None:
    torch.manual_seed(0)
    w = torch.randn(D_OUT, D_IN)
    left, right = init_weight_factors(w, 1.0)
    assert left.shape == (D_OUT, D_IN) and torch.allclose(left @ right, w, atol=1e-5)
    left, right = init_weight_factors(w, 0.6)
    s = torch.linalg.svdvals(w)
    k = left.shape[1]
    assert (s[:k] ** 2).sum() / (s**2).sum() >= 0.6 > (s[: k - 1] ** 2).sum() / (s**2).sum()
    moved = left + 0.1 * torch.randn_like(left)  # an optimiser step leaves L non-orthonormal
    new_left, new_right = weight_subspace_iteration(moved, right)
    assert torch.allclose(new_left.T @ new_left, torch.eye(k), atol=1e-5)
    assert torch.allclose(new_left @ new_right, moved @ right, atol=1e-5)


def test_tucker_is_exact_at_full_ranks_and_power_iteration_finds_a_low_rank_mode() -> None:
    torch.manual_seed(1)
    x = torch.randn(B, N, D_IN)
    comp = ActivationCompressor(1.0, seed=0)
    core, factors = comp.compress(x)
    assert comp.ranks == (B, N, D_IN) and core.shape == (B, N, D_IN)
    assert torch.allclose(tucker_reconstruct(core, factors), x, atol=1e-5)
    # a feature mode of rank 2: one power iteration from any start spans it exactly
    low = torch.randn(B * N, 2) @ torch.randn(2, D_IN)
    q = power_iteration(low.reshape(B, N, D_IN), 2, torch.randn(D_IN, 2))
    assert torch.allclose(q @ (q.T @ low.T), low.T, atol=1e-4)


def _dense_reference(layer: WASILinear, x: torch.Tensor, g: torch.Tensor):
    """Autograd through y = x Wᵀ + b with leaf copies of what the layer trains: W = L R for
    `factors`, the dense W for `asi`, and for `full` a leaf W_eff = L R (its gradient is the
    dense ∇W that the full rule applies to W)."""
    if layer.mode == "full":
        trained = [(layer.left @ layer.right).detach(), layer.bias]
    else:
        trained = [*layer.weights(), layer.bias]
    leaves = [p.detach().clone().requires_grad_(True) for p in trained]
    xd = x.detach().clone().requires_grad_(True)
    w = leaves[0] @ leaves[1] if len(leaves) == 3 else leaves[0]
    (xd @ w.T + leaves[-1]).backward(g)
    return xd.grad, [p.grad for p in leaves]


@pytest.mark.parametrize(
    ("variant", "update"),
    [("wasi", "full"), ("wasi", "factors"), ("wsi", "full"), ("wsi", "factors"), ("asi", "full")],
)
def test_factored_gradient_equals_the_dense_gradient_at_full_ranks(
    variant: str, update: str
) -> None:
    torch.manual_seed(2)
    layer = WASILinear(nn.Linear(D_IN, D_OUT), variant, 1.0, 1.0, seed=0, update=update)
    x = torch.randn(B, N, D_IN, requires_grad=True)
    g = torch.randn(B, N, D_OUT)
    layer.train()
    layer(x).backward(g)  # refreshes L, R first (lossless at full rank), then the backward
    grad_x, grads = _dense_reference(layer, x, g)
    assert torch.allclose(x.grad, grad_x, atol=1e-4)
    trained = [p for p in layer.parameters()]
    assert len(trained) == len(grads), [n for n, _ in layer.named_parameters()]
    for p, ref in zip(trained, grads, strict=True):
        assert torch.allclose(p.grad, ref, atol=1e-4), (variant, update)


def test_truncated_ranks_change_the_gradient_and_match_the_papers_contraction() -> None:
    torch.manual_seed(3)
    x = torch.randn(B, N, D_IN)
    g = torch.randn(B, N, D_OUT)
    comp = ActivationCompressor(0.6, seed=0)
    core, factors = comp.compress(x)
    assert all(k < d for k, d in zip(comp.ranks, (B, N, D_IN), strict=True))
    approx = compressed_grad_core(g, core, factors) @ factors[2].T
    assert torch.allclose(approx, reference_compressed_grad(g, core, factors), atol=1e-4)
    exact = torch.einsum("bno,bni->oi", g, x)
    assert not torch.allclose(approx, exact, atol=1e-2)
    x_tilde = tucker_reconstruct(core, factors)
    assert torch.allclose(approx, torch.einsum("bno,bni->oi", g, x_tilde), atol=1e-4)
    assert torch.allclose(tucker_core(x_tilde, factors), core, atol=1e-4)


def test_inference_uses_the_factored_weights() -> None:
    torch.manual_seed(4)
    dense = nn.Linear(D_IN, D_OUT)
    layer = WASILinear(dense, "wasi", eps=0.5, act_energy=0.8, seed=0).eval()
    x = torch.randn(B, N, D_IN)
    assert layer.rank < min(D_IN, D_OUT)
    with torch.no_grad():
        expected = x @ layer.dense_weight().T + layer.bias
        assert torch.allclose(layer(x), expected, atol=1e-5)
        assert not torch.allclose(layer(x), dense(x), atol=1e-3)
