"""The step contract: first reason wins, columns stay aligned, counts add up."""

from __future__ import annotations

import pytest

from rayworks.pipelines.corpus.step import DROP, alive, drop, reason_counts, score_rows, size


def test_first_reason_wins_and_counts() -> None:
    batch = {"text": ["a", "bb", "ccc", "dddd"]}
    assert size(batch) == 4 and alive(batch) == [True] * 4
    batch = drop(batch, ["", "short:len", "", "short:len"])
    batch = drop(batch, ["toxic:words", "toxic:words", "", ""])
    assert list(batch[DROP]) == ["toxic:words", "short:len", "", "short:len"]
    assert alive(batch) == [False, False, True, False]
    assert reason_counts(batch) == {"short:len": 2, "toxic:words": 1}
    with pytest.raises(ValueError, match="3 verdicts for a batch of 4"):
        drop(batch, ["", "", ""])


def test_score_rows_adds_prefixed_columns() -> None:
    batch = score_rows({"text": ["ab", "abcd"]}, "text", lambda t: {"len": len(t)}, "q")
    assert list(batch["q_len"]) == [2, 4] and list(batch["text"]) == ["ab", "abcd"]
