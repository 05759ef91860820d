"""Configs of the test-time compute allocation pipelines (`ttc`, `ttc_uniform`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rayworks.core.config import Config, PipelineConfig
from rayworks.models import DecoderSpec
from rayworks.pipelines.rl.config import PolicyConfig, SFTConfig
from rayworks.pipelines.ttc.allocators import AllocatorConfig
from rayworks.pipelines.ttc.simulator import SimulatorConfig


class SamplerConfig(Config):
    """Level (ii): a policy from the RL issue sampling a task whose hardest items exceed it.

    The policy is the RL pipelines' SFT'd base of `task` (`model` and `sft` as in the RL
    configs, so the default shares the `grpo` default's cached base; arithmetic trains on 1-4
    digit operands) unless `policy` names a checkpoint or run dir (e.g. a `grpo` run).
    Queries mix in-range items with longer ones (up to `max_digits`) it has never seen.
    Every query gets a pool of `pool_size` responses at temperature 1, drawn as Ray tasks;
    allocations replay the pool in order, so every rule sees the same responses and a query
    counts as unsolvable when none of its `pool_size` responses is correct (operational
    definition, reconstructed).
    """

    task: str = Field("arithmetic", description="task of the policy (exact verifier = oracle)")
    policy: str | None = Field(None, description="checkpoint or run dir; default: the RL base")
    model: DecoderSpec = Field(
        default_factory=lambda: PolicyConfig().model, description="size of the default base"
    )
    sft: SFTConfig = Field(default_factory=SFTConfig, description="SFT of the default base")
    min_digits: int = Field(2, ge=1, le=12, description="fewest operand digits of a query")
    max_digits: int = Field(6, ge=1, le=12, description="most operand digits of a query")
    n_queries: int = Field(60, ge=2, description="test queries")
    n_val_queries: int = Field(
        60, ge=2, description="held-out validation queries on which lam is chosen"
    )
    pool_size: int = Field(64, ge=2, description="responses drawn per query")
    max_new_tokens: int = Field(80, ge=8, description="tokens per response")
    temperature: float = Field(1.0, gt=0, le=2, description="sampling temperature")
    num_tasks: int = Field(2, ge=1, description="Ray tasks the pool is sharded over")
    entropy_samples: int = Field(
        8, ge=2, description="responses per query the entropy / confidence separation uses"
    )

    @model_validator(mode="after")
    def _digits(self) -> SamplerConfig:
        if self.min_digits > self.max_digits:
            raise ValueError(
                f"sampler.min_digits={self.min_digits} exceeds max_digits={self.max_digits}"
            )
        if self.entropy_samples > self.pool_size:
            raise ValueError(
                f"sampler.entropy_samples={self.entropy_samples} exceeds pool_size={self.pool_size}"
            )
        return self


class TTCConfig(PipelineConfig):
    """Allocate a sample budget over queries; coverage / accuracy against budget.

    `budgets` are per-query budgets (the total is `budget x n_queries`); `budget` is the one
    the headline metrics are read at. Every run also draws the uniform rule's curve on the
    same responses to find the uniform budget that matches it (the efficiency ratio).
    """

    presets = {
        # level (ii) where the longest items need a longer generation than the base was
        # trained on: a context of 256 positions, SFT rows of 112 (1-4 digit operands), test
        # operands of 2-8 digits with room for a correct 8-digit trace (about 125 tokens)
        "long": {
            "level": "sampler",
            "theory_sizes": [],
            "sampler": {
                "model": {"d_model": 64, "n_layer": 2, "n_head": 4, "max_seq_len": 256},
                "min_digits": 2,
                "max_digits": 8,
                "max_new_tokens": 160,
                "pool_size": 32,
            },
        },
        # the same policy and task with operands of up to 12 digits (about 175 tokens of
        # correct trace, 216 allowed): the longest items start past the trained positions
        "long12": {
            "level": "sampler",
            "theory_sizes": [],
            "sampler": {
                "model": {"d_model": 64, "n_layer": 2, "n_head": 4, "max_seq_len": 256},
                "min_digits": 2,
                "max_digits": 12,
                "max_new_tokens": 216,
                "pool_size": 32,
            },
        },
        "smoke": {
            "simulator": {"n_queries": 40},
            "budgets": [1, 2, 4],
            "budget": 4,
            "theory_sizes": [8],
            "sampler": {
                "n_queries": 6,
                "n_val_queries": 6,
                "pool_size": 8,
                "max_new_tokens": 40,
                "min_digits": 1,
                "max_digits": 5,
                "entropy_samples": 4,
                "num_tasks": 1,
                "model": {"d_model": 32, "n_layer": 1, "n_head": 2},
                "sft": {"steps": 40, "n_train": 300, "n_test": 0, "batch_size": 16},
            },
        },
    }

    level: Literal["simulator", "sampler"] = Field(
        "simulator", description="simulator: known Delta; sampler: a trained policy"
    )
    allocator: AllocatorConfig = Field(default_factory=AllocatorConfig)
    budgets: list[int] = Field(
        default_factory=lambda: [1, 2, 4, 8, 16],
        description="per-query budgets of the curve, in the allocator's unit (samples or tokens)",
    )
    budget: int = Field(8, ge=1, description="per-query budget of the headline metrics")
    simulator: SimulatorConfig = Field(default_factory=SimulatorConfig)
    sampler: SamplerConfig = Field(default_factory=SamplerConfig)
    repeats: int = Field(
        5, ge=1, description="simulator: sampling seeds per run (same queries), averaged"
    )
    efficiency_cap: float = Field(
        16.0, gt=1, description="largest uniform/method budget ratio searched"
    )
    lam_grid: list[float] = Field(
        default_factory=lambda: [0.0, 0.03, 0.1, 0.3, 1.0],
        description="exploration weights tried for ucb, entropy and bconf; the one with the "
        "best coverage at `budget` on held-out validation queries is used ([] keeps "
        "allocator.lam)",
    )
    theory_sizes: list[int] = Field(
        default_factory=lambda: [8, 16, 32, 64],
        description="simulator: n of the Delta_i = i/n theory check ([] skips it)",
    )

    @model_validator(mode="after")
    def _budget_listed(self) -> TTCConfig:
        if any(lam < 0 for lam in self.lam_grid):
            raise ValueError(f"lam_grid={self.lam_grid} holds a negative weight")
        if self.budget not in self.budgets:
            raise ValueError(f"budget={self.budget} must be one of budgets={self.budgets}")
        samples = self.allocator.unit == "samples"
        if samples and self.level == "sampler" and max(self.budgets) > self.sampler.pool_size:
            raise ValueError(
                f"budgets up to {max(self.budgets)} per query exceed sampler.pool_size="
                f"{self.sampler.pool_size}: the pool cannot serve them"
            )
        return self
