"""Configs of `rae` (DiT^DH on RAE latents) and its baselines `rae_dit` (wider plain DiT,
E4) and `rae_convae` (the same DiT^DH on conv-AE latents, E5) (`docs/rae.md`).

    rayworks run rae --preset smoke
    rayworks bench rae --preset default --seeds 1

Every value follows our CPU recipe (reconstructed; "recipe" in the descriptions) unless its
description says "scaled": the recipe's ≈ 55 CPU-min is cut to fit a 10-minute bench on 2
loaded cores.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rayworks.core.config import Config, PipelineConfig

Arm = Literal["rae", "dit", "convae"]


class DataConfig(Config):
    """load_digits 8 x 8 → 16 x 16 (nearest), in [-1, 1]; train = train + val split."""

    max_train: int | None = Field(
        None, ge=50, description="subsample the training images (smoke); null = all ≈ 1437"
    )


class EncoderConfig(Config):
    """Representation encoder: ViT-tiny (rayworks.models.vit) trained with objective (a)
    supervised CE + contrastive (`supcon`, default) or (b) MAE (`mae`), then frozen."""

    objective: Literal["supcon", "mae"] = Field(
        "supcon", description="supcon: CE + SimCLR contrastive (recipe (a)); mae: recipe (b)"
    )
    contrastive_weight: float = Field(
        1.0, ge=0, description="supcon: weight of NT-Xent next to CE (reconstructed)"
    )
    temperature: float = Field(0.2, gt=0, description="supcon: NT-Xent temperature (SimCLR)")
    proj_dim: int = Field(64, ge=2, description="supcon: projection head output width")
    width: int = Field(64, ge=8, description="token dimension n (recipe: 64)")
    depth: int = Field(4, ge=1, description="encoder blocks (recipe: 4)")
    heads: int = Field(4, ge=1, description="attention heads")
    mask_ratio: float = Field(0.75, gt=0, lt=1, description="MAE masking (recipe: 75%)")
    mae_decoder_width: int = Field(32, ge=8, description="MAE decoder width (reconstructed)")
    mae_decoder_depth: int = Field(2, ge=1, description="MAE decoder blocks (reconstructed)")
    steps: int = Field(400, ge=1, description="encoder steps (scaled; ≈ 36 epochs)")
    batch: int = Field(128, ge=2, description="batch size")
    lr: float = Field(1e-3, gt=0, description="AdamW lr (reconstructed)")


class ConvAEConfig(Config):
    """The 'legacy VAE' baseline: reconstruction-only conv AE, latent 4 x 4 x c."""

    latent_channels: int = Field(4, ge=1, description="latent channels c (recipe: 4)")
    hidden: int = Field(32, ge=4, description="conv width (reconstructed)")
    steps: int = Field(400, ge=1, description="training steps (scaled)")
    batch: int = Field(128, ge=2, description="batch size")
    lr: float = Field(1e-3, gt=0, description="AdamW lr")


class DecoderConfig(Config):
    """RAE decoder: ViT blocks of width n on the frozen tokens → 4 x 4 pixel patches."""

    depth: int = Field(3, ge=1, description="decoder blocks (recipe: ViT-tiny depth 4; scaled)")
    heads: int = Field(4, ge=1, description="attention heads")
    tau: float = Field(0.8, ge=0, description="noise augmentation sigma ~ U(0, τ) (paper: 0.8)")
    mse_weight: float = Field(0.1, ge=0, description="L1 + w · MSE (recipe: 0.1; no LPIPS/GAN)")
    steps: int = Field(500, ge=1, description="training steps (scaled)")
    batch: int = Field(128, ge=2, description="batch size")
    lr: float = Field(1e-3, gt=0, description="AdamW lr")


class ClassifierConfig(Config):
    """Independent evaluation CNN (FD features = its 64-d penultimate layer)."""

    steps: int = Field(300, ge=1, description="training steps")
    batch: int = Field(128, ge=2, description="batch size")
    lr: float = Field(1e-3, gt=0, description="AdamW lr")
    feature_dim: int = Field(64, ge=4, description="penultimate (FD) feature width")


class ArchConfig(Config):
    """DiT sizes: head_width = 0 is a plain DiT, > 0 a DiT^DH."""

    width: int = Field(48, ge=4, description="body width d")
    depth: int = Field(4, ge=1, description="body blocks")
    heads: int = Field(4, ge=1, description="body heads")
    head_width: int = Field(128, ge=0, description="DiT^DH head width (recipe E4: 128)")
    head_depth: int = Field(2, ge=1, description="DiT^DH head blocks (paper: 2)")
    head_heads: int = Field(4, ge=1, description="DiT^DH head heads")
    mlp_ratio: float = Field(4.0, gt=0, description="MLP ratio")


class DiffusionConfig(Config):
    """Flow matching on normalised latents (paper §4) at digits scale."""

    shift: bool = Field(True, description="dimension-dependent shift alpha = √(m/n_base)")
    n_base: int = Field(64, ge=1, description="n_base (recipe: 64 = 8 x 8 pixels; paper 4096)")
    steps: int = Field(800, ge=1, description="DiT training steps (scaled; recipe ≈ 8 min)")
    batch: int = Field(64, ge=2, description="batch size (reconstructed)")
    lr: float = Field(
        2e-3, gt=0, description="AdamW lr (paper 2e-4 at batch 1024; tuned for 800 steps)"
    )
    class_dropout: float = Field(0.1, ge=0, lt=1, description="label dropout (paper: 0.1)")
    sample_steps: int = Field(50, ge=1, description="Euler steps (paper: 50)")
    n_samples: int = Field(300, ge=20, description="generated samples for gFD (recipe: 1000)")
    fd_reference: Literal["heldout", "train"] = Field(
        "heldout",
        description="gFD / rFD against the held-out test images (heldout) or the training "
        "images the DiT and decoder saw (train: the earlier runs)",
    )
    curve_at: list[float] = Field(
        default_factory=lambda: [0.5],
        description="extra gFD evaluations at these fractions of training (convergence)",
    )
    curve_samples: int = Field(150, ge=20, description="samples per intermediate gFD")
    checkpoint_every: int = Field(250, ge=1, description="checkpoint cadence (steps)")


class WidthConfig(Config):
    """E1: single-image overfit of plain DiTs of width d against Theorem 1's bound."""

    widths: list[int] = Field(
        default_factory=lambda: [16, 32, 48, 64, 96, 128], description="DiT widths d (recipe)"
    )
    depth: int = Field(4, ge=1, description="DiT depth (recipe: 4)")
    steps: int = Field(250, ge=1, description="steps per width (recipe 3000; scaled)")
    batch: int = Field(32, ge=1, description="noise draws per step of the one image")
    lr: float = Field(2e-3, gt=0, description="AdamW lr (as the DiT arms)")
    eval_draws: int = Field(2048, ge=16, description="draws of the final loss estimate")
    margin: float = Field(
        1.5, gt=1, description="pass: every d<n loss ≥ margin x the worst d≥n loss (reconstr.)"
    )


