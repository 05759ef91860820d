"""Differentiable 2D MLS-MPM (MOSIV Stage III, z_{n+1} = T(z_n; Θ)).

One substep: particle-to-grid (quadratic B-spline weights over the 3x3 stencil, APIC
affine momentum plus the MLS stress term -dt·V·(4/dx²)·τ), grid update (momentum → velocity,
gravity, boundaries with a per-node Coulomb floor friction), grid-to-particle (velocity and
APIC matrix C), F ← (I + dt·C)F, then the plastic return map (`constitutive.py`).
Scatter is `index_add_` over flattened node ids, so everything is differentiable with
autograd in float32 or float64.

Simplifications (named, reconstructed): contact between objects is the shared grid's
standard no-slip MPM contact (no multi-field inter-object friction); the floor has a
per-object Coulomb coefficient µ_k, mass-averaged onto each grid node, standing in for the
paper's pairwise µ_{m,m'} = (µ_m + µ_m')/2; walls and ceiling are frictionless slip.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rayworks.pipelines.mosiv.constitutive import kirchhoff, lame, return_map

OFFSETS = torch.tensor([(i, j) for i in range(3) for j in range(3)])


@dataclass(frozen=True)
class Grid:
    """nxn nodes on [0,1]², spacing dx = 1/n; `bound` nodes at each side are boundary."""

    n: int
    dt: float
    gravity: float = 9.8
    bound: int = 3
    boundaries: bool = True

    @property
    def dx(self) -> float:
        return 1.0 / self.n


@dataclass
class Particles:
    """Per-particle state z = {x, v, C, F} and constants (N particles)."""

    x: torch.Tensor  # (N, 2)
    v: torch.Tensor  # (N, 2)
    C: torch.Tensor  # (N, 2, 2) APIC affine velocity
    F: torch.Tensor  # (N, 2, 2) deformation gradient (elastic part)
    mass: torch.Tensor  # (N,)
    vol: torch.Tensor  # (N,)


@dataclass
class Material:
    """Per-particle material (gathered from per-object parameters): family id and θ."""

    family: torch.Tensor  # (N,) long: ELASTIC / PLASTICINE / SAND
    mu: torch.Tensor
    lam: torch.Tensor
    yield_stress: torch.Tensor
    theta_fric: torch.Tensor
    floor_mu: torch.Tensor


def material(obj, family, log_E, nu, log_yield, theta_fric, floor_mu) -> Material:
    """Per-particle `Material` from per-object tensors (K,) indexed by obj (N,)."""
    mu, lam = lame(log_E, nu)
    return Material(
        family[obj], mu[obj], lam[obj], torch.exp(log_yield)[obj], theta_fric[obj], floor_mu[obj]
    )


def weights(x: torch.Tensor, grid: Grid) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quadratic B-spline stencil: base node (N,2) long, fractional fx (N,2), w (N,3,2).
    Positions are clamped one node inside the grid so the stencil never leaves it."""
    xs = torch.clamp(x / grid.dx, 1.0, grid.n - 2.0)
    base = torch.floor(xs - 0.5)
    fx = xs - base
    w = torch.stack([0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1.0) ** 2, 0.5 * (fx - 0.5) ** 2], 1)
    return base.long(), fx, w


def stencil(p: Particles, grid: Grid) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """All 9 stencil nodes at once: flat node ids (N,9), weights (N,9), dpos = x_i - x_p (N,9,2)."""
    base, fx, w = weights(p.x, grid)
    ii, jj = OFFSETS[:, 0], OFFSETS[:, 1]
    wij = w[:, ii, 0] * w[:, jj, 1]
    dpos = (OFFSETS.to(p.x.dtype)[None] - fx[:, None]) * grid.dx
    idx = (base[:, None, 0] + ii) * grid.n + (base[:, None, 1] + jj)
    return idx, wij, dpos


