"""Evaluations: task_accuracy reconciles its counts; lm scores a saved checkpoint."""

from __future__ import annotations

import json
import math

import pytest

from rayworks.core.errors import RayworksError
from rayworks.evals.run import run_evaluation
from rayworks.models import DecoderSpec, TokenizerSpec, build_decoder, train_tokenizer


def test_task_accuracy_scores_and_keeps_malformed_rows_aside(tmp_path):
    preds = tmp_path / "preds.jsonl"
    rows = [
        json.dumps({"prompt": "Q: 12+30=\n", "completion": "<think>..</think>A: 42"}),
        "{not json",
        json.dumps({"prompt": "Q: 5-3=\n", "completion": "A: 3"}),
        json.dumps({"completion": "A: 1"}),
        json.dumps({"prompt": "Q: 7+1=\n", "completion": "A: 8", "answer": "8"}),
    ]
    preds.write_text("\n".join(rows) + "\n")
    out = tmp_path / "m.json"
    metrics = run_evaluation("task_accuracy", predictions=str(preds), out=str(out))
    assert metrics["rows_in"] == 5 == metrics["rows_scored"] + metrics["rows_rejected"]
    assert metrics["rows_rejected"] == 2
    assert metrics["accuracy"] == pytest.approx(2 / 3)
    rejects = [json.loads(x) for x in (tmp_path / "preds.rejects.jsonl").read_text().splitlines()]
    assert [r["line"] for r in rejects] == [2, 4]
    assert json.loads(out.read_text())["rows_in"] == 5


def test_task_accuracy_missing_file(tmp_path):
    with pytest.raises(RayworksError, match="does not exist"):
        run_evaluation("task_accuracy", predictions=str(tmp_path / "none.jsonl"))


def test_lm_eval_on_a_saved_model(tmp_path):
    tok = train_tokenizer(TokenizerSpec(), ["Q: 0123456789+-=\n<think>|cb</think>A: "])
    model = build_decoder(DecoderSpec(d_model=16, n_layer=1, n_head=2), len(tok), 1, 2, 0)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    metrics = run_evaluation(
        "lm", checkpoint=str(tmp_path), overrides=["n_val=8", "n_test=4", "max_new_tokens=8"]
    )
    assert metrics["val_ppl"] == pytest.approx(math.exp(metrics["val_loss"]))
    assert metrics["val_loss"] == pytest.approx(
        math.log(len(tok)), rel=0.2
    )  # untrained: near uniform
    assert 0.0 <= metrics["exact_match"] <= 1.0
