"""PFT's pieces: Gram and cosine pairs against brute force, every translator form at
identity leaves predictions unchanged, pre-training lowers its loss, adaptation moves T
alone, and the style loss is large enough to change the adapted translator's predictions."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from rayworks.pipelines.pft.config import DataConfig, PFTMethodConfig
from rayworks.pipelines.pft.model import build_model
from rayworks.pipelines.pft.pft import (
    Translator,
    adapt_translator,
    cosine_pairs,
    expr_loss,
    gram,
    pft_logits,
    pretrain_translator,
    style_loss,
)
from rayworks.pipelines.pft.subjects import source_frames, target_subject

SOURCE = {"channels": (4, 4, 8), "bottleneck": 4}
PFT = {
    "hidden": 8,
    "translator": "conv_copy",
    "style_norm": "chw",
    "style_layers": [0, 1, 2],
    "lambda_expr": 1.0,
    "lambda_style": 1.0,
    "pretrain_ce": 1.0,
    "pretrain_epochs": 3,
    "pretrain_lr": 1e-2,
    "expr_loss": "ce",
}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = build_model(SOURCE, 2).train()
    with torch.no_grad():  # non-trivial BN statistics
        model(torch.rand(32, 1, 8, 8))
    return model.eval()


def test_gram_matches_a_loop() -> None:
    maps = torch.randn(2, 3, 4, 5)
    brute = torch.zeros(2, 3, 3)
    for n in range(2):
        for i in range(3):
            for j in range(3):
                brute[n, i, j] = (maps[n, i] * maps[n, j]).sum() / (3 * 4 * 5)
    torch.testing.assert_close(gram(maps), brute)


def test_cosine_pairs_pick_the_nearest_other_subject_other_label() -> None:
    gen = torch.Generator().manual_seed(0)
    feats = torch.randn(12, 5, generator=gen)
    subject, labels = torch.arange(12) % 3, torch.arange(12) // 6
    got = cosine_pairs(feats, subject, labels)
    for a in range(12):
        best = max(
            (b for b in range(12) if subject[b] != subject[a] and labels[b] != labels[a]),
            key=lambda b: torch.cosine_similarity(feats[a], feats[b], 0).item(),
        )
        assert got[a].item() == best


@pytest.mark.parametrize("kind", ["mlp", "pooled_mlp", "conv_copy"])
def test_translator_at_identity_leaves_predictions_unchanged(kind: str) -> None:
    model = _model()
    T = Translator(model.F, 8, kind).eval()
    x = torch.rand(10, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(pft_logits(model, T, x), model(x))
    T.train()  # training mode keeps the backbone's frozen BN statistics
    with torch.no_grad():
        torch.testing.assert_close(pft_logits(model, T, x), model(x))


def test_expr_loss_forms() -> None:
    ref = torch.tensor([[2.0, 0.0], [0.0, 3.0]])
    assert expr_loss(ref, ref, "kl").item() == pytest.approx(0.0, abs=1e-6)
    assert expr_loss(ref, ref, "mse").item() == pytest.approx(0.0, abs=1e-6)
    ce = torch.nn.functional.cross_entropy(ref, torch.tensor([0, 1])).item()
    assert expr_loss(ref, ref, "ce").item() == pytest.approx(ce)


def test_pretraining_lowers_its_loss_and_adaptation_moves_only_t() -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (48, 1, 8, 8)).astype(np.float32)
    y, subject = np.repeat([0, 1], 24), np.tile(np.arange(4), 12)
    model = _model()
    before = copy.deepcopy(model.state_dict())
    T, history = pretrain_translator(model, x, y, subject, PFT, batch_size=16, seed=0)
    total = [h["expr"] + h["ce"] + h["style"] for h in history]
    assert total[-1] < total[0] and all(h["style"] >= 0 for h in history)
    adapted = adapt_translator(
        model, T, x[:16], PFT, {"epochs": 2, "batch_size": 8, "lr": 1e-2}, seed=0
    )
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, before[key])  # F, B, C frozen
    moved = [
        not torch.equal(a, b) for a, b in zip(T.parameters(), adapted.parameters(), strict=True)
    ]
    assert all(moved[-4:])  # the residual MLP moved (its backbone too, by gradient)


def test_relative_style_loss_is_scale_free_and_zero_on_equal_maps() -> None:
    maps = [torch.rand(3, 4, 5, 5) for _ in range(3)]
    assert style_loss(maps, maps, [0, 1, 2], "relative").item() == pytest.approx(0.0)
    zeros = [torch.zeros_like(m) for m in maps]
    assert style_loss(maps, zeros, [2], "relative").item() == pytest.approx(1.0)
    scaled = [10 * m for m in maps]
    other = [m.flip(0) for m in maps]
    torch.testing.assert_close(
        style_loss(scaled, [10 * m for m in other], [1], "relative"),
        style_loss(maps, other, [1], "relative"),
    )


def test_style_loss_changes_the_adapted_translator() -> None:
    """The default recipe (mlp translator, relative Gram loss, λ_style = 1) against the same
    run with λ_style = 0 on rendered subjects: T and the adapted predictions must differ, by
    more than the code's C·H·W-normalised Gram loss (about 5e-4) could move them."""
    data = {
        **DataConfig().model_dump(mode="json"),
        "n_source_subjects": 4,
        "source_frames_per_class": 12,
        "adapt_frames": 16,
        "test_frames_per_class": 12,
    }
    frames, subject = source_frames(data)
    model = build_model({"channels": (16, 32, 64), "bottleneck": 32}, 2)
    torch.manual_seed(0)
    model.train()
    with torch.no_grad():  # source BN statistics of these frames, weights at their init
        model(torch.from_numpy(frames.x))
    model.eval()
    target = target_subject(data, 0, 12)
    cfg = PFTMethodConfig(pretrain_epochs=3).model_dump(mode="json")
    assert cfg["translator"] == "mlp" and cfg["style_norm"] == "relative"
    adapt = {"epochs": 2, "batch_size": 8, "lr": 1e-3}
    probs = {}
    for lam in (0.0, 1.0):
        c = {**cfg, "lambda_style": lam}
        T, history = pretrain_translator(model, frames.x, frames.y, subject, c, 16, seed=0)
        if lam:
            assert history[0]["style"] > 1e-2  # the term is not negligible against CE ~0.7
        T = adapt_translator(model, T, target.adapt.x, c, adapt, seed=0)
        with torch.no_grad():
            probs[lam] = pft_logits(model, T, torch.from_numpy(target.test.x)).softmax(1)
    assert (probs[1.0] - probs[0.0]).abs().mean().item() > 1e-2
