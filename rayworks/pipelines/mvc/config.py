"""Configs of `mvc` (MambaVoiceCloning conditioning stack) and its baseline `mvc_attn`
(attention/LSTM stack, StyleTTS2-like); user's guide: `docs/mvc.md`.

    rayworks run mvc --preset smoke
    rayworks bench mvc --preset default --seeds 3

Every arm trains its conditioning stack under one fixed decoder (pretrained once on
ground-truth features and frozen, cached with the corpus). Values follow our CPU
recipe (reconstructed: an espeak-ng corpus stands in for the paper's LJSpeech / LibriTTS),
scaled down to fit the bench budget on a loaded 2-core machine; every reduction and every
reconstructed choice is a key here with the recipe's value ("recipe") in its description.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rayworks.core.config import Config, PipelineConfig

Arm = Literal["mvc", "attn", "meanprosody"]
Fusion = Literal["gated", "concat"]
StyleMode = Literal["adaln", "concat"]


class CorpusConfig(Config):
    """espeak-ng corpus (all reconstructed: our CPU recipe)."""

    espeak_bin: str = Field("espeak-ng", description="espeak-ng program (Debian package)")
    seed: int = Field(0, ge=0, description="seed of the sentence grammar and speaker draw")
    n_utterances: int = Field(200, ge=10, description="utterances (recipe: 1500; scaled down)")
    min_words: int = Field(3, ge=1, description="shortest sentence in words (recipe: 3)")
    max_words: int = Field(12, ge=1, description="longest sentence in words (recipe: 12)")
    voices: list[str] = Field(
        default_factory=lambda: [
            "en-us",
            "en-gb",
            "en-us+m3",
            "en-us+f2",
            "en-gb+m7",
            "en-gb+f4",
            "en-us+m1",
            "en-us+f5",
        ],
        description="espeak-ng voices / variants (recipe: 8)",
    )
    pitches: list[int] = Field(default_factory=lambda: [35, 50, 65], description="-p (recipe)")
    speeds: list[int] = Field(default_factory=lambda: [140, 175], description="-s (recipe)")
    val_fraction: float = Field(0.1, gt=0, lt=0.5, description="validation share (recipe 150/1500)")
    test_fraction: float = Field(0.1, gt=0, lt=0.5, description="test share (recipe 150/1500)")
    aligner_iters: int = Field(5, ge=1, description="hard-EM rounds of the MAS aligner")
    n_wav_samples: int = Field(2, ge=0, description="test utterances kept as audio samples")
    workers: int = Field(2, ge=1, le=16, description="espeak-ng processes run side by side")

    @model_validator(mode="after")
    def _ranges(self) -> CorpusConfig:
        if self.min_words > self.max_words:
            raise ValueError(f"corpus.min_words={self.min_words} > max_words={self.max_words}")
        for key in ("voices", "pitches", "speeds"):
            if not getattr(self, key):
                raise ValueError(f"corpus.{key} must not be empty")
        if any(not 0 <= p <= 99 for p in self.pitches):
            raise ValueError(f"corpus.pitches={self.pitches}: espeak-ng -p takes 0..99")
        if any(not 80 <= s <= 450 for s in self.speeds):
            raise ValueError(f"corpus.speeds={self.speeds}: espeak-ng -s takes 80..450")
        return self


class DecoderConfig(Config):
    """The fixed decoder (conv + AdaIN; phonemes + durations + F0 + energy + style → mel),
    pretrained once on ground-truth features, then frozen for every arm (reconstructed)."""

    width: int = Field(96, ge=8, description="channels")
    blocks: int = Field(4, ge=1, description="residual dilated conv blocks with AdaIN")
    style_dim: int = Field(32, ge=4, description="style vector size (paper 128; scaled down)")
    steps: int = Field(300, ge=1, description="pretraining steps (L1 mel loss)")
    batch: int = Field(16, ge=1, description="utterances per step")
    lr: float = Field(2e-3, gt=0, description="Adam learning rate")


class RecognizerConfig(Config):
    """Small CTC phoneme recognizer on ground-truth mels (the WER proxy; reconstructed)."""

    width: int = Field(64, ge=8, description="conv + BiGRU width")
    steps: int = Field(600, ge=1, description="training steps")
    batch: int = Field(16, ge=1, description="utterances per step")
    lr: float = Field(3e-3, gt=0, description="Adam learning rate")


class StackConfig(Config):
    """One conditioning stack (text encoder + duration + prosody predictors)."""

    width: int = Field(64, ge=8, description="hidden size (recipe: 128; paper: 512)")
    text_layers: int = Field(2, ge=1, description="sequence-mixer layers (recipe: 4; paper: 6)")
    conv_layers: int = Field(2, ge=0, description="grouped conv blocks before each mixer (paper 6)")
    heads: int = Field(2, ge=1, description="attention heads of the baseline's Transformer")
    d_state: int = Field(4, ge=1, description="Mamba state size N (paper: 16; CPU time)")
    d_conv: int = Field(4, ge=2, description="Mamba causal conv width (paper: 4)")
    expand: int = Field(
        1, ge=1, description="Mamba expansion (paper: 2; 1 for CPU time and parameter parity)"
    )
    scan_chunk: int = Field(64, ge=1, description="selective-scan chunk (memory vs speed)")
    scan_parallel: bool = Field(
        False,
        description="associative (doubling) scan inside chunks; false = step loop (faster on CPU)",
    )
    dropout: float = Field(0.1, ge=0, lt=1, description="dropout (paper: 0.2)")
    fusion: Fusion = Field(
        "gated", description="Bi-Mamba fusion: gated (MVC) | concat (ablation c)"
    )
    style: StyleMode = Field("adaln", description="style injection: adaln (MVC) | concat (abl. d)")


class TrainConfig(Config):
    """Stack training (teacher-forced alignment; the aligner is dropped at inference)."""

    steps: int = Field(
        500,
        ge=1,
        description="optimizer steps (recipe: ≈15 CPU-min per arm; ours ≈3 at 500 steps)",
    )
    batch: int = Field(8, ge=1, description="utterances per step (paper: 8)")
    lr: float = Field(2e-3, gt=0, description="Adam lr (paper 1e-4 at 512 wide; ours is tiny)")
    lambda_mel: float = Field(5.0, ge=0, description="mel L1 through the frozen decoder (paper 5)")
    lambda_dur: float = Field(1.0, ge=0, description="log-duration MSE (paper λ_dur 1)")
    lambda_f0: float = Field(1.0, ge=0, description="voiced log-F0 L1 (paper λ_F0 1)")
    lambda_energy: float = Field(1.0, ge=0, description="energy L1 (paper λ_norm 1)")
    lambda_voiced: float = Field(0.5, ge=0, description="voicing BCE (reconstructed)")
    checkpoint_every: int = Field(50, ge=1, description="steps between checkpoints (resume)")
    log_every: int = Field(25, ge=1, description="steps between progress records")


class ScalingConfig(Config):
    """Encoder throughput / peak memory vs sequence length (1 layer, batch 1)."""

    lengths: list[int] = Field(
        default_factory=lambda: [256, 1024, 4096, 16384], description="T (the recipe's list)"
    )
    attn_max_len: int = Field(
        16384,
        ge=16,
        description="longest T for the attention encoder (its T² scores: 16k = 1 GiB "
        "per head; lower it on a small machine)",
    )
    width: int = Field(128, ge=8, description="encoder width (recipe: 128)")
    repeats: int = Field(1, ge=1, description="timed forwards per point (best kept)")
    fit_from: int = Field(1024, ge=1, description="log-log slopes use T ≥ this")


class MVCConfig(PipelineConfig):
    """One arm trained and evaluated; `compare` arms trained in the same run (pass rule)."""

    presets = {
        "smoke": {
            "corpus": {
                "n_utterances": 12,
                "voices": ["en-us", "en-gb+f4"],
                "pitches": [40, 60],
                "speeds": [160],
                "aligner_iters": 1,
                "n_wav_samples": 1,
            },
            "decoder": {"width": 16, "blocks": 1, "style_dim": 8, "steps": 8, "batch": 4},
            "recognizer": {"width": 16, "steps": 8, "batch": 4},
            "stack": {"width": 16, "text_layers": 1, "conv_layers": 1, "d_state": 2},
            "train": {"steps": 6, "batch": 4, "checkpoint_every": 3, "log_every": 2},
            "scaling": {
                "lengths": [32, 64],
                "attn_max_len": 64,
                "width": 16,
                "repeats": 1,
                "fit_from": 32,
            },
            "griffin_lim_iters": 2,
        },
    }

    arm: Arm = Field(
        "mvc",
        description="arm this run reports: mvc (b, c, d) | attn (a) | meanprosody (the "
        "floor of the stack: per-utterance flat prosody from the style only)",
    )
    compare: list[Arm] = Field(
        default_factory=lambda: ["attn", "meanprosody"],
        description="arms also trained here (pass rule: attn for parity, meanprosody for "
        "the span above the decoder floor)",
    )
    corpus: CorpusConfig = Field(default_factory=CorpusConfig)
    decoder: DecoderConfig = Field(default_factory=DecoderConfig)
    recognizer: RecognizerConfig = Field(default_factory=RecognizerConfig)
    stack: StackConfig = Field(default_factory=StackConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    scaling: ScalingConfig | None = Field(
        default_factory=ScalingConfig, description="encoder scaling benchmark; null = skip"
    )
    griffin_lim_iters: int = Field(32, ge=1, description="Griffin-Lim iterations (listening only)")
    parity_tolerance: float = Field(
        0.05,
        gt=0,
        description="pass rule: |b/a-1| ≤ this on MCD above the decoder floor and on log-F0 "
        "RMSE (recipe 5%)",
    )
    slope_band: tuple[float, float] = Field(
        (0.8, 1.25), description="pass rule: log-log slope counted as linear (reconstructed)"
    )

    @model_validator(mode="after")
    def _consistent(self) -> MVCConfig:
        if self.arm in self.compare:
            raise ValueError(f"compare={self.compare} repeats arm={self.arm!r}")
        if self.stack.width % self.stack.heads:
            raise ValueError(
                f"stack.width={self.stack.width} must be divisible by stack.heads={self.stack.heads}"
            )
        if self.stack.width % 4:
            raise ValueError(f"stack.width={self.stack.width} must be divisible by 4 (GroupNorm)")
        if self.scaling is not None and any(t < 2 for t in self.scaling.lengths):
            raise ValueError(f"scaling.lengths={self.scaling.lengths} must all be >= 2")
        return self
