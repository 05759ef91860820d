"""Configs of `gdr` (ball oracle, Lewis geometry) and its baselines `gdr_euclid`, `gdr_ipm`,
`gdr_firstorder` (docs/gdr.md).

    rayworks run gdr --preset smoke
    rayworks bench gdr --preset default --seeds 1

Every run computes the cvxpy/CLARABEL optimum OPT as the reference, grid-tunes each arm
from the common ERM warm start and reports iterations to `target` gap. Values follow the
our reconstructed CPU recipe (docs/gdr.md); every reconstructed choice is a key here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rayworks.core.config import Config, PipelineConfig

Arm = Literal["lewis", "euclid", "ipm", "firstorder"]


class DataConfig(Config):
    """The synthetic recipe (all reconstructed: the paper's notebook is absent; docs/gdr.md)."""

    m: int = Field(100, ge=2, description="groups (paper/card: 100)")
    d: int = Field(10, ge=2, description="features (paper/card: 10)")
    n_per_group: int = Field(50, ge=1, description="rows per group n_i (card: 50)")
    n_adversarial: int = Field(5, ge=0, description="adversarial groups (paper: 5)")
    lam_max: float = Field(30.0, ge=1, description="normal groups: λ log-uniform in [1, lam_max]")
    kappa_target: float | None = Field(
        1e5,
        gt=1,
        description="solve λ_big so that κ(AᵀA) equals this (card: ≈ 1e5); null = use large_eig",
    )
    large_eig: float = Field(1e5, gt=0, description="λ_big when kappa_target is null")
    far: float = Field(10.0, ge=0, description="adversarial optimum c + far·q_k (card: D ≈ 10)")
    center_spread: float = Field(0.1, ge=0, description="normal optima c + spread·ξ (card 0.1)")
    normal_noise: float = Field(0.1, ge=0, description="normal groups' label noise (card 0.1)")
    adversarial_noise: float = Field(1e-3, ge=0, description="adversarial noise (card 1e-3)")

    @model_validator(mode="after")
    def _fits(self) -> DataConfig:
        if self.n_adversarial >= self.m:
            raise ValueError(f"data.n_adversarial={self.n_adversarial} must be < data.m={self.m}")
        if self.kappa_target is not None and self.n_adversarial >= self.d:
            raise ValueError(
                f"data.n_adversarial={self.n_adversarial} must be < data.d={self.d} "
                "when data.kappa_target is set"
            )
        return self


class OracleConfig(Config):
    """Ball-oracle trust region (Algorithm 1; the paper's experiments ran it unaccelerated)."""

    outer_iters: int = Field(100, ge=1, description="outer-iteration budget (card: 100)")
    eps_rels: list[float] = Field(
        default_factory=lambda: [1e-4, 1e-3],
        description="grid of ε/f(x₀) (β = ε/(4 log m), δ = ε/4); reconstructed scale",
    )
    radius_rels: list[float] = Field(
        default_factory=lambda: [0.1, 0.3, 1.0, 3.0, 10.0],
        description="grid of r/f(x₀), r the M-norm ball radius (theory r = C/ε; C unstated); "
        "reaches past 1 up to radii where the first ball no longer binds (r = 10 on the "
        "default instance: one outer call, the cost moves into its Newton solves)",
    )
    shrink: float = Field(1.0, gt=0, le=1, description="r ← shrink·r per outer step (paper: rho)")
    reg_coef: float = Field(1e-3, ge=0, description="f̂ = f̃ + reg_coef·ε/min{rank,m}·‖x-x₀‖²_M")
    max_newton: int = Field(30, ge=1, description="damped-Newton steps per oracle call")
    newton_tol: float = Field(1e-6, gt=0, description="stop Newton when -gᵀp ≤ newton_tol·ε")
    lewis_log_factor: float = Field(2.0, gt=0, description="Lewis iterations T = ⌈c·ln m⌉")
    accelerate: bool = Field(False, description="Monteiro-Svaiter acceleration (theory only)")


class BaselineConfig(Config):
    """IPM and first-order baselines, each grid-tuned (grids reconstructed)."""

    ipm_mus: list[float] = Field(
        default_factory=lambda: [4.0, 16.0, 64.0], description="barrier growth factors μ"
    )
    ipm_max_newton: int = Field(
        1000, ge=1, description="Newton-step budget of the IPM (short-step needs many)"
    )
    ipm_gap_tol: float = Field(1e-6, gt=0, description="IPM stops when m/τ ≤ tol·t")
    fo_iters: int = Field(2000, ge=1, description="first-order iteration budget")
    subgrad_etas: list[float] = Field(
        default_factory=lambda: [1e-3, 1e-2, 1e-1],
        description="subgradient η₀ grid (step η₀(1+‖x₀‖), fixed and 1/√t)",
    )
    fo_step_mults: list[float] = Field(
        default_factory=lambda: [1.0, 3.0, 10.0], description="smoothed GD/HB/Nesterov c in c/L"
    )
    fo_eps_rel: float = Field(1e-3, gt=0, description="smoothing ε/f(x₀) of the first-order arms")
    momentum: float = Field(0.9, ge=0, lt=1, description="heavy-ball momentum")


class GDRConfig(PipelineConfig):
    """GDR least squares: one arm reported, others compared in the same run, plus extras."""

    presets = {
        "smoke": {
            "data": {"m": 20, "d": 5, "n_per_group": 20, "n_adversarial": 2},
            "oracle": {"outer_iters": 20, "eps_rels": [1e-3], "radius_rels": [0.3, 1.0, 3.0]},
            "baselines": {
                "ipm_mus": [16.0],
                "fo_iters": 100,
                "subgrad_etas": [1e-2],
                "fo_step_mults": [3.0],
                "ipm_max_newton": 100,
            },
            "dup_ks": [1, 4],
            "m_sweep": [10, 40],
            "interp_ps": [2, 4],
        },
    }

    arm: Arm = Field("lewis", description="arm this run reports (headline)")
    compare: list[Arm] = Field(
        default_factory=lambda: ["euclid", "ipm", "firstorder"],
        description="arms also run in the same run for the table and plots",
    )
    target: float = Field(0.01, gt=0, lt=1, description="gap target (card: 1%)")
    data: DataConfig = Field(default_factory=DataConfig)
    oracle: OracleConfig = Field(default_factory=OracleConfig)
    baselines: BaselineConfig = Field(default_factory=BaselineConfig)
    dup_ks: list[int] = Field(
        default_factory=lambda: [1, 4, 16],
        description="duplication factors k (card: 1, 4, 16); empty = skip",
    )
    m_sweep: list[int] = Field(
        default_factory=lambda: [50, 200, 800], description="group counts m swept (card)"
    )
    interp_ps: list[float] = Field(
        default_factory=lambda: [2.0, 4.0, 8.0], description="p-interpolation exponents (card)"
    )
    pass_tolerance: int = Field(2, ge=0, description="pass rule: iteration spread over k ≤ this")
    sweep_full_grid: bool = Field(
        True,
        description="duplication / m sweeps run both ball-oracle arms (Lewis and Euclidean) "
        "at every (ε, r) of the grid, not only at their k = 1 tuned setting",
    )

    @model_validator(mode="after")
    def _consistent(self) -> GDRConfig:
        if self.arm in self.compare:
            raise ValueError(f"compare={self.compare} repeats arm={self.arm!r}")
        for key, values in (
            ("oracle.eps_rels", self.oracle.eps_rels),
            ("oracle.radius_rels", self.oracle.radius_rels),
            ("baselines.ipm_mus", self.baselines.ipm_mus),
            ("baselines.subgrad_etas", self.baselines.subgrad_etas),
            ("baselines.fo_step_mults", self.baselines.fo_step_mults),
        ):
            if not values or any(v <= 0 for v in values):
                raise ValueError(f"{key}={values} must be a non-empty list of positive numbers")
        if any(mu <= 1 for mu in self.baselines.ipm_mus):
            raise ValueError(f"baselines.ipm_mus={self.baselines.ipm_mus} must all be > 1")
        if any(k < 1 for k in self.dup_ks):
            raise ValueError(f"dup_ks={self.dup_ks} must all be >= 1")
        if any(m <= self.data.n_adversarial for m in self.m_sweep):
            raise ValueError(
                f"m_sweep={self.m_sweep} must all exceed data.n_adversarial="
                f"{self.data.n_adversarial}"
            )
        if any(p < 2 for p in self.interp_ps):
            raise ValueError(f"interp_ps={self.interp_ps} must all be >= 2")
        return self
