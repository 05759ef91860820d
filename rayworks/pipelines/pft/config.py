"""Configs of `pft` (personalised feature translation) and its baselines `pft_source`,
`pft_adabn`, `pft_tent`, `pft_shot`, `pft_neutral_ce`, `pft_oracle` (`docs/pft.md`).

    rayworks run pft --preset smoke
    rayworks bench pft --preset default --seeds 3 --no-baselines

Values follow our CPU recipe (digits as expressions, procedural subjects; the whole
benchmark is reconstructed), its values marked "recipe" in the descriptions; every
reconstructed choice is a key here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rayworks.core.config import Config, PipelineConfig

Arm = Literal["pft", "source", "adabn", "tent", "shot", "neutral_ce", "oracle"]
ARMS: tuple[str, ...] = ("pft", "source", "adabn", "tent", "shot", "neutral_ce", "oracle")


class DataConfig(Config):
    """Digit "expressions" rendered by procedural "subjects" (all reconstructed)."""

    classes: list[int] = Field(
        default_factory=lambda: [1, 7],
        description="digit classes, the first is 'neutral' (recipe: 1 vs 7; 4-class 1,7,4,9)",
    )
    world_seed: int = Field(0, ge=0, description="seed of subjects, pools and frames (fixed world)")
    n_source_subjects: int = Field(16, ge=2, description="labelled source subjects (recipe: 16)")
    n_target_subjects: int = Field(8, ge=1, description="target subjects (recipe: 8)")
    source_frames_per_class: int = Field(60, ge=2, description="frames per class, source subject")
    adapt_frames: int = Field(40, ge=2, description="unlabelled neutral frames per target (recipe)")
    test_frames_per_class: int = Field(40, ge=1, description="test frames per class (recipe: 40)")
    image_size: int = Field(16, ge=8, le=32, description="8x8 digits upsampled to this (recipe 16)")
    max_rotation: float = Field(20.0, ge=0, le=90, description="subject rotation ± deg (recipe)")
    max_shear: float = Field(0.3, ge=0, le=1, description="subject shear ± (recipe 0.3)")
    scale_range: tuple[float, float] = Field((0.85, 1.15), description="subject scale (recipe)")
    gamma_range: tuple[float, float] = Field((0.6, 1.6), description="subject gamma (recipe)")
    texture_range: tuple[float, float] = Field((0.15, 0.3), description="texture strength (recipe)")
    texture_sigma: float = Field(
        1.5, gt=0, description="texture smoothness (pixels; reconstructed)"
    )
    bias_range: tuple[float, float] = Field(
        (0.4, 0.6),
        description="target (and validation) subjects' resting bias: neutral blended toward "
        "their expressive template (recipe: 10-30%, where the source model is already 95% "
        "right; default 40-60%, stronger than any source subject's: reconstructed)",
    )
    source_bias_range: tuple[float, float] = Field(
        (0.1, 0.3),
        description="source subjects' resting bias (recipe: the same 10-30% as the targets)",
    )
    split: Literal["test", "val"] = Field(
        "test",
        description="which held-out subjects a run adapts and scores: the test subjects "
        "(report) or the validation subjects (knob choice; other styles, never a test subject)",
    )
    n_val_subjects: int = Field(8, ge=1, description="validation subjects (reconstructed)")
    frame_shift: int = Field(1, ge=0, le=3, description="per-frame random shift ± px (reconstr.)")
    frame_noise: float = Field(0.05, ge=0, description="per-frame pixel noise std (reconstructed)")

    @model_validator(mode="after")
    def _valid(self) -> DataConfig:
        c = self.classes
        if len(c) < 2 or len(set(c)) != len(c) or not all(0 <= d <= 9 for d in c):
            raise ValueError(f"data.classes={c} must be >= 2 distinct digits 0-9")
        for key in (
            "scale_range",
            "gamma_range",
            "texture_range",
            "bias_range",
            "source_bias_range",
        ):
            lo, hi = getattr(self, key)
            if not 0 <= lo <= hi:
                raise ValueError(f"data.{key}=({lo}, {hi}) must satisfy 0 <= low <= high")
        if self.scale_range[0] <= 0 or self.gamma_range[0] <= 0:
            raise ValueError("data.scale_range and data.gamma_range must be positive")
        for key in ("bias_range", "source_bias_range"):
            if getattr(self, key)[1] >= 1:
                raise ValueError(f"data.{key}={getattr(self, key)} must stay below 1")
        return self


class SourceConfig(Config):
    """Source model F (3-layer CNN + BN), B (64 -> 32 + BN), C (weight-normalised linear)."""

    channels: tuple[int, int, int] = Field((16, 32, 64), description="F's conv widths (64-d f)")
    bottleneck: int = Field(32, ge=2, description="B's width (recipe: 32)")
    epochs: int = Field(15, ge=1, description="source CE epochs (recipe: 15)")
    lr: float = Field(1e-3, gt=0, description="Adam lr (recipe / CLI default 1e-3)")
    batch_size: int = Field(64, ge=2, description="batch (paper: 64)")


class PFTMethodConfig(Config):
    """The translator T and its two stages (reconstructed from code + reviews)."""

    hidden: int = Field(64, ge=1, description="T's residual MLP width (recipe: 64-64-64)")
    translator: Literal["mlp", "pooled_mlp", "conv_copy"] = Field(
        "mlp",
        description="T's form: mlp = recipe's residual MLP in feature space, per position of "
        "F's last map (Gram on its output; reconstructed); pooled_mlp = the MLP on pooled F(x) "
        "(no Gram possible); conv_copy = own copy of F's conv layers + MLP (official T_full)",
    )
    style_layers: list[int] = Field(
        default_factory=lambda: [2],
        description="conv blocks in L_style (code: 0,1,2; the mlp translator has block 2 only)",
    )
    style_norm: Literal["relative", "chw"] = Field(
        "relative",
        description="L_style per layer: relative = ‖G_b-G_a‖²/‖G_a‖² (reconstructed, O(0.1)); "
        "chw = MSE of Grams normalised by C·H·W (code; about 5e-4 here)",
    )
    lambda_expr: float = Field(1.0, ge=0, description="λ_expr (absent from code; recipe 1.0)")
    lambda_style: float = Field(
        0.3,
        ge=0,
        description="λ_style (absent from code; chosen on the validation subjects from "
        "0, 0.1, 0.3, 1, 3, 10 with the relative style loss)",
    )
    pretrain_ce: float = Field(1.0, ge=0, description="weight of CE on y_b in L_src (reconstr.)")
    pretrain_epochs: int = Field(10, ge=0, description="pre-training epochs over pairs (recipe 10)")
    pretrain_lr: float = Field(1e-3, gt=0, description="pre-training Adam lr (reconstructed)")
    expr_loss: Literal["ce", "kl", "mse"] = Field("ce", description="L_expr form (code: CE)")


class AdaptConfig(Config):
    """Target adaptation budget shared by every adapted arm (paper defaults)."""

    epochs: int = Field(25, ge=1, description="epochs over the neutral frames (paper: 25)")
    batch_size: int = Field(32, ge=1, description="batch (paper: 32)")
    lr: float = Field(1e-4, gt=0, description="Adam lr of PFT/Tent/SHOT/neutral-CE (paper 1e-4)")
    shot_beta: float = Field(0.3, ge=0, description="SHOT pseudo-label CE weight (SHOT: 0.3)")
    oracle_lr: float = Field(1e-3, gt=0, description="oracle fine-tune lr (reconstructed)")
    oracle_frames_per_class: int = Field(
        40, ge=1, description="labelled target frames per class of the oracle (reconstructed)"
    )


class PFTConfig(PipelineConfig):
    """PFT: one arm reported (headline), the others run on the same subjects for the table."""

    presets = {
        "smoke": {
            "data": {
                "n_source_subjects": 6,
                "n_target_subjects": 4,
                "source_frames_per_class": 20,
                "adapt_frames": 16,
                "test_frames_per_class": 12,
            },
            "source": {"epochs": 10},
            "pft": {"pretrain_epochs": 1},
            "adapt": {"epochs": 2, "oracle_frames_per_class": 12},
            "replicates": 1,
        },
    }

    arm: Arm = Field("pft", description="arm this run reports (headline)")
    compare: list[Arm] = Field(
        default_factory=lambda: ["source", "adabn", "tent", "shot", "neutral_ce", "oracle"],
        description="arms also run on the same subjects and seeds for the table and plot",
    )
    replicates: int = Field(
        3, ge=1, le=10, description="training seeds per run (recipe: 3); seed_r = 1000·seed + r"
    )
    data: DataConfig = Field(default_factory=DataConfig)
    source: SourceConfig = Field(default_factory=SourceConfig)
    pft: PFTMethodConfig = Field(default_factory=PFTMethodConfig)
    adapt: AdaptConfig = Field(default_factory=AdaptConfig)
    pass_gain: float = Field(0.03, description="pass rule: accuracy ≥ source + this (recipe 3 pt)")
    pass_recall_drop: float = Field(0.05, description="pass rule: recall ≥ source - this (recipe)")

    @model_validator(mode="after")
    def _consistent(self) -> PFTConfig:
        if self.arm in self.compare or len(set(self.compare)) != len(self.compare):
            raise ValueError(f"compare={self.compare} repeats an arm (arm={self.arm!r})")
        p = self.pft
        if p.translator == "pooled_mlp" and p.lambda_style > 0:
            raise ValueError(
                f"pft.lambda_style={p.lambda_style} needs pft.translator=mlp or conv_copy "
                "(the pooled_mlp translator has no maps for the Gram loss)"
            )
        if not p.style_layers or any(not 0 <= k <= 2 for k in p.style_layers):
            raise ValueError(f"pft.style_layers={p.style_layers} must be in 0..2")
        if p.translator == "mlp" and p.lambda_style > 0 and p.style_layers != [2]:
            raise ValueError(
                f"pft.style_layers={p.style_layers} must be [2] with pft.translator=mlp "
                "(T acts on F's last block only; the earlier blocks are F's, frozen)"
            )
        from rayworks.pipelines.pft.subjects import check_sizes

        check_sizes(self.data.model_dump(mode="json"), self.adapt.oracle_frames_per_class)
        return self

    def arms(self) -> list[str]:
        return [self.arm, *self.compare]
