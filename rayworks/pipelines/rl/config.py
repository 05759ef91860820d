"""Configs of the RL pipelines: `grpo` (RLConfig), `ppo` (PPOConfig), `asyppo` (AsyPPOConfig).

rayworks run asyppo --preset smoke --set asyppo.mask_low=0.1 --set critic.n_critics=3

Each pipeline takes only the keys it uses (an unknown key is an error): GRPO has no
critic section, PPO adds one critic with GAE, AsyPPO adds M critics and its masks.
Defaults are the honest small-scale CPU setting; the values marked (reconstructed) are
not given by the papers and are our choice.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from rayworks.core.config import Config, PipelineConfig
from rayworks.core.errors import RayworksError
from rayworks.models import DecoderSpec, resolve_model_dir
from rayworks.pipelines.rl.prompt_file import file_problem
from rayworks.pipelines.rl.rewards import RewardSpec
from rayworks.pipelines.rl.verifiers import get_verifier
from rayworks.platform.rollout import SamplingConfig


class SFTConfig(Config):
    """Supervised fine-tuning on the task's traces that gives RL a partially competent start."""

    steps: int = Field(900, ge=1, description="SFT optimizer steps")
    batch_size: int = Field(32, ge=1, description="examples per SFT step")
    lr: float = Field(2e-3, gt=0, le=1, description="SFT peak learning rate")
    n_train: int = Field(20000, ge=1, description="task examples to fine-tune on")
    seq_len: int = Field(112, ge=8, description="tokens per SFT row (longer traces are cut)")
    n_test: int = Field(100, ge=0, description="test prompts for the base model's exact match")
    seed: int = Field(0, ge=0, description="SFT seed (shared by every RL seed and arm)")


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")  # one of them: a tokenizer


def absolute(path: str) -> str:
    """`path` made absolute here: Ray workers run in other folders than the launching shell."""
    return os.path.abspath(os.path.expanduser(path))


