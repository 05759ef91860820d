"""Checkpoint selection of the post-training, and the lr chosen on S-val (never S-test)."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from rayworks.core.config import build_config
from rayworks.data.digits import Digits, DigitSplit
from rayworks.models.vit_train import accuracy, train_classifier
from rayworks.pipelines.vulcan import pipeline as vulcan_pipeline
from rayworks.pipelines.vulcan.config import VulcanConfig
from rayworks.pipelines.vulcan.posttrain import (
    Selection,
    choose_on_val,
    fine_tune_on_val,
    train_config,
)
from rayworks.pipelines.vulcan.subtask import subtask


def test_selection_prefers_small_gaps_then_accuracy(tiny_vit) -> None:
    sel = Selection()
    sel.offer(100, tiny_vit, tiny_vit, acc=0.95, pruned_acc=0.80, tolerance=1.0)
    assert (sel.step, sel.gap_ok) == (100, False)
    sel.offer(200, tiny_vit, tiny_vit, acc=0.95, pruned_acc=0.90, tolerance=1.0)
    assert sel.step == 200  # no checkpoint within the gap yet: best pruned accuracy
    sel.offer(300, tiny_vit, tiny_vit, acc=0.85, pruned_acc=0.85, tolerance=1.0)
    assert (sel.step, sel.gap_ok) == (300, True)  # within the gap beats a better pruned acc
    sel.offer(400, tiny_vit, tiny_vit, acc=0.99, pruned_acc=0.97, tolerance=1.0)
    assert sel.step == 300  # a 2-point gap never replaces a checkpoint within the gap
    sel.offer(500, tiny_vit, tiny_vit, acc=0.90, pruned_acc=0.895, tolerance=1.0)
    assert sel.step == 500 and sel.val == 0.895
    assert sel.unpruned is not None and set(sel.unpruned) == set(tiny_vit.state_dict())


def test_choose_on_val_keeps_the_best_score_and_the_smaller_lr_on_ties() -> None:
    scores = {1e-2: 0.7, 1e-3: 0.5, 3e-3: 0.7}
    tried: list[float] = []

    def fit(lr: float) -> tuple[str, float]:
        tried.append(lr)
        return f"model@{lr}", scores[lr]

    choice = choose_on_val([1e-2, 1e-3, 3e-3], fit)
    assert (choice.lr, choice.result) == (3e-3, "model@0.003")
    assert tried == [1e-3, 3e-3, 1e-2] and choice.val == scores
    assert choose_on_val([5e-4], lambda lr: (None, 0.0)).lr == 5e-4


def _unreadable(split: DigitSplit) -> DigitSplit:
    """A split no ViT can score (3 channels for a 1-channel model): reading it raises."""
    return DigitSplit(torch.zeros(len(split), 3, 16, 16), split.y)


def _small_task() -> Digits:
    """Digits 3 and 8 (labels kept) with a 64-image train split and an unreadable test split."""
    from rayworks.data.digits import load_digits_splits

    task = subtask(load_digits_splits(), [3, 8])
    train = DigitSplit(task.train.x[:64], task.train.y[:64])
    return Digits(train, task.val, _unreadable(task.test), task.cfg)


def test_fine_tune_lr_is_the_argmax_of_s_val_and_s_test_is_never_read(tiny_vit) -> None:
    task = _small_task()
    with pytest.raises(RuntimeError):
        accuracy(tiny_vit, task.test)  # the guard works: any read of S-test would raise
    cfg = build_config(
        VulcanConfig, "smoke", (), ["post.steps=4", "post.batch_size=16", "post.lrs=[1e-5,3e-2]"]
    )
    choice = fine_tune_on_val(tiny_vit, task, cfg)
    # independent reference: train a copy at each lr by hand and score it on S-val
    expected = {}
    for lr in (1e-5, 3e-2):
        model = copy.deepcopy(tiny_vit)
        train_classifier(model, task, train_config(cfg, len(task.train), lr))
        expected[lr] = accuracy(model, task.val)
    assert choice.val == pytest.approx(expected)
    assert expected[3e-2] != expected[1e-5]  # the grid discriminates, so the choice is real
    assert choice.lr == max(expected, key=lambda lr: (expected[lr], -lr))
    assert accuracy(choice.result, task.val) == pytest.approx(expected[choice.lr])


def test_every_arm_of_a_run_chooses_its_lr_on_s_val(tmp_path, monkeypatch) -> None:
    """`derive` (all model selection of a run) with an unreadable S-test: it must not raise,
    and every kept model's S-val accuracy is the score its lr won with."""
    real = vulcan_pipeline.subtask

    def no_test(digits: Digits, classes: list[int]) -> Digits:
        t = real(digits, classes)
        return Digits(t.train, t.val, _unreadable(t.test), t.cfg)

    monkeypatch.setattr(vulcan_pipeline, "subtask", no_test)
    ctx = SimpleNamespace(cache_root=tmp_path, progress=lambda *a: None, log=lambda *a, **k: None)
    keys = ["pretrain.epochs=1", "post.steps=4", "post.eval_every=2", "post.lrs=[1e-4,3e-2]"]
    for method, arms in (("vulcan", ["base_ft", "vulcan"]), ("prune_ft", ["prune_ft"])):
        ref = f"reference_ft={'base_ft' in arms}".lower()
        cfg = build_config(VulcanConfig, "smoke", (), [*keys, f"method={method}", ref])
        models, extras = vulcan_pipeline.derive(cfg, ctx)
        val = extras["task"].val
        assert {r["arm"] for r in extras["lr_selection"]} == set(arms)
        for arm in arms:
            rows = {r["lr"]: r["val_accuracy"] for r in extras["lr_selection"] if r["arm"] == arm}
            assert set(rows) == {1e-4, 3e-2}
            assert extras[f"{arm}_lr"] == max(rows, key=lambda lr: (rows[lr], -lr))
            assert accuracy(models[arm], val) == pytest.approx(extras[f"{arm}_val_accuracy"])
            assert rows[extras[f"{arm}_lr"]] == extras[f"{arm}_val_accuracy"]