class RAEConfig(PipelineConfig):
    """RAE at digits scale: one DiT arm reported, extras E1 and E2 in the method run."""

    presets = {
        "smoke": {
            "data": {"max_train": 300},
            "encoder": {"steps": 30, "depth": 2},
            "convae": {"steps": 30},
            "decoder": {"steps": 30, "depth": 1},
            "classifier": {"steps": 30},
            "diffusion": {
                "steps": 20,
                "n_samples": 40,
                "curve_at": [0.5],
                "curve_samples": 20,
                "sample_steps": 5,
                "checkpoint_every": 10,
            },
            "width": {"widths": [16, 64], "steps": 10, "depth": 1, "eval_draws": 64},
        },
    }

    arm: Arm = Field("rae", description="rae: DiT^DH on RAE latents; dit: plain DiT; convae")
    extras: bool = Field(True, description="run E1 (width overfit) and E2 (shift off) in-run")
    data: DataConfig = Field(default_factory=DataConfig)
    encoder: EncoderConfig = Field(default_factory=EncoderConfig)
    convae: ConvAEConfig = Field(default_factory=ConvAEConfig)
    decoder: DecoderConfig = Field(default_factory=DecoderConfig)
    classifier: ClassifierConfig = Field(default_factory=ClassifierConfig)
    dit_dh: ArchConfig = Field(default_factory=ArchConfig, description="DiT^DH (rae, convae)")
    dit_plain: ArchConfig = Field(
        default_factory=lambda: ArchConfig(width=96, head_width=0),
        description="plain DiT of the `dit` arm (recipe E4: d = 96)",
    )
    diffusion: DiffusionConfig = Field(default_factory=DiffusionConfig)
    width: WidthConfig = Field(default_factory=WidthConfig)
    e2_ratio: float = Field(1.5, gt=0, description="pass: gFD(shift) ≤ gFD(no shift) / ratio")

    @model_validator(mode="after")
    def _consistent(self) -> RAEConfig:
        for key, dim, heads in (
            ("encoder", self.encoder.width, self.encoder.heads),
            ("decoder", self.encoder.width, self.decoder.heads),
            ("dit_dh", self.dit_dh.width, self.dit_dh.heads),
            ("dit_plain", self.dit_plain.width, self.dit_plain.heads),
        ):
            if dim % heads:
                raise ValueError(f"{key}.heads={heads} does not divide width {dim}")
        if self.dit_dh.head_width and self.dit_dh.head_width % self.dit_dh.head_heads:
            raise ValueError(
                f"dit_dh.head_heads={self.dit_dh.head_heads} does not divide "
                f"dit_dh.head_width={self.dit_dh.head_width}"
            )
        if any(w < 4 or w % 4 for w in self.width.widths):
            raise ValueError(f"width.widths={self.width.widths} must be multiples of 4")
        if any(not 0 < f < 1 for f in self.diffusion.curve_at):
            raise ValueError(f"diffusion.curve_at={self.diffusion.curve_at} must lie in (0, 1)")
        return self
