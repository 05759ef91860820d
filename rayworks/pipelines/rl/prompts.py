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

With `data.prompts` set, the prompts come from the user's files instead (prompt_file.py:
parsing, rejects and the split rule): the whole train split is the pool, val and test are
the first `eval.n_val` / `eval.n_test` of theirs, and `data.verifier` scores them. The
driver calls `record_prompt_files` once, before any actor starts: it writes the rejected
lines to `<run dir>/rejects.jsonl` and returns the counts for the run's summary.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rayworks.core.errors import ConfigError
from rayworks.data.tasks import Example, get_task
from rayworks.pipelines.rl.prompt_file import PromptSplits, split_prompt_files
from rayworks.pipelines.rl.verifiers import get_verifier

if TYPE_CHECKING:
    from rayworks.pipelines.rl.config import RLConfig

TRAIN_POOL = 5000  # distinct draws of training prompts the RL steps sample from
RL_STREAM = 7_777  # offset of the RL prompt stream's seed from the SFT stream's
REJECTS_FILE = "rejects.jsonl"  # a prompt file's rejected lines, in the run directory
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
    seen = {e.prompt + e.scene for e in task.examples(n_sft, "train", seed)}  # an item's key
    pool = [
        e
        for e in task.examples(TRAIN_POOL, "train", seed + RL_STREAM)
        if e.prompt + e.scene not in seen
    ]
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


def read_splits(cfg: RLConfig) -> PromptSplits:
    """The prompt files' splits (prompt_file.py), not yet checked."""
    data = cfg.data
    if data.prompts is None:
        raise ConfigError("data.prompts is not set: the run uses `task`'s prompts")
    return split_prompt_files(data.prompts, data.verifier, data.val, data.test)


def check_splits(cfg: RLConfig, splits: PromptSplits) -> PromptSplits:
    """`splits`, or a `ConfigError` when the train split or an `eval.splits` one is empty."""
    needed = {
        "train": "data.prompts",
        **{s: f"eval.splits={cfg.eval.splits}" for s in cfg.eval.splits},
    }
    for name, key in needed.items():
        if not getattr(splits, name):
            fix = f"data.{name}=FILE, more lines, or eval.splits without {name}"
            if name == "train":
                fix = "more usable lines"
            raise ConfigError(
                f"data.prompts={cfg.data.prompts!r} gives no {name} prompts, which {key} "
                f"needs ({splits.counts}); give {fix}."
            )
    return splits


def file_prompts(cfg: RLConfig) -> PromptSet:
    """The splits of `data.prompts` (and `data.val` / `data.test`), see the docstring."""
    splits = check_splits(cfg, read_splits(cfg))
    return PromptSet(
        train=splits.train,
        val=splits.val[: cfg.eval.n_val],
        test=splits.test[: cfg.eval.n_test],
        verify=get_verifier(cfg.data.verifier),
        source=str(cfg.data.prompts),
    )


def record_prompt_files(cfg: RLConfig, run_dir: Path) -> dict[str, int]:
    """Write `run_dir/rejects.jsonl` (also when empty: no line was rejected) and return the
    line counts; the rejects are written before an empty split fails the run."""
    splits = read_splits(cfg)
    (run_dir / REJECTS_FILE).write_text("".join(json.dumps(r) + "\n" for r in splits.rejects))
    return check_splits(cfg, splits).counts


def prompt_set(cfg: RLConfig) -> PromptSet:
    """The run's prompts: the prompt files' splits when `data.prompts` is set, else the
    synthetic task's."""
    return file_prompts(cfg) if cfg.data.prompts else task_prompts(cfg)
