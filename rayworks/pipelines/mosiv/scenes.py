"""Procedural two-object collision scenes and their observations (our CPU recipe,
`docs/mosiv.md`; all reconstructed): two shapes of given constitutive families thrown at
each other so they collide mid-air and land, simulated with the true parameters by `mpm.py`.

Observations (emulating Stage I, as in the paper's noise-sensitivity study): per object a
fixed subset of `n_points` true particles plus Gaussian noise of std `noise`·extent, and soft
silhouettes from two views (`render.py`) of all the object's true particles displaced by
Gaussian noise of the same std (an independent draw per frame), so neither target is exact
at the true parameters. The initial continuum is the true particle set (Stage II assumed
perfect: named simplification).

Splits: `scene.split = "validation"` draws other throws and parameters of the same material
pairs from a separate random stream, so knobs (λ_CD) are chosen on scenes the reported
("test") ones never share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from rayworks.pipelines.mosiv.constitutive import FAMILIES
from rayworks.pipelines.mosiv.mpm import Grid, Particles, material, rollout
from rayworks.pipelines.mosiv.render import silhouettes

SHAPES = ("disc", "square", "rect")


@dataclass
class Scene:
    """One scene: particles, object ids, true per-object parameters and observations."""

    name: str
    grid: Grid
    substeps: int
    frame_dt: float
    start: Particles
    obj: torch.Tensor  # (N,) object id
    family: torch.Tensor  # (K,) family id
    truth: dict[str, torch.Tensor]  # log_E, nu, log_yield, theta_fric, floor_mu, v0 (K[,2])
    points_idx: list[torch.Tensor]  # per object: indices of the observed subset
    true_x: torch.Tensor  # (T, N, 2) clean positions, T = observed + future frames
    obs_points: list[torch.Tensor]  # per object (T, n_points, 2), noisy
    obs_image: torch.Tensor  # (T, K, res, res) per-object soft silhouettes, view 0 (noisy)
    obs_line: torch.Tensor  # (T, K, res) view 1 (noisy)
    frames_observed: int


def shape_particles(shape: str, centre, size: float, spacing: float, rng) -> np.ndarray:
    """Jittered lattice points (spacing apart) inside a disc/square/rect of half-size size."""
    half_w, half_h = (size * 1.25, size * 0.8) if shape == "rect" else (size, size)
    xs = np.arange(-half_w + spacing / 2, half_w, spacing)
    ys = np.arange(-half_h + spacing / 2, half_h, spacing)
    pts = np.stack(np.meshgrid(xs, ys, indexing="ij"), -1).reshape(-1, 2)
    if shape == "disc":
        pts = pts[np.linalg.norm(pts, axis=1) <= size]
    pts = pts + rng.uniform(-0.25, 0.25, pts.shape) * spacing
    return pts + np.asarray(centre)


def _log_uniform(rng, lo: float, hi: float) -> float:
    return float(rng.uniform(math.log(lo), math.log(hi)))


def true_parameters(families: list[int], sc, rng) -> dict[str, torch.Tensor]:
    """Per-object ground truth drawn from the config's generation ranges."""
    k = len(families)
    out = {
        "log_E": [_log_uniform(rng, *sc.E_range) for _ in range(k)],
        "nu": [float(rng.uniform(*sc.nu_range)) for _ in range(k)],
        "log_yield": [_log_uniform(rng, *sc.yield_range) for _ in range(k)],
        "theta_fric": [math.radians(rng.uniform(*sc.friction_angle_range)) for _ in range(k)],
        "floor_mu": [float(rng.uniform(*sc.floor_mu_range)) for _ in range(k)],
    }
    return {key: torch.tensor(v, dtype=torch.float32) for key, v in out.items()}


def observation_sigma(sc) -> float:
    """Std of the observation noise in domain units: `noise` x the object extent (2 x
    half-size), shared by the observed points and the silhouettes' particles."""
    return sc.noise * 2 * sc.object_size


def floor_frame(x: torch.Tensor, grid: Grid) -> int | None:
    """First frame at which a particle of x (T, n, 2) reaches the floor's grid nodes (its
    quadratic stencil holds a boundary node: y < (bound + 0.5)·dx), or None."""
    hit = torch.nonzero(x[..., 1].amin(-1) < (grid.bound + 0.5) * grid.dx)
    return int(hit[0]) if len(hit) else None


