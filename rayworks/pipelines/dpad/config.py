"""Configs of the DPad pipelines (`dpad` and its baseline `dpad_vanilla`).

Defaults follow our CPU reproduction recipe (reconstructed; `docs/dpad.md`), scaled to the
budget: a 2-layer d=64 bidirectional Llama (recipe: 4 x d128), LLaDA SFT on copy /
LSB-first addition (6000 steps at lr 2e-3 with weight decay 0.1, ~7 CPU-min), gen lengths
64/128/256, block 2 (every answer spans >= 3 blocks; recipe 16), DPad (k=3, a=2, W=64,
~21 kept suffix tokens), parallel tau = 0.9.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, model_validator

from rayworks.core.config import Config, PipelineConfig
from rayworks.models import DecoderSpec
from rayworks.pipelines.dpad.dropout import A_MAX
from rayworks.pipelines.dpad.tasks import TaskConfig, answer_limit

DecoderName = Literal[
    "vanilla",
    "vanilla_et",
    "dpad_et",
    "dpad_det_et",
    "dpad_uniform_et",
    "w0_et",
    "parallel",
    "parallel_et",
    "parallel_dpad_et",
    "parallel_cache_et",
    "parallel_cache_dpad_et",
]
GRID: list[DecoderName] = list(get_args(DecoderName))


class TrainConfig(Config):
    """LLaDA SFT of the masked diffusion LM (recipe: AdamW 1e-3, batch 32, ~800 steps)."""

    steps: int = Field(
        6000,
        ge=1,
        description="optimizer steps (recipe: ~800; addition leaves its plateau near step 2000)",
    )
    batch_size: int = Field(32, ge=1, description="sequences per step (recipe: 32)")
    lr: float = Field(2e-3, gt=0, le=1, description="AdamW peak learning rate (recipe: 1e-3)")
    weight_decay: float = Field(
        0.1,
        ge=0,
        description="AdamW weight decay (reconstructed: runs without it, 1500-3000 steps, never "
        "left the addition plateau; with 0.1 and lr 2e-3 it leaves near step 2000)",
    )
    warmup: int = Field(20, ge=0, description="linear warm-up steps, then cosine decay to 10%")
    mixed_lengths: bool = Field(
        True,
        description="each batch's gen length drawn from gen_lengths (reconstructed; False: "
        "always the largest, the recipe's 'train at the largest gen_length')",
    )
    inverse_length: bool = Field(
        True,
        description="draw gen length g with probability ~ 1/g (reconstructed: equal compute "
        "per length; False: uniform over gen_lengths)",
    )
    init_std: float | None = Field(
        None, gt=0, description="initial weight std (None: HF Llama's 0.02)"
    )
    extra_lengths: list[int] = Field(
        default_factory=lambda: [16],
        description="more gen lengths to train at besides gen_lengths (reconstructed: a short "
        "one, e.g. 16, keeps the digits a real share of the loss instead of the EOS padding)",
    )
    stratified_t: bool = Field(
        True,
        description="one t per stratum of the batch (reconstructed, MDLM's low-discrepancy "
        "sampler; False: i.i.d. U(0, 1), LLaDA)",
    )


class DropoutConfig(Config):
    """DPad keep profile p(i) = a * phi(k i / (W - 1)), i < W (paper: k, a, W per task)."""

    window: int = Field(64, ge=0, description="W: suffix window (0 = no suffix at all)")
    k: float = Field(3.0, gt=0, description="Gaussian width: the window end sits at k sigma")
    a: float = Field(2.0, gt=0, le=A_MAX, description="scale; a <= 2.5066 keeps p(0) <= 1")


class DPadConfig(PipelineConfig):
    """Train one masked diffusion LM, then decode the same test prompts with every decoder
    of `decoders` at every gen length. `method` is the decoder the headline is read from."""

    presets = {
        "smoke": {
            "model": {"d_model": 48, "n_layer": 2, "n_head": 4, "ffn_mult": 2.0},
            "train": {"steps": 100, "batch_size": 32, "lr": 3e-3, "warmup": 10},
            "gen_lengths": [32, 64],
            "block_length": 16,
            "n_test": 12,
            "dropout": {"window": 32, "k": 3.0, "a": 2.0},
            "num_threads": 1,
        },
    }

    model: DecoderSpec = Field(
        default_factory=lambda: DecoderSpec(
            d_model=64, n_layer=2, n_head=4, ffn_mult=4.0, max_seq_len=320
        ),
        description="bidirectional Llama size (recipe: 4 layers, d=128; 2 layers, d=64 "
        "learn the default tasks within the CPU budget, the recipe's size did not)",
    )
    data: TaskConfig = Field(
        default_factory=lambda: TaskConfig(min_digits=4, max_digits=8),
        description="synthetic SFT tasks (recipe: 8-16 digits; 4-8 to fit the budget)",
    )
    train: TrainConfig = Field(default_factory=TrainConfig, description="SFT of the model")
    gen_lengths: list[int] = Field(
        default_factory=lambda: [64, 128, 256], description="generation lengths evaluated"
    )
    block_length: int = Field(
        2,
        ge=1,
        description="semi-AR block (recipe 16; paper 32). 2 here so every answer (4-8 digits "
        "+ EOS) spans at least 3 blocks, as the paper's answers span many 32-token blocks: "
        "earlier blocks are decoded while later answer tokens are still masked suffix, so "
        "the suffix can matter (at 16 every answer fits the first block)",
    )
    n_test: int = Field(128, ge=1, description="test prompts (same for every decoder)")
    eval_batch: int = Field(32, ge=1, description="prompts decoded together")
    threshold: float = Field(0.9, gt=0, lt=1, description="parallel decoding tau (Fast-dLLM)")
    dropout: DropoutConfig = Field(default_factory=DropoutConfig, description="DPad profile")
    decoders: list[DecoderName] = Field(
        default_factory=lambda: list(GRID), description="decoders evaluated (vanilla needed)"
    )
    method: DecoderName = Field("dpad_et", description="decoder whose numbers are the headline")
    num_threads: int = Field(2, ge=1, le=64, description="torch.set_num_threads")

    @model_validator(mode="after")
    def _check(self) -> DPadConfig:
        if not self.gen_lengths:
            raise ValueError("gen_lengths must hold at least one length")
        for g in self.gen_lengths:
            if g % self.block_length:
                raise ValueError(
                    f"gen_lengths entry {g} is not a multiple of block_length={self.block_length}"
                )
            if g < answer_limit(self.data):
                raise ValueError(
                    f"gen_lengths entry {g} is shorter than the longest answer + EOS "
                    f"({answer_limit(self.data)} for data.max_digits={self.data.max_digits})"
                )
        short = [g for g in self.train.extra_lengths if g < answer_limit(self.data)]
        if short:
            raise ValueError(
                f"train.extra_lengths {short} are shorter than the longest answer + EOS "
                f"({answer_limit(self.data)})"
            )
        top = max(self.gen_lengths) + 3 + max(self.data.max_digits, 9)
        if top > self.model.max_seq_len:
            raise ValueError(
                f"model.max_seq_len={self.model.max_seq_len} is below prompt + largest gen "
                f"length ({top})"
            )
        for needed in ("vanilla", self.method):
            if needed not in self.decoders:
                raise ValueError(f"decoders must include {needed!r} (got {self.decoders})")
        return self
