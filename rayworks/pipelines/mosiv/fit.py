"""The MOSIV algorithm on a 2D scene (arXiv 2603.06022; `docs/mosiv.md`):
fit continuous per-object material parameters θ_k (and initial velocities) through the
differentiable MPM with the geometry-aligned, object-wise loss of Eq. 3, and the baselines
that share this file's loss: the scene-wise loss and discrete prototype selection.

1. Velocity stage (step 5, reconstructed): a ballistic least-squares fit of each object's
   observed centroid over the first `velocity_frames` frames (mostly before contact) replaces the
   paper's 80 Adam iterations; the method then refines v0 jointly with θ.
2. Parameters per object k (never shared): log E, nu = 0.45·sigmoid(a), log τ_Y (plasticine),
   θ_fric = 10° + 40°·sigmoid(b) (sand), floor µ_k = sigmoid(c). The constitutive family comes from
   the material masks (known, as in the paper).
3. Loss (Eq. 3): L = (1/M) Σ_i [ w_sil Σ_views Σ_k mean|A^sim_k - Ã_k| + λ_CD Σ_k
   CD(P^sim_k, P^obs_k) ] over frames 1..H-1; the scene-wise variant uses one union mask per
   view and one Chamfer over the union of points.
4. Optimisation (step 5): Adam (lr 0.05 in log space), gradient-norm clip, horizon curriculum
   H over `horizons` with equal iteration shares (reconstructed fixed schedule; the paper
   grows H as alignment improves), log E projected into `log_E_bounds` after each step.
   No re-synchronisation of states (named simplification).
5. Prototype selection (OPGS-like baselines e, f): every per-object pair of a K-prototype
   library scored by the same object-wise loss on all observed frames (K² forward rollouts);
   velocities from step 1, floor µ at the middle of its range.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch

from rayworks.pipelines.mosiv.constitutive import FAMILIES
from rayworks.pipelines.mosiv.mpm import material, rollout
from rayworks.pipelines.mosiv.render import chamfer
from rayworks.pipelines.mosiv.scenes import PARAM_KEYS, Scene, object_silhouettes

NU_MAX = 0.45
THETA_LO, THETA_SPAN = math.radians(10.0), math.radians(40.0)


@dataclass
class Estimate:
    """Physical per-object estimate: family (K,) and θ tensors (K,), v0 (K, 2)."""

    family: torch.Tensor
    params: dict[str, torch.Tensor]


def estimate_velocity(scene: Scene, frames: int) -> torch.Tensor:
    """v0 (K, 2) from c(t) + ½gt²ŷ = c0 + v0·t fitted to the observed point centroids."""
    t = torch.arange(frames, dtype=torch.float32) * scene.frame_dt
    design = torch.stack([torch.ones_like(t), t], 1)
    lift = torch.stack([torch.zeros_like(t), 0.5 * scene.grid.gravity * t * t], 1)
    out = []
    for pts in scene.obs_points:
        centre = pts[:frames].mean(1) + lift  # (frames, 2)
        out.append(torch.linalg.lstsq(design, centre).solution[1])
    return torch.stack(out)


def simulate(scene: Scene, est: Estimate, frames: int) -> torch.Tensor:
    """Positions (frames, N, 2) of the scene's start particles under the estimate."""
    start = scene.start
    v = est.params["v0"][scene.obj]
    p = type(start)(start.x, v, start.C, start.F, start.mass, start.vol)
    mat = material(scene.obj, est.family, *(est.params[k] for k in PARAM_KEYS))
    return rollout(p, mat, scene.grid, frames, scene.substeps)


def scene_loss(
    scene: Scene, x: torch.Tensor, sc, mode: str, lambda_cd: float, sil_weight: float
) -> torch.Tensor:
    """Eq. 3 over frames 1..H-1 of the simulated positions x (H, N, 2)."""
    h = x.shape[0]
    obs_pts = [p[1:h] for p in scene.obs_points]
    sim_pts = [x[1:h, scene.obj == k] for k in range(len(obs_pts))]
    image, line = object_silhouettes(x[1:h], scene.obj, sc) if sil_weight > 0 else (None, None)
    t_image, t_line = scene.obs_image[1:h], scene.obs_line[1:h]
    if mode == "scenewise":
        cd = chamfer(torch.cat(sim_pts, 1), torch.cat(obs_pts, 1))
        if sil_weight > 0:
            union = [1 - (1 - a).prod(1) for a in (image, line, t_image, t_line)]
            sil = (union[0] - union[2]).abs().mean((1, 2)) + (union[1] - union[3]).abs().mean(1)
    else:
        cd = sum(chamfer(s, o) for s, o in zip(sim_pts, obs_pts, strict=True))
        if sil_weight > 0:
            sil = (image - t_image).abs().mean((2, 3)).sum(1) + (line - t_line).abs().mean(2).sum(1)
    total = lambda_cd * cd
    if sil_weight > 0:
        total = total + sil_weight * sil
    return total.mean()


