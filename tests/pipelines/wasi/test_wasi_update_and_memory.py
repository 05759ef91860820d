"""The paper's full-W update rule against a dense projected-gradient reference, and the
saved-tensor probe against a hand count and an independent walk of the autograd graph."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from rayworks.models.vit import ViT, ViTSpec
from rayworks.pipelines.wasi.memory import saved_bytes_by_type, saved_tensor_bytes
from rayworks.pipelines.wasi.subspace import tucker_reconstruct
from rayworks.pipelines.wasi.wasi_linear import WASILinear, wrap_model

B, N, D_IN, D_OUT, LR = 6, 5, 12, 10, 0.3


def _dense_projected_step(
    w0: torch.Tensor, left0: torch.Tensor, b0: torch.Tensor, x: torch.Tensor, g: torch.Tensor
):
    """Independent dense computation of one step of the paper's rule (SGD, no momentum):
    forward with the rank-k projection of W0 warm-started at L0, dense ∇W by autograd,
    W1 = W0 - lr ∇W, then the projection of W1 onto span(W1 W1ᵀ L1) (SVD, not QR)."""

    def project(w: torch.Tensor, left: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        u, _, _ = torch.linalg.svd(w @ w.T @ left, full_matrices=False)
        return u @ u.T @ w, u

    w_eff0, basis0 = project(w0, left0)
    w_leaf = w_eff0.clone().requires_grad_(True)
    bias = b0.clone().requires_grad_(True)
    (x @ w_leaf.T + bias).backward(g)
    w1 = w0 - LR * w_leaf.grad
    w_eff1, _ = project(w1, basis0)
    return w_leaf.grad, w1, w_eff1, bias.grad


@pytest.mark.parametrize("act_energy", [1.0, 0.5])
def test_full_rule_is_a_dense_gradient_step_on_w_then_a_projection_to_rank_k(
    act_energy: float,
) -> None:
    torch.manual_seed(5)
    layer = WASILinear(nn.Linear(D_IN, D_OUT), "wasi", 0.6, act_energy, seed=0, update="full")
    k = layer.rank
    assert k < min(D_IN, D_OUT)
    w0, left0, b0 = layer.weight.detach().clone(), layer.left.clone(), layer.bias.detach().clone()
    x, g = torch.randn(B, N, D_IN), torch.randn(B, N, D_OUT)
    opt = torch.optim.SGD(layer.parameters(), lr=LR)
    layer.train()
    layer(x).backward(g)
    x_used = x
    if act_energy < 1:  # the reference sees the Tucker reconstruction the backward used
        comp = layer.compressor
        assert comp is not None and comp.ranks is not None
        assert comp.ranks[2] < D_IN  # the activations really are truncated
        factors = tuple(comp.factors)
        core = torch.einsum("bni,bj,nl,ik->jlk", x, *factors)
        x_used = tucker_reconstruct(core, factors)
    grad_w, w1, w_eff1, grad_b = _dense_projected_step(w0, left0, b0, x_used, g)
    assert torch.allclose(layer.weight.grad, grad_w, atol=1e-4)
    assert torch.allclose(layer.bias.grad, grad_b, atol=1e-4)
    opt.step()
    assert torch.allclose(layer.weight, w1, atol=1e-5)  # W itself stays full: no truncation
    assert torch.linalg.matrix_rank(layer.weight.detach()) > k
    layer.refresh()  # what the next training forward does first
    assert torch.allclose(layer.left @ layer.right, w_eff1, atol=1e-4)
    assert torch.allclose(layer.left.T @ layer.left, torch.eye(k), atol=1e-5)
    assert not torch.allclose(layer.left @ layer.right, w1, atol=1e-2)


def test_the_factors_rule_differs_from_the_full_rule_after_a_step() -> None:
    torch.manual_seed(6)
    dense = nn.Linear(D_IN, D_OUT)
    x, g = torch.randn(B, N, D_IN), torch.randn(B, N, D_OUT)
    out = {}
    for update in ("full", "factors"):
        layer = WASILinear(dense, "wsi", 0.6, 1.0, seed=0, update=update).train()
        opt = torch.optim.SGD(layer.parameters(), lr=LR)
        layer(x).backward(g)
        opt.step()
        layer.refresh()
        out[update] = (layer.left @ layer.right).detach()
    assert out["full"].shape == out["factors"].shape
    assert not torch.allclose(out["full"], out["factors"], atol=1e-3)


class _LinGeluNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.act, self.norm = nn.Linear(D_IN, D_OUT), nn.GELU(), nn.LayerNorm(D_OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.act(self.fc(x)))


def test_saved_bytes_match_a_hand_count_for_linear_gelu_layernorm() -> None:
    torch.manual_seed(7)
    model = _LinGeluNorm()
    x = torch.randn(B, N, D_IN)
    modules = {"fc": model.fc, "act": model.act, "norm": model.norm}
    total, per = saved_tensor_bytes(model, lambda: model(x).sum(), modules)
    # Linear saves its input; GELU its input; LayerNorm its input, mean and 1/std per token.
    # Weights and biases are parameters, not activations; sum() saves nothing.
    assert per == {
        "fc": 4 * B * N * D_IN,
        "act": 4 * B * N * D_OUT,
        "norm": 4 * B * N * (D_OUT + 2),
    }
    assert total == sum(per.values())


def _graph_saved_bytes(loss: torch.Tensor, model: nn.Module) -> int:
    """Independent count: walk the autograd graph of `loss` and read every node's saved
    tensors (`_saved_*` attributes; `saved_tensors` of custom functions), one per storage,
    parameters and buffers excluded."""
    skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen: dict[int, int] = {}
    stack, visited = [loss.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in visited:
            continue
        visited.add(node)
        values = []
        for attr in dir(node):
            if attr.startswith("_saved_") and not attr.startswith("_saved_raw"):
                values.append(getattr(node, attr))
        if hasattr(node, "saved_tensors"):
            values.append(node.saved_tensors)
        for value in values:
            items = value if isinstance(value, tuple | list) else [value]
            for t in items:
                if isinstance(t, torch.Tensor):
                    storage = t.untyped_storage()
                    if storage.data_ptr() not in skip:
                        seen[storage.data_ptr()] = storage.nbytes()
        stack += [fn for fn, _ in node.next_functions]
    return sum(seen.values())


@pytest.mark.parametrize("wrap", [None, "full", "factors"])
def test_whole_model_saved_bytes_equal_the_autograd_graph_walk(wrap: str | None) -> None:
    torch.manual_seed(8)
    spec = ViTSpec(
        image_size=8, patch_size=4, d_model=16, n_layer=1, n_head=2, ffn_dim=32, n_classes=3
    )
    model = ViT(spec).train()
    if wrap:
        wrap_model(model, "wasi", ["fc1", "fc2"], 0.8, 0.8, seed=0, update=wrap)
    images, labels = torch.randn(7, 1, 8, 8), torch.tensor([0, 1, 2, 0, 1, 2, 0])

    def loss() -> torch.Tensor:
        return nn.functional.cross_entropy(model(images), labels)

    total, by_type = saved_bytes_by_type(model, loss)
    kept: list[torch.Tensor] = []
    total_again, _ = saved_tensor_bytes(model, lambda: kept.append(loss()) or kept[0], {})
    assert total_again == total
    assert _graph_saved_bytes(kept[0], model) == total
    tokens = 7 * (spec.n_patches + 1)
    assert by_type["GELU"] == 4 * tokens * spec.ffn_dim
    n_norms = 2 * spec.n_layer + 1  # norm1, norm2 per block and the final norm
    assert by_type["LayerNorm"] == n_norms * 4 * tokens * (spec.d_model + 2)
    assert by_type["Attention"] >= 3 * 4 * tokens * spec.d_model  # q, k, v at least
    assert ("WASILinear" in by_type) == (wrap is not None)
    assert sum(by_type.values()) == total
