"""The selective scan against the naive recurrent loop, carried state, and the
bidirectional wrapper's padding behaviour."""

from __future__ import annotations

import pytest
import torch

from rayworks.pipelines.mvc.mamba import (
    BiMamba,
    Mamba,
    flip_padded,
    selective_scan,
    selective_scan_loop,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _inputs(batch: int, length: int, width: int, state: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    kw = {"generator": g, "dtype": torch.float64}
    return (
        torch.randn(batch, length, width, **kw),
        torch.rand(batch, length, width, **kw),
        -3 * torch.rand(width, state, **kw),
        torch.randn(batch, length, state, **kw),
        torch.randn(batch, length, state, **kw),
        torch.randn(width, **kw),
        torch.randn(batch, width, state, **kw),
    )


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("length,chunk", [(1, 4), (23, 8), (32, 32), (40, 64)])
def test_scan_matches_recurrent_loop(parallel: bool, length: int, chunk: int) -> None:
    u, dt, A, B, C, D, h0 = _inputs(2, length, 5, 3)
    y, h = selective_scan(u, dt, A, B, C, D, h0, chunk=chunk, parallel=parallel)
    y_ref, h_ref = selective_scan_loop(u, dt, A, B, C, D, h0)
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(h, h_ref, rtol=1e-10, atol=1e-10)


def test_scan_zero_input_decays_state_in_closed_form() -> None:
    """u = 0: h_T = exp(A Σ_t Δ_t) h_0 exactly (no input term)."""
    u, dt, A, B, C, D, h0 = _inputs(1, 17, 4, 2, seed=1)
    _, h = selective_scan(torch.zeros_like(u), dt, A, B, C, D, h0, chunk=5)
    torch.testing.assert_close(h, torch.exp(dt.sum(1)[..., None] * A) * h0)


def test_mamba_chunked_state_equals_full_pass() -> None:
    torch.manual_seed(0)
    m = Mamba(8, d_state=4, d_conv=4, expand=2, chunk=5).double()
    x = torch.randn(2, 29, 8, dtype=torch.float64)
    full, (buf, h) = m(x)
    state, parts = None, []
    for start in range(0, 29, 6):
        y, state = m(x[:, start : start + 6], state)
        parts.append(y)
    torch.testing.assert_close(torch.cat(parts, 1), full)
    torch.testing.assert_close(state[1], h)
    torch.testing.assert_close(state[0], buf)


def test_mamba_is_causal() -> None:
    torch.manual_seed(0)
    m = Mamba(8, d_state=4).double()
    x = torch.randn(1, 20, 8, dtype=torch.float64)
    y2 = x.clone()
    y2[:, 12:] += 1.0
    torch.testing.assert_close(m(x)[0][:, :12], m(y2)[0][:, :12])
    assert not torch.allclose(m(x)[0][:, 12:], m(y2)[0][:, 12:])


def test_flip_padded_reverses_within_length() -> None:
    x = torch.arange(10.0).view(2, 5, 1)
    out = flip_padded(x, torch.tensor([5, 3]))[..., 0]
    assert out.tolist() == [[4, 3, 2, 1, 0], [7, 6, 5, 8, 9]]


@pytest.mark.parametrize("gated", [True, False])
def test_bimamba_ignores_padding(gated: bool) -> None:
    """A padded sequence gives the same outputs on its real positions as alone."""
    torch.manual_seed(0)
    bi = BiMamba(8, gated, d_state=4, chunk=4).double()
    x = torch.randn(2, 11, 8, dtype=torch.float64)
    both = bi(x, torch.tensor([11, 6]))
    alone = bi(x[1:, :6], torch.tensor([6]))
    torch.testing.assert_close(both[1, :6], alone[0])
    assert (bi.gate is not None) == gated
