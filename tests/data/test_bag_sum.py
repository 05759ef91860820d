"""The bag_sum tasks: the answer is the sum mod 5 of sampled draws, so its law is known only
when the trace ends; an exact parser B collapses the surface forms."""

from __future__ import annotations

import itertools
import math
import random
import re
from collections import Counter, defaultdict

import pytest

from rayworks.data.tasks import TASKS, BagSumCoTTask, BagSumTask, Example, get_task
from rayworks.data.tasks.bag_sum import answer_class, answer_law, bag_of, final_answer, trace_steps

PROMPT_RE = re.compile(r"^Q: sum ([0-4]+)\n$")
DIRECT_RE = re.compile(r"^A: ([0-4]|zero|one|two|three|four|[0-4]\.)$")
COT_RE = re.compile(r"^<think>(\+[0-4]=[0-4](?: \+[0-4]=[0-4])*)</think>(A: .*)$")


def entropy(law: dict[str, float]) -> float:
    return -sum(p * math.log(p) for p in law.values() if p > 0)


def shares(bag: list[int]) -> dict[str, float]:
    return {str(v): bag.count(v) / len(bag) for v in set(bag)}


def test_registered_names_and_options() -> None:
    assert TASKS["bag_sum"] is BagSumTask and TASKS["bag_sum_cot"] is BagSumCoTTask
    direct, cot = get_task("bag_sum"), get_task("bag_sum_cot")
    assert (direct.steps, direct.show_trace, cot.steps, cot.show_trace) == (4, False, 4, True)
    with pytest.raises(ValueError, match="steps=0"):
        BagSumTask(steps=0)
    with pytest.raises(ValueError, match="max_main=1"):
        BagSumTask(max_main=1)
    with pytest.raises(ValueError, match="max_others=5"):
        BagSumTask(max_others=5)
    with pytest.raises(ValueError, match="pure_share=2"):
        BagSumCoTTask(pure_share=2)


@pytest.mark.parametrize(
    ("text", "cls"),
    [
        ("4", "4"),
        ("four", "4"),
        ("Four", "4"),
        ("4.", "4"),
        ("0", "0"),
        ("zero", "0"),
        ("it is 3", "3"),
        ("3 or three", "3"),
        ("3 or 4", None),  # two different values
        ("7", None),  # outside Z_5
        ("seven", None),
        ("14", None),  # one number, not the digit 1 or 4
        ("fourteen", None),
        ("", None),
        (None, None),
    ],
)
def test_parser_collapses_surface_forms(text: str | None, cls: str | None) -> None:
    assert answer_class(text) == cls


def test_every_surface_form_of_the_generator_collapses_to_its_gold() -> None:
    task = get_task("bag_sum")
    forms: dict[str, set[str]] = defaultdict(set)
    for ex in task.examples(600, "train", 0):
        assert DIRECT_RE.match(ex.completion), ex.completion
        forms[ex.answer].add(final_answer(ex.completion))
        assert task.verify(ex, ex.completion) == 1.0
        assert task.verify(ex, f"A: {(int(ex.answer) + 1) % 5}") == 0.0
        assert task.verify(ex, ex.answer) == 0.0  # no "A:" marker: no answer
    for value, seen in forms.items():
        assert len(seen) == 3, seen  # digit, word and "digit." all occur ...
        assert {answer_class(f) for f in seen} == {value}  # ... and collapse to one class


def test_cot_trace_is_running_sum_and_shares_gold_with_direct() -> None:
    direct, cot = get_task("bag_sum"), get_task("bag_sum_cot")
    pairs = list(zip(direct.examples(300, "test", 2), cot.examples(300, "test", 2), strict=True))
    for d, c in pairs:
        assert (d.prompt, d.answer) == (c.prompt, c.answer)  # same questions and gold labels
        assert COT_RE.match(c.completion), c.completion
        bag = bag_of(c.prompt)
        assert c.difficulty == len(set(bag)) and PROMPT_RE.match(c.prompt)
        steps = trace_steps(c.completion)
        assert len(steps) == 4 and all(draw in bag for draw, _ in steps)
        running = 0
        for draw, total in steps:
            running = (running + draw) % 5
            assert total == running
        assert str(running) == c.answer and cot.verify(c, c.completion) == 1.0
        assert direct.distribution(d) == cot.distribution(c) == answer_law(bag, 4)


