"""Configs of `lssm` (MAP-EM) and its baselines `lssm_mle`, `lssm_mle_threshold`,
`lssm_n4sid`, `lssm_hokalman`.

    rayworks run lssm --preset smoke
    rayworks bench lssm --preset default --seeds 1   # MAP-EM vs ML-EM (+thr) vs N4SID vs HK

One run = one system family x `n_trials` trial seeds x `noise_levels`. Values follow the
our reconstructed CPU recipe (docs/lssm.md); what was scaled is named per key.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rayworks.core.config import PipelineConfig

Method = Literal["map", "mle", "mle_threshold", "n4sid", "hokalman"]
EM_METHODS = ("map", "mle", "mle_threshold")
STATES = {"s1": 10, "s2": 8, "s3": 6}


class LSSMConfig(PipelineConfig):
    """Fit `method` (and `compare`) on every (trial seed, noise level) of one system."""

    presets = {
        "smoke": {
            "n_trials": 2,
            "noise_levels": [0.1],
            "T": 240,
            "em_iters": 20,
            "noise_em_iters": 3,
            "markov_lags": 12,
            "n4sid_block_rows": 3,
        },
    }

    method: Method = Field("map", description="method this run reports (map = MAP-EM)")
    compare: list[Method] = Field(
        default_factory=lambda: ["mle"],
        description="methods also fitted on the same trials (MLE here: the pass rule's rival)",
    )
    system: Literal["s1", "s2", "s3"] = Field(
        "s1",
        description="true system: s1 paper's anti-diagonal n=10, s2 random sparse, "
        "s3 singular A (s2, s3 reconstructed)",
    )
    n_trials: int = Field(20, ge=1, le=1000, description="trial seeds per noise level (recipe: 20)")
    noise_levels: list[float] = Field(
        default_factory=lambda: [0.1, 0.3],
        description="noise std sigma, R = Q = sigma² I (recipe: 0.1, 0.3; reconstructed)",
    )
    T: int = Field(900, ge=30, description="sequence length before the 2:1 split (recipe: 900)")
    train_fraction: float = Field(2 / 3, gt=0, lt=1, description="train share (paper: 2/3)")
    val_fraction: float = Field(
        1 / 6,
        ge=0,
        lt=0.5,
        description="share of the train segment held out (at its end) as validation, where "
        "the threshold is chosen (reconstructed; 1/6 of 600 = 100 steps)",
    )
    em_iters: int = Field(
        1000, ge=1, description="cap on EM iterations when em_tol is not reached (recipe: 300)"
    )
    em_tol: float = Field(
        1e-6,
        ge=0,
        description="stop EM when |Δ log posterior| <= em_tol · |log posterior| (recipe: a "
        "tolerance, value reconstructed; 0 = always run em_iters)",
    )
    thresholds: list[float] = Field(
        default_factory=lambda: [0.0, 0.1, 0.2, 0.3],
        description="truncation levels relative to max|θ| per matrix, swept for MAP-EM and "
        "chosen by validation MRE; mle_threshold uses the chosen one (App. G; grid "
        "reconstructed)",
    )
    a0: float = Field(1e-6, gt=0, description="inverse-gamma shape a0 (paper: 1e-6)")
    b0: float = Field(1e-6, gt=0, description="inverse-gamma scale b0 (paper: 1e-6)")
    init: Literal["random", "n4sid"] = Field(
        "random",
        description="EM start: random dense Θ0 shared by all EM arms (recipe) or the N4SID fit",
    )
    init_scale: float = Field(1.0, gt=0, description="std of the random B0, C0, D0 entries")
    markov_lags: int = Field(30, ge=2, description="Ho-Kalman: Markov parameters h_0..h_L")
    n4sid_block_rows: int = Field(5, ge=1, description="N4SID: block rows i of the Hankel data")
    noise_em_iters: int = Field(
        20, ge=0, description="EM steps fitting R, Q for N4SID / Ho-Kalman (reconstructed)"
    )
    gp_tol: float = Field(
        0.05, gt=0, lt=1, description="off-diagonal energy below which Φ̂ is a gen. permutation"
    )
    support_tol: float = Field(
        0.01, gt=0, lt=1, description="|Â_ij| > support_tol · max|Â| counts as support"
    )
    heatmap_trial: int = Field(0, ge=0, description="trial whose |Â| heatmaps are plotted")

    @model_validator(mode="after")
    def _consistent(self) -> LSSMConfig:
        if self.method in self.compare or len(set(self.compare)) != len(self.compare):
            raise ValueError(f"compare={self.compare} repeats a method or method={self.method!r}")
        if not self.noise_levels or any(not 0 < s <= 10 for s in self.noise_levels):
            raise ValueError(f"noise_levels={self.noise_levels} must be non-empty, in (0, 10]")
        n_train = round(self.train_fraction * self.T)
        if min(n_train, self.T - n_train) < 10:
            raise ValueError(f"T={self.T} leaves fewer than 10 train or test steps")
        if n_train < 2 * self.n4sid_block_rows + STATES[self.system] + 2:
            raise ValueError(f"n4sid_block_rows={self.n4sid_block_rows} is too large for T")
        if 2 * self.markov_lags + 2 > n_train:
            raise ValueError(f"markov_lags={self.markov_lags} is too large for T={self.T}")
        grid = self.thresholds
        if not grid or len(set(grid)) != len(grid) or any(not 0 <= t < 1 for t in grid):
            raise ValueError(f"thresholds={grid} must be distinct values in [0, 1)")
        if len(grid) > 1 and round(self.val_fraction * n_train) < 5:
            raise ValueError(
                f"val_fraction={self.val_fraction} leaves fewer than 5 validation steps to "
                f"choose among thresholds={grid}"
            )
        fit = n_train - round(self.val_fraction * n_train)
        if (
            fit < 2 * self.n4sid_block_rows + STATES[self.system] + 2
            or 2 * self.markov_lags + 2 > fit
        ):
            raise ValueError(
                f"val_fraction={self.val_fraction} leaves too few fit steps for "
                f"n4sid_block_rows={self.n4sid_block_rows}, markov_lags={self.markov_lags}"
            )
        if self.heatmap_trial >= self.n_trials:
            raise ValueError(f"heatmap_trial={self.heatmap_trial} must be < n_trials")
        return self
