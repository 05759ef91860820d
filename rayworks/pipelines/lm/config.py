"""Config of the `lm` pipeline (and its plain-PyTorch baseline `lm_plain`).

rayworks run lm --preset smoke --set train.lr=3e-3
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rayworks.core.config import Config, PipelineConfig
from rayworks.models import DecoderSpec, TokenizerSpec


class DataConfig(Config):
    source: Literal["task", "files"] = Field("task", description="synthetic task or local files")
    task: str = Field("arithmetic", description="task name when source=task")
    files: list[str] = Field(
        default_factory=list, description="local .txt/.jsonl/.parquet files or folders"
    )
    text_field: str = Field("text", description="field holding the text in jsonl/parquet rows")
    n_train: int = Field(20000, ge=1, description="task examples for training")
    n_val: int = Field(500, ge=1, description="task examples for validation loss")
    n_test: int = Field(200, ge=0, description="task prompts for exact-match accuracy")
    val_fraction: float = Field(0.05, gt=0, lt=1, description="share of file documents held out")
    seq_len: int = Field(128, ge=8, description="tokens per training row")
    packing: bool = Field(True, description="pack documents into full rows (else pad per example)")
    loss_on: Literal["all", "completion"] = Field(
        "all",
        description="train on every token, or on task completions only (SFT; needs packing=false)",
    )


class TrainConfig(Config):
    strategy: Literal["ddp", "deepspeed"] = Field(
        "ddp", description="DDP over gloo, or DeepSpeed ZeRO"
    )
    zero_stage: Literal[1, 2] = Field(2, description="DeepSpeed ZeRO stage")
    num_workers: int = Field(2, ge=1, description="Ray Train workers (processes)")
    cpus_per_worker: float = Field(1.0, gt=0, description="CPUs each worker reserves")
    use_gpu: bool = Field(False, description="one GPU per worker")
    threads_per_worker: int = Field(1, ge=1, description="torch intra-op threads per worker")
    batch_size: int = Field(32, ge=1, description="global batch (rows per optimizer step)")
    max_steps: int = Field(2000, ge=1, description="optimizer steps")
    lr: float = Field(1e-3, gt=0, le=1, description="peak learning rate (AdamW)")
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="cosine floor as a share of lr")
    warmup_steps: int = Field(50, ge=0, description="linear warmup steps")
    weight_decay: float = Field(0.1, ge=0, description="AdamW weight decay")
    grad_clip: float = Field(1.0, ge=0, description="max grad norm (0 = off)")
    log_every: int = Field(20, ge=1, description="steps between train-metric logs")
    eval_every: int = Field(200, ge=1, description="steps between validation passes")
    checkpoint_every: int = Field(200, ge=1, description="steps between checkpoints")
    keep_checkpoints: int = Field(2, ge=0, description="newest checkpoints kept (0 = all)")
    max_failures: int = Field(
        1, ge=0, description="worker failures Ray Train retries from a checkpoint"
    )


class EvalConfig(Config):
    val_batches: int = Field(8, ge=1, description="batches of validation loss per pass")
    exact_match: bool = Field(True, description="greedy-decode test prompts and verify answers")
    max_new_tokens: int = Field(64, ge=1, description="generation budget per test prompt")


class LMConfig(PipelineConfig):
    presets = {
        "smoke": {
            "model": {"d_model": 32, "n_layer": 2, "n_head": 2},
            "data": {"n_train": 400, "n_val": 64, "n_test": 16, "seq_len": 64},
            "train": {
                "max_steps": 30,
                "batch_size": 16,
                "lr": 3e-3,
                "warmup_steps": 5,
                "log_every": 5,
                "eval_every": 15,
                "checkpoint_every": 10,
            },
            "eval": {"val_batches": 2, "max_new_tokens": 40},
        },
        "small": {
            "model": {"d_model": 128, "n_layer": 4, "n_head": 4},
            "data": {"n_train": 20000, "n_val": 500, "n_test": 200, "seq_len": 128},
            "train": {"max_steps": 600, "batch_size": 32, "lr": 2e-3, "eval_every": 200},
        },
    }

    model: DecoderSpec = Field(default_factory=DecoderSpec)
    tokenizer: TokenizerSpec = Field(default_factory=TokenizerSpec)
    data: DataConfig = Field(default_factory=DataConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)

    def ray_resources(self) -> dict[str, float]:
        """What one run reserves: its Ray Train workers."""
        return {"CPU": self.train.num_workers * self.train.cpus_per_worker}

    @model_validator(mode="after")
    def _consistent(self) -> LMConfig:
        if self.train.batch_size % self.train.num_workers:
            raise ValueError(
                f"train.batch_size={self.train.batch_size} must be divisible by "
                f"train.num_workers={self.train.num_workers}"
            )
        if self.model.d_model % self.model.n_head:
            raise ValueError(
                f"model.d_model={self.model.d_model} must be divisible by model.n_head={self.model.n_head}"
            )
        if self.data.source == "files" and not self.data.files:
            raise ValueError("data.source=files needs data.files (a list of paths)")
        if self.data.loss_on == "completion" and (self.data.packing or self.data.source != "task"):
            raise ValueError(
                "data.loss_on=completion needs data.source=task and data.packing=false "
                "(one example per row, so the prompt can be masked)"
            )
        if self.data.seq_len > self.model.max_seq_len:
            raise ValueError(
                f"data.seq_len={self.data.seq_len} exceeds model.max_seq_len={self.model.max_seq_len}"
            )
        return self
