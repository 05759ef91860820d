"""Draw a ball from a bag: a QA task with real aleatoric uncertainty (B-calibration).

Prompt:      "Q: draw rgbrry\n"          (the bag's balls, one letter each, in random order)
Direct:      "A: red" | "A: a red ball" | "A: red."    (three surface templates, one class)
CoT:         "<think>g r b r</think>A: red"   (`steps` draws without replacement; the
             answer is the colour of the last one)

The true answer distribution of a question is p*(k|x) = (balls of colour k) / (balls in
the bag): deterministic for one-colour bags, spread otherwise. Every completion's answer
is *sampled* from p* (for training and for the gold label alike), so a model trained with
cross-entropy on these targets is pushed towards p* itself, and "calibration" is not
trivially 1-vs-1 as on a task with one right answer. This is our reconstructed synthetic
QA for the B-calibration study (`docs/calibration.md`): aleatoric uncertainty, surface
paraphrases, an exact parser B (`answer_class`) instead of an LLM judge.

Chain of thought: the trace draws `steps` balls *without* replacement and answers with the
last one. By exchangeability the last draw is distributed exactly as p*, so the CoT task
has the same true answer distribution and the same gold labels; but a model can only know
its answer after sampling the whole trace, and an error in any step's conditional
probabilities moves its answer distribution (the paper's prediction 3). We build the trace
gold-first (last draw = the gold answer, the earlier draws a uniform ordered sample of the
rest) — the same joint law as drawing in order — so the direct and CoT variants of one
seed share their prompts *and* gold labels, and compare question by question.
"""

from __future__ import annotations

import random
import re

from rayworks.data.tasks.base import Example, Split, answer_after, draw_examples, register_task

COLOURS = {"r": "red", "g": "green", "b": "blue", "y": "yellow"}
TEMPLATES = ("{c}", "a {c} ball", "{c}.")  # surface forms of one semantic answer
ANSWER_MARKER = "A:"
COLOUR_RE = re.compile(r"\b(" + "|".join(COLOURS.values()) + r")\b")


def answer_class(text: str | None) -> str | None:
    """The semantic class (a colour word) of an answer text, or None when it names no
    colour or several different ones. "a Red ball", "red." and "red" are all "red"."""
    if text is None:
        return None
    found = set(COLOUR_RE.findall(text.lower()))
    return found.pop() if len(found) == 1 else None


def final_answer(completion: str) -> str | None:
    """The text after the last "A:" (its first line), or None without a marker."""
    return answer_after(completion, ANSWER_MARKER)


@register_task("bag_draw")
class BagDrawTask:
    """Direct answers (`steps=0`) or a `steps`-draw chain of thought before the answer."""

    name = "bag_draw"

    def __init__(
        self, steps: int = 0, max_count: int = 3, min_balls: int = 4, pure_share: float = 0.15
    ) -> None:
        if steps < 0:
            raise ValueError(f"steps={steps} must be >= 0 (0 = direct answers)")
        if not 1 <= max_count <= 9:
            raise ValueError(f"max_count={max_count} must be in 1..9 balls per colour")
        if not 1 <= min_balls <= max_count * len(COLOURS):
            raise ValueError(f"min_balls={min_balls} must be in 1..{max_count * len(COLOURS)}")
        if steps > min_balls:
            raise ValueError(f"steps={steps} exceeds min_balls={min_balls}: a bag could run out")
        if not 0 <= pure_share <= 1:
            raise ValueError(f"pure_share={pure_share} must be in [0, 1]")
        self.steps, self.max_count, self.min_balls = steps, max_count, min_balls
        self.pure_share = pure_share

    def _bag(self, rng: random.Random) -> list[str]:
        """One bag's balls in random order, `min_balls` or more. It does not depend on
        `steps`, so the direct and CoT variants draw the same bags from the same seed."""
        while True:
            if rng.random() < self.pure_share:  # a deterministic question
                colour = rng.choice(list(COLOURS))
                balls = [colour] * rng.randint(self.min_balls, self.min_balls + 4)
            else:
                counts = {k: rng.randint(0, self.max_count) for k in COLOURS}
                balls = [k for k, c in counts.items() for _ in range(c)]
            if len(balls) >= self.min_balls:
                rng.shuffle(balls)
                return balls

    def make(self, rng: random.Random) -> Example:
        balls = self._bag(rng)
        gold_index = rng.randrange(len(balls))  # the draw, y ~ p*(.|x)
        gold = balls[gold_index]
        template = rng.choice(TEMPLATES)
        trace_rng = random.Random(rng.getrandbits(64))  # keeps the main stream variant-free
        completion = f"{ANSWER_MARKER} {template.format(c=COLOURS[gold])}"
        if self.steps:
            rest = balls[:gold_index] + balls[gold_index + 1 :]
            earlier = trace_rng.sample(rest, self.steps - 1)
            completion = f"<think>{' '.join([*earlier, gold])}</think>{completion}"
        return Example(
            prompt=f"Q: draw {''.join(balls)}\n",
            completion=completion,
            answer=COLOURS[gold],
            difficulty=len(set(balls)),  # number of colours: 1 = deterministic
        )

    def examples(self, n: int, split: Split, seed: int) -> list[Example]:
        return draw_examples(self.make, n, split, seed)

    def distribution(self, example: Example) -> dict[str, float]:
        """p*(k|x): the share of each colour in the prompt's bag (the true answer law)."""
        balls = example.prompt.removeprefix("Q: draw ").strip()
        if not balls or set(balls) - set(COLOURS):
            raise ValueError(f"prompt {example.prompt!r} is not a bag_draw question")
        return {COLOURS[k]: balls.count(k) / len(balls) for k in COLOURS if k in balls}

    def answer_class(self, answer: str | None) -> str | None:
        """The collapsing function B of this task: answer text -> colour (None: no class)."""
        return answer_class(answer)

    def verify(self, example: Example, completion: str) -> float:
        return float(answer_class(final_answer(completion)) == example.answer)


@register_task("bag_draw_cot")
class BagDrawCoTTask(BagDrawTask):
    """`bag_draw` answered after a 4-draw chain of thought (draws without replacement)."""

    name = "bag_draw_cot"

    def __init__(
        self, steps: int = 4, max_count: int = 3, min_balls: int = 4, pure_share: float = 0.15
    ) -> None:
        if steps < 1:
            raise ValueError(f"bag_draw_cot needs steps >= 1, got {steps}")
        super().__init__(steps, max_count, min_balls, pure_share)
