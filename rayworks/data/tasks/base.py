"""The task contract: generate examples with known answers, verify a completion exactly.

A task makes `Example`s (prompt, reference completion with its reasoning trace, final
answer, difficulty) for a split and seed, and `verify(example, completion)` scores a model's
completion in [0, 1] by parsing its final answer — never by string-matching the trace.
Train and test splits draw from disjoint seeded streams and the test split excludes any
prompt that also occurs in train.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from rayworks.errors import UnknownNameError

Split = Literal["train", "val", "test"]
SPLIT_OFFSET = {"train": 0, "val": 1_000_003, "test": 2_000_003}


@dataclass(frozen=True)
class Example:
    prompt: str
    completion: str
    answer: str
    difficulty: int

    @property
    def text(self) -> str:
        return self.prompt + self.completion


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
