"""Metrics against brute force, the velocity stage, the loss modes, the pass rule and the
configs' error paths."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import torch

from rayworks.core.config import build_config
from rayworks.core.errors import ConfigError
from rayworks.pipelines.mosiv.config import MosivConfig
from rayworks.pipelines.mosiv.fit import estimate_velocity, scene_loss
from rayworks.pipelines.mosiv.render import chamfer, emd, iou, silhouettes
from rayworks.pipelines.mosiv.report import pass_rule
from rayworks.pipelines.mosiv.scenes import build_scene, floor_frame, observation_sigma
from rayworks.platform.registry import get_pipeline


def test_chamfer_and_emd_match_brute_force() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(6, 2)), rng.normal(size=(9, 2))
    d = np.array([[np.hypot(*(p - q)) for q in b] for p in a])
    ref = d.min(1).mean() + d.min(0).mean()
    assert np.isclose(chamfer(torch.tensor(a), torch.tensor(b)).item(), ref)
    a5, b5 = a[:5], b[:5]
    best = min(
        np.mean([np.hypot(*(a5[i] - b5[j])) for i, j in enumerate(perm)])
        for perm in itertools.permutations(range(5))
    )
    assert np.isclose(emd(a5, b5), best)
    assert emd(a5, a5[::-1].copy()) == 0.0


def test_silhouette_and_iou() -> None:
    pts = torch.stack(
        torch.meshgrid(torch.linspace(0.3, 0.5, 11), torch.linspace(0.3, 0.5, 11), indexing="ij"),
        -1,
    ).reshape(-1, 2)
    image, line = silhouettes(pts, 32, 0.02, 1.0)
    assert image.shape == (32, 32) and line.shape == (32,)
    assert image[12, 12] > 0.9 and image[28, 28] < 1e-3  # inside / far outside the square
    assert line[12] > 0.99 and line[28] < 1e-3
    assert iou(image, image) == 1.0
    shifted, _ = silhouettes(pts + 0.3, 32, 0.02, 1.0)
    assert iou(image, shifted) == 0.0


def _smoke() -> MosivConfig:
    return build_config(MosivConfig, "smoke", (), [])


def test_velocity_stage_recovers_ballistic_v0() -> None:
    cfg = _smoke()
    sc = cfg.scene.model_copy(update={"noise": 0.0})
    scene = build_scene(sc, 0, seed=3)
    v0 = estimate_velocity(scene, 2)
    assert torch.allclose(v0, scene.truth["v0"], atol=0.05)


def test_objectwise_loss_is_zero_at_truth_and_scenewise_is_blind_to_swaps() -> None:
    cfg = _smoke()
    sc = cfg.scene.model_copy(update={"noise": 0.0, "n_points": 10_000})
    scene = build_scene(sc, 0, seed=1)
    x = scene.true_x
    for mode in ("objectwise", "scenewise"):
        assert scene_loss(scene, x, sc, mode, 1.0, 1.0).item() < 1e-6
    # swap the object labels of the simulated particles: the union is unchanged
    swapped = dataclasses.replace(scene, obj=1 - scene.obj)
    assert scene_loss(swapped, x, sc, "scenewise", 1.0, 1.0).item() < 1e-6
    assert scene_loss(swapped, x, sc, "objectwise", 1.0, 1.0).item() > 0.1


def test_silhouettes_carry_the_points_observation_noise() -> None:
    """Both targets are noisy at the same std: the silhouette term is not 0 at the true
    parameters, and its error grows with `scene.noise` as the points' error does."""
    sc = _smoke().scene
    errors = {}
    for noise in (0.0, 0.01, 0.02):
        scene = build_scene(sc.model_copy(update={"noise": noise}), 0, seed=2)
        x = scene.true_x
        sil = scene_loss(scene, x, sc, "objectwise", 0.0, 1.0).item()
        pts = (scene.obs_points[0] - x[:, scene.points_idx[0]]).std().item()
        errors[noise] = (sil, pts)
    assert errors[0.0] == (0.0, 0.0)
    assert errors[0.01][0] > 1e-4  # exact silhouettes would give 0 here
    sigma = observation_sigma(sc.model_copy(update={"noise": 0.01}))
    assert abs(errors[0.01][1] / sigma - 1) < 0.2  # the points' std is that sigma
    # same random draws scaled by the same std: both errors double with the noise
    assert 1.6 < errors[0.02][0] / errors[0.01][0] < 2.4
    assert abs(errors[0.02][1] / errors[0.01][1] - 2) < 1e-3


def test_default_scenes_land_within_the_observed_frames() -> None:
    """Every object of every default scene (test and validation split) reaches the floor
    before the observed frames end, so the floor friction µ_k is observed."""
    sc = MosivConfig().scene
    for split in ("test", "validation"):
        scene_cfg = sc.model_copy(update={"split": split})
        for index in range(sc.n_scenes):
            scene = build_scene(scene_cfg, index, seed=0, frames=sc.frames_observed)
            for k in range(2):
                frame = floor_frame(scene.true_x[:, scene.obj == k], scene.grid)
                assert frame is not None and 0 < frame < sc.frames_observed, (split, index, k)


def test_validation_split_draws_other_scenes() -> None:
    sc = _smoke().scene
    test = build_scene(sc, 0, seed=0)
    val = build_scene(sc.model_copy(update={"split": "validation"}), 0, seed=0)
    assert torch.equal(test.family, val.family)  # same material pair
    assert not torch.allclose(test.truth["log_E"], val.truth["log_E"])
    assert not torch.allclose(test.truth["v0"], val.truth["v0"])


def test_pass_rule() -> None:
    arm = lambda cd, le=0.1: {"future_cd": cd, "log_E_err_elastic": le}  # noqa: E731
    rows = {
        "objectwise": arm(1.0),
        "scenewise": arm(1.5),
        "prototype": arm(3.5),
        "prototype_oracle": arm(3.0),
    }
    assert pass_rule(rows, 1 / 3, 0.3)["pass_rule"] == 1.0
    assert pass_rule({**rows, "prototype": arm(2.9)}, 1 / 3, 0.3)["pass_rule"] == 0.0
    assert pass_rule({**rows, "scenewise": arm(0.9)}, 1 / 3, 0.3)["pass_rule"] == 0.0
    assert pass_rule({**rows, "objectwise": arm(1.0, 0.5)}, 1 / 3, 0.3)["pass_rule"] == 0.0
    assert pass_rule({"objectwise": arm(1.0)}, 1 / 3, 0.3) == {}


def test_presets_load() -> None:
    scenewise = get_pipeline("mosiv_scenewise").config
    for cls in (MosivConfig, scenewise):
        for preset in (None, *cls.presets):
            cfg = build_config(cls, preset, (), [])
            assert max(cfg.fit.horizons) <= cfg.scene.frames_observed
    assert build_config(scenewise, None, (), []).compare == []


@pytest.mark.parametrize(
    ("override", "names"),
    [
        ("scene.grid_n=4", r"scene\.grid_n"),
        ("fit.horizons=[4, 30]", r"fit\.horizons"),
        ("scene.E_range=[500, 100]", r"scene\.E_range"),
        ("fit.log_E_bounds=[7, 3]", r"fit\.log_E_bounds"),
        ("arm=mystery", "arm"),
        ("scene.pairs=[water-sand]", r"scene\.pairs"),
    ],
)
def test_bad_values_name_the_key(override: str, names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        build_config(MosivConfig, None, (), [override])
