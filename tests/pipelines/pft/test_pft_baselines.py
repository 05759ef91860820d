"""The SFDA baselines on a two-class toy: SHOT's IM loss at its known values, Tent lowers the
mean entropy and touches only BN affine parameters, AdaBN's statistics are the frames',
SHOT's centroid pseudo-labels, neutral-CE moves only C and the oracle learns the labels."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from rayworks.pipelines.pft import baselines
from rayworks.pipelines.pft.model import build_model

SOURCE = {"channels": (4, 4, 8), "bottleneck": 4}
ADAPT = {"epochs": 5, "batch_size": 8, "lr": 1e-2, "shot_beta": 0.3, "oracle_lr": 1e-2}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _toy(seed: int = 0) -> tuple[torch.nn.Module, np.ndarray]:
    torch.manual_seed(seed)
    model = build_model(SOURCE, 2).train()
    with torch.no_grad():
        model(torch.rand(32, 1, 8, 8))
    x = np.random.default_rng(seed).uniform(0, 1, (24, 1, 8, 8)).astype(np.float32)
    return model.eval(), x


def test_im_loss_known_values() -> None:
    big = 50.0
    confident_diverse = torch.tensor([[big, 0.0], [0.0, big]])
    assert baselines.im_loss(confident_diverse).item() == pytest.approx(-math.log(2), abs=1e-4)
    uniform = torch.zeros(4, 2)
    assert baselines.im_loss(uniform).item() == pytest.approx(0.0, abs=1e-4)
    collapsed = torch.tensor([[big, 0.0], [big, 0.0]])  # confident but one class: no reward
    assert baselines.im_loss(collapsed).item() == pytest.approx(0.0, abs=1e-4)
    p = torch.tensor([[0.9, 0.1], [0.3, 0.7]])
    ent = -(p * p.log()).sum(1).mean()
    mean = p.mean(0)
    expected = ent + (mean * (mean + 1e-5).log()).sum()
    assert baselines.im_loss(p.log()).item() == pytest.approx(expected.item(), abs=1e-6)


def test_tent_lowers_entropy_and_only_touches_bn_affine() -> None:
    model, x = _toy()
    xt = torch.from_numpy(x)
    with torch.no_grad():
        before = baselines.entropy(baselines.adabn(model, x)(xt)).mean().item()
    adapted = baselines.tent(model, x, ADAPT, seed=0)
    with torch.no_grad():
        after = baselines.entropy(adapted(xt)).mean().item()
    assert after < before
    affine = {
        f"{name}.{p}"
        for name, m in model.named_modules()
        if isinstance(m, baselines.BN)
        for p in ("weight", "bias")
    }
    new = dict(adapted.named_parameters())
    for name, p in model.named_parameters():
        changed = not torch.equal(p, new[name])
        assert changed == (name in affine), name


def test_adabn_statistics_are_the_frames() -> None:
    model, x = _toy()
    adapted = baselines.adabn(model, x)
    bn = adapted.F.blocks[0][1]
    with torch.no_grad():
        conv = adapted.F.blocks[0][0](torch.from_numpy(x))
    torch.testing.assert_close(bn.running_mean, conv.mean((0, 2, 3)), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(bn.running_var, conv.var((0, 2, 3)), atol=1e-4, rtol=1e-4)
    assert not torch.equal(bn.running_mean, model.F.blocks[0][1].running_mean)


def test_centroid_labels_recover_two_clusters() -> None:
    gen = torch.Generator().manual_seed(0)
    centres = torch.tensor([[3.0, 0.0, 0.0], [0.0, 3.0, 0.0]])
    truth = torch.arange(20) % 2
    feats = centres[truth] + 0.3 * torch.randn(20, 3, generator=gen)
    noisy_logits = 0.5 * torch.nn.functional.one_hot(truth, 2).float()
    noisy_logits[:4] = noisy_logits[:4].flip(1)  # 4 wrong soft predictions
    assert torch.equal(baselines.centroid_labels(feats, noisy_logits), truth)


def test_shot_neutral_ce_and_oracle_move_what_they_should() -> None:
    model, x = _toy()
    shot = baselines.shot(model, x, ADAPT, seed=0)
    assert torch.equal(
        shot.C.parametrizations.weight.original1, model.C.parametrizations.weight.original1
    )
    assert not torch.equal(shot.F.blocks[0][0].weight, model.F.blocks[0][0].weight)
    ce = baselines.neutral_ce(model, x, ADAPT, seed=0)
    base = copy.deepcopy(model.state_dict())
    for name, value in ce.state_dict().items():
        assert torch.equal(value, base[name]) == (not name.startswith("C.")), name
    with torch.no_grad():
        assert (ce(torch.from_numpy(x)).argmax(1) == 0).float().mean() == 1.0  # collapse
    y = (x.mean((1, 2, 3)) > np.median(x.mean((1, 2, 3)))).astype(np.int64)
    x_sep = x + y[:, None, None, None].astype(np.float32)  # a learnable label
    oracle = baselines.oracle(model, x_sep, y, {**ADAPT, "epochs": 15}, seed=0)
    with torch.no_grad():
        acc = (oracle(torch.from_numpy(x_sep)).argmax(1).numpy() == y).mean()
    assert acc >= 0.9
