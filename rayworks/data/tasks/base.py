"""The task contract: generate examples with known answers, verify a completion exactly.

A task makes `Example`s (prompt, reference completion with its reasoning trace, final
answer, difficulty; for multimodal tasks also a `scene` key and its rendered `image`) for a
split and seed, and `verify(example, completion)` scores a model's completion in [0, 1] by
parsing its final answer — never by string-matching the trace.
Splits are disjoint by construction: every item belongs to exactly one split, decided by a
hash of its prompt and scene key (`split_of(prompt + scene)`; text tasks have scene ""), and
each split draws from its own seeded stream keeping only its own items — so no test item can
occur in train, whatever the sizes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from rayworks.core.errors import UnknownNameError

Split = Literal["train", "val", "test"]
SPLIT_OFFSET = {"train": 0, "val": 1_000_003, "test": 2_000_003}
SPLIT_SHARE = {"train": 80, "val": 10, "test": 10}  # percent of the prompt space


def split_of(prompt: str) -> Split:
    """The split a prompt (plus its scene key, if any) belongs to: a stable hash, 80/10/10."""
    bucket = int.from_bytes(hashlib.blake2b(prompt.encode(), digest_size=4).digest(), "big") % 100
    return "train" if bucket < 80 else "val" if bucket < 90 else "test"


@dataclass(frozen=True)
class Example:
    prompt: str
    completion: str
    answer: str
    difficulty: int
    scene: str = ""  # compact text key of the picture; "" for text-only tasks
    # the rendered picture, uint8 (H, W, 3), or None; a pure function of `scene`, so not compared
    image: Any = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def text(self) -> str:
        return self.prompt + self.completion


def answer_after(completion: str, marker: str = "A:") -> str | None:
    """The answer part of a completion: its first line after the last `marker`, stripped;
    None when the marker is missing."""
    if marker not in completion:
        return None
    return completion.rsplit(marker, 1)[1].strip().split("\n", 1)[0]


def draw_examples(
    make: Callable[[random.Random], Example], n: int, split: Split, seed: int
) -> list[Example]:
    """`n` examples of `split` from `make(rng)`, keeping only items whose prompt + scene
    hashes to `split`.

    Each split has its own seeded stream; val/test items (prompt + scene) are distinct, train
    may repeat easy ones.
    """
    rng = random.Random(seed * 7_919 + SPLIT_OFFSET[split])
    out: list[Example] = []
    seen: set[str] = set()
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 200 * n + 10_000:
            raise ValueError(f"could not draw {n} distinct {split} examples")
        ex = make(rng)
        key = ex.prompt + ex.scene
        if split_of(key) != split or (split != "train" and key in seen):
            continue
        seen.add(key)
        out.append(ex)
    return out


class Task(Protocol):
    name: str

    def examples(self, n: int, split: Split, seed: int) -> list[Example]: ...

    def verify(self, example: Example, completion: str) -> float: ...


TASKS: dict[str, Callable[[], Task]] = {}


def register_task(name: str) -> Callable[[type], type]:
    def decorate(cls: type) -> type:
        TASKS[name] = cls
        return cls

    return decorate


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise UnknownNameError("task", name, list(TASKS))
    return TASKS[name]()
