"""The prompts an RL run trains, chooses knobs and reports on: train pool, val and test.

A `PromptSet` holds the three splits as `Example`s together with the verifier that scores a
completion and the task's optional diagnostics. For a synthetic task:

- the train pool is drawn from the task's train split by its own seeded stream and keeps
  only prompts the SFT stage never saw (`policy.sft.n_train` examples of the same stream
  the base was fine-tuned on), so RL measures what the reward teaches, not recall of the
  demonstrations; its size is `TRAIN_POOL` distinct draws at most (an easy item that the
  SFT data already holds is dropped, so very small problems can be missing from it);
- val (`eval.n_val`) and test (`eval.n_test`) come from the task's hash-disjoint val and
  test splits (tasks/base.py): val is for choosing knobs (`rayworks sweep ... --metric
  val_accuracy`), test only for reporting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rayworks.data.tasks import Example, get_task

if TYPE_CHECKING:
    from rayworks.pipelines.rl.config import RLConfig

TRAIN_POOL = 5000  # distinct draws of training prompts the RL steps sample from
RL_STREAM = 7_777  # offset of the RL prompt stream's seed from the SFT stream's
Verifier = Callable[[Example, str], float]


@dataclass(frozen=True)
class PromptSet:
    train: list[Example]
    val: list[Example]
    test: list[Example]
    verify: Verifier  # (example, completion) -> score in [0, 1]
    diagnostics: Callable[[Example, str], dict[str, float]] | None = None
    source: str = ""  # the task name or the prompt file, for logs and reports

    def split(self, name: str) -> list[Example]:
        return {"train": self.train, "val": self.val, "test": self.test}[name]


def task_prompts(cfg: RLConfig) -> PromptSet:
    """The splits of `cfg.task` (see the module docstring)."""
    task = get_task(cfg.task)
    seed, n_sft = cfg.policy.sft.seed, cfg.policy.sft.n_train
    seen = {e.prompt for e in task.examples(n_sft, "train", seed)}
    pool = [e for e in task.examples(TRAIN_POOL, "train", seed + RL_STREAM)
            if e.prompt not in seen]  # fmt: skip
    if not pool:
        raise ValueError(f"task {cfg.task!r} has no training prompt outside its SFT data")
    diagnose: Any = getattr(task, "diagnostics", None)
    return PromptSet(
        train=pool,
        val=task.examples(cfg.eval.n_val, "val", seed),
        test=task.examples(cfg.eval.n_test, "test", seed),
        verify=task.verify,
        diagnostics=diagnose if callable(diagnose) else None,
        source=cfg.task,
    )


def prompt_set(cfg: RLConfig) -> PromptSet:
    """The run's prompts: the synthetic task's splits."""
    return task_prompts(cfg)