def build_scene(sc, index: int, seed: int, frames: int | None = None) -> Scene:
    """Scene `index` of a run with seed `seed` (`sc` a `SceneConfig`): pair type
    sc.pairs[index % len], shapes, positions, velocities and parameters from one rng (its
    stream depends on `sc.split`)."""
    stream = [seed, index, 7] if sc.split == "test" else [seed, index, 7, 1]
    rng = np.random.default_rng(stream)
    pair = sc.pairs[index % len(sc.pairs)].split("-")
    families = [FAMILIES.index(f) for f in pair]
    grid = Grid(sc.grid_n, sc.dt, sc.gravity)
    spacing = grid.dx / 2
    xs, objs, v0 = [], [], []
    for k in range(2):
        side = -1 if k == 0 else 1
        centre = (
            0.5 + side * (sc.separation / 2 + rng.uniform(-0.02, 0.02)),
            sc.height + rng.uniform(-sc.height_jitter, sc.height_jitter),
        )
        shape = SHAPES[int(rng.integers(len(SHAPES)))]
        pts = shape_particles(shape, centre, sc.object_size, spacing, rng)
        xs.append(pts)
        objs.append(np.full(len(pts), k))
        v0.append([-side * rng.uniform(*sc.speed_range), rng.uniform(*sc.lift_range)])
    x = torch.tensor(np.concatenate(xs), dtype=torch.float32)
    obj = torch.tensor(np.concatenate(objs))
    fam = torch.tensor(families)
    truth = true_parameters(families, sc, rng)
    truth["v0"] = torch.tensor(v0, dtype=torch.float32)
    start = initial_particles(x, obj, truth["v0"], spacing)
    frames = frames or sc.frames_observed + sc.frames_future
    with torch.no_grad():
        mat = material(obj, fam, *(truth[k] for k in PARAM_KEYS))
        true_x = rollout(start, mat, grid, frames, sc.substeps)
    sigma = observation_sigma(sc)
    points_idx, obs_points = [], []
    for k in range(2):
        members = torch.nonzero(obj == k)[:, 0]
        pick = rng.choice(len(members), size=min(sc.n_points, len(members)), replace=False)
        idx = members[torch.tensor(np.sort(pick))]
        noise = rng.normal(0.0, sigma, (frames, len(idx), 2))
        points_idx.append(idx)
        obs_points.append(true_x[:, idx] + torch.tensor(noise, dtype=torch.float32))
    jitter = torch.tensor(rng.normal(0.0, sigma, tuple(true_x.shape)), dtype=torch.float32)
    image, line = object_silhouettes(true_x + jitter, obj, sc)
    name = f"{index}:{pair[0]}-{pair[1]}"
    return Scene(
        name,
        grid,
        sc.substeps,
        sc.dt * sc.substeps,
        start,
        obj,
        fam,
        truth,
        points_idx,
        true_x,
        obs_points,
        image,
        line,
        sc.frames_observed,
    )


PARAM_KEYS = ("log_E", "nu", "log_yield", "theta_fric", "floor_mu")


def initial_particles(x, obj, v0, spacing: float) -> Particles:
    """Particles at rest shape (F = I, C = 0) with object velocities v0[obj]; rho = 1."""
    n = len(x)
    vol = torch.full((n,), spacing**2, dtype=x.dtype)
    eye = torch.eye(2, dtype=x.dtype).repeat(n, 1, 1)
    return Particles(x, v0[obj], torch.zeros(n, 2, 2, dtype=x.dtype), eye, vol.clone(), vol)


def object_silhouettes(x: torch.Tensor, obj: torch.Tensor, sc):
    """Per-object soft silhouettes of positions x (T, N, 2): ((T, K, r, r), (T, K, r))."""
    sigma = sc.splat_sigma / sc.grid_n
    per = [silhouettes(x[:, obj == k], sc.image_res, sigma, sc.splat_gain) for k in range(2)]
    return torch.stack([p[0] for p in per], 1), torch.stack([p[1] for p in per], 1)
