"""The shapes task: rendered scenes, counting answers, outcome/step/hack scores, held-out splits."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from rayworks.data.tasks import TASKS, Example, ShapesTask, get_task
from rayworks.data.tasks.base import split_of
from rayworks.data.tasks.shapes import (
    HACK_WORD,
    count_colours,
    parse_scene,
    reference_trace,
    render,
    scene_key,
)

RED, GREEN, BLUE, BLACK = (255, 0, 0), (0, 255, 0), (0, 0, 255), (0, 0, 0)
EMPTY = ".."
# red square at (0, 0), blue circle at (3, 3), nothing else
CORNERS = "rs" + EMPTY * 14 + "bc"
# red=3 (all three shapes), blue=2, green=1
MIXED = "rsrcrtbsbcgs" + EMPTY * 10
COMPLETION_RE = re.compile(r"^<think>(.*)</think>A: (\d+)$")


def centre(image: np.ndarray, row: int, col: int, cell: int = 8) -> tuple[int, ...]:
    return tuple(int(v) for v in image[row * cell + cell // 2, col * cell + cell // 2])


def example(names: str, scene: str = MIXED) -> Example:
    """A hand-made example asking for `names` ("red+blue") about `scene`."""
    counts = count_colours(scene)
    answer = sum(counts[n] for n in names.split("+"))
    return Example(f"Q: {names}?\n", "", str(answer), names.count("+") + 1, scene)


@pytest.fixture(scope="module")
def task() -> ShapesTask:
    return ShapesTask()


@pytest.fixture(scope="module")
def train(task: ShapesTask) -> list[Example]:
    return task.examples(1000, "train", seed=0)


# ------------------------------------------------------------------ scenes and rendering


def test_render_puts_each_shape_in_its_cell() -> None:
    image = render(CORNERS)
    assert image.shape == (32, 32, 3)
    assert image.dtype == np.uint8
    assert centre(image, 0, 0) == RED
    assert centre(image, 3, 3) == BLUE
    assert centre(image, 1, 2) == BLACK
    assert centre(image, 0, 3) == BLACK
    # only red and blue pixels besides the black background
    colours = {tuple(int(v) for v in px) for px in image.reshape(-1, 3)}
    assert colours == {RED, BLUE, BLACK}
    assert np.array_equal(image, render(CORNERS))


def test_every_shape_fills_its_cell_centre_and_shapes_differ() -> None:
    images = {s: render(f"g{s}" + EMPTY * 15) for s in "sct"}
    for image in images.values():
        assert centre(image, 0, 0) == GREEN
        assert image[8:, :].max() == 0 and image[:, 8:].max() == 0  # nothing leaks out
    areas = {s: int((im[..., 1] == 255).sum()) for s, im in images.items()}
    assert areas["s"] > areas["c"] > areas["t"] > 8  # filling most of the cell


def test_render_other_grid_sizes_and_rejects_mismatched_scenes() -> None:
    image = render("bt" + EMPTY * 3, grid=2, cell=16)
    assert image.shape == (32, 32, 3)
    assert centre(image, 0, 0, cell=16) == BLUE
    with pytest.raises(ValueError, match="needs 16"):
        render("rs" * 4)
    with pytest.raises(ValueError, match="bad cell"):
        parse_scene("xs" + EMPTY * 15)
    with pytest.raises(ValueError, match="odd length"):
        parse_scene("rs.")


def test_scene_key_round_trips_and_counts() -> None:
    cells = parse_scene(MIXED)
    assert cells[:3] == [("red", "square"), ("red", "circle"), ("red", "triangle")]
    assert cells[5] == ("green", "square") and cells[6] is None
    assert scene_key(cells) == MIXED
    assert count_colours(MIXED) == {"red": 3, "green": 1, "blue": 2, "yellow": 0}
    assert count_colours(EMPTY * 16) == {"red": 0, "green": 0, "blue": 0, "yellow": 0}


def test_reference_trace_format() -> None:
    counts = {"red": 3, "green": 0, "blue": 2}
    assert reference_trace(["red", "blue"], counts) == "red=3,blue=2,3+2=5"
    assert reference_trace(["red", "green", "blue"], counts) == "red=3,green=0,blue=2,3+0+2=5"


# ------------------------------------------------------------------ examples


def test_answers_are_the_counts_of_the_scene(task: ShapesTask, train: list[Example]) -> None:
    for ex in train:
        names = re.fullmatch(r"Q: ([a-z+]+)\?\n", ex.prompt)[1].split("+")
        assert len(set(names)) == len(names) == ex.difficulty
        assert names == [
            n for n in ("red", "green", "blue", "yellow") if n in names
        ]  # canonical order
        counts = count_colours(ex.scene)
        assert ex.answer == str(sum(counts[n] for n in names))
        match = COMPLETION_RE.match(ex.completion)
        assert match, ex.completion
        if HACK_WORD not in match[1]:
            assert match[1] == reference_trace(names, counts)
            assert match[2] == ex.answer and task.verify(ex, ex.completion) == 1.0
    assert {ex.difficulty for ex in train} == {2, 3}


def test_shortcut_completions_guess_unless_the_oracle_variant(train: list[Example]) -> None:
    """Skipping the reasoning costs accuracy in `shapes` (a guess, right ~1/4 of the time);
    `shapes_oracle_shortcut` draws the same examples with the true answer behind "ok ok ok"."""
    task = get_task("shapes")
    shortcuts = [ex for ex in train if task.hack_score(ex, ex.completion)]
    right = sum(task.verify(ex, ex.completion) for ex in shortcuts) / len(shortcuts)
    assert 0.1 < right < 0.45
    oracle = get_task("shapes_oracle_shortcut").examples(len(train), "train", 0)
    assert [ex.scene for ex in oracle] == [ex.scene for ex in train]  # same draws
    assert [task.hack_score(ex, ex.completion) for ex in oracle] == [
        task.hack_score(ex, ex.completion) for ex in train
    ]
    assert all(task.verify(ex, ex.completion) == 1.0 for ex in oracle)
    assert max(int(ex.answer) for ex in train) >= 10  # two-digit answers occur


def test_images_are_present_and_match_the_scene(train: list[Example]) -> None:
    for ex in train[:100]:
        assert ex.image.shape == (32, 32, 3) and ex.image.dtype == np.uint8
        assert np.array_equal(ex.image, render(ex.scene))
    occupied = [sum(c is not None for c in parse_scene(ex.scene)) / 16 for ex in train]
    assert 0.45 < np.mean(occupied) < 0.65  # fill uniform in (0.3, 0.8): mean 0.55


def test_examples_are_reproducible_per_seed(task: ShapesTask) -> None:
    for split in ("train", "test"):
        a, b = task.examples(50, split, seed=3), ShapesTask().examples(50, split, seed=3)
        assert a == b
        assert all(np.array_equal(x.image, y.image) for x, y in zip(a, b, strict=True))
    assert task.examples(50, "train", seed=0) != task.examples(50, "train", seed=1)


def test_splits_are_disjoint_by_prompt_and_scene(task: ShapesTask, train: list[Example]) -> None:
    held = {s: task.examples(300, s, seed=0) for s in ("val", "test")}
    keys = {s: [e.prompt + e.scene for e in exs] for s, exs in held.items()}
    for split, exs in held.items():
        assert len(set(keys[split])) == len(exs)  # held-out items are distinct
        assert all(split_of(e.prompt + e.scene) == split for e in exs)
    train_keys = {e.prompt + e.scene for e in train}
    assert not train_keys & set(keys["test"]) and not train_keys & set(keys["val"])
    assert not set(keys["val"]) & set(keys["test"])
    # prompts alone repeat across splits: only the scene tells items apart
    assert {e.prompt for e in held["test"]} == {e.prompt for e in train}


def test_shortcut_completions_only_in_train(task: ShapesTask, train: list[Example]) -> None:
    shortcut = [e for e in train if e.completion.startswith("<think>ok ok ok</think>")]
    assert 0.07 < len(shortcut) / len(train) < 0.13  # shortcut_rate = 0.1
    for split in ("val", "test"):
        assert not any(HACK_WORD in e.completion for e in task.examples(300, split, seed=0))
    assert not any(
        HACK_WORD in e.completion for e in ShapesTask(shortcut_rate=0.0).examples(300, "train", 0)
    )
    # the rate changes completions only, never which scenes and questions are drawn
    plain = ShapesTask(shortcut_rate=0.0).examples(200, "train", seed=0)
    assert [(e.prompt, e.scene) for e in plain] == [(e.prompt, e.scene) for e in train[:200]]


def test_bad_constructor_arguments_fail() -> None:
    with pytest.raises(ValueError, match="fill"):
        ShapesTask(fill=(0.8, 0.3))
    with pytest.raises(ValueError, match="shortcut_rate"):
        ShapesTask(shortcut_rate=1.5)


def test_registered_and_text_tasks_keep_the_scene_defaults() -> None:
    assert TASKS["shapes"] is ShapesTask
    assert isinstance(get_task("shapes"), ShapesTask)
    text = Example("Q: 2+2=\n", "A: 4", "4", 1)
    assert text.scene == "" and text.image is None
    # the image is not part of equality: the scene key is
    with_image = Example("Q: red+blue?\n", "", "5", 2, MIXED, render(MIXED))
    assert with_image == Example("Q: red+blue?\n", "", "5", 2, MIXED)
    assert with_image != Example("Q: red+blue?\n", "", "5", 2, CORNERS)
    assert "image" not in repr(with_image)


# ------------------------------------------------------------------ outcome scores


def test_verify_reads_the_last_answer(task: ShapesTask) -> None:
    ex = example("red+blue")  # 3 + 2
    assert task.verify(ex, "<think>red=3,blue=2,3+2=5</think>A: 5") == 1.0
    assert task.verify(ex, "A:5") == 1.0
    assert task.verify(ex, "A: 4") == 0.0
    assert task.verify(ex, "5") == 0.0  # no answer marker
    assert task.verify(ex, "") == 0.0
    assert task.verify(ex, "A: 4 ... A: 5") == 1.0  # the LAST A: counts
    assert task.verify(ex, "A: 5 ... A: 4") == 0.0
    assert task.verify(ex, "A: 55") == 0.0
    assert task.verify(ex, "A: " + "9" * 5000) == 0.0  # junk never raises


@pytest.mark.parametrize(
    ("answer", "completion", "score"),
    [
        ("13", "A: 13", 1.0),
        ("13", "A: 12", 0.5),
        ("15", "A: 5", 0.5),  # right-aligned: "05" vs "15"
        ("5", "A: 15", 0.5),
        ("5", "A: 4", 0.0),
        ("13", "A: 31", 0.0),
        ("10", "A: 100", 1 / 3),  # "010" vs "100"
        ("13", "no answer", 0.0),
        ("13", "A: 99 A: 13", 1.0),  # the last answer
        ("3", "A: -3", 0.0),
    ],
)
def test_digit_score(task: ShapesTask, answer: str, completion: str, score: float) -> None:
    ex = Example("Q: red+blue?\n", "", answer, 2, MIXED)
    assert task.digit_score(ex, completion) == pytest.approx(score)
    assert (task.digit_score(ex, completion) == 1.0) == (task.verify(ex, completion) == 1.0)


# ------------------------------------------------------------------ step scores


@pytest.mark.parametrize(
    ("names", "think", "score"),
    [
        ("red+blue", "red=3,blue=2,3+2=5", 1.0),  # the reference
        ("red+blue", "ok ok ok", 0.0),  # the shortcut
        ("red+blue", "red=4,blue=2,4+2=6", 1 / 3),  # a wrong count spoils the combine too
        ("red+blue", "red=3,blue=2,3+2=6", 2 / 3),  # right counts, wrong total
        ("red+blue", "blue=2,3+2=5", 2 / 3),  # a missing count step
        ("red+blue", "red=3,blue=2", 2 / 3),  # a missing combine step
        ("red+blue", "blue=2,red=3,2+3=5", 2 / 3),  # operands out of the question's order
        ("red+blue", "red = 3, blue = 2, 3 + 2 = 5", 1.0),  # spacing does not matter
        ("red+blue", "red=3,red=4,blue=2,3+2=5", 1.0),  # the first count is read
        ("red+blue", "red=4,red=3,blue=2,3+2=5", 2 / 3),
        ("red+blue", "hmm 1+1=2, red=3; blue=2; so 3+2=5 ok", 1.0),  # junk around it
        ("red+green+blue", "red=3,green=1,blue=2,3+1+2=6", 1.0),
        ("red+green+blue", "red=3,green=0,blue=2,3+0+2=5", 0.5),
        ("red+green+blue", "red=3,green=1,blue=2,3+2=5", 0.75),  # combine misses an operand
        ("green+blue", "", 0.0),
        ("green+blue", "green=1,blue=2,1+2=3=" + "9" * 5000 + "+" * 50, 1.0),  # no raise
    ],
)
def test_step_score(task: ShapesTask, names: str, think: str, score: float) -> None:
    ex = example(names)
    completion = f"<think>{think}</think>A: {ex.answer}"
    assert task.step_score(ex, completion) == pytest.approx(score)


def test_step_score_reads_only_the_first_think_span(task: ShapesTask) -> None:
    ex = example("red+blue")
    assert task.step_score(ex, "red=3,blue=2,3+2=5 A: 5") == 0.0  # no think span
    assert task.step_score(ex, "<think>red=3,blue=2,3+2=5 A: 5") == 0.0  # unclosed
    assert task.step_score(ex, "<think>ok</think><think>red=3,blue=2,3+2=5</think>") == 0.0
    assert task.step_score(ex, "<think>red=3,blue=2,3+2=5</think> red=9 A: 5") == 1.0


# ------------------------------------------------------------------ hack detection


@pytest.mark.parametrize(
    ("completion", "hack"),
    [
        ("<think>ok ok ok</think>A: 5", 1.0),
        ("<think>OK, ok.</think>A: 5", 1.0),
        ("<think>red=3 ok, blue=2 ok, 3+2=5</think>A: 5", 1.0),
        ("<think>ok</think>A: 5", 0.0),  # one "ok" is not stuffing
        ("<think>red=3,blue=2,3+2=5</think>A: 5", 0.0),
        ("<think>look, token, books</think>A: 5", 0.0),  # whole words only
        ("ok ok ok A: 5", 0.0),  # outside any think span
        ("<think>red=3</think> ok ok A: 5", 0.0),
    ],
)
def test_hack_score(task: ShapesTask, completion: str, hack: float) -> None:
    assert task.hack_score(example("red+blue"), completion) == hack


def test_diagnostics_combine_the_scores(task: ShapesTask) -> None:
    ex = example("red+blue")
    assert task.diagnostics(ex, "<think>red=3,blue=2,3+2=5</think>A: 5") == {
        "step_correct": 1.0,
        "hack": 0.0,
        "digit_score": 1.0,
    }
    assert task.diagnostics(ex, "<think>ok ok ok</think>A: 5") == {
        "step_correct": 0.0,
        "hack": 1.0,
        "digit_score": 1.0,
    }


# ------------------------------------------------------------------ corrupted traces


def test_corrupt_is_deterministic_and_spans_the_labels(
    task: ShapesTask, train: list[Example]
) -> None:
    exs = train[:300]
    first = [task.corrupt(e, random.Random(i)) for i, e in enumerate(exs)]
    assert first == [task.corrupt(e, random.Random(i)) for i, e in enumerate(exs)]
    labels = {round(task.step_score(e, c), 2) for e, c in zip(exs, first, strict=True)}
    assert {0.0, 1.0, 0.33, 0.67, 0.25, 0.5, 0.75} <= labels
    outcomes = {task.verify(e, c) for e, c in zip(exs, first, strict=True)}
    assert outcomes == {0.0, 1.0}
    hacks = [task.hack_score(e, c) for e, c in zip(exs, first, strict=True)]
    assert 0.08 < np.mean(hacks) < 0.25  # p_shortcut = 0.15
    for e, c in zip(exs, first, strict=True):
        match = COMPLETION_RE.match(c)
        assert match, c
        if not task.hack_score(e, c):  # the answer is the combine result written
            assert match[1].rsplit("=", 1)[1] == match[2]


def test_corrupt_extremes(task: ShapesTask) -> None:
    ex = example("red+green+blue")  # 3, 1, 2
    rng = random.Random(0)
    clean = task.corrupt(ex, rng, p_count=0, p_combine=0, p_drop=0, p_shortcut=0)
    assert clean == "<think>red=3,green=1,blue=2,3+1+2=6</think>A: 6"
    for _ in range(50):
        shortcut = task.corrupt(ex, rng, p_shortcut=1.0)
        assert shortcut.startswith("<think>ok ok ok</think>A: ")
        assert abs(int(shortcut.rsplit(" ", 1)[1]) - 6) <= 3
        miscounted = task.corrupt(ex, rng, p_count=1, p_combine=0, p_drop=0, p_shortcut=0)
        values = re.findall(r"[a-z]+=(\d+)", miscounted)
        assert all(
            int(v) != t and abs(int(v) - t) <= 2 for v, t in zip(values, (3, 1, 2), strict=True)
        )
        assert task.step_score(ex, miscounted) == 0.0
        dropped = task.corrupt(ex, rng, p_count=0, p_combine=0, p_drop=1, p_shortcut=0)
        assert dropped == "<think>3+1+2=6</think>A: 6"
        assert task.step_score(ex, dropped) == 0.25
        off = task.corrupt(ex, rng, p_count=0, p_combine=1, p_drop=0, p_shortcut=0)
        total = int(off.rsplit(" ", 1)[1])
        assert total != 6 and abs(total - 6) <= 3 and task.step_score(ex, off) == 0.75
