"""The synthetic SFT tasks: answers are right, layouts put PAD where the config says."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from rayworks.pipelines.dpad.config import DPadConfig
from rayworks.pipelines.dpad.pipeline import TEST_SEED_OFFSET
from rayworks.pipelines.dpad.tasks import (
    BOS,
    DIGIT0,
    EOS,
    PAD,
    PLUS,
    SEP,
    TASK_IDS,
    TaskConfig,
    answer_limit,
    make_batch,
    prompt_length,
)


def _number(tokens: list[int]) -> str:
    return "".join(str(t - DIGIT0) for t in tokens)


@pytest.mark.parametrize("pad", ["after", "before"])
def test_every_task_answers_correctly_in_either_layout(pad: str) -> None:
    cfg = TaskConfig(
        tasks=["reverse", "sort", "add", "copy", "add_lsb"], min_digits=3, max_digits=6, pad=pad
    )
    batch = make_batch(200, cfg, np.random.default_rng(0))
    p = prompt_length(cfg)
    assert batch.prompts.shape == (200, p) and set(batch.tasks) == set(TASK_IDS)
    for row, answer, task in zip(batch.prompts.tolist(), batch.answers, batch.tasks, strict=True):
        body = [t for t in row if t != PAD]
        start = row.index(BOS)
        assert (start == 0) if pad == "after" else (row[-1] == SEP)
        assert body[:2] == [BOS, TASK_IDS[task]] and body[-1] == SEP
        digits = body[2:-1]
        if task in ("add", "add_lsb"):
            i = digits.index(PLUS)
            a, b = _number(digits[:i]), _number(digits[i + 1 :])
            if task == "add_lsb":
                a, b = a[::-1], b[::-1]
            assert _number(answer) == str(int(a) + int(b))[::-1]
        else:
            x = _number(digits)
            want = {"reverse": x[::-1], "sort": "".join(sorted(x)), "copy": x}[task]
            assert _number(answer) == want
        assert len(answer) + 1 <= answer_limit(cfg)


def test_sequences_pad_the_answer_with_eos_and_mark_only_the_response() -> None:
    cfg = TaskConfig(tasks=["copy"], min_digits=4, max_digits=4)
    batch = make_batch(3, cfg, np.random.default_rng(1))
    x, response = batch.sequences(8)
    p = prompt_length(cfg)
    assert x.shape == (3, p + 8) and response[:, p:].all() and not response[:, :p].any()
    assert (x[:, p + 4 :] == EOS).all() and (x[:, p : p + 4] >= DIGIT0).all()
    with pytest.raises(ValueError, match="gen_length=4"):
        batch.sequences(4)


def test_unknown_task_and_pad_side_are_config_errors() -> None:
    with pytest.raises(ValidationError, match="tasks"):
        TaskConfig(tasks=["multiply"])
    with pytest.raises(ValidationError, match="pad"):
        TaskConfig(pad="middle")


def test_default_answers_reach_past_the_second_block() -> None:
    """The default test prompts' answers span >= 3 decoding blocks (EOS in block 3 or
    later), so earlier blocks are decoded while answer tokens are still masked suffix:
    with every answer inside the first block, no suffix could ever matter to an answer."""
    cfg = DPadConfig()
    test = make_batch(cfg.n_test, cfg.data, np.random.default_rng(cfg.seed + TEST_SEED_OFFSET))
    eos_block = [len(answer) // cfg.block_length for answer in test.answers]  # 0-based
    assert min(eos_block) >= 2, f"an answer ends in block {min(eos_block) + 1}"
    assert set(test.tasks) == {"copy", "add_lsb"}  # both tasks, addition included
