"""GDR math against independent references: rank identities and fixed point of the block
Lewis iteration, the sandwich guarantee, f̃'s derivatives vs torch autograd, the smoothing
bound, and every solver against the cvxpy optimum."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rayworks.pipelines.gdr.ball_oracle import (
    OracleOptions,
    accelerated,
    geometry,
    trust_region,
    trust_region_step,
)
from rayworks.pipelines.gdr.baselines import cvxpy_optimum, log_barrier_ipm
from rayworks.pipelines.gdr.interpolation import interpolation_solve
from rayworks.pipelines.gdr.lewis import (
    block_inf_norm,
    block_ratios,
    lewis_iterates,
    lewis_overestimates,
)
from rayworks.pipelines.gdr.problem import (
    GroupData,
    SyntheticSpec,
    duplicate,
    erm,
    group_losses,
    synthetic,
    worst_group_loss,
)
from rayworks.pipelines.gdr.smoothing import (
    Smoothing,
    max_group_norm,
    smoothed_hessian,
    smoothing_constants,
)
from rayworks.pipelines.gdr.trace import Trace

SPEC = SyntheticSpec(m=12, d=4, n_per_group=6, n_adversarial=2, kappa_target=1e3)


@pytest.fixture(scope="module")
def data() -> GroupData:
    return synthetic(SPEC, 3)


@pytest.fixture(scope="module")
def optimum(data: GroupData) -> tuple[np.ndarray, float]:
    return cvxpy_optimum(data)


def test_synthetic_hits_kappa_target(data: GroupData) -> None:
    assert np.linalg.cond(data.A.T @ data.A) == pytest.approx(1e3, rel=1e-6)


def test_lewis_iterates_sum_to_rank_of_a_b(data: GroupData) -> None:
    folded = data.folded()
    sums = lewis_iterates(folded, 5).sum(axis=1)
    assert sums[0] == pytest.approx(data.d + 1)  # w⁽¹⁾ = (d+1)/m · 1
    assert np.allclose(sums[1:], data.d + 1, rtol=1e-8)  # generic b: rank [A|b] = d + 1
    in_range = GroupData(data.A, data.A @ np.ones(data.d), data.offsets).folded()
    sums = lewis_iterates(in_range, 5).sum(axis=1)
    assert np.allclose(sums[1:], data.d, rtol=1e-6)  # b ∈ range(A): rank [A|b] = d, not d+1


def test_lewis_iteration_reaches_its_fixed_point(data: GroupData) -> None:
    folded = data.folded()
    w = lewis_iterates(folded, 3000)[-1]
    ratios = block_ratios(folded, w)
    assert ratios.max() <= 1 + 1e-3  # w_i ≥ τ_i(W^{1/2}Â) on every block
    assert np.abs(w * ratios - w).sum() <= 1e-4 * w.sum()  # w = τ(W^{1/2}Â)


def test_overestimates_and_the_sandwich(data: GroupData) -> None:
    folded = data.folded()
    w = lewis_overestimates(folded)
    assert block_ratios(folded, w).max() <= 1 + 1e-9
    bound = math.sqrt(2 * (np.linalg.matrix_rank(folded.A) + 1))
    rng = np.random.default_rng(0)
    for _ in range(50):
        x, c = 10 * rng.standard_normal(data.d), rng.standard_normal()
        y = folded.A @ x - c * folded.b
        mid = math.sqrt(np.sum(np.repeat(w, folded.sizes) * y * y))
        inf = block_inf_norm(folded, y)
        assert inf <= mid * (1 + 1e-9) and mid <= bound * inf


def _torch_smoothed(folded: GroupData, sm: Smoothing):
    A, b = torch.tensor(folded.A), torch.tensor(folded.b)
    gid = torch.tensor(folded.group_of_row)

    def f(x: torch.Tensor) -> torch.Tensor:
        r = A @ x - b
        sq = torch.zeros(folded.m, dtype=x.dtype).index_add(0, gid, r * r)
        s = torch.sqrt(sm.delta**2 + sq) - sm.delta
        return sm.beta * torch.logsumexp(s / sm.beta, 0)

    return f


def test_smoothed_derivatives_match_autograd_and_the_bound(data: GroupData) -> None:
    folded = data.folded()
    sm = smoothing_constants(0.5, folded.m)
    f = _torch_smoothed(folded, sm)
    rng = np.random.default_rng(1)
    for _ in range(3):
        x = erm(data) + rng.standard_normal(data.d)
        v, g, H = smoothed_hessian(folded, x, sm)
        xt = torch.tensor(x, requires_grad=True)
        assert v == pytest.approx(float(f(xt.detach())), rel=1e-12)
        assert np.allclose(g, torch.autograd.grad(f(xt), xt)[0].numpy(), rtol=1e-9, atol=1e-10)
        H_ref = torch.autograd.functional.hessian(f, xt.detach()).numpy()
        assert np.allclose(H, H_ref, rtol=1e-7, atol=1e-8 * np.abs(H_ref).max())
        err = abs(v - max_group_norm(folded, x))
        assert err <= sm.beta * math.log(folded.m) + sm.delta


def test_trust_region_step_satisfies_kkt() -> None:
    rng = np.random.default_rng(2)
    B = rng.standard_normal((5, 5))
    H, M = B @ B.T, np.eye(5) + 0.1 * np.ones((5, 5))
    g, y = rng.standard_normal(5), 0.1 * rng.standard_normal(5)
    for r in (1e-2, 1e3):
        p, nu = trust_region_step(g, H, M, y, r)
        z = y + p
        assert math.sqrt(z @ M @ z) <= r * (1 + 1e-9)
        assert np.allclose(H @ p + g + nu * M @ z, 0, atol=1e-8)
        if nu > 0:
            assert math.sqrt(z @ M @ z) == pytest.approx(r, rel=1e-8)
    assert trust_region_step(g, H, M, y, 1e3)[1] == 0.0


@pytest.mark.parametrize(
    ("kind", "solver"), [("lewis", trust_region), ("euclid", trust_region), ("lewis", accelerated)]
)
def test_ball_oracle_matches_cvxpy(data: GroupData, optimum, kind: str, solver) -> None:
    opt = optimum[1]
    folded, x0 = data.folded(), erm(data)
    opts = OracleOptions(eps_rel=1e-4, radius_rel=1.0)
    trace = solver(folded, geometry(folded, kind), x0, opts, 60, Trace())
    assert trace.best == pytest.approx(opt, rel=1e-3)
    assert trace.best >= opt * (1 - 1e-7)
    assert len(trace.values) <= 61


def test_ipm_reaches_the_cvxpy_optimum(data: GroupData, optimum) -> None:
    x_star, opt = optimum
    trace = log_barrier_ipm(data, erm(data), 16.0, 300, Trace(), gap_tol=1e-9)
    assert trace.best == pytest.approx(opt, rel=1e-6)
    assert np.allclose(trace.x_best, x_star, atol=1e-3 * (1 + np.abs(x_star).max()))
    assert trace.solves[-1] < 300


def test_duplication_leaves_f_erm_and_opt_unchanged(data: GroupData, optimum) -> None:
    dup = duplicate(data, 3)
    assert dup.m == 3 * data.m and np.all(dup.sizes == np.repeat(data.sizes, 3))
    rng = np.random.default_rng(4)
    for _ in range(5):
        x = rng.standard_normal(data.d)
        assert worst_group_loss(dup, x) == pytest.approx(worst_group_loss(data, x), rel=1e-12)
        assert np.allclose(
            np.sort(group_losses(dup, x)), np.sort(np.repeat(group_losses(data, x), 3))
        )
    assert np.allclose(erm(dup), erm(data), atol=1e-10)
    assert cvxpy_optimum(dup)[1] == pytest.approx(optimum[1], rel=1e-7)
    with pytest.raises(ValueError, match="k=0"):
        duplicate(data, 0)


def test_interpolation_p2_is_erm_and_large_p_approaches_gdr(data: GroupData, optimum) -> None:
    x_erm = erm(data)
    assert np.allclose(interpolation_solve(data, 2.0), x_erm, atol=1e-8)
    # reference ERM: minimise the mean of group losses by dense normal equations
    w = np.repeat(1 / data.sizes, data.sizes)
    ref = np.linalg.solve(data.A.T @ (data.A * w[:, None]), data.A.T @ (w * data.b))
    assert np.allclose(x_erm, ref, atol=1e-8)
    worst = [group_losses(data, interpolation_solve(data, p)).max() for p in (2, 8, 64)]
    assert worst[0] >= worst[1] >= worst[2] >= optimum[1] * (1 - 1e-9)
    with pytest.raises(ValueError, match="p=1"):
        interpolation_solve(data, 1)