def p2g(p: Particles, mat: Material, grid: Grid):
    """Scatter momentum (APIC + MLS stress), mass and friction mass to the flat n² grid."""
    n, dx, dt = grid.n, grid.dx, grid.dt
    idx, wij, dpos = stencil(p, grid)
    tau = kirchhoff(p.F, mat.family, mat.mu, mat.lam)
    affine = -dt * (4.0 / dx**2) * p.vol[:, None, None] * tau + p.mass[:, None, None] * p.C
    mom = p.mass[:, None, None] * p.v[:, None] + torch.einsum("nab,nkb->nka", affine, dpos)
    wm = wij * p.mass[:, None]
    payload = torch.cat(
        [wij[..., None] * mom, wm[..., None], (wm * mat.floor_mu[:, None])[..., None]], 2
    )
    out = torch.zeros(n * n, 4, dtype=p.x.dtype).index_add(
        0, idx.reshape(-1), payload.reshape(-1, 4)
    )
    return out[:, :2], out[:, 2], out[:, 3]


def grid_update(mom, m, fric, grid: Grid) -> torch.Tensor:
    """Node velocities (n², 2): momentum/mass, gravity, slip walls, Coulomb floor."""
    n = grid.n
    has = m > 0
    safe_m = torch.where(has, m, torch.ones_like(m))
    v = torch.where(has[:, None], mom / safe_m[:, None], torch.zeros_like(mom))
    v = v + grid.dt * torch.tensor([0.0, -grid.gravity], dtype=v.dtype)
    if not grid.boundaries:
        return v
    ij = torch.arange(n * n)
    gi, gj = ij // n, ij % n
    vx, vy = v[:, 0], v[:, 1]
    vx = torch.where((gi < grid.bound) & (vx < 0), torch.zeros_like(vx), vx)
    vx = torch.where((gi >= n - grid.bound) & (vx > 0), torch.zeros_like(vx), vx)
    vy_ceiling = torch.where((gj >= n - grid.bound) & (vy > 0), torch.zeros_like(vy), vy)
    floor = (gj < grid.bound) & (vy < 0)
    mu = fric / safe_m
    keep = torch.relu(1.0 - mu * vy.abs() / (vx.abs() + 1e-12))  # Coulomb: |v_t| -= µ|v_n|
    vx = torch.where(floor, vx * keep, vx)
    vy = torch.where(floor, torch.zeros_like(vy), vy_ceiling)
    return torch.stack([vx, vy], 1)


def g2p(p: Particles, mat: Material, gv: torch.Tensor, grid: Grid) -> Particles:
    """Gather velocity and APIC C, advect, update F and apply the plastic return map."""
    idx, wij, dpos = stencil(p, grid)
    gvij = gv[idx]  # (N, 9, 2)
    v = (wij[..., None] * gvij).sum(1)
    C = (4.0 / grid.dx**2) * torch.einsum("nk,nka,nkb->nab", wij, gvij, dpos)
    eye = torch.eye(2, dtype=p.x.dtype)
    F = (eye + grid.dt * C) @ p.F
    F = return_map(F, mat.family, mat.mu, mat.lam, mat.yield_stress, mat.theta_fric)
    return Particles(p.x + grid.dt * v, v, C, F, p.mass, p.vol)


def step(p: Particles, mat: Material, grid: Grid) -> Particles:
    """One MLS-MPM substep z_{n+1} = T(z_n; Θ)."""
    mom, m, fric = p2g(p, mat, grid)
    return g2p(p, mat, grid_update(mom, m, fric, grid), grid)


def rollout(p: Particles, mat: Material, grid: Grid, frames: int, substeps: int):
    """Particle positions at frames 0..frames-1 (frames, N, 2), `substeps` steps apart."""
    out = [p.x]
    for _ in range(frames - 1):
        for _ in range(substeps):
            p = step(p, mat, grid)
        out.append(p.x)
    return torch.stack(out)
