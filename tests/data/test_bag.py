"""The bag_draw tasks: answers sampled from the bag's true law, an exact parser B, CoT traces."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from rayworks.data.tasks import TASKS, BagDrawCoTTask, BagDrawTask, Example, get_task
from rayworks.data.tasks.bag import COLOURS, answer_class, final_answer

PROMPT_RE = re.compile(r"^Q: draw ([rgby]+)\n$")
DIRECT_RE = re.compile(
    r"^A: (red|green|blue|yellow|a (red|green|blue|yellow) ball|"
    r"(red|green|blue|yellow)\.)$"
)
COT_RE = re.compile(r"^<think>([rgby](?: [rgby])*)</think>(A: .*)$")


def test_registered_names_and_options() -> None:
    assert TASKS["bag_draw"] is BagDrawTask and TASKS["bag_draw_cot"] is BagDrawCoTTask
    assert get_task("bag_draw").steps == 0 and get_task("bag_draw_cot").steps == 4
    with pytest.raises(ValueError, match="steps=-1"):
        BagDrawTask(steps=-1)
    with pytest.raises(ValueError, match="steps=5 exceeds min_balls=4"):
        BagDrawTask(steps=5)
    with pytest.raises(ValueError, match="max_count=0"):
        BagDrawTask(max_count=0)
    with pytest.raises(ValueError, match="needs steps >= 1"):
        BagDrawCoTTask(steps=0)


def test_direct_examples_are_well_formed_and_verified() -> None:
    task = get_task("bag_draw")
    for ex in task.examples(300, "train", 0):
        balls = PROMPT_RE.match(ex.prompt).group(1)
        assert len(balls) >= 4 and ex.difficulty == len(set(balls))
        assert DIRECT_RE.match(ex.completion), ex.completion
        assert ex.answer in {COLOURS[b] for b in balls}  # the draw comes from the bag
        law = task.distribution(ex)
        assert sum(law.values()) == pytest.approx(1.0)
        assert law == {COLOURS[k]: balls.count(k) / len(balls) for k in set(balls)}
        assert task.verify(ex, ex.completion) == 1.0
        wrong = next(c for c in COLOURS.values() if c != ex.answer)
        assert task.verify(ex, f"A: {wrong}") == 0.0
        assert task.verify(ex, ex.answer) == 0.0  # no "A:" marker: no answer


def test_answers_follow_the_true_law() -> None:
    """Mean of 1[gold = k] - p*(k) over many bags is ~0 for every colour (|z| < 4)."""
    task = get_task("bag_draw")
    examples = task.examples(4000, "train", 1)
    for colour in COLOURS.values():
        gaps = [float(e.answer == colour) - task.distribution(e).get(colour, 0.0) for e in examples]
        mean = sum(gaps) / len(gaps)
        sd = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5
        assert abs(mean) < 4 * sd / len(gaps) ** 0.5, (colour, mean)


def test_cot_traces_draw_without_replacement_and_share_gold() -> None:
    direct, cot = get_task("bag_draw"), get_task("bag_draw_cot")
    pairs = list(zip(direct.examples(200, "test", 3), cot.examples(200, "test", 3), strict=True))
    firsts = []
    for d, c in pairs:
        assert (d.prompt, d.answer) == (c.prompt, c.answer)  # same questions and gold labels
        trace, answer = COT_RE.match(c.completion).groups()
        draws = trace.split(" ")
        assert len(draws) == 4 and COLOURS[draws[-1]] == c.answer
        bag = Counter(PROMPT_RE.match(c.prompt).group(1))
        assert not Counter(draws) - bag  # without replacement: never more than the bag holds
        assert DIRECT_RE.match(answer) and cot.verify(c, c.completion) == 1.0
        firsts.append(float(COLOURS[draws[0]] == "red") - cot.distribution(c).get("red", 0.0))
    # exchangeability: the first draw is also distributed as p*
    assert abs(sum(firsts) / len(firsts)) < 0.1


def test_splits_are_disjoint() -> None:
    task = get_task("bag_draw")
    test = {e.prompt for e in task.examples(200, "test", 0)}
    assert len(test) == 200
    assert not test & {e.prompt for e in task.examples(2000, "train", 0)}


@pytest.mark.parametrize(
    ("text", "cls"),
    [
        ("red", "red"),
        ("a Red ball", "red"),
        ("yellow.", "yellow"),
        ("red or blue", None),
        ("purple", None),
        ("", None),
        (None, None),
        ("red red", "red"),
    ],
)
def test_answer_class(text: str | None, cls: str | None) -> None:
    assert answer_class(text) == cls


def test_final_answer_takes_the_last_marker() -> None:
    assert final_answer("<think>r g</think>A: a green ball") == "a green ball"
    assert final_answer("A: a \nA: blue") == "blue"
    assert final_answer("no marker") is None


def test_distribution_rejects_foreign_prompts() -> None:
    with pytest.raises(ValueError, match="not a bag_draw question"):
        get_task("bag_draw").distribution(Example("Q: 1+2=\n", "", "3", 1))
