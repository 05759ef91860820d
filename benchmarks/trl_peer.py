"""What the TRL side-by-sides share: benchmarks/rl_step.py (speed), benchmarks/rl_learning.py
(learning).

- `grpo_args`: TRL 1.16 `GRPOConfig` from one of our `RLConfig`s, knob by knob (the mapping is
  spelled out in rl_learning.py's docstring, and checked against TRL's GRPOTrainer source);
- `step_rows`: the training-pool rows our run draws, step by step, in our order
  (`learner.StepDriver.prompts`), so TRL can be handed the very same sequence;
- `reward_function`: our reward components (`CombinedReward`, by default the task's exact
  verifier) as a TRL reward function, recording every call;
- `launch_worker`: one TRL run in a subprocess of the calling script (its own torch threads,
  no Ray in the process), given a JSON spec and answering with a JSON result.

Nothing here imports trl at module level, so tests can import it without the bench extra.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def rl_config(overrides: Sequence[str] = ()) -> Any:
    """`RLConfig` defaults (the `grpo` pipeline's default preset) plus `--set` overrides."""
    from rayworks.core.config import build_config
    from rayworks.pipelines.rl.config import RLConfig

    return build_config(RLConfig, None, (), list(overrides))


def policy_override(folder: str | Path) -> str:
    """The `--set` that starts our run from `folder` (`policy.init_from`; `policy.path` in
    configs from before the rename)."""
    from rayworks.pipelines.rl.config import PolicyConfig

    key = "init_from" if "init_from" in PolicyConfig.model_fields else "path"
    return f"policy.{key}={folder}"


def trl_prompts(cfg: Any, tokenizer: Any, prompts: Sequence[str]) -> list[Any]:
    """Prompts as TRL should get them: plain text, or one user turn each where our engine
    applies the tokenizer's chat template (rollout.encode_prompts), so TRL applies the same
    template (with the generation prompt, no special tokens added twice)."""
    from rayworks.platform.rollout import uses_chat_template

    if uses_chat_template(tokenizer, getattr(cfg.policy, "chat_template", True)):
        return [[{"role": "user", "content": p}] for p in prompts]
    return list(prompts)


def completion_text(completion: Any) -> str:
    """A TRL completion as text (a conversational one is a list of messages)."""
    if isinstance(completion, list):
        return "".join(m["content"] for m in completion if m.get("role") == "assistant")
    return completion


def step_rows(n_pool: int, prompts_per_step: int, seed: int, steps: int) -> list[int]:
    """Pool indices of steps 0..steps-1 of a run with `seed`, step after step: step s's prompts
    are `pool[i] for i in batch_rows(n_pool, prompts_per_step, seed, s)`, as in
    `learner.StepDriver.prompts`."""
    from rayworks.pipelines.lm.data import batch_rows

    return [
        int(i) for s in range(steps) for i in batch_rows(n_pool, prompts_per_step, seed, s).tolist()
    ]


def updates_per_step(cfg: Any) -> int:
    """Optimizer steps per RL step: ppo_epochs passes x minibatches."""
    return cfg.loss.ppo_epochs * cfg.loss.minibatches


def loss_type(cfg: Any) -> str:
    """TRL's loss aggregation equal to ours (one process, no gradient accumulation).

    token-mean over one optimizer step's rows: 'dapo' (divides by the active tokens of the
    generation batch, which is the optimizer step's batch when minibatches=1) or, with
    minibatches > 1, 'bnpo' (the active tokens of the local batch = our minibatch; 'dapo'
    would divide by the generation batch's tokens / minibatches, an average). Our
    seq-mean-token-mean is TRL's 'grpo' (per-sequence mean, then the batch mean).
    """
    if cfg.loss.agg == "seq-mean-token-mean":
        return "grpo"
    return "dapo" if cfg.loss.minibatches == 1 else "bnpo"


def lr_schedule(cfg: Any) -> dict[str, Any]:
    """HF's nearest built-in schedule (used where the caller does not pass ours; HF's warmup
    starts at lr 0 at step 0, ours at lr / warmup_steps)."""
    t, k = cfg.learner, updates_per_step(cfg)
    if t.schedule == "cosine":
        return {
            "lr_scheduler_type": "cosine_with_min_lr",
            "warmup_steps": t.warmup_steps * k,
            "lr_scheduler_kwargs": {"min_lr_rate": t.min_lr_ratio},
        }
    kind = "constant_with_warmup" if t.warmup_steps else "constant"
    return {"lr_scheduler_type": kind, "warmup_steps": t.warmup_steps * k}


def unmappable(cfg: Any) -> list[str]:
    """Settings of ours that TRL's GRPOTrainer cannot run at all (an error, not a footnote)."""
    problems = []
    if cfg.loss.policy_loss != "clipped":
        problems.append(f"loss.policy_loss={cfg.loss.policy_loss!r} (TRL: the clipped ratio)")
    if cfg.rollout.sampling.temperature <= 0:
        problems.append("rollout.sampling.temperature=0 (TRL samples; greedy GRPO has no groups)")
    if cfg.rollout.group_size < 2:
        problems.append("rollout.group_size < 2 (TRL needs num_generations >= 2)")
    return problems


def grpo_args(cfg: Any, output_dir: str | Path, seed: int, **extra: Any) -> Any:
    """`GRPOConfig` with every knob of `cfg` that TRL has, so that one TRL optimizer step is one
    of ours: prompts_per_step x group_size completions per RL step, generated once and used
    for ppo_epochs x minibatches optimizer steps. `extra` overrides (e.g. logging)."""
    from trl import GRPOConfig

    problems = unmappable(cfg)
    if problems:
        raise ValueError("TRL's GRPOTrainer cannot run " + "; ".join(problems))
    ro, lo, t = cfg.rollout, cfg.loss, cfg.learner
    rows = ro.prompts_per_step * ro.group_size
    settings: dict[str, Any] = {
        "output_dir": str(output_dir),
        "use_cpu": True,
        "bf16": False,
        "use_vllm": False,
        "report_to": "none",
        "save_strategy": "no",
        "gradient_checkpointing": False,
        "dataloader_num_workers": 0,
        "disable_tqdm": True,
        "logging_steps": 1,
        "seed": seed,
        "max_steps": t.max_steps * updates_per_step(cfg),
        # batch: one generation of prompts x G per RL step, split into `minibatches` optimizer
        # steps of rows / minibatches each, the whole split reused `ppo_epochs` times
        "num_generations": ro.group_size,
        "per_device_train_batch_size": rows // lo.minibatches,
        "steps_per_generation": lo.minibatches,
        "gradient_accumulation_steps": 1,
        "num_iterations": lo.ppo_epochs,
        # our prompt order: the dataset holds the run's prompt sequence; RepeatSampler keeps it
        # and yields each row G times in a row (one group), prompts_per_step rows per generation
        "shuffle_dataset": False,
        # sampling: the rollout's; the scored policy is logits / temperature on both sides
        "max_completion_length": ro.sampling.max_new_tokens,
        "temperature": ro.sampling.temperature,
        "top_p": ro.sampling.top_p,
        "top_k": 0,
        "repetition_penalty": 1.0,
        # loss: clipped ratio with clip-higher, k3 KL to the base, token-level ratios
        "epsilon": lo.eps_low,
        "epsilon_high": lo.eps_high,
        "beta": lo.kl_coef,
        "loss_type": loss_type(cfg),
        "scale_rewards": "group" if lo.grpo_scale else "none",
        "entropy_coef": lo.entropy_coef,
        "importance_sampling_level": "token",
        "mask_truncated_completions": False,
        "top_entropy_quantile": 1.0,
        # optimizer: AdamW, our lr, weight decay and clip
        "learning_rate": t.lr,
        "weight_decay": t.weight_decay,
        "max_grad_norm": t.grad_clip,
        **lr_schedule(cfg),
    }
    settings.update(extra)
    return GRPOConfig(**settings)


def reward_function(
    examples: Sequence[Any],
    reward: Callable,
    calls: list[dict[str, Any]],
    shuffle_seed: Callable[[int], int] | None = None,
) -> Callable[..., list[float]]:
    """Our `reward(examples, completions) -> (totals, parts)` as a TRL reward function.

    The dataset's `row` column names each completion's example in `examples`; every call
    appends {"rows", "tokens", "rewards"} to `calls`. `shuffle_seed(call_index)` permutes the
    rewards over the batch as our `shuffle_rewards` control does (learner.shuffled)."""

    def our_reward(
        completions: list[str], completion_ids: list[list[int]], row: list[int], **_: Any
    ) -> list[float]:
        items = [examples[r] for r in row]
        totals, parts = reward(items, [completion_text(c) for c in completions])
        calls.append(
            {
                "rows": [int(r) for r in row],
                "rewards": list(totals),
                "tokens": sum(len(ids) for ids in completion_ids),
            }
        )
        if shuffle_seed is not None:
            from rayworks.pipelines.rl.learner import shuffled

            totals, _ = shuffled(list(totals), parts, shuffle_seed(len(calls) - 1))
        return [float(x) for x in totals]

    return our_reward


def launch_worker(
    script: str | Path,
    spec: dict[str, Any],
    threads: int = 1,
    omp_wait: str = "",
    log: Path | None = None,
) -> tuple[dict[str, Any], float]:
    """Run `python script --trl-worker SPEC.json` (the spec gains `out`, `output_dir` and
    `threads`); returns the JSON the worker wrote to `out` and the wall seconds. `log`: a
    file for the worker's stdout and stderr (default: this process's)."""
    with tempfile.TemporaryDirectory(prefix="bench-trl-") as tmp:
        spec = {
            **spec,
            "out": str(Path(tmp) / "out.json"),
            "output_dir": str(Path(tmp) / "trainer"),
            "threads": threads,
        }
        path = Path(tmp) / "spec.json"
        path.write_text(json.dumps(spec))
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        if threads > 1 and omp_wait:
            env["OMP_WAIT_POLICY"] = omp_wait
        started = time.perf_counter()
        run_logged([sys.executable, str(script), "--trl-worker", str(path)], env, log)
        wall = time.perf_counter() - started
        return json.loads(Path(spec["out"]).read_text()), wall


def run_logged(cmd: list[str], env: dict[str, str], log: Path | None) -> None:
    """Run `cmd`; with `log`, its output goes there and a failure shows the log's tail."""
    if log is None:
        subprocess.run(cmd, env=env, check=True)
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        done = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise RuntimeError(f"{' '.join(cmd[:6])} ... failed ({done.returncode}); {log}:\n{tail}")


def read_spec(path: str) -> dict[str, Any]:
    return json.loads(Path(path).read_text())
