"""The countdown task: reachable targets, honest traces, a safe exact verifier, held-out splits."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from rayworks.data.tasks import TASKS, CountdownTask, Example, get_task
from rayworks.data.tasks.countdown import ParseError, evaluate, parse_prompt

PROMPT_RE = re.compile(r"^Q: reach (\d+) with (\d+(?: \d+)*)\n$")
COMPLETION_RE = re.compile(r"^<think>(.*)</think>A: ([0-9+\-*/()]+)$")
STEP_RE = re.compile(r"^(\d+)([-+*/])(\d+)=(\d+)$")
OPS = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "/": int.__floordiv__}


def example(target: int, numbers: list[int]) -> Example:
    prompt = f"Q: reach {target} with {' '.join(map(str, numbers))}\n"
    return Example(prompt=prompt, completion="", answer="", difficulty=len(numbers))


@pytest.fixture(scope="module")
def task() -> CountdownTask:
    return CountdownTask()


@pytest.fixture(scope="module")
def train(task: CountdownTask) -> list[Example]:
    return task.examples(600, "train", seed=0)


# ------------------------------------------------------------------ generation


def test_every_reference_completion_verifies(task: CountdownTask, train: list[Example]) -> None:
    for ex in train + task.examples(200, "test", seed=0):
        assert task.verify(ex, ex.completion) == 1.0, ex
        assert ex.completion.endswith("A: " + ex.answer)


def test_traces_are_arithmetically_right_and_use_the_reference_numbers(
    train: list[Example],
) -> None:
    for ex in train:
        prompt, completion = PROMPT_RE.match(ex.prompt), COMPLETION_RE.match(ex.completion)
        assert prompt and completion, ex
        target, numbers = int(prompt[1]), [int(n) for n in prompt[2].split()]
        pool = Counter(numbers)  # values available: prompt numbers, then step results
        steps = completion[1].split("|")
        assert len(steps) == ex.difficulty - 1
        for step in steps:
            match = STEP_RE.match(step)
            assert match, step
            a, op, b, c = int(match[1]), match[2], int(match[3]), int(match[4])
            assert pool[a] and pool[b] and (a != b or pool[a] >= 2), (ex, step)
            pool.subtract([a, b])
            assert op != "/" or a % b == 0, step
            assert OPS[op](a, b) == c and 1 <= c <= 200, step
            pool[c] += 1
        assert c == target
        assert target not in numbers  # a listed target would be no puzzle
        value, used = evaluate(ex.answer)
        assert value == target and len(used) == ex.difficulty
        assert not Counter(used) - Counter(numbers)
        assert all(1 <= n <= 12 for n in numbers)
        assert ex.difficulty <= len(numbers) <= ex.difficulty + 1
        assert len(ex.completion) <= 64  # short enough for a char-level model


def test_difficulty_spans_the_configured_range() -> None:
    task = CountdownTask(min_numbers=2, max_numbers=5)
    for split in ("train", "test"):
        assert {e.difficulty for e in task.examples(300, split, seed=0)} == {2, 3, 4, 5}
    assert {e.difficulty for e in CountdownTask(3, 3).examples(50, "train", 0)} == {3}


def test_only_requested_ops_are_used() -> None:
    for ex in CountdownTask(ops="+-").examples(100, "train", seed=1):
        assert not set(ex.answer) & set("*/")


def test_bad_number_range_is_rejected() -> None:
    with pytest.raises(ValueError, match="min_numbers"):
        CountdownTask(min_numbers=1)
    with pytest.raises(ValueError, match="min_numbers"):
        CountdownTask(min_numbers=4, max_numbers=3)


# ------------------------------------------------------------------ verifier


def test_verifier_accepts_any_correct_solution() -> None:
    task, ex = CountdownTask(), example(24, [3, 5, 8, 2])
    assert task.verify(ex, "A: 8*3") == 1.0
    assert task.verify(ex, "A: (5-2)*8") == 1.0
    assert task.verify(ex, "<think>x</think>A:  ( 5 - 2 ) * 8 </s>") == 1.0
    assert task.verify(ex, "A: 3*8\n") == 1.0
    assert task.verify(ex, "A: 2+2 ... A: 3*8") == 1.0  # the LAST A: counts
    assert task.verify(ex, "A: 3*8 ... A: 2+2") == 0.0
    assert task.verify(ex, "A: 8/2*3*2") == 0.0  # 2 is listed once
    assert task.verify(example(24, [8, 2, 3, 2]), "A: 8/2*3*2") == 1.0


@pytest.mark.parametrize(
    "answer",
    [
        "A: 8*3+1",  # wrong value
        "A: 3*3*8/3",  # 3 reused
        "A: 6*4",  # numbers not in the prompt
        "A: 24",
        "A: 8*3/0",  # division by zero
        "A: -3*-8",  # no unary minus
        "A: 2**100",
        "A: __import__('os').system('true')",
        "A: 8*3.0",
        "A: 8*3 and 1",
        "A: (8*3",
        "A: 8*3)",
        "A: 8 3",
        "A: ()",
        "A: ",
        "8*3",  # no answer marker
        "",
        "A: 8\u00d73",  # a multiplication sign, not *
        "A: ٨*٣",  # non-ASCII digits
    ],
)
def test_verifier_rejects(answer: str) -> None:
    assert CountdownTask().verify(example(24, [3, 5, 8, 2]), answer) == 0.0


def test_division_must_be_exact_at_every_step() -> None:
    task = CountdownTask()
    assert task.verify(example(4, [8, 2, 3, 6]), "A: 8/2") == 1.0
    assert task.verify(example(9, [3, 2, 6]), "A: 3/2*6") == 0.0  # 1.5*6 = 9 is not allowed
    assert task.verify(example(9, [3, 2, 6]), "A: 3*6/2") == 1.0
    with pytest.raises(ParseError, match="exact"):
        evaluate("7/2")


def test_evaluate_and_parse_prompt() -> None:
    assert evaluate("(12-5)*3+4") == (25, [12, 5, 3, 4])
    assert evaluate("2-3-4") == (-5, [2, 3, 4])  # left-associative
    assert evaluate("24/4/2") == (3, [24, 4, 2])
    assert evaluate("2+3*4") == (14, [2, 3, 4])
    assert parse_prompt("Q: reach 24 with 3 5 8 2\n") == (24, [3, 5, 8, 2])
    with pytest.raises(ParseError):
        parse_prompt("Q: 2+2=\n")
    with pytest.raises(ParseError, match="longer"):
        evaluate("(" * 500 + "1" + ")" * 500)


def test_verifier_never_raises_on_garbage() -> None:
    task, ex = CountdownTask(), example(24, [3, 5, 8, 2])
    rng = random.Random(0)
    alphabet = "0123456789+-*/() A:<>think.,_'\"[]{}\n\\%^&|=eE" + "é٣"
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        for completion in (text, "A: " + text, "A:" + text.replace("\n", "")):
            assert task.verify(ex, completion) in (0.0, 1.0)
    deep = "A: " + "(" * 5_000 + "3" + ")" * 5_000
    assert task.verify(ex, deep) == 0.0
    assert task.verify(Example("not a countdown prompt", "", "", 1), "A: 3") == 0.0


# ------------------------------------------------------------------ splits


def test_splits_are_deterministic_distinct_and_disjoint(task: CountdownTask) -> None:
    for split in ("train", "val", "test"):
        assert task.examples(50, split, seed=3) == CountdownTask().examples(50, split, seed=3)
    assert task.examples(50, "train", seed=0) != task.examples(50, "train", seed=1)
    for split in ("val", "test"):
        prompts = [e.prompt for e in task.examples(200, split, seed=0)]
        assert len(prompts) == len(set(prompts))
    train = {e.prompt for e in task.examples(5_000, "train", seed=0)}
    held_out = {e.prompt for s in ("val", "test") for e in task.examples(200, s, seed=0)}
    assert not train & held_out


def test_registered_by_name() -> None:
    assert TASKS["countdown"] is CountdownTask
    assert isinstance(get_task("countdown"), CountdownTask)
