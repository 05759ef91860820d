"""Add up tiles drawn from a bag: a calibration task whose answer law is known only at the
end of the trace (B-calibration, the chain-of-thought prediction).

Prompt:  "Q: sum 20020\n"      (the bag's tiles, values 0-4, one digit each, random order)
Direct:  "A: 4" | "A: four" | "A: 4."      (three surface forms of one semantic answer)
CoT:     "<think>+2=2 +0=2 +2=4 +2=1</think>A: 1"
         (`steps` draws *with* replacement, each followed by the running sum mod 5;
         the answer is the final sum)

True answer law. With q the bag's shares over Z_5, the answer is the sum of `steps`
independent draws from q, mod 5, so p*(s|x) = (q ⊛ q ⊛ ... ⊛ q)(s), the `steps`-fold
cyclic convolution (`answer_law`). Every completion's answer — SFT targets and gold labels
alike — is the end of a trace sampled by this recipe, so a cross-entropy model is pushed
towards p*; the direct variant only hides the trace, so both variants of one seed share
their prompts *and* gold labels and compare question by question.

Why this task and not `bag_draw_cot`. There the answer is the last of the draws, whose law
is the bag's shares: a model reads its answer distribution off the prompt at the first
token, and each trace step only re-draws from that same law. Here each step is as easy
(a count ratio and a mod-5 addition, both written out), but the law of the answer is the
composition of all steps: strictly more spread than the bag's shares (the entropy of a sum
of independent Z_5 variables exceeds each summand's unless one is a point mass or uniform),
a polynomial of degree `steps` in the shares that the prompt does not show, tending to
uniform as `steps` grows; with every draw but the last known the answer is still as spread
as one draw (the last draw shifts it one-to-one); only the full trace fixes it. This is
the paper's premise for the chain-of-thought prediction — the model cannot know its answer
distribution before the trace ends (`answer_law(..., prefix=...)` gives the law at every
point of the trace).

Bags (reconstructed, chosen so that the top-class share of p* spreads over 0.2-0.7 at
4 steps instead of collapsing to uniform): 15% one-value bags (deterministic answers; few
distinct prompts, so rare among distinct held-out questions), otherwise a main value 2-9
times plus 1-2 tiles of uniformly random values.
"""

from __future__ import annotations

import functools
import random
import re
from fractions import Fraction

from rayworks.data.tasks.base import Example, Split, answer_after, draw_examples, register_task

MOD = 5  # tile values and answers live in Z_5
WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
TEMPLATES = ("{d}", "{w}", "{d}.")  # surface forms of one semantic answer
ANSWER_MARKER = "A:"
PROMPT_PREFIX = "Q: sum "
NUMBER_RE = re.compile(r"\b(\d+|" + "|".join(WORDS) + r")\b")
STEP_RE = re.compile(r"\+(\d)=(\d)")


def answer_class(text: str | None) -> str | None:
    """The semantic class (a value "0".."4") of an answer text, or None when it names no
    number, several different ones, or one outside Z_5. "4", "Four" and "4." are all "4"."""
    if text is None:
        return None
    found = {int(t) if t.isdigit() else WORDS.index(t) for t in NUMBER_RE.findall(text.lower())}
    if len(found) != 1:
        return None
    value = found.pop()
    return str(value) if value < MOD else None


def final_answer(completion: str) -> str | None:
    """The text after the last "A:" (its first line), or None without a marker."""
    return answer_after(completion, ANSWER_MARKER)


def bag_of(prompt: str) -> list[int]:
    """The tile values of a `bag_sum` prompt."""
    tiles = prompt.removeprefix(PROMPT_PREFIX).strip()
    if not prompt.startswith(PROMPT_PREFIX) or not tiles or set(tiles) - set("01234"):
        raise ValueError(f"prompt {prompt!r} is not a bag_sum question")
    return [int(t) for t in tiles]


def trace_steps(completion: str) -> list[tuple[int, int]]:
    """(draw, running sum) of each step of a CoT completion's trace."""
    return [(int(d), int(s)) for d, s in STEP_RE.findall(completion.split("</think>", 1)[0])]


def answer_law(bag: list[int], steps: int, prefix: tuple[int, ...] = ()) -> dict[str, float]:
    """Exact law of the answer given the bag and the first `len(prefix)` draws of a
    `steps`-draw trace: the remaining draws' cyclic convolution, shifted by the prefix sum.
    `prefix=()` is p*(.|x); a full prefix is a point mass."""
    if len(prefix) > steps:
        raise ValueError(f"prefix of {len(prefix)} draws is longer than steps={steps}")
    counts = tuple(bag.count(v) for v in range(MOD))
    return dict(_law(counts, steps - len(prefix), sum(prefix) % MOD))  # a copy: cached


