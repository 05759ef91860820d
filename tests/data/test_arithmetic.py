"""The arithmetic task: traces that are arithmetically right, an exact verifier, held-out splits."""

from __future__ import annotations

import re

import pytest

from rayworks.core.errors import UnknownNameError
from rayworks.data.tasks import TASKS, ArithmeticTask, Example, get_task
from rayworks.data.tasks.arithmetic import addition_trace, subtraction_trace

PROMPT_RE = re.compile(r"^Q: (\d+)([+-])(\d+)=\n$")
COMPLETION_RE = re.compile(r"^<think>(.*)</think>A: (-?\d+)$")
ADD_STEP_RE = re.compile(r"^(\d)\+(\d)(?:\+(\d))?=(\d+) c([01])$")
SUB_STEP_RE = re.compile(r"^(\d+)-(\d)=(\d) b([01])$")


def digits(value: int, width: int) -> list[int]:
    """Least significant first."""
    return [(value // 10**i) % 10 for i in range(width)]


def check_addition(a: int, b: int, trace: str) -> int:
    """Check every column of an addition trace; return the sum rebuilt from the trace."""
    steps = trace.split("|")
    width = max(len(str(a)), len(str(b)))
    assert len(steps) == width
    carry, result = 0, 0
    for i, (step, x, y) in enumerate(zip(steps, digits(a, width), digits(b, width), strict=True)):
        match = ADD_STEP_RE.match(step)
        assert match, step
        sx, sy, sc, total, new_carry = match.groups()
        assert (int(sx), int(sy)) == (x, y), (step, i)
        assert int(sc or 0) == carry, step  # the carry in is written iff it is nonzero
        assert sc != "0", step
        assert int(total) == x + y + carry, step
        assert int(new_carry) == int(total) // 10, step
        result += (int(total) % 10) * 10**i
        carry = int(new_carry)
    return result + carry * 10**width


def check_subtraction(a: int, b: int, trace: str) -> int:
    """Check every column of a borrowing subtraction trace; return the difference it spells."""
    steps = trace.split("|")
    width = len(str(a))
    assert len(steps) == width
    borrow, result = 0, 0
    for i, (step, x, y) in enumerate(zip(steps, digits(a, width), digits(b, width), strict=True)):
        match = SUB_STEP_RE.match(step)
        assert match, step
        top, sy, diff, new_borrow = (int(g) for g in match.groups())
        assert sy == y, step
        # the top digit after lending `borrow`, plus 10 if this column borrows
        assert top == x - borrow + 10 * new_borrow, step
        assert 0 <= top - y <= 9 and diff == top - y, step
        assert new_borrow == int(x - borrow < y), step
        result += diff * 10**i
        borrow = new_borrow
    assert borrow == 0  # a >= b never borrows past the top column
    return result


def parse(example: Example) -> tuple[int, str, int, str, int]:
    prompt = PROMPT_RE.match(example.prompt)
    completion = COMPLETION_RE.match(example.completion)
    assert prompt, example.prompt
    assert completion, example.completion
    a, op, b = int(prompt[1]), prompt[2], int(prompt[3])
    return a, op, b, completion[1], int(completion[2])


@pytest.fixture(scope="module")
def task() -> ArithmeticTask:
    return ArithmeticTask()


@pytest.fixture(scope="module")
def train(task: ArithmeticTask) -> list[Example]:
    return task.examples(600, "train", seed=0)


# ------------------------------------------------------------------ traces


@pytest.mark.parametrize(
    ("a", "b", "trace"),
    [
        (347, 58, "7+8=15 c1|4+5+1=10 c1|3+0+1=4 c0"),  # the module docstring's example
        (999, 1, "9+1=10 c1|9+0+1=10 c1|9+0+1=10 c1"),
        (0, 0, "0+0=0 c0"),
    ],
)
def test_addition_trace_known_values(a: int, b: int, trace: str) -> None:
    assert addition_trace(a, b) == trace
    assert check_addition(a, b, trace) == a + b


@pytest.mark.parametrize(
    ("a", "b", "trace"),
    [
        (405, 58, "15-8=7 b1|9-5=4 b1|3-0=3 b0"),
        (1000, 1, "10-1=9 b1|9-0=9 b1|9-0=9 b1|0-0=0 b0"),
        (52, 52, "2-2=0 b0|5-5=0 b0"),
    ],
)
def test_subtraction_trace_known_values(a: int, b: int, trace: str) -> None:
    assert subtraction_trace(a, b) == trace
    assert check_subtraction(a, b, trace) == a - b


def test_every_generated_trace_is_arithmetically_correct(train: list[Example]) -> None:
    ops = set()
    for example in train:
        a, op, b, trace, answer = parse(example)
        ops.add(op)
        if op == "+":
            rebuilt = check_addition(a, b, trace)
            assert answer == a + b
        else:
            assert a >= b  # operands are swapped so results are never negative
            rebuilt = check_subtraction(a, b, trace)
            assert answer == a - b
        assert rebuilt == answer, example
        assert example.answer == str(answer)
        assert example.text == example.prompt + example.completion
    assert ops == {"+", "-"}


def test_only_requested_ops_are_drawn() -> None:
    examples = ArithmeticTask(ops="-").examples(100, "train", seed=1)
    assert {parse(e)[1] for e in examples} == {"-"}


# ------------------------------------------------------------------ verifier


def test_verifier_accepts_reference_and_rejects_wrong_answers(
    task: ArithmeticTask, train: list[Example]
) -> None:
    for example in train[:50]:
        assert task.verify(example, example.completion) == 1.0
        wrong = example.completion.rsplit("A: ", 1)[0] + f"A: {int(example.answer) + 1}"
        assert task.verify(example, wrong) == 0.0


def test_verifier_parses_the_final_answer_only() -> None:
    task = ArithmeticTask()
    example = Example(prompt="Q: 2+2=\n", completion="A: 4", answer="4", difficulty=1)
    assert task.verify(example, "A: 4") == 1.0
    assert task.verify(example, "A:4") == 1.0
    assert task.verify(example, "<think>whatever trace</think>A: 4</s>") == 1.0
    assert task.verify(example, "A: 5 ... A: 4") == 1.0  # the LAST A: counts
    assert task.verify(example, "A: 4 ... A: 5") == 0.0
    assert task.verify(example, "4") == 0.0  # no answer marker
    assert task.verify(example, "") == 0.0
    assert task.verify(example, "A: 44") == 0.0
    assert task.verify(example, "A: -4") == 0.0
    negative = Example(prompt="Q: x\n", completion="", answer="-3", difficulty=1)
    assert task.verify(negative, "A: -3") == 1.0
    assert task.verify(negative, "A: 3") == 0.0


# ------------------------------------------------------------------ splits


def test_splits_are_deterministic_per_seed(task: ArithmeticTask) -> None:
    for split in ("train", "val", "test"):
        assert task.examples(50, split, seed=3) == ArithmeticTask().examples(50, split, seed=3)


def test_splits_differ_across_seeds_and_from_each_other(task: ArithmeticTask) -> None:
    assert task.examples(50, "train", seed=0) != task.examples(50, "train", seed=1)
    assert task.examples(50, "test", seed=0) != task.examples(50, "test", seed=1)
    train = {e.prompt for e in task.examples(50, "train", 0)}
    val = {e.prompt for e in task.examples(50, "val", 0)}
    assert train != val


@pytest.mark.parametrize("split", ["val", "test"])
def test_held_out_prompts_are_distinct(task: ArithmeticTask, split: str) -> None:
    prompts = [e.prompt for e in task.examples(100, split, seed=0)]
    assert len(prompts) == len(set(prompts))


def test_test_prompts_never_occur_in_an_equally_sized_train_set(task: ArithmeticTask) -> None:
    for seed in range(3):
        train = {e.prompt for e in task.examples(200, "train", seed)}
        test = [e.prompt for e in task.examples(200, "test", seed)]
        assert not train.intersection(test)


def test_test_prompts_never_occur_in_a_larger_train_set(task: ArithmeticTask) -> None:
    train = {e.prompt for e in task.examples(20_000, "train", seed=0)}
    test = [e.prompt for e in task.examples(200, "test", seed=0)]
    assert not train.intersection(test)


def test_difficulty_spans_min_to_max_digits() -> None:
    task = ArithmeticTask(min_digits=2, max_digits=5)
    examples = task.examples(400, "train", seed=0)
    assert {e.difficulty for e in examples} == {2, 3, 4, 5}
    for example in examples:
        a, _, b, _, _ = parse(example)
        # the larger operand has exactly `difficulty` digits, the other at most that many
        assert len(str(max(a, b))) == example.difficulty
        assert len(str(min(a, b))) <= example.difficulty
    test = task.examples(100, "test", seed=0)
    assert {e.difficulty for e in test} == {2, 3, 4, 5}


def test_too_small_a_problem_space_fails_clearly() -> None:
    task = ArithmeticTask(min_digits=1, max_digits=1, ops="+")
    with pytest.raises(ValueError, match="could not draw 500 distinct test examples"):
        task.examples(500, "test", seed=0)


# ------------------------------------------------------------------ registry


def test_get_task_returns_a_fresh_registered_task() -> None:
    assert TASKS["arithmetic"] is ArithmeticTask
    assert isinstance(get_task("arithmetic"), ArithmeticTask)
    assert get_task("arithmetic") is not get_task("arithmetic")


def test_get_unknown_task_lists_known_tasks() -> None:
    with pytest.raises(UnknownNameError) as err:
        get_task("nope")
    message = str(err.value)
    assert "unknown task 'nope'" in message
    assert "known tasks: arithmetic" in message