def test_answer_law_is_the_exact_convolution() -> None:
    """answer_law against brute-force enumeration of every ordered 3-draw sequence."""
    bag = [0, 0, 1, 3, 3, 3]
    counts = Counter(sum(seq) % 5 for seq in itertools.product(bag, repeat=3))
    total = len(bag) ** 3
    law = answer_law(bag, 3)
    assert law == pytest.approx({str(s): n / total for s, n in counts.items()})
    assert answer_law(bag, 3, prefix=(1, 3, 3)) == {"2": 1.0}  # full trace: a point mass
    with pytest.raises(ValueError, match="longer than steps"):
        answer_law(bag, 2, prefix=(1, 1, 1))


def test_answer_is_known_only_when_the_trace_ends() -> None:
    """From the generator itself, for one mixed bag: the answer is a function of the full
    trace; with every draw but the last known it is still spread (law = answer_law with
    that prefix); given the question alone it follows p*, which is more uncertain than
    anything the bag shows directly (an answer equal to one draw would have the bag's own
    law) and tends to uniform with longer traces."""
    bag = [2, 2, 2, 2, 0, 1]
    task = BagSumCoTTask()
    rng = random.Random(0)
    examples = [task.from_bag(bag, rng) for _ in range(6000)]
    by_trace: dict[tuple, set[str]] = defaultdict(set)
    by_prefix: dict[tuple, Counter] = defaultdict(Counter)
    for ex in examples:
        draws = tuple(d for d, _ in trace_steps(ex.completion))
        by_trace[draws].add(ex.answer)
        by_prefix[draws[:-1]][ex.answer] += 1
    assert all(len(answers) == 1 for answers in by_trace.values())  # determined at the end
    for prefix, counts in by_prefix.items():
        n = sum(counts.values())
        if n < 200:
            continue
        assert len(counts) >= 2  # not known one draw before the end
        for value, p in answer_law(bag, 4, prefix).items():
            assert abs(counts[value] / n - p) < 4 * math.sqrt(p * (1 - p) / n) + 1e-9
    # the question alone: gold labels follow p* ...
    law = task.distribution(examples[0])
    freq = Counter(ex.answer for ex in examples)
    for value, p in law.items():
        assert abs(freq[value] / len(examples) - p) < 4 * math.sqrt(p * (1 - p) / len(examples))
    # ... which is more spread than the bag's shares (the law of any one draw)
    assert entropy(law) > entropy(shares(bag)) + 0.3
    assert max(law.values()) < max(shares(bag).values()) - 0.2
    # and close to uniform after 16 draws: maximally uncertain before the trace
    assert max(abs(p - 0.2) for p in answer_law(bag, 16).values()) < 0.01


def test_every_mixed_test_bag_is_more_uncertain_than_its_draws() -> None:
    task = get_task("bag_sum")
    for ex in task.examples(400, "test", 0):
        bag, law = bag_of(ex.prompt), task.distribution(ex)
        assert sum(law.values()) == pytest.approx(1.0)
        if len(set(bag)) == 1:
            assert law == {str(bag[0] * 4 % 5): 1.0}  # a one-value bag: deterministic
        else:
            assert entropy(law) > entropy(shares(bag)) + 1e-6


def test_gold_labels_follow_the_true_law_over_bags() -> None:
    """Mean of 1[gold = s] - p*(s) over many bags is ~0 for every value (|z| < 4)."""
    task = get_task("bag_sum")
    examples = task.examples(4000, "train", 1)
    laws = [task.distribution(e) for e in examples]
    for value in "01234":
        gaps = [
            float(e.answer == value) - law.get(value, 0.0)
            for e, law in zip(examples, laws, strict=True)
        ]
        mean = sum(gaps) / len(gaps)
        sd = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5
        assert abs(mean) < 4 * sd / len(gaps) ** 0.5, (value, mean)


def test_splits_are_disjoint_and_foreign_prompts_rejected() -> None:
    task = get_task("bag_sum")
    test = {e.prompt for e in task.examples(300, "test", 0)}
    assert len(test) == 300
    assert not test & {e.prompt for e in task.examples(3000, "train", 0)}
    with pytest.raises(ValueError, match="not a bag_sum question"):
        task.distribution(Example("Q: draw rgb\n", "", "red", 1))
    with pytest.raises(ValueError, match="not a bag_sum question"):
        bag_of("Q: sum 0157\n")
