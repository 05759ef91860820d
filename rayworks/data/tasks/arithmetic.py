"""Multi-digit addition and subtraction with a column-by-column trace and an exact verifier.

Prompt:      "Q: 347+58=\n"
Completion:  "<think>7+8=15 c1|4+5+1=10 c1|3+0+1=4 c0</think>A: 405"
The trace walks the columns right to left with the carry (or borrow), so a small model can
learn the algorithm rather than memorise sums; difficulty is the operands' digit count, mixed
within every split so a base policy's pass rate spans 0..1 across items. The verifier parses
the integer after the last "A:" and compares it with the true result.
"""

from __future__ import annotations

import random
import re
from dataclasses import replace

from rayworks.data.tasks.base import Example, Split, draw_examples, register_task

ANSWER_RE = re.compile(r"A:\s*(-?\d+)")


def _digits(value: int, width: int) -> list[int]:
    return [int(c) for c in str(value).zfill(width)][::-1]


def addition_trace(a: int, b: int) -> str:
    width = max(len(str(a)), len(str(b)))
    da, db = _digits(a, width), _digits(b, width)
    steps, carry = [], 0
    for x, y in zip(da, db, strict=True):
        total = x + y + carry
        carry_part = f"+{carry}" if carry else ""
        steps.append(f"{x}+{y}{carry_part}={total} c{total // 10}")
        carry = total // 10
    return "|".join(steps)


def subtraction_trace(a: int, b: int) -> str:
    """Trace of a - b for a >= b, borrowing column by column."""
    width = len(str(a))
    da, db = _digits(a, width), _digits(b, width)
    steps, borrow = [], 0
    for x, y in zip(da, db, strict=True):
        top = x - borrow
        borrow = 1 if top < y else 0
        steps.append(f"{top + 10 * borrow}-{y}={top + 10 * borrow - y} b{borrow}")
    return "|".join(steps)


@register_task("arithmetic")
class ArithmeticTask:
    name = "arithmetic"

    def __init__(self, min_digits: int = 1, max_digits: int = 4, ops: str = "+-") -> None:
        self.min_digits, self.max_digits, self.ops = min_digits, max_digits, ops

    def make(self, rng: random.Random) -> Example:
        digits = rng.randint(self.min_digits, self.max_digits)
        a = rng.randint(10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1)
        b = rng.randint(0, 10 ** rng.randint(1, digits) - 1)
        op = rng.choice(self.ops)
        if op == "-" and b > a:
            a, b = b, a
        result = a + b if op == "+" else a - b
        trace = addition_trace(a, b) if op == "+" else subtraction_trace(a, b)
        return Example(
            prompt=f"Q: {a}{op}{b}=\n",
            completion=f"<think>{trace}</think>A: {result}",
            answer=str(result),
            difficulty=digits,
        )

    def examples(self, n: int, split: Split, seed: int) -> list[Example]:
        return draw_examples(self.make, n, split, seed)

    def verify(self, example: Example, completion: str) -> float:
        found = ANSWER_RE.findall(completion)
        return float(bool(found) and found[-1] == example.answer)


@register_task("arithmetic_mix")
class ArithmeticMixTask(ArithmeticTask):
    """The same problems, but a share of the demonstrations answers without the trace.

    Prompt:      "Q: 347+58=\n"
    Completion:  "<think>7+8=15 c1|...</think>A: 405"  or, with probability `direct_share`,
                 "A: 405"
    A model fine-tuned on this mixture learns both behaviours: it traces the columns on some
    prompts and guesses the sum in one go on others, which a small model gets right far less
    often on multi-digit items. That is the situation outcome-reward RL is meant for (a base
    that can already solve a problem, but does not always use the way that works): the
    reward can teach it to trace, and greedy and sampled accuracy both have headroom. Only
    the completions differ from `arithmetic`; prompts, answers, splits and the verifier are
    the same. Which demonstrations are direct is drawn per example from the split's stream.
    """

    name = "arithmetic_mix"

    def __init__(self, direct_share: float = 0.5, **kwargs: int | str) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        if not 0.0 <= direct_share <= 1.0:
            raise ValueError(f"direct_share must be in [0, 1], got {direct_share}")
        self.direct_share = direct_share

    def make(self, rng: random.Random) -> Example:
        example = super().make(rng)
        if rng.random() < self.direct_share:
            return replace(example, completion=f"A: {example.answer}")
        return example

    def diagnostics(self, example: Example, completion: str) -> dict[str, float]:
        """`traced`: 1.0 if the completion traces the columns before it answers."""
        return {"traced": float(completion.lstrip().startswith("<think>"))}
