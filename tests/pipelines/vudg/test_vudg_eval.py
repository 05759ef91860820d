"""`rayworks eval vudg` on a tiny written dataset: scores, rejects with reasons, counts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rayworks.core.errors import ConfigError, RayworksError
from rayworks.evals.run import run_evaluation
from rayworks.pipelines.vudg.dataset import read_annotations, write_dataset

DATA = {"domains": ["fog", "night"], "n_train": 2, "n_test": 3, "frames": 2, "size": 16}
ANN = {"generator_error": 0.1, "synonym_rate": 0.05, "verifier_error": 0.1, "synonym_recall": 0.7}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vudg") / "data"
    write_dataset(folder, DATA, ANN, seed=0)
    return folder


def test_written_dataset_matches_its_documented_format(tiny) -> None:
    rows = read_annotations(tiny)
    manifest = json.loads((tiny / "manifest.json").read_text())
    assert manifest["clips"] == 10 and manifest["questions"] == len(rows)
    report = json.loads((tiny / "annotation_report.json").read_text())
    assert report["het"]["items"] == 40 == len(rows) + report["het"]["deleted"]
    for r in rows:
        clip = np.load(tiny / "videos" / f"{r['clip']}.npy")
        assert clip.shape == (2, 16, 16, 3) and clip.dtype == np.uint8
        assert len(r["options"]) == 6 and 0 <= r["answer"] < 6 and r["id"].startswith(r["clip"])
        assert r["split"] in ("train", "test") and r["domain"] in DATA["domains"]
    assert (tiny / "FORMAT.md").read_text().count("annotations.jsonl") >= 1


def test_eval_scores_rejects_with_reasons_and_counts_reconcile(tiny, tmp_path) -> None:
    test = [r for r in read_annotations(tiny) if r["split"] == "test"]
    train_id = next(r["id"] for r in read_annotations(tiny) if r["split"] == "train")
    right, wrong, by_text = test[0], test[1], test[2]
    lines = [
        json.dumps({"id": right["id"], "prediction": right["answer"]}),
        json.dumps({"id": wrong["id"], "prediction": (wrong["answer"] + 1) % 6}),
        json.dumps({"id": by_text["id"], "prediction": by_text["options"][by_text["answer"]]}),
        "{not json",
        json.dumps([1, 2]),
        json.dumps({"prediction": 1}),
        json.dumps({"id": "nope", "prediction": 1}),
        json.dumps({"id": train_id, "prediction": 0}),
        json.dumps({"id": right["id"], "prediction": 0}),
        json.dumps({"id": test[3]["id"]}),
        json.dumps({"id": test[4]["id"], "prediction": 6}),
        "",
        json.dumps({"id": test[5]["id"], "prediction": True}),
    ]
    preds = tmp_path / "preds.jsonl"
    preds.write_text("\n".join(lines) + "\n")
    m = run_evaluation("vudg", predictions=str(preds), overrides=[f"dataset={tiny}"])
    assert (
        m["lines_in"] == 12 == m["lines_scored"] + m["lines_rejected"]
    )  # the blank line is no row
    assert m["lines_scored"] == 3 and m["questions"] == len(test)
    assert m["answered"] + m["unanswered"] == m["questions"]
    assert m["accuracy"] == pytest.approx(2 / len(test))
    assert m["accuracy_answered"] == pytest.approx(2 / 3)
    rejects = [json.loads(x) for x in preds.with_suffix(".rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["reason"]) for r in rejects] == [
        (4, "bad_json"),
        (5, "not_an_object"),
        (6, "missing_id"),
        (7, "unknown_id"),
        (8, "out_of_scope"),
        (9, "duplicate_id"),
        (10, "missing_prediction"),
        (11, "invalid_prediction"),
        (13, "invalid_prediction"),
    ]
    assert m["rejected_invalid_prediction"] == 2
    domain_sum = sum(m[f"acc_{d}"] * sum(r["domain"] == d for r in test) for d in DATA["domains"])
    assert domain_sum == pytest.approx(2)  # per-domain accuracies recombine to the 2 correct


def test_eval_errors_name_what_is_wrong(tiny, tmp_path) -> None:
    with pytest.raises(ConfigError, match="dataset"):
        run_evaluation("vudg", predictions=str(tmp_path / "p.jsonl"))
    with pytest.raises(RayworksError, match="does not exist"):
        run_evaluation("vudg", predictions=str(tmp_path / "p.jsonl"), overrides=[f"dataset={tiny}"])
    (tmp_path / "p.jsonl").write_text("")
    with pytest.raises(RayworksError, match="selects no question"):
        run_evaluation(
            "vudg",
            predictions=str(tmp_path / "p.jsonl"),
            overrides=[f"dataset={tiny}", "domains=[snow]"],
        )