@functools.lru_cache(maxsize=4096)
def _law(counts: tuple[int, ...], steps: int, start: int) -> dict[str, float]:
    """The law of start + `steps` draws from tiles with these counts, mod 5 (exact
    fractions, cached: bags share few count vectors)."""
    shares = [Fraction(c, sum(counts)) for c in counts]
    law = [Fraction(0)] * MOD
    law[start] = Fraction(1)
    for _ in range(steps):
        law = [sum(law[j] * shares[(s - j) % MOD] for j in range(MOD)) for s in range(MOD)]
    return {str(s): float(p) for s, p in enumerate(law) if p}


@register_task("bag_sum")
class BagSumTask:
    """Sum mod 5 of `steps` draws from a bag: direct answers or the written trace first."""

    name = "bag_sum"

    def __init__(
        self,
        steps: int = 4,
        show_trace: bool = False,
        pure_share: float = 0.15,
        max_main: int = 9,
        max_others: int = 2,
    ) -> None:
        if not 1 <= steps <= 16:
            raise ValueError(f"steps={steps} must be in 1..16 draws")
        if not 0 <= pure_share <= 1:
            raise ValueError(f"pure_share={pure_share} must be in [0, 1]")
        if not 2 <= max_main <= 9:
            raise ValueError(f"max_main={max_main} must be in 2..9 tiles")
        if not 1 <= max_others <= 4:
            raise ValueError(f"max_others={max_others} must be in 1..4 tiles")
        self.steps, self.show_trace, self.pure_share = steps, show_trace, pure_share
        self.max_main, self.max_others = max_main, max_others

    def bag(self, rng: random.Random) -> list[int]:
        """One bag's tiles in random order; it does not depend on `steps` or `show_trace`."""
        main = rng.randrange(MOD)
        if rng.random() < self.pure_share:  # a deterministic question
            tiles = [main] * rng.randint(4, 8)
        else:
            others = [rng.randrange(MOD) for _ in range(rng.randint(1, self.max_others))]
            tiles = [main] * rng.randint(2, self.max_main) + others
        rng.shuffle(tiles)
        return tiles

    def from_bag(self, tiles: list[int], rng: random.Random) -> Example:
        """The example of one bag: its trace and answer are sampled whatever `show_trace`
        says, so both variants consume the same random stream."""
        trace_rng = random.Random(rng.getrandbits(64))
        draws = [trace_rng.choice(tiles) for _ in range(self.steps)]
        sums = [sum(draws[: i + 1]) % MOD for i in range(self.steps)]
        answer = sums[-1]
        form = rng.choice(TEMPLATES).format(d=answer, w=WORDS[answer])
        completion = f"{ANSWER_MARKER} {form}"
        if self.show_trace:
            trace = " ".join(f"+{d}={s}" for d, s in zip(draws, sums, strict=True))
            completion = f"<think>{trace}</think>{completion}"
        return Example(
            prompt=f"{PROMPT_PREFIX}{''.join(map(str, tiles))}\n",
            completion=completion,
            answer=str(answer),
            difficulty=len(set(tiles)),  # distinct values: 1 = deterministic
        )

    def make(self, rng: random.Random) -> Example:
        return self.from_bag(self.bag(rng), rng)

    def examples(self, n: int, split: Split, seed: int) -> list[Example]:
        return draw_examples(self.make, n, split, seed)

    def distribution(self, example: Example) -> dict[str, float]:
        """p*(s|x): the `steps`-fold cyclic convolution of the bag's shares."""
        return answer_law(bag_of(example.prompt), self.steps)

    def answer_class(self, answer: str | None) -> str | None:
        """The collapsing function B of this task: answer text -> value in Z_5."""
        return answer_class(answer)

    def verify(self, example: Example, completion: str) -> float:
        return float(answer_class(final_answer(completion)) == example.answer)


@register_task("bag_sum_cot")
class BagSumCoTTask(BagSumTask):
    """`bag_sum` answered after its written 4-draw trace (draw, running sum per step)."""

    name = "bag_sum_cot"

    def __init__(self, steps: int = 4, pure_share: float = 0.15) -> None:
        super().__init__(steps, show_trace=True, pure_share=pure_share)