class PolicyConfig(Config):
    model: DecoderSpec = Field(
        default_factory=lambda: DecoderSpec(d_model=64, n_layer=2, n_head=4, max_seq_len=128),
        description="size of the policy (built and SFT'd here unless `init_from` is given)",
    )
    init_from: str | None = Field(
        None,
        description="start from this local HF causal LM with its tokenizer (a model folder, "
        "checkpoint or run dir; Llama, Qwen2, GPT-2, ...) instead of SFT'ing `model`",
    )
    chat_template: bool = Field(
        True,
        description="wrap each prompt as one user turn of the tokenizer's chat template, "
        "when it has one (false: the raw prompt)",
    )
    sft: SFTConfig = Field(default_factory=SFTConfig)

    @field_validator("init_from")
    @classmethod
    def _local_model(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            folder = resolve_model_dir(absolute(value))
        except RayworksError as err:
            raise ValueError(str(err)) from None
        if not any((folder / name).is_file() for name in TOKENIZER_FILES):
            raise ValueError(
                f"{str(folder)!r} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
                "save it beside the weights with tokenizer.save_pretrained"
            )
        return absolute(value)


class DataConfig(Config):
    """Your own prompts instead of `task`'s: JSON lines of {"prompt", "answer"[, "difficulty"]}.

    Without `val` / `test` files, `prompts` is split 80/10/10 by the stable prompt hash
    (prompt_file.py has the split rule); malformed lines go to `<run dir>/rejects.jsonl`.
    """

    verifier: str = Field(
        "exact",
        description="how a completion is scored: exact (answer after the last 'A:', else the "
        "whole completion), numeric (last number), countdown, or module:function",
    )
    prompts: str | None = Field(
        None, description="jsonl prompt file; when set, it replaces `task`'s prompts"
    )
    val: str | None = Field(None, description="jsonl of validation prompts (else from `prompts`)")
    test: str | None = Field(None, description="jsonl of test prompts (else from `prompts`)")

    @field_validator("verifier")
    @classmethod
    def _known_verifier(cls, value: str) -> str:
        try:
            get_verifier(value)
        except RayworksError as err:
            raise ValueError(str(err)) from None
        return value

    @field_validator("prompts", "val", "test")
    @classmethod
    def _usable_file(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if info.field_name != "prompts" and info.data.get("prompts", "") is None:
            raise ValueError(f"data.{info.field_name} needs data.prompts (the training prompts)")
        problem = file_problem(absolute(value), info.data.get("verifier"))
        if problem:
            raise ValueError(problem)
        return absolute(value)


class RolloutConfig(Config):
    engine: str = Field("hf", description="rollout engine: hf (CPU default) or vllm (GPU)")
    num_engines: int = Field(1, ge=1, description="engine actors; prompts are sharded over them")
    engine_resources: dict[str, float] = Field(
        default_factory=lambda: {"CPU": 0.4}, description="Ray resources of each engine actor"
    )
    prompts_per_step: int = Field(32, ge=1, description="training prompts per RL step")
    group_size: int = Field(8, ge=1, description="responses per prompt (G)")
    sampling: SamplingConfig = Field(
        default_factory=lambda: SamplingConfig(temperature=1.0, max_new_tokens=80)
    )
    engine_threads: int = Field(1, ge=1, description="torch threads per hf engine")
    placement: Literal["auto", "colocated", "separate"] = Field(
        "auto",
        description="colocated: generate in the learner's process from its own module; "
        "separate: engine actors; auto: colocated for hf on one node (rollout_group.py)",
    )
    mode: Literal["sync", "async"] = Field(
        "sync",
        description="async: step t+1's rollouts are generated while step t trains (one step "
        "off-policy; the engine's logprobs are the ratio's denominator)",
    )
    max_staleness: int = Field(
        1, ge=0, description="the oldest weight version a step may train on: step - this"
    )
    call_timeout_s: float = Field(
        600.0, gt=0, description="deadline of every call to an engine or critic actor"
    )
    max_engine_restarts: int = Field(
        3, ge=0, description="times Ray restarts each dead engine actor (weights are reloaded)"
    )

    def engine_kwargs(self) -> dict[str, Any]:
        """Constructor arguments of the engine (the `hf` engine's device and threads)."""
        if self.engine != "hf":
            return {}
        return {
            "threads": self.engine_threads,
            "device": "cuda" if self.engine_resources.get("GPU") else "cpu",
        }


class LossConfig(Config):
    policy_loss: str = Field("clipped", description="registered policy loss (algo.POLICY_LOSSES)")
    ppo_epochs: int = Field(1, ge=1, description="passes over each batch (data reuse)")
    minibatches: int = Field(1, ge=1, description="optimizer steps per pass")
    eps_low: float = Field(0.2, ge=0, description="lower clip range (1 - eps_low)")
    eps_high: float = Field(0.2, ge=0, description="upper clip range (clip-higher when > eps_low)")
    agg: Literal["token-mean", "seq-mean-token-mean"] = Field(
        "token-mean", description="loss aggregation over tokens"
    )
    kl_coef: float = Field(0.0, ge=0, description="weight of KL(pi || reference) in the loss")
    kl_estimator: Literal["k1", "k2", "k3"] = Field("k3", description="KL estimator")
    kl_monitor_every: int = Field(
        1,
        ge=0,
        description="steps between KL logs when kl_coef=0 (0 = never: no reference forward)",
    )
    entropy_coef: float = Field(
        0.0, ge=0, description="entropy bonus beta (same for every arm; reconstructed)"
    )
    old_logprobs: Literal["rollout", "recompute"] = Field(
        "rollout",
        description="pi_old from the engine's logprobs, or recomputed by the learner",
    )
    grpo_scale: bool = Field(True, description="GRPO: divide by the group std (else centre)")


class LearnerConfig(Config):
    """The policy learner: a Ray Train worker group (DDP/gloo or DeepSpeed ZeRO)."""

    strategy: Literal["ddp", "deepspeed"] = Field("ddp", description="DDP or DeepSpeed ZeRO")
    zero_stage: Literal[1, 2] = Field(2, description="DeepSpeed ZeRO stage")
    num_workers: int = Field(1, ge=1, description="Ray Train workers (batch rows are split)")
    cpus_per_worker: float = Field(1.0, gt=0, description="CPUs each worker reserves")
    use_gpu: bool = Field(False, description="one GPU per worker")
    threads_per_worker: int = Field(1, ge=1, description="torch threads per worker")
    max_steps: int = Field(100, ge=1, description="RL steps (rollout + update + sync)")
    lr: float = Field(1e-4, gt=0, le=1, description="policy learning rate (AdamW)")
    warmup_steps: int = Field(0, ge=0, description="linear warmup steps")
    schedule: Literal["constant", "cosine"] = Field(
        "constant", description="lr after warmup: constant, or cosine decay to min_lr_ratio * lr"
    )
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="cosine floor as a share of lr")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    grad_clip: float = Field(1.0, ge=0, description="max grad norm (0 = off)")
    log_every: int = Field(1, ge=1, description="steps between metric logs")
    eval_every: int = Field(10, ge=1, description="steps between test-accuracy evaluations")
    checkpoint_every: int = Field(20, ge=1, description="steps between checkpoints")
    keep_checkpoints: int = Field(2, ge=0, description="newest checkpoints kept (0 = all)")
    max_failures: int = Field(1, ge=0, description="learner failures retried from a checkpoint")


class EvalConfig(Config):
    """Held-out evaluation every `learner.eval_every` steps (learner.StepDriver.evaluate)."""

    splits: list[Literal["val", "test"]] = Field(
        default_factory=lambda: ["val", "test"],
        description="held-out splits evaluated: val for choosing knobs, test for reporting",
    )
    n_val: int = Field(128, ge=1, description="validation prompts")
    n_test: int = Field(256, ge=1, description="test prompts")
    samples_per_prompt: int = Field(
        8,
        ge=0,
        description="samples per prompt at the rollout temperature for sampled accuracy, "
        "pass@k, entropy and KL to the base (0: greedy only)",
    )
    samples: int = Field(8, ge=0, description="sample generations written per eval step")

    @model_validator(mode="after")
    def _some_split(self) -> EvalConfig:
        if not self.splits:
            raise ValueError("eval.splits must name at least one of val, test")
        return self


class RLConfig(PipelineConfig):
    """GRPO: group-normalised outcome advantages, no critic."""

    presets = {
        "smoke": {
            "policy": {
                "model": {"d_model": 32, "n_layer": 1, "n_head": 2},
                "sft": {"steps": 40, "n_train": 300, "n_test": 8, "batch_size": 16},
            },
            "rollout": {"prompts_per_step": 2, "group_size": 4, "sampling": {"max_new_tokens": 24}},
            "learner": {"max_steps": 3, "eval_every": 2, "checkpoint_every": 2},
            "eval": {"n_val": 4, "n_test": 4, "samples": 2, "samples_per_prompt": 2},
        },
        # `make demo`: the default setting, 20 steps with an eval every 5 (a rising curve)
        "demo": {
            "learner": {"max_steps": 20, "eval_every": 5, "checkpoint_every": 20},
            "eval": {"splits": ["test"], "n_test": 128, "samples_per_prompt": 4},
        },
    }

    task: str = Field("arithmetic_mix", description="synthetic task with an exact verifier")
    policy: PolicyConfig = Field(
        default_factory=lambda: PolicyConfig(sft=SFTConfig(steps=1500)),
        description="the policy to train (SFT'd here from `task`'s demonstrations by default)",
    )
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    loss: LossConfig = Field(default_factory=LossConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    data: DataConfig = Field(
        default_factory=DataConfig,
        description="your own prompt file and verifier (unset: `task`'s prompts)",
    )
    rewards: list[RewardSpec] = Field(
        default_factory=list,
        description="weighted reward components (empty: the verifier, weight 1)",
    )
    shuffle_rewards: bool = Field(
        False,
        description="control arm: permute each batch's rewards over its rows, so the "
        "update carries no reward signal (the logged accuracy stays the true one)",
    )

    def reward_specs(self) -> list[RewardSpec]:
        """The configured rewards; a verifier without a `task` or `verifier` kwarg scores
        with this run's prompts: the prompt file's `data.verifier`, else the task's."""
        own = {"verifier": self.data.verifier} if self.data.prompts else {"task": self.task}
        specs = self.rewards or [RewardSpec(name="verifier")]
        return [
            s.model_copy(update={"kwargs": {**own, **s.kwargs}})
            if s.name == "verifier" and not {"task", "verifier"} & set(s.kwargs)
            else s
            for s in specs
        ]

    def critic_config(self) -> CriticConfig | None:
        """The critics' settings; None for a critic-free method."""
        return None

    def ray_resources(self, placement: str | None = None) -> dict[str, float]:
        """What one run reserves: learner workers, engine actors (none when colocated; an
        unresolved `auto` counts them) and critic actors."""
        placement = placement or self.rollout.placement
        learner = {"CPU": self.learner.cpus_per_worker}
        if self.learner.use_gpu:
            learner["GPU"] = 1.0
        roles = [(self.learner.num_workers, learner)]
        if placement != "colocated":
            roles.append((self.rollout.num_engines, self.rollout.engine_resources))
        critic = self.critic_config()
        if critic is not None:
            roles.append((critic.n_critics, critic.resources))
        total: dict[str, float] = {}
        for count, res in roles:
            for key, value in res.items():
                total[key] = total.get(key, 0.0) + count * value
        return total

    @model_validator(mode="after")
    def _consistent(self) -> RLConfig:
        rows = self.rollout.prompts_per_step * self.rollout.group_size
        if rows % (self.loss.minibatches * self.learner.num_workers):
            raise ValueError(
                f"rollout.prompts_per_step x rollout.group_size = {rows} rows must split into "
                f"loss.minibatches={self.loss.minibatches} x "
                f"learner.num_workers={self.learner.num_workers} equal parts"
            )
        text = getattr(self.policy.model, "text", self.policy.model)  # a VLM's decoder
        if text.d_model % text.n_head:
            raise ValueError(
                f"the policy's d_model={text.d_model} must be divisible by its n_head={text.n_head}"
            )
        if self.rollout.mode == "async" and self.loss.old_logprobs != "rollout":
            raise ValueError(
                "rollout.mode=async needs loss.old_logprobs=rollout: the ratio's denominator "
                "must be the behaviour policy (the weights that sampled the rows), which a "
                "recompute by the updated learner is not"
            )
        if self.rollout.mode == "async" and self.rollout.max_staleness < 1:
            raise ValueError("rollout.mode=async needs rollout.max_staleness >= 1")
        if self.rollout.placement == "colocated" and self.rollout.engine != "hf":
            raise ValueError(
                f"rollout.placement=colocated runs the hf engine in the learner; "
                f"rollout.engine={self.rollout.engine!r} needs placement=separate"
            )
        return self


class CriticConfig(Config):
    """Critics: small LMs pretrained on the task's traces (SFT like the policy) + a value head."""

    n_critics: int = Field(1, ge=1, description="number of critic actors (M)")
    model: DecoderSpec = Field(
        default_factory=lambda: DecoderSpec(d_model=32, n_layer=2, n_head=2, max_seq_len=128),
        description="critic backbone size (smaller than the policy: asymmetric)",
    )
    symmetric: bool = Field(
        False, description="the backbone takes the policy's size instead (`model` is unused)"
    )
    path: str | None = Field(None, description="HF folder of a critic backbone to start from")
    pretrained: bool = Field(True, description="SFT the backbone on the traces (else random)")
    lr: float = Field(1e-3, gt=0, le=1, description="critic learning rate (AdamW)")
    epochs: int = Field(2, ge=1, description="critic passes over its data per step (UTD)")
    minibatches: int = Field(2, ge=1, description="critic optimizer steps per pass")
    value_clip: float | None = Field(None, gt=0, description="PPO value clipping range")
    gamma: float = Field(1.0, ge=0, le=1, description="GAE discount")
    lam: float = Field(0.95, ge=0, le=1, description="GAE lambda (reconstructed)")
    warmup_steps: int = Field(
        0, ge=0, description="RL steps that train the critics while the policy waits"
    )
    resources: dict[str, float] = Field(
        default_factory=lambda: {"CPU": 0.2}, description="Ray resources of each critic actor"
    )
    threads: int = Field(1, ge=1, description="torch threads per critic actor")
    max_restarts: int = Field(3, ge=0, description="restarts of a critic actor that dies")


class PPOConfig(RLConfig):
    """PPO: one (small) critic, GAE advantages."""

    presets = {  # no `demo`: grpo's shows learning in `make demo`, the benches the rest
        "smoke": {
            **RLConfig.presets["smoke"],
            "critic": {"model": {"d_model": 16, "n_layer": 1, "n_head": 2}},
        },
    }

    critic: CriticConfig = Field(default_factory=CriticConfig)

    def critic_config(self) -> CriticConfig:
        return self.critic


class AsyPPOKnobs(Config):
    """AsyPPO's uses of the inter-critic std sigma (steps 7 and 8 of the method)."""

    critic_data: Literal["responses", "prompts", "identical"] = Field(
        "responses",
        description="each prompt's responses split over critics (paper), whole prompts "
        "split (the abstract's wording), or every critic on all rows (ablation)",
    )
    aggregate: Literal["mean", "min"] = Field("mean", description="ensemble value V-bar")
    mask_low: float = Field(0.2, ge=0, le=1, description="k: advantage zeroed on lowest-k sigma")
    filter_high: float = Field(
        0.2, ge=0, le=1, description="h: entropy bonus dropped on highest-h sigma"
    )
    per_sequence: bool = Field(
        False, description="rank sigma per sequence (default: over the batch; reconstructed)"
    )


class AsyPPOConfig(PPOConfig):
    """AsyPPO: M mini-critic actors on disjoint response shards; sigma-based masks."""

    presets = PPOConfig.presets
    critic: CriticConfig = Field(default_factory=lambda: CriticConfig(n_critics=2))
    asyppo: AsyPPOKnobs = Field(default_factory=AsyPPOKnobs)
