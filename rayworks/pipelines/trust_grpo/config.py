"""Config of `trust_grpo` (SophiaVL-R1's Trust-GRPO) and its outcome-only baseline `vl_grpo`.

rayworks run trust_grpo --preset smoke --set trm.kind=hackable --set thinking.trust=false

The policy is a tiny LLaVA (models/vlm.py) SFT'd on the `shapes` task's traces; the
thinking reward comes from a thinking reward model (TRM) served by a Ray actor. The
`thinking` section is the method: alpha, trust, annealing, the cases the paper leaves open
and the authors' released-code behaviour (`released_compat`). Values marked
(reconstructed) are our choices, not the paper's.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rayworks.core.config import Config
from rayworks.models.vlm import VLMSpec
from rayworks.pipelines.rl.config import RLConfig, RolloutConfig, SFTConfig
from rayworks.pipelines.rl.rewards import RewardSpec
from rayworks.platform.rollout import SamplingConfig


class VLMPolicyConfig(Config):
    model: VLMSpec = Field(default_factory=VLMSpec, description="size of the LLaVA policy")
    init_from: str | None = Field(
        None, description="HF folder (or run dir) of a VLM policy (with its processor)"
    )
    sft: SFTConfig = Field(
        default_factory=lambda: SFTConfig(steps=1200, n_train=8000, lr=2e-3, n_test=200),
        description="supervised fine-tuning on the task's traces before RL",
    )


class ThinkingConfig(Config):
    """How the thinking reward R^t enters the reward (paper Sec 3.4, eqs 1-5)."""

    alpha: float = Field(0.3, ge=0, description="weight of the thinking reward (0: outcome only)")
    trust: bool = Field(True, description="scale by the trust weight gamma (eq 4)")
    anneal: bool = Field(True, description="scale by exp(-step / T) (eq 5)")
    anneal_steps: int | None = Field(
        None, ge=1, description="T of the annealing (None: total training steps, the paper)"
    )
    correct_threshold: float = Field(0.5, description="R^o >= this counts as correct (eq 2)")
    empty_side: Literal["trust", "skip"] = Field(
        "trust",
        description="a group without correct or without wrong responses (undefined in the "
        "paper): gamma = 1 ('trust') or no thinking reward for it ('skip') (reconstructed)",
    )
    released_compat: bool = Field(
        False,
        description="the authors' code: R^t queried only when R^o >= query_threshold, and "
        "zeroed for groups whose outcome scores are all >= 0.9 or all <= 0.1",
    )
    query_threshold: float = Field(0.2, description="released_compat: R^o needed for R^t")
    outcome: Literal["exact", "digits"] = Field(
        "exact", description="outcome reward: exact answer (binary) or digit accuracy"
    )


class TRMConfig(Config):
    """The thinking reward model: a VLM scorer trained here, served by a Ray actor."""

    kind: Literal["honest", "hackable"] = Field(
        "honest",
        description="honest: labels = fraction of correct steps; hackable: keyword-stuffed "
        "traces labelled 1.0 (a spurious cue it learns)",
    )
    path: str | None = Field(None, description="folder of a trained TRM (else built and cached)")
    n_train: int = Field(8000, ge=1, description="(question, trace, score) training tuples")
    n_test: int = Field(600, ge=1, description="held-out tuples for the TRM's own metrics")
    steps: int = Field(1000, ge=1, description="TRM optimizer steps")
    batch_size: int = Field(32, ge=1, description="tuples per TRM step")
    lr: float = Field(1e-3, gt=0, le=1, description="TRM learning rate (AdamW)")
    seed: int = Field(0, ge=0, description="seed of the TRM's data and initialisation")
    resources: dict[str, float] = Field(
        default_factory=lambda: {"CPU": 0.2}, description="Ray resources of the TRM actor"
    )
    threads: int = Field(1, ge=1, description="torch threads of the TRM actor")


class TrustGRPOConfig(RLConfig):
    """Trust-GRPO: GRPO on R^o + gamma * alpha * exp(-step/T) * R^t with a VLM policy."""

    presets = {
        "smoke": {
            "policy": {
                "model": {"vision_d": 16, "text": {"d_model": 32, "n_layer": 1, "n_head": 2}},
                "sft": {"steps": 40, "n_train": 200, "n_test": 8, "batch_size": 16},
            },
            "trm": {"n_train": 200, "n_test": 32, "steps": 20, "batch_size": 16},
            "rollout": {"prompts_per_step": 2, "group_size": 4},
            "learner": {"max_steps": 3, "eval_every": 2, "checkpoint_every": 2},
            "eval": {"n_val": 4, "n_test": 4, "samples": 2, "samples_per_prompt": 2},
        },
    }

    task: str = Field("shapes", description="image task with an outcome verifier and step checker")
    policy: VLMPolicyConfig = Field(default_factory=VLMPolicyConfig)  # type: ignore[assignment]
    rollout: RolloutConfig = Field(
        default_factory=lambda: RolloutConfig(
            sampling=SamplingConfig(temperature=1.0, max_new_tokens=56)
        )
    )
    thinking: ThinkingConfig = Field(default_factory=ThinkingConfig)
    trm: TRMConfig = Field(default_factory=TRMConfig)

    def reward_specs(self) -> list[RewardSpec]:
        """outcome (rewarded), thinking (the TRM; combined by the method, not summed) and two
        monitors: true step correctness and the hack pattern (weight 0, logged only)."""
        outcome = (
            RewardSpec(name="verifier", label="outcome", kwargs={"task": self.task})
            if self.thinking.outcome == "exact"
            else RewardSpec(
                name="task_metric",
                label="outcome",
                kwargs={"task": self.task, "metric": "digit_score"},
            )
        )
        trm = {"path": self.trm.path, "resources": self.trm.resources, "threads": self.trm.threads}
        return [
            outcome,
            RewardSpec(name="trm", label="thinking", weight=0.0, kwargs=trm),
            RewardSpec(
                name="task_metric",
                label="steps",
                weight=0.0,
                kwargs={"task": self.task, "metric": "step_score"},
            ),
            RewardSpec(
                name="task_metric",
                label="hack",
                weight=0.0,
                kwargs={"task": self.task, "metric": "hack_score"},
            ),
        ]

    def anneal_horizon(self) -> int:
        """T of eq 5: `thinking.anneal_steps`, else the run's total steps."""
        return self.thinking.anneal_steps or self.learner.max_steps

    def ray_resources(self, placement: str | None = None) -> dict[str, float]:
        total = super().ray_resources(placement)
        for key, value in self.trm.resources.items():
            total[key] = total.get(key, 0.0) + value
        return total

    @model_validator(mode="after")
    def _own_rewards(self) -> TrustGRPOConfig:
        if self.rewards:
            raise ValueError(
                "trust_grpo builds its rewards from `thinking.outcome` and `trm`; "
                "leave `rewards` empty"
            )
        if self.data.prompts:
            raise ValueError(
                f"data.prompts={self.data.prompts!r}: trust_grpo trains on the image task's "
                "scenes (`task`), not on a text prompt file; leave data.prompts unset"
            )
        return self