def _physical(raw: dict[str, torch.Tensor], family: torch.Tensor) -> Estimate:
    return Estimate(
        family,
        {
            "log_E": raw["log_E"],
            "nu": NU_MAX * torch.sigmoid(raw["nu"]),
            "log_yield": raw["log_yield"],
            "theta_fric": THETA_LO + THETA_SPAN * torch.sigmoid(raw["theta"]),
            "floor_mu": torch.sigmoid(raw["mu"]),
            "v0": raw["v0"],
        },
    )


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def initial_raw(scene: Scene, sc, fc, rng: np.random.Generator) -> dict[str, torch.Tensor]:
    """Start of the fit: log E* ± offset (random sign), nu = 0.3, mid-range τ_Y, θ, µ."""
    k = len(scene.family)
    sign = torch.tensor(rng.choice([-1.0, 1.0], size=k), dtype=torch.float32)
    mid = lambda lo, hi: (lo + hi) / 2  # noqa: E731
    theta = (math.radians(mid(*sc.friction_angle_range)) - THETA_LO) / THETA_SPAN
    full = lambda v: torch.full((k,), float(v))  # noqa: E731
    lo, hi = fc.log_E_bounds
    return {
        "log_E": (scene.truth["log_E"] + sign * fc.init_log_E_offset).clamp(lo, hi),
        "nu": full(_logit(0.3 / NU_MAX)),
        "log_yield": full(mid(*map(math.log, sc.yield_range))),
        "theta": full(_logit(theta)),
        "mu": full(_logit(mid(*sc.floor_mu_range))),
        "v0": estimate_velocity(scene, fc.velocity_frames),
    }


def fit_continuous(
    scene: Scene, sc, fc, mode: str, lambda_cd: float, sil_weight: float, rng: np.random.Generator
) -> tuple[Estimate, list[float]]:
    """MOSIV fit (steps 1-4): Adam on all per-object raw parameters through the simulator
    with the horizon curriculum; returns the final estimate and the loss curve."""
    raw = {
        k: v.clone().requires_grad_(k != "v0" or fc.fit_velocity)
        for k, v in initial_raw(scene, sc, fc, rng).items()
    }
    leaves = [v for v in raw.values() if v.requires_grad]
    opt = torch.optim.Adam(leaves, lr=fc.lr)
    stages = np.array_split(np.arange(fc.iterations), len(fc.horizons))
    curve = []
    for horizon, its in zip(fc.horizons, stages, strict=True):
        for _ in its:
            opt.zero_grad()
            x = simulate(scene, _physical(raw, scene.family), horizon)
            loss = scene_loss(scene, x, sc, mode, lambda_cd, sil_weight)
            loss.backward()
            for leaf in leaves:  # a diverged rollout must not poison the parameters
                leaf.grad = torch.nan_to_num(leaf.grad, nan=0.0, posinf=0.0, neginf=0.0)
            torch.nn.utils.clip_grad_norm_(leaves, fc.grad_clip)
            opt.step()
            with torch.no_grad():
                raw["log_E"].clamp_(*fc.log_E_bounds)
            curve.append(float(loss.detach()))
    return _physical({k: v.detach() for k, v in raw.items()}, scene.family), curve


def prototype(family: str, q: float, sc) -> dict[str, float]:
    """A library entry: every parameter of `family` at quantile q of its generation range
    (log-uniform ranges interpolated in log space)."""
    lerp = lambda r: r[0] + q * (r[1] - r[0])  # noqa: E731
    log_lerp = lambda r: math.log(r[0]) + q * (math.log(r[1]) - math.log(r[0]))  # noqa: E731
    return {
        "family": FAMILIES.index(family),
        "log_E": log_lerp(sc.E_range),
        "nu": lerp(sc.nu_range),
        "log_yield": log_lerp(sc.yield_range),
        "theta_fric": math.radians(lerp(sc.friction_angle_range)),
    }


def _estimate(chosen: list[dict[str, float]], v0: torch.Tensor, mu: float) -> Estimate:
    params = {
        k: torch.tensor([c[k] for c in chosen], dtype=torch.float32)
        for k in ("log_E", "nu", "log_yield", "theta_fric")
    }
    params["floor_mu"] = torch.full((len(chosen),), mu)
    params["v0"] = v0
    return Estimate(torch.tensor([c["family"] for c in chosen]), params)


def select_prototypes(
    scene: Scene, sc, fc, libraries: list[list[dict[str, float]]]
) -> tuple[Estimate, list[float]]:
    """Grid search over per-object library choices (one library per object) on the
    object-wise loss of all observed frames; returns the best estimate and all scores."""
    v0 = estimate_velocity(scene, fc.velocity_frames)
    mu = sum(sc.floor_mu_range) / 2
    best, scores = None, []
    with torch.no_grad():
        for combo in itertools.product(*libraries):
            est = _estimate(list(combo), v0, mu)
            x = simulate(scene, est, scene.frames_observed)
            score = float(scene_loss(scene, x, sc, "objectwise", fc.lambda_cd, fc.sil_weight))
            score = score if math.isfinite(score) else math.inf
            scores.append(score)
            if best is None or score < best[0]:
                best = (score, est)
    return best[1], scores
