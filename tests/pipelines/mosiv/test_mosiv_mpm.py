"""The 2D MLS-MPM: mass and momentum conservation without external forces, gradients
against finite differences (float64), and the constitutive closed forms against
eigendecomposition / matrix-exponential references."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla
import torch

from rayworks.pipelines.mosiv import constitutive as cm
from rayworks.pipelines.mosiv.mpm import Grid, Particles, grid_update, material, p2g, step

D = torch.float64


def _blob(n_particles: int, n: int, seed: int, spread: float = 0.2) -> Particles:
    """Random particles in the middle of the box, random v, C and a perturbed F."""
    g = torch.Generator().manual_seed(seed)
    x = 0.5 - spread / 2 + spread * torch.rand(n_particles, 2, generator=g, dtype=D)
    v = torch.randn(n_particles, 2, generator=g, dtype=D)
    C = 0.5 * torch.randn(n_particles, 2, 2, generator=g, dtype=D)
    F = torch.eye(2, dtype=D) + 0.1 * torch.randn(n_particles, 2, 2, generator=g, dtype=D)
    vol = torch.full((n_particles,), 0.25 / n**2, dtype=D)
    return Particles(x, v, C, F, vol * (1 + torch.rand(n_particles, generator=g, dtype=D)), vol)


def _material(n_particles: int, family: int, log_E=6.0, nu=0.3, log_yield=0.5, theta=0.6):
    obj = torch.arange(n_particles) % 2
    t = lambda v: torch.as_tensor(v, dtype=D).expand(2).clone()  # noqa: E731
    return material(
        obj, torch.tensor([family, family]), t(log_E), t(nu), t(log_yield), t(theta), t(0.4)
    )


@pytest.mark.parametrize("family", [cm.ELASTIC, cm.PLASTICINE, cm.SAND])
def test_step_conserves_mass_and_momentum_without_external_forces(family: int) -> None:
    n = 32
    grid = Grid(n, 1e-4, gravity=0.0, boundaries=False)
    p = _blob(60, n, seed=family)
    mat = _material(60, family)
    total_mass = p.mass.sum()
    momentum0 = (p.mass[:, None] * p.v).sum(0)
    for _ in range(8):
        mom, m, _ = p2g(p, mat, grid)
        assert torch.allclose(m.sum(), total_mass, rtol=1e-12)  # P2G: partition of unity
        assert torch.allclose(mom.sum(0), (p.mass[:, None] * p.v).sum(0), atol=1e-12)
        p = step(p, mat, grid)
    assert torch.allclose((p.mass[:, None] * p.v).sum(0), momentum0, atol=1e-12)
    assert p.mass.sum() == total_mass
    # the stress did act: velocities changed although total momentum did not
    assert not torch.allclose(p.v, _blob(60, n, seed=family).v, atol=1e-3)


def test_gravity_and_floor_change_momentum() -> None:
    """Control for the test above: with gravity the same step does not conserve momentum."""
    n = 32
    p = _blob(40, n, seed=3)
    mat = _material(40, cm.ELASTIC)
    p1 = step(p, mat, Grid(n, 1e-3, gravity=9.8, boundaries=False))
    dmom = (p1.mass[:, None] * p1.v).sum(0) - (p.mass[:, None] * p.v).sum(0)
    assert torch.allclose(dmom, torch.tensor([0.0, -9.8e-3], dtype=D) * p.mass.sum(), atol=1e-12)


def test_floor_friction_is_coulomb() -> None:
    """A node moving down into the floor stops vertically and loses µ|v_n| tangentially."""
    n = 16
    grid = Grid(n, 1e-3, gravity=0.0)
    mom = torch.zeros(n * n, 2, dtype=D)
    m = torch.zeros(n * n, dtype=D)
    node = 5 * n + 1  # i = 5, j = 1: inside the floor band
    mom[node] = torch.tensor([2.0, -1.0], dtype=D)
    m[node] = 1.0
    fric = m * 0.5
    v = grid_update(mom, m, fric, grid)
    assert torch.allclose(v[node], torch.tensor([1.5, 0.0], dtype=D))
    mom[node] = torch.tensor([0.3, -1.0], dtype=D)  # µ|v_n| > |v_t|: sticks
    assert torch.allclose(grid_update(mom, m, fric, grid)[node], torch.zeros(2, dtype=D))


@pytest.mark.parametrize("family", [cm.ELASTIC, cm.PLASTICINE, cm.SAND])
def test_gradients_match_finite_differences(family: int) -> None:
    n = 8
    grid = Grid(n, 2e-3, gravity=9.8, boundaries=True)
    base = _blob(4, n, seed=10 + family, spread=0.15)
    weight = torch.randn(4, 2, generator=torch.Generator().manual_seed(1), dtype=D)

    def positions(log_E, nu, log_yield, theta, v0):
        mat = _material(4, family, log_E, nu, log_yield, theta)
        p = Particles(base.x, v0.expand(4, 2), base.C, base.F, base.mass, base.vol)
        for _ in range(2):
            p = step(p, mat, grid)
        return (weight * p.x).sum() + p.F.sum()

    inputs = tuple(
        torch.tensor(v, dtype=D, requires_grad=True) for v in (5.0, 0.3, -1.0, 0.5, [0.7, -0.4])
    )
    assert torch.autograd.gradcheck(positions, inputs, eps=1e-6, atol=1e-6, rtol=1e-4)
    grads = torch.autograd.grad(positions(*inputs), inputs)
    used = {cm.ELASTIC: (0, 1, 4), cm.PLASTICINE: (0, 1, 2, 4), cm.SAND: (0, 1, 3, 4)}[family]
    assert all(grads[i].abs().sum() > 0 for i in used)  # the law's parameters matter


def _random_F(k: int, seed: int, scale: float = 0.3) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.eye(2, dtype=D) + scale * torch.randn(k, 2, 2, generator=g, dtype=D)


def test_hencky_and_exp_match_eigen_references() -> None:
    F = torch.cat([_random_F(8, 0), torch.eye(2, dtype=D)[None]])
    tr, dev, norm = cm.hencky(F)
    for f, t, d, nrm in zip(F.numpy(), tr, dev, norm, strict=True):
        eps = 0.5 * sla.logm(f @ f.T).real
        assert np.isclose(t.item(), np.trace(eps), atol=1e-10)
        ref_dev = eps - np.trace(eps) / 2 * np.eye(2)
        assert np.allclose(d.numpy(), ref_dev, atol=1e-9)
        assert np.isclose(nrm.item(), np.linalg.norm(ref_dev), atol=1e-9)
    shift, scale = torch.linspace(-0.5, 0.5, 9, dtype=D), torch.linspace(-1.0, 0.8, 9, dtype=D)
    got = cm.exp_shift(shift, scale, dev, norm)
    for g, s, c, d in zip(got.numpy(), shift, scale, dev.numpy(), strict=True):
        ref = sla.expm(s.item() / 2 * np.eye(2) + c.item() * d)
        assert np.allclose(g, ref, atol=1e-10)


def test_return_maps_land_on_their_yield_surfaces() -> None:
    F = _random_F(50, 2, scale=0.25)
    k = len(F)
    mu, lam = cm.lame(torch.full((k,), 5.0, dtype=D), torch.full((k,), 0.3, dtype=D))
    tau_y = torch.full((k,), 2.0, dtype=D)
    theta = torch.full((k,), 0.5, dtype=D)
    fam = torch.full((k,), cm.PLASTICINE)
    Fp = cm.return_map(F, fam, mu, lam, tau_y, theta)
    tr0, _, norm0 = cm.hencky(F)
    tr1, _, norm1 = cm.hencky(Fp)
    radius = tau_y / (2 * mu)
    assert torch.allclose(tr1, tr0, atol=1e-10)  # von Mises keeps the volume
    assert torch.all(norm1 <= radius + 1e-9)
    yielded = norm0 > radius
    assert yielded.any() and torch.allclose(norm1[yielded], radius[yielded], atol=1e-9)
    assert torch.allclose(Fp[~yielded], F[~yielded])
    Fs = cm.return_map(F, torch.full((k,), cm.SAND), mu, lam, tau_y, theta)
    trs, _, norms = cm.hencky(Fs)
    alpha = cm.drucker_prager_alpha(theta)
    expanding = tr0 >= 0
    assert expanding.any() and (~expanding).any()
    assert torch.allclose(trs[expanding], torch.zeros_like(trs[expanding]), atol=1e-10)
    cone = norms + (lam + mu) / mu * trs * alpha
    assert torch.all(cone[~expanding] <= 1e-9)
    Fe = cm.return_map(F, torch.full((k,), cm.ELASTIC), mu, lam, tau_y, theta)
    assert torch.equal(Fe, F)


def test_stress_vanishes_under_rotation() -> None:
    angle = torch.tensor([0.0, 0.4, 1.3], dtype=D)
    R = torch.stack(
        [torch.stack([angle.cos(), -angle.sin()], 1), torch.stack([angle.sin(), angle.cos()], 1)], 1
    )
    mu, lam = cm.lame(torch.full((3,), 5.0, dtype=D), torch.full((3,), 0.3, dtype=D))
    for fam in (cm.ELASTIC, cm.PLASTICINE):
        tau = cm.kirchhoff(R, torch.full((3,), fam), mu, lam)
        assert tau.abs().max() < 1e-10
    stretched = torch.diag(torch.tensor([1.1, 1.0], dtype=D))[None]
    assert cm.kirchhoff(stretched, torch.tensor([0]), mu[:1], lam[:1])[0, 0, 0] > 0
