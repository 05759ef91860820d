"""Synthetic SFT pairs for the masked diffusion LM (our CPU recipe, `docs/dpad.md`).

Tasks (reconstructed). The recipe's `reverse` and `sort` of a string of
`min_digits`..`max_digits` digits, and `add` of two 4-digit numbers (sum written least
significant digit first); plus `copy` (the digit string itself) and `add_lsb` (`add` with
both operands also written least significant digit first). A sequence is

    [BOS, TASK, digits (a PLUS b for add), SEP, PAD ... PAD | answer, EOS, EOS ... EOS]

with the prompt padded to a fixed `prompt_length(cfg)` (simplification: a fixed prompt
length lets a batch share block boundaries; PAD is an ordinary, attended token the model
learns to ignore) and the answer followed by EOS then EOS padding up to `gen_length`, as in
LLaDA SFT, so early termination can fire. Tokens are ids; no tokenizer is needed.

Why `copy` and `add_lsb` are the defaults (measured, docs/dpad.md): a bidirectional
RoPE-only model sees relative positions only, and every fully masked answer slot has the
same content, so an answer token must find its source at a relative offset. In `copy` and
`add_lsb` with the body right after TASK (`pad="after"`), answer slot j reads prompt
positions at a constant offset for every j; `reverse`, `sort` and MSB-first `add` need a
mirrored, j-dependent offset. At d = 64, 2 layers, 1000 steps, gen 16, `copy` reaches
0.81 digit accuracy from an all-masked answer and `reverse` stays at chance (0.10) with
either padding side; the three earlier trainings on reverse/sort/add never read the prompt.
`pad="before"` (the body just before the answer) is the original layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import Tensor

from rayworks.core.config import Config

PAD, BOS, EOS, MASK, SEP, PLUS = 0, 1, 2, 3, 4, 5
TASK_IDS = {"reverse": 6, "sort": 7, "add": 8, "copy": 9, "add_lsb": 10}
DIGIT0 = 11
VOCAB_SIZE = DIGIT0 + 10
TaskName = Literal["reverse", "sort", "add", "copy", "add_lsb"]
ADD_DIGITS = 4


class TaskConfig(Config):
    """Which synthetic tasks the model is trained and tested on."""

    tasks: list[TaskName] = Field(
        default_factory=lambda: ["copy", "add_lsb"],
        description="task mix, uniform (reconstructed: copy and LSB-first addition, the "
        "tasks a small bidirectional RoPE model learns; recipe: reverse, sort, add)",
    )
    pad: Literal["after", "before"] = Field(
        "after",
        description="where the prompt's PAD goes: after SEP (the body right after TASK, so "
        "answer and body align at a constant offset) or before BOS (the original layout)",
    )
    min_digits: int = Field(8, ge=1, le=32, description="shortest digit string (reverse, sort)")
    max_digits: int = Field(16, ge=1, le=32, description="longest digit string (reverse, sort)")

    @model_validator(mode="after")
    def _check(self) -> TaskConfig:
        if not self.tasks:
            raise ValueError("tasks must name at least one of reverse, sort, add, copy, add_lsb")
        if self.min_digits > self.max_digits:
            raise ValueError(f"min_digits={self.min_digits} exceeds max_digits={self.max_digits}")
        return self


def prompt_length(cfg: TaskConfig) -> int:
    """Fixed prompt length: BOS, task, the longest input, SEP."""
    return 3 + max(cfg.max_digits, 2 * ADD_DIGITS + 1)


def answer_limit(cfg: TaskConfig) -> int:
    """Longest answer plus its EOS: the smallest gen_length that fits every answer."""
    return max(cfg.max_digits, ADD_DIGITS + 1) + 1


@dataclass
class Batch:
    """`prompts` [N, P]; `answers[i]` the answer tokens of item i (without EOS); `task`."""

    prompts: Tensor
    answers: list[list[int]]
    tasks: list[str]

    def sequences(self, gen_length: int) -> tuple[Tensor, Tensor]:
        """Clean SFT sequences [N, P + gen_length] and their response mask."""
        n, p = self.prompts.shape
        resp = torch.full((n, gen_length), EOS, dtype=torch.long)
        for i, ans in enumerate(self.answers):
            if len(ans) + 1 > gen_length:
                raise ValueError(f"gen_length={gen_length} is shorter than an answer + EOS")
            resp[i, : len(ans)] = torch.tensor(ans, dtype=torch.long)
        response = torch.zeros(n, p + gen_length, dtype=torch.bool)
        response[:, p:] = True
        return torch.cat([self.prompts, resp], 1), response


def _digits(values: np.ndarray) -> list[int]:
    return [DIGIT0 + int(v) for v in values]


def make_item(task: str, cfg: TaskConfig, rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """(prompt body without padding, answer) of one item."""
    if task in ("add", "add_lsb"):
        a, b = (str(int(rng.integers(1000, 10_000))) for _ in range(2))
        total = str(int(a) + int(b))
        if task == "add_lsb":
            a, b = a[::-1], b[::-1]
        body = [*_digits(np.array(list(a), int)), PLUS, *_digits(np.array(list(b), int))]
        answer = _digits(np.array(list(total[::-1]), int))
    else:
        n = int(rng.integers(cfg.min_digits, cfg.max_digits + 1))
        x = rng.integers(0, 10, n)
        body = _digits(x)
        answer = _digits({"reverse": x[::-1], "sort": np.sort(x), "copy": x}[task])
    return [BOS, TASK_IDS[task], *body, SEP], answer


def make_batch(n: int, cfg: TaskConfig, rng: np.random.Generator) -> Batch:
    """`n` items, tasks drawn uniformly from `cfg.tasks`."""
    p = prompt_length(cfg)
    prompts = torch.full((n, p), PAD, dtype=torch.long)
    answers, tasks = [], []
    for i in range(n):
        task = cfg.tasks[int(rng.integers(len(cfg.tasks)))]
        body, answer = make_item(task, cfg, rng)
        span = slice(0, len(body)) if cfg.pad == "after" else slice(p - len(body), p)
        prompts[i, span] = torch.tensor(body, dtype=torch.long)
        answers.append(answer)
        tasks.append(task)
    return Batch(prompts, answers, tasks)


def extract_answer(generated: Tensor) -> list[int]:
    """The tokens before the first EOS (all of them when there is none)."""
    out = []
    for tok in generated.tolist():
        if tok == EOS:
            break
        out.append(tok)
    return out
