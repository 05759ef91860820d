"""Configs of `lestd` (the method) and its baselines `lestd_tucker`, `lestd_svd`.

    rayworks run lestd --preset smoke
    rayworks bench lestd --seeds 1            # LeSTD vs dense Tucker vs SVD (+ no-refit)

Values follow our reconstructed CPU recipe (`docs/lestd.md`), scaled to the budgets:
a 4-layer, d = 128, 8-head (d_h = 16) char-level LM on Python stdlib files, MHA
compression ratios {2, 4, 8, 16, 32}.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rayworks.core.config import Config, PipelineConfig
from rayworks.models import DecoderSpec

Method = Literal["lestd", "lestd_norefit", "tucker", "svd"]


def _recipe_model() -> DecoderSpec:
    return DecoderSpec(d_model=128, n_layer=4, n_head=8, ffn_mult=4.0, max_seq_len=128)


class StdlibLMConfig(Config):
    """The LM that gets compressed: trained once per config (and seed), then cached."""

    model: DecoderSpec = Field(
        default_factory=_recipe_model, description="decoder size (recipe: 4 x d128, 8 heads)"
    )
    n_files: int = Field(120, ge=2, description="stdlib Lib/*.py files used (evenly spaced)")
    max_file_kb: int = Field(80, ge=1, description="skip stdlib files larger than this")
    val_fraction: float = Field(0.05, gt=0, lt=1, description="files held out (recipe: 5%)")
    seq_len: int = Field(128, ge=8, description="characters per row (recipe: 128)")
    batch_size: int = Field(32, ge=1, description="rows per step (recipe: 32)")
    steps: int = Field(1500, ge=1, description="optimizer steps (recipe: 1500)")
    lr: float = Field(3e-3, gt=0, le=1, description="peak AdamW learning rate")
    warmup_steps: int = Field(30, ge=0, description="linear warmup steps")
    threads: int = Field(1, ge=1, description="torch threads for training and evaluation")
    seed: int | None = Field(
        None,
        ge=0,
        description="LM training seed (init, batch order, held-out files); None = the run's "
        "seed. Fixing it reruns the compression sweep on one LM with another run seed",
    )
    monitor_rows: int = Field(
        128,
        ge=1,
        description="last held-out rows scored during training (the LM's validation split; "
        "the pipeline's test rows are the first eval.val_rows, and must not overlap)",
    )
    monitor_every: int = Field(
        100, ge=1, description="steps between validation bits/char passes during training"
    )


class EvalConfig(Config):
    val_rows: int = Field(256, ge=1, description="held-out rows scored for bits/char")
    logit_rows: int = Field(4, ge=1, description="held-out rows for the attention-logit error")
    throughput_rows: int = Field(8, ge=1, description="rows per forward in the tokens/s timing")
    throughput_reps: int = Field(5, ge=0, description="timed forwards per model (0 = skip)")
    bootstrap_resamples: int = Field(
        2000, ge=100, description="bootstrap resamples of the val rows for bits/char intervals"
    )
    ci_level: float = Field(0.95, gt=0, lt=1, description="bootstrap interval level")


class LeSTDConfig(PipelineConfig):
    """Compress the MHA of a stdlib char LM at several ratios; one record per ratio."""

    presets = {
        "smoke": {
            "ratios": [4, 16],
            "headline_ratio": 16,
            "lm": {
                "model": {"d_model": 32, "n_layer": 2, "n_head": 2, "max_seq_len": 64},
                "n_files": 6,
                "max_file_kb": 20,
                "val_fraction": 0.34,
                "seq_len": 64,
                "batch_size": 8,
                "steps": 60,
                "warmup_steps": 5,
                "monitor_rows": 4,
                "monitor_every": 30,
            },
            "eval": {"val_rows": 8, "logit_rows": 2, "throughput_rows": 2, "throughput_reps": 1},
        },
    }

    method: Method = Field("lestd", description="compression method this run reports")
    compare: list[Method] = Field(
        default_factory=lambda: ["lestd_norefit", "tucker", "svd"],
        description="methods also evaluated in the same run for the table and plot",
    )
    ratios: list[int] = Field(
        default_factory=lambda: [2, 4, 8, 16, 32],
        description="MHA compression ratios swept (recipe: 2, 4, 8, 16, 32)",
    )
    headline_ratio: int = Field(16, description="ratio the headline metrics are read at")
    hooi_iters: int = Field(10, ge=1, description="HOOI sweeps T (recipe: about 10)")
    prune_fraction: float = Field(
        0.1, gt=0, le=1, description="share rho of surviving core entries pruned per round"
    )
    refit_sweeps: int = Field(2, ge=1, description="refit sweeps (U1, U2, core) per round")
    r1_fractions: list[float] = Field(
        default_factory=lambda: [0.03125, 0.0625, 0.125, 0.25, 0.375, 0.5, 0.75, 1.0],
        description="LeSTD rank grid: R1 as fractions of d",
    )
    r2_fractions: list[float] = Field(
        default_factory=lambda: [0.125, 0.25, 0.5, 0.75, 1.0],
        description="LeSTD rank grid: R2 as fractions of d_h",
    )
    lm: StdlibLMConfig = Field(default_factory=StdlibLMConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)

    @model_validator(mode="after")
    def _consistent(self) -> LeSTDConfig:
        bad = [r for r in self.ratios if r <= 1]
        if not self.ratios or bad:
            raise ValueError(f"ratios={self.ratios} must be a non-empty list of integers >= 2")
        if self.headline_ratio not in self.ratios:
            raise ValueError(
                f"headline_ratio={self.headline_ratio} is not one of ratios={self.ratios}"
            )
        if self.method in self.compare:
            raise ValueError(f"compare={self.compare} repeats method={self.method!r}")
        for key in ("r1_fractions", "r2_fractions"):
            values = getattr(self, key)
            if not values or any(not 0 < f <= 1 for f in values):
                raise ValueError(f"{key}={values} must be non-empty fractions in (0, 1]")
        spec = self.lm.model
        if spec.n_kv_head not in (None, spec.n_head):
            raise ValueError(
                f"lm.model.n_kv_head={spec.n_kv_head}: LeSTD stacks Q, K, V per head, "
                f"so it needs n_kv_head = n_head={spec.n_head} (no GQA)"
            )
        if spec.d_model % spec.n_head:
            raise ValueError(
                f"lm.model.d_model={spec.d_model} is not divisible by lm.model.n_head={spec.n_head}"
            )
        if self.lm.seq_len > spec.max_seq_len:
            raise ValueError(
                f"lm.seq_len={self.lm.seq_len} exceeds lm.model.max_seq_len={spec.max_seq_len}"
            )
        return self
