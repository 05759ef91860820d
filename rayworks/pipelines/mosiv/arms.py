"""One piece of a `mosiv` run = one arm on one scene (a pure function `fan_out` sends to a
Ray task): build the scene, fit or select, roll the estimate out over observed + future
frames and score it against the clean truth.

Arms (`docs/mosiv.md`): objectwise (a, MOSIV-2D), scenewise (b), cd_only (c), sil_only (d),
prototype (e, mixed K = 5 library), prototype_oracle (f, true family, library parameters).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch

from rayworks.pipelines.mosiv.config import MosivConfig
from rayworks.pipelines.mosiv.constitutive import FAMILIES, PLASTICINE, SAND
from rayworks.pipelines.mosiv.fit import (
    Estimate,
    fit_continuous,
    prototype,
    select_prototypes,
    simulate,
)
from rayworks.pipelines.mosiv.render import chamfer, emd, iou
from rayworks.pipelines.mosiv.scenes import Scene, build_scene, floor_frame, object_silhouettes

GRADIENT_ARMS = {
    "objectwise": ("objectwise", 1, 1),
    "scenewise": ("scenewise", 1, 1),
    "cd_only": ("objectwise", 1, 0),
    "sil_only": ("objectwise", 0, 1),
}


def run_arm(scene: Scene, cfg: MosivConfig, arm: str, rng) -> tuple[Estimate, list[float]]:
    """The arm's estimate for the scene and its curve (losses or prototype scores)."""
    sc, fc = cfg.scene, cfg.fit
    if arm in GRADIENT_ARMS:
        mode, use_cd, use_sil = GRADIENT_ARMS[arm]
        return fit_continuous(
            scene, sc, fc, mode, fc.lambda_cd * use_cd, fc.sil_weight * use_sil, rng
        )
    if arm == "prototype":
        library = [prototype(f, q, sc) for f, q in cfg.prototypes.library]
        return select_prototypes(scene, sc, fc, [library, library])
    libraries = [
        [prototype(FAMILIES[int(f)], q, sc) for q in cfg.prototypes.oracle_quantiles]
        for f in scene.family
    ]
    return select_prototypes(scene, sc, fc, libraries)


def parameter_errors(scene: Scene, est: Estimate) -> dict[str, float]:
    """Per-object |log E - log E*|, |nu - nu*|, |log τ_Y - log τ_Y*| (plasticine), |θ - θ*|
    in degrees (sand), |µ - µ*|, ‖v0 - v0*‖; τ_Y, θ only where the family was right."""
    t, p = scene.truth, est.params
    out: dict[str, float] = {}
    for k, fam in enumerate(scene.family.tolist()):
        right = int(est.family[k]) == fam
        out[f"obj{k}_family_ok"] = float(right)
        out[f"obj{k}_log_E_err"] = abs(float(p["log_E"][k] - t["log_E"][k]))
        out[f"obj{k}_nu_err"] = abs(float(p["nu"][k] - t["nu"][k]))
        out[f"obj{k}_mu_err"] = abs(float(p["floor_mu"][k] - t["floor_mu"][k]))
        out[f"obj{k}_v0_err"] = float(torch.linalg.norm(p["v0"][k] - t["v0"][k]))
        yield_err = abs(float(p["log_yield"][k] - t["log_yield"][k]))
        theta_err = math.degrees(abs(float(p["theta_fric"][k] - t["theta_fric"][k])))
        out[f"obj{k}_yield_err"] = yield_err if fam == PLASTICINE and right else math.nan
        out[f"obj{k}_theta_err"] = theta_err if fam == SAND and right else math.nan
    return out


def geometry_scores(scene: Scene, x: torch.Tensor, sc) -> dict[str, float]:
    """CD, EMD (observed subsets) and silhouette IoU against the clean truth, per split;
    `future_obs_cd`: the Chamfer term of Eq. 3 on the future frames, i.e. against the noisy
    observed points (what a held-out stretch of video would score; knobs are chosen on it
    over validation scenes)."""
    n_obs = scene.frames_observed
    image, line = object_silhouettes(x, scene.obj, sc)
    t_image, t_line = object_silhouettes(scene.true_x, scene.obj, sc)
    future = list(range(n_obs, len(x)))
    obs_cds = [
        chamfer(x[future][:, scene.obj == k], scene.obs_points[k][future]).mean()
        for k in range(len(scene.family))
    ]
    out = {"future_obs_cd": float(torch.stack(obs_cds).mean())}
    for split, frames in (("observed", range(1, n_obs)), ("future", range(n_obs, len(x)))):
        f = list(frames)
        cds = [
            chamfer(x[f][:, scene.obj == k], scene.true_x[f][:, scene.obj == k]).mean()
            for k in range(len(scene.family))
        ]
        emds = [
            emd(x[i, idx].numpy(), scene.true_x[i, idx].numpy())
            for i in f
            for idx in scene.points_idx
        ]
        ious = [iou(image[i, k], t_image[i, k]) for i in f for k in range(len(scene.family))]
        ious += [iou(line[i, k], t_line[i, k]) for i in f for k in range(len(scene.family))]
        out[f"{split}_cd"] = float(torch.stack(cds).mean())
        out[f"{split}_emd"] = float(np.mean(emds))
        out[f"{split}_iou"] = float(np.mean(ious))
    return out


def landing_frames(scene: Scene) -> dict[str, float]:
    """Per object, the first frame its true particles reach the floor (NaN: never)."""
    out = {}
    for k in range(len(scene.family)):
        frame = floor_frame(scene.true_x[:, scene.obj == k], scene.grid)
        out[f"obj{k}_floor_frame"] = math.nan if frame is None else float(frame)
    return out


def arm_piece(
    arm: str, scene_index: int, cfg: dict[str, Any], keep_rollout: bool = False
) -> dict[str, Any]:
    """Run one arm on one scene; metrics (+ fitted and true rollouts when keep_rollout)."""
    config = MosivConfig.model_validate(cfg)
    torch.manual_seed(config.seed)
    rng = np.random.default_rng([config.seed, scene_index, 11])
    scene = build_scene(config.scene, scene_index, config.seed)
    start = time.perf_counter()
    est, curve = run_arm(scene, config, arm, rng)
    seconds = time.perf_counter() - start
    with torch.no_grad():
        x = simulate(scene, est, len(scene.true_x))
    x = torch.nan_to_num(x, nan=0.5)
    row: dict[str, Any] = {
        "arm": arm,
        "scene": scene.name,
        "scene_index": scene_index,
        "seconds": seconds,
        **parameter_errors(scene, est),
        **geometry_scores(scene, x, config.scene),
        **landing_frames(scene),
        "curve": curve,
        "families": [FAMILIES[int(f)] for f in est.family],
        "true_families": [FAMILIES[int(f)] for f in scene.family],
    }
    if keep_rollout:
        row["rollout"] = x.numpy().astype(np.float32).tolist()
        row["truth"] = scene.true_x.numpy().astype(np.float32).tolist()
        row["obj"] = scene.obj.tolist()
    return row
