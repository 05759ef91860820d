"""The step contract: first reason wins, columns stay aligned, counts add up."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rayworks.pipelines.corpus.step import (
    DROP,
    add_scores,
    alive,
    drop,
    judge,
    reason_counts,
    score_rows,
    scored_rows,
    size,
    spread,
)


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


def test_only_live_rows_are_scored_and_fills_keep_types() -> None:
    batch = drop({"text": ["ab", "abcd", "abc"]}, ["", "gate:closed", ""])
    seen: list[str] = []

    def fn(t: str) -> dict:
        seen.append(t)
        return {"len": len(t), "frac": len(t) / 4, "odd": len(t) % 2 == 1, "tag": t[:1]}

    out = score_rows(batch, "text", fn, "q")
    assert seen == ["ab", "abc"]  # the dropped row is never scored
    assert list(out["q_len"]) == [2, None, 3] and list(out["q_odd"]) == [False, None, True]
    assert out["q_frac"].dtype == np.float64 and math.isnan(out["q_frac"][1])
    assert list(out["q_tag"]) == ["a", None, "a"] and list(out[DROP])[1] == "gate:closed"
    every = score_rows(batch, "text", fn, "q", score_dropped=True)
    assert list(every["q_len"]) == [2, 4, 3] and every["q_len"].dtype == np.int64


def test_add_scores_and_judge_keep_alignment_and_first_reasons() -> None:
    batch = drop({"text": ["a", "b", "c"]}, ["x:y", "x:y", "x:y"])
    rows = scored_rows(batch)
    assert len(rows) == 0  # a batch whose rows were all dropped still gets every column
    out = add_scores(batch, rows, [], ["n"], "s")
    assert out["s_n"].dtype == np.float64 and np.isnan(out["s_n"]).all()
    every = scored_rows(batch, score_dropped=True)
    judged = judge(out, every, [1, 2, 3], lambda s: "s:big" if s > 1 else "")
    assert list(judged[DROP]) == ["x:y"] * 3  # scored anyway, but the first reason stays
    fresh = judge({"text": ["a", "b"]}, np.arange(2), [1, 2], lambda s: "s:big" if s > 1 else "")
    assert list(fresh[DROP]) == ["", "s:big"]
    assert list(spread(np.array([1.5]), np.array([1]), 3)[[0, 2]].astype(str)) == ["nan"] * 2
