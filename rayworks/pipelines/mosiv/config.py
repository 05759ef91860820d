"""Configs of `mosiv` (continuous per-object fitting through a differentiable 2D MPM) and
its baselines `mosiv_scenewise`, `mosiv_prototype`, `mosiv_prototype_oracle`
(`docs/mosiv.md`).

    rayworks run mosiv --preset smoke
    rayworks bench mosiv --preset default --seeds 3

Our 2D CPU recipe is itself reconstructed from the paper's setup; the defaults here scale it
down further to fit a bench of ≈ 12 minutes per seed on a loaded 2-core machine. Every reduction is a key
below, with the recipe's value ("recipe") and, where known, the paper's in its description.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rayworks.core.config import Config, PipelineConfig

Arm = Literal["objectwise", "scenewise", "cd_only", "sil_only", "prototype", "prototype_oracle"]
Split = Literal["test", "validation"]
Pair = Literal[
    "elastic-elastic",
    "elastic-plasticine",
    "plasticine-plasticine",
    "elastic-sand",
    "plasticine-sand",
    "sand-sand",
]


def _range(lo: float, hi: float, what: str):
    return Field((lo, hi), description=f"{what} generation range (reconstructed)")


class SceneConfig(Config):
    """Procedural two-object collision scenes (all reconstructed; recipe: 2D, 4 pairs).

    The default throw (height, lift, separation, frames) is set so that the objects collide
    mid-air within the first ≈ 4 frames and every object lands inside the observed frames:
    the floor friction µ_k is then observed, not only extrapolated."""

    n_scenes: int = Field(4, ge=1, le=24, description="scenes (recipe: 4 pairs)")
    split: Split = Field(
        "test",
        description="scene draws: 'test' (the reported scenes) or 'validation' (other throws "
        "and parameters of the same pairs, from a separate random stream, for choosing knobs)",
    )
    pairs: list[Pair] = Field(
        default_factory=lambda: [
            "elastic-elastic",
            "elastic-plasticine",
            "plasticine-plasticine",
            "elastic-sand",
        ],
        min_length=1,
        description="material pair of scene i = pairs[i % len] (the recipe's four)",
    )
    grid_n: int = Field(24, ge=12, le=128, description="grid nxn, dx = 1/n (recipe: 48)")
    dt: float = Field(6e-4, gt=0, le=2e-3, description="substep τ in s (paper 1/4800; recipe 2e-4)")
    substeps: int = Field(16, ge=1, description="substeps per frame (recipe: 100)")
    frames_observed: int = Field(
        14, ge=2, description="observed frames, landing included (recipe: 20)"
    )
    frames_future: int = Field(10, ge=1, description="future frames (recipe: 20)")
    gravity: float = Field(9.8, ge=0, description="gravity (m/s², domain = 1 m)")
    object_size: float = Field(0.09, gt=0.02, lt=0.2, description="half-size of each shape")
    separation: float = Field(0.32, gt=0, lt=0.8, description="initial centre distance")
    height: float = Field(0.28, gt=0.1, lt=0.8, description="initial centre height")
    height_jitter: float = Field(
        0.01, ge=0, lt=0.1, description="centre height ± this, uniform, per object"
    )
    speed_range: tuple[float, float] = _range(1.5, 2.5, "horizontal speed toward the other")
    lift_range: tuple[float, float] = _range(-0.7, -0.2, "initial upward speed (< 0: downward)")
    E_range: tuple[float, float] = _range(80.0, 400.0, "Young's modulus E (rho = 1)")
    nu_range: tuple[float, float] = _range(0.2, 0.4, "Poisson ratio nu")
    yield_range: tuple[float, float] = _range(3.0, 10.0, "von Mises yield stress τ_Y")
    friction_angle_range: tuple[float, float] = _range(25.0, 40.0, "sand friction angle (deg)")
    floor_mu_range: tuple[float, float] = _range(0.1, 0.6, "floor Coulomb µ_k")
    n_points: int = Field(128, ge=8, description="observed surface points per object (recipe 128)")
    noise: float = Field(
        0.01,
        ge=0,
        description="observation noise std / object extent (recipe 0.01): on the observed "
        "points and on the particles the target silhouettes are drawn from",
    )
    image_res: int = Field(64, ge=8, description="silhouette resolution (recipe 64²)")
    splat_sigma: float = Field(0.5, gt=0, description="splat sigma in grid cells (reconstructed)")
    splat_gain: float = Field(1.0, gt=0, description="splat gain (reconstructed)")

    @model_validator(mode="after")
    def _ordered(self) -> SceneConfig:
        for key in (
            "speed_range",
            "lift_range",
            "E_range",
            "nu_range",
            "yield_range",
            "friction_angle_range",
            "floor_mu_range",
        ):
            lo, hi = getattr(self, key)
            if lo > hi:
                raise ValueError(f"scene.{key}=({lo}, {hi}) must have low ≤ high")
        if not (self.nu_range[0] > 0 and self.nu_range[1] < 0.45):
            raise ValueError(f"scene.nu_range={self.nu_range} must lie in (0, 0.45)")
        if self.E_range[0] <= 0 or self.yield_range[0] <= 0:
            raise ValueError("scene.E_range and scene.yield_range must be positive")
        return self


class FitConfig(Config):
    """Gradient fitting of the continuous per-object parameters (Eq. 3, step 5)."""

    iterations: int = Field(20, ge=1, description="Adam iterations in all (recipe 60; paper 200)")
    lr: float = Field(0.05, gt=0, description="Adam lr on log E, logits, v0 (recipe 0.05)")
    horizons: list[int] = Field(
        default_factory=lambda: [5, 10, 14],
        min_length=1,
        description="horizon curriculum in frames, equal iteration shares (recipe 5→10→20)",
    )
    grad_clip: float = Field(1.0, gt=0, description="gradient-norm clip (recipe 1.0)")
    lambda_cd: float = Field(
        1.0,
        ge=0,
        description="λ_CD of Eq. 3 (paper: not given); chosen over {0.25, 1, 4, 16} by the "
        "future-frame Chamfer to the observed points on the validation split",
    )
    sil_weight: float = Field(1.0, ge=0, description="weight of the mean-L1 silhouette term")
    init_log_E_offset: float = Field(1.0, ge=0, description="init log E = truth ± this (recipe 1)")
    log_E_bounds: tuple[float, float] = Field(
        (3.0, 6.6), description="log E kept in these bounds (explicit-step stability, CFL)"
    )
    fit_velocity: bool = Field(
        False, description="also refine v0 jointly with θ (paper: separate velocity stage first)"
    )
    velocity_frames: int = Field(3, ge=2, description="frames of the ballistic v0 estimate")

    @model_validator(mode="after")
    def _bounds(self) -> FitConfig:
        lo, hi = self.log_E_bounds
        if lo >= hi:
            raise ValueError(f"fit.log_E_bounds=({lo}, {hi}) must have low < high")
        return self


class PrototypeConfig(Config):
    """Discrete prototype libraries (OPGS-like baselines; library values reconstructed)."""

    library: list[tuple[str, float]] = Field(
        default_factory=lambda: [
            ("elastic", 0.25),
            ("elastic", 0.75),
            ("plasticine", 0.25),
            ("plasticine", 0.75),
            ("sand", 0.5),
        ],
        description="(family, q): K=5 mixed prototypes, every parameter at quantile q of "
        "its range (recipe: K = 5)",
    )
    oracle_quantiles: list[float] = Field(
        default_factory=lambda: [0.1, 0.3, 0.5, 0.7, 0.9],
        description="oracle library: the true family at these quantiles (K = 5)",
    )


class MosivConfig(PipelineConfig):
    """MOSIV-2D: one arm reported, `compare` arms run in the same run for the pass rule."""

    presets = {
        "smoke": {
            "scene": {
                "n_scenes": 1,
                "grid_n": 16,
                "object_size": 0.1,
                "substeps": 8,
                "dt": 1e-3,
                "frames_observed": 3,
                "frames_future": 2,
                "n_points": 32,
                "image_res": 24,
            },
            "fit": {"iterations": 2, "horizons": [2, 3], "velocity_frames": 2},
            "prototypes": {
                "oracle_quantiles": [0.25, 0.75],
                "library": [("elastic", 0.5), ("plasticine", 0.5)],
            },
        },
    }

    arm: Arm = Field("objectwise", description="arm this run reports (headline)")
    compare: list[Arm] = Field(
        default_factory=lambda: ["scenewise", "prototype", "prototype_oracle"],
        description="arms also run in this run (the pass rule needs b, e, f)",
    )
    scene: SceneConfig = Field(default_factory=SceneConfig)
    fit: FitConfig = Field(default_factory=FitConfig)
    prototypes: PrototypeConfig = Field(default_factory=PrototypeConfig)
    pass_ratio: float = Field(1 / 3, gt=0, description="pass: CD_fut(a) ≤ this x (e), (f)")
    pass_log_E: float = Field(0.3, gt=0, description="pass: elastic |log E err| under (a)")
    gif: bool = Field(True, description="write fitted-vs-true rollout GIF of scene 0")

    @model_validator(mode="after")
    def _fits(self) -> MosivConfig:
        s, f = self.scene, self.fit
        if max(f.horizons) > s.frames_observed:
            raise ValueError(
                f"fit.horizons={f.horizons} exceed scene.frames_observed={s.frames_observed}"
            )
        if f.velocity_frames > s.frames_observed:
            raise ValueError(
                f"fit.velocity_frames={f.velocity_frames} exceeds "
                f"scene.frames_observed={s.frames_observed}"
            )
        return self
