"""The 4th-order layout: slices are the per-head maps, and the stacking round-trips."""

from __future__ import annotations

import torch

from rayworks.pipelines.lestd.tensorize import dense_params, from_tensor, to_tensor


def test_slices_are_per_head_maps_and_round_trip(tiny_llama) -> None:
    attn = tiny_llama.model.layers[0].self_attn
    w = to_tensor(attn)
    d, hd, heads = 32, attn.head_dim, 4
    assert w.shape == (d, hd, 4, heads)
    x = torch.randn(3, d, dtype=torch.float64)
    q = x @ attn.q_proj.weight.double().T  # (3, H·d_h)
    for h in range(heads):
        assert torch.allclose(x @ w[:, :, 0, h], q[:, h * hd : (h + 1) * hd])
    o = torch.randn(3, heads * hd, dtype=torch.float64)  # concatenated head outputs
    out = o @ attn.o_proj.weight.double().T
    by_head = sum(o[:, h * hd : (h + 1) * hd] @ w[:, :, 3, h].T for h in range(heads))
    assert torch.allclose(out, by_head)
    back = from_tensor(w)
    for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
        assert torch.equal(back[name], getattr(attn, name).weight.double())
    assert dense_params(attn) == 4 * d * d
