"""Configs of `attnrow` (the classical analogue of the quantum attention-row structure) and
its baselines `attnrow_uniform` (uniform-landmark Nyström), `attnrow_performer`.

    rayworks run attnrow --preset smoke
    rayworks bench attnrow --preset default --seeds 1

Sizes follow our reconstructed CPU recipe (docs/attnrow.md), scaled to the budget: input
(b) has d = 32 and n up to 16384; input (a) is one d_h = 16 head of the `lestd` stdlib LM
(the recipe's d = 32 LM is not on the platform). Every choice beyond the abstract is
reconstructed and is a key below.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rayworks.core.config import Config, PipelineConfig
from rayworks.pipelines.lestd.config import StdlibLMConfig

Method = Literal["analogue", "rls_nystrom", "uniform_nystrom", "performer"]


class SyntheticConfig(Config):
    """Input (b): clustered tokens whose kernel spectrum does not depend on n."""

    d: int = Field(32, ge=2, description="head dimension (recipe: 32)")
    clusters: int = Field(8, ge=1, description="number of token clusters C")
    center_logit: float = Field(
        3.0, gt=0, description="own-centre logit ‖c‖²/√d: how peaked attention is"
    )
    spread: float = Field(
        0.1, ge=0, description="within-cluster noise std relative to ‖c‖/√d per coordinate"
    )
    value_noise: float = Field(0.5, ge=0, description="std of V around its cluster mean")


class ImbalancedConfig(Config):
    """Input (b'): input (b)'s law (same centres, spread, values) with unequal cluster
    weights w_c ∝ cluster_decay^c, c = 0..C-1 (geometric law; reconstructed). Reported
    beside (b), never gated: it is where RLS landmarks should beat uniform ones."""

    enabled: bool = Field(True, description="also evaluate RLS vs uniform Nyström on it")
    cluster_decay: float = Field(
        0.5,
        gt=0,
        le=1,
        description="geometric ratio of successive cluster weights (1 = balanced = input b; "
        "0.5 with C = 8 puts 2.7% of the points in the 3 smallest clusters)",
    )
    minor_share: float = Field(
        0.05,
        gt=0,
        lt=1,
        description="'minor' clusters = the smallest ones whose weights sum to <= this; "
        "row_err_minor is the median error over query rows drawn from them",
    )


class RLSConfig(Config):
    """Recursive RLS (Musco & Musco 2017, Alg. 2), simplified (reconstructed)."""

    oversample: float = Field(
        4.0, gt=0, description="keep-probability factor, replaces 16·log(Σl̃/δ)"
    )
    leaf_size: int = Field(256, ge=8, description="stop halving at this many points")


class SublinearConfig(Config):
    """Error of the analogue at m sublinear in n (reconstructed): at every n of `n_grid`
    (input b, s = headline s, s_λ is n-invariant there) and every exponent β, the shared
    sample has m = ceil(m_at_min_n · (n / min n_grid)^β) rows, so m/n falls as n grows."""

    enabled: bool = Field(True, description="run the sweep (needs the analogue in the run)")
    n_grid: list[int] = Field(
        default_factory=lambda: [1024, 2048, 4096, 8192, 16384],
        description="n of input (b) for the sweep",
    )
    exponents: list[float] = Field(
        default_factory=lambda: [0.5, 0.75],
        description="β of m ∝ n^β (β < 1: sublinear; 0.5 is the √n of the quantum bound)",
    )
    m_at_min_n: int = Field(256, ge=1, description="m at the smallest n of n_grid")


class LMInputConfig(Config):
    """Input (a): one head of the stdlib char LM (reported, not gated)."""

    enabled: bool = Field(True, description="also evaluate on LM q/k/v")
    lm: StdlibLMConfig = Field(default_factory=StdlibLMConfig)
    folder: str | None = Field(
        None,
        description="an already trained LM folder to load instead (e.g. the `lestd` cache "
        "runs/cache/lestd_lm/lm-<hash>); None = train `lm` once, cached",
    )
    layer: int = Field(2, ge=0, description="decoder layer whose q/k/v are captured (recipe: 2)")
    head: int = Field(0, ge=0, description="attention head captured")
    n: int = Field(2048, ge=16, description="tokens of held-out text (rows concatenated)")


class AttnRowConfig(PipelineConfig):
    """Sweeps of one attention-row method on inputs (b) and (a); one record per piece."""

    presets = {
        "smoke": {
            "n_ref": 512,
            "n_grid": [256, 512, 1024],
            "spectrum_n": 256,
            "landmark_multiples": [1.0, 4.0],
            "headline_multiple": 4.0,
            "samples": 512,
            "sample_grid": [128, 512, 2048],
            "sample_seeds": 2,
            "landmark_draws": 2,
            "sublinear": {"n_grid": [256, 1024], "exponents": [0.5], "m_at_min_n": 64},
            "scales": [0.75, 1.0, 1.25],
            "query_rows": 10,
            "timing_rows": 10,
            "lm_input": {
                "n": 256,
                "layer": 1,
                "lm": {
                    "model": {"d_model": 32, "n_layer": 2, "n_head": 2, "max_seq_len": 64},
                    "n_files": 6,
                    "max_file_kb": 20,
                    "val_fraction": 0.34,
                    "seq_len": 64,
                    "batch_size": 8,
                    "steps": 20,
                    "warmup_steps": 2,
                },
            },
        },
    }

    method: Method = Field("analogue", description="method whose numbers this run reports")
    compare: list[Method] = Field(
        default_factory=lambda: ["rls_nystrom", "uniform_nystrom", "performer"],
        description="methods also evaluated in the same run for the table and plots",
    )
    lambda_rel: float = Field(
        0.01, gt=0, description="ridge λ = lambda_rel · 2n (λ ∝ n keeps s_λ n-invariant)"
    )
    n_ref: int = Field(4096, ge=16, description="n of input (b) for the error sweeps")
    n_grid: list[int] = Field(
        default_factory=lambda: [512, 1024, 2048, 4096, 8192, 16384],
        description="n of input (b) for per-query time vs n (recipe: 512 ... 16384)",
    )
    spectrum_n: int = Field(
        1024, ge=8, description="n of the exact eigendecomposition that sets s_λ on (b)"
    )
    exact_max_points: int = Field(
        4096, ge=16, description="largest 2n whose kernel is eigendecomposed (else RLS sum)"
    )
    landmark_multiples: list[float] = Field(
        default_factory=lambda: [0.5, 1.0, 2.0, 4.0, 8.0],
        description="landmark counts s as multiples of s_λ (capped at 2n)",
    )
    headline_multiple: float = Field(8.0, description="s/s_λ the headline is read at")
    samples: int = Field(
        2048, ge=1, description="m: rows sampled for u and Z in the analogue (reconstructed)"
    )
    estimator: Literal["shared", "independent"] = Field(
        "shared",
        description="shared: u and Z from one leverage sample of [1, V] (self-normalising); "
        "independent: u from m uniform K rows, Z from m other rows ∝ leverage of V",
    )
    landmark_draws: int = Field(
        5,
        ge=1,
        description="landmark draws per (input, method, s); errors are means over them, "
        "with 95% t-intervals (RLS vs uniform is paired by draw)",
    )
    sample_grid: list[int] = Field(
        default_factory=lambda: [64, 128, 256, 512, 1024, 2048, 4096],
        description="m values of the error-vs-samples sweep (fixed landmarks)",
    )
    sample_seeds: int = Field(4, ge=1, description="sampling repeats per m")
    scales: list[float] = Field(
        default_factory=lambda: [0.5, 0.75, 1.0, 1.25, 1.5, 2.0],
        description="norm scales of Q, K for s_λ vs scale on (b)",
    )
    query_rows: int = Field(100, ge=1, description="random query rows scored (recipe: 100)")
    timing_rows: int = Field(100, ge=1, description="single-row queries timed per n")
    target_eps: float = Field(
        0.05, gt=0, description="pass rule's median relative row error target ε (reconstructed)"
    )
    landmark_constant: float = Field(
        1.0, gt=0, description="c in the pass rule's s >= c·s_λ·ln s_λ (reconstructed)"
    )
    inverse: Literal["pinv", "ridge"] = Field(
        "pinv", description="M = K_SS⁺ (pinv) or (K_SS + λI)⁻¹ (ridge)"
    )
    pinv_rcond: float = Field(1e-10, gt=0, lt=1, description="relative eigenvalue cutoff of K_SS⁺")
    rls: RLSConfig = Field(default_factory=RLSConfig)
    synthetic: SyntheticConfig = Field(default_factory=SyntheticConfig)
    imbalanced: ImbalancedConfig = Field(default_factory=ImbalancedConfig)
    sublinear: SublinearConfig = Field(default_factory=SublinearConfig)
    lm_input: LMInputConfig = Field(default_factory=LMInputConfig)

    @model_validator(mode="after")
    def _consistent(self) -> AttnRowConfig:
        lists = {
            key: getattr(self, key)
            for key in ("landmark_multiples", "n_grid", "sample_grid", "scales")
        }
        lists["sublinear.n_grid"] = self.sublinear.n_grid
        lists["sublinear.exponents"] = self.sublinear.exponents
        for key, values in lists.items():
            if not values or any(x <= 0 for x in values):
                raise ValueError(f"{key}={values} must be a non-empty list of positive numbers")
        if len(self.n_grid) < 2 or len(self.sample_grid) < 2:
            raise ValueError("n_grid and sample_grid need at least 2 values to fit a slope")
        if self.headline_multiple not in self.landmark_multiples:
            raise ValueError(
                f"headline_multiple={self.headline_multiple} is not one of "
                f"landmark_multiples={self.landmark_multiples}"
            )
        if self.method in self.compare:
            raise ValueError(f"compare={self.compare} repeats method={self.method!r}")
        if 2 * self.spectrum_n > self.exact_max_points:
            raise ValueError(
                f"spectrum_n={self.spectrum_n}: 2n exceeds exact_max_points={self.exact_max_points}"
            )
        spec = self.lm_input.lm.model
        if self.lm_input.layer >= spec.n_layer:
            raise ValueError(
                f"lm_input.layer={self.lm_input.layer} >= lm.model.n_layer={spec.n_layer}"
            )
        if self.lm_input.head >= spec.n_head:
            raise ValueError(f"lm_input.head={self.lm_input.head} >= n_head={spec.n_head}")
        return self
