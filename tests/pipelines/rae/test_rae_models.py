"""Shapes, reload (safetensors), DiT^DH conditioning, noise augmentation, FD, the cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from safetensors.torch import load_file, save_file

from rayworks.models.vit import ViT
from rayworks.pipelines.rae.autoencoders import (
    ConvAE,
    RAEDecoder,
    SupConHeads,
    encode_tokens,
    noise_augment,
    nt_xent,
    patchify,
    supcon_loss,
    unpatchify,
)
from rayworks.pipelines.rae.config import RAEConfig
from rayworks.pipelines.rae.dit import DiT, DiTSpec, forward_flops, load_dit, save_dit
from rayworks.pipelines.rae.evaluator import frechet_distance
from rayworks.pipelines.rae.stages import encoder_spec
from rayworks.pipelines.rae.training import cached, fit


def test_decoder_shapes_and_safetensors_reload(tmp_path) -> None:
    dec = RAEDecoder(n=16, depth=1, heads=2, tokens=16, p=4)
    z = torch.randn(3, 16, 16)
    out = dec(z)
    assert out.shape == (3, 1, 16, 16)
    save_file({k: v.contiguous() for k, v in dec.state_dict().items()}, tmp_path / "d.st")
    again = RAEDecoder(n=16, depth=1, heads=2, tokens=16, p=4)
    again.load_state_dict(load_file(tmp_path / "d.st"))
    assert torch.equal(again(z), out)
    ae = ConvAE(4, 8)
    img = torch.randn(2, 1, 16, 16)
    assert ae.encode(img).shape == (2, 16, 4) and ae(img).shape == img.shape


def test_patchify_roundtrip_and_encoder_tokens() -> None:
    img = torch.randn(2, 1, 16, 16)
    assert torch.equal(unpatchify(patchify(img, 4), 4), img)
    vit = ViT(encoder_spec({"width": 16, "depth": 1, "heads": 2}))
    tokens = encode_tokens(vit, img)
    assert tokens.shape == (2, 16, 16)
    keep = torch.tensor([[0, 5, 9, 15], [1, 2, 3, 4]])
    assert encode_tokens(vit, img, keep).shape == (2, 4, 16)


@pytest.mark.parametrize("head_width", [0, 32])
def test_dit_shapes_reload_and_zero_init(tmp_path, head_width: int) -> None:
    spec = DiTSpec(channels=8, width=16, depth=1, heads=2, head_width=head_width, head_heads=2)
    model = DiT(spec)
    x, t, y = torch.randn(3, 16, 8), torch.rand(3), torch.tensor([0, 1, 10])
    assert torch.equal(model(x, t, y), torch.zeros(3, 16, 8))  # adaLN-Zero output layer
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.1)
    out = model(x, t, y)
    again = load_dit(save_dit(model, tmp_path / "dit"))
    assert torch.equal(again(x, t, y), out)
    assert forward_flops(model) > 0


def test_dit_dh_head_is_conditioned_per_token_on_body() -> None:
    """Changing only the body's weights changes the head's per-token conditioning; the
    head re-embeds x_t (its own input projection has the head width)."""
    spec = DiTSpec(channels=8, width=16, depth=1, heads=2, head_width=32, head_heads=2)
    model = DiT(spec)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.1)
    assert model.head.embed.in_features == 8 and model.head.embed.out_features == 32
    x, t, y = torch.randn(2, 16, 8), torch.rand(2), torch.tensor([3, 4])
    before = model(x, t, y)
    with torch.no_grad():
        model.body.blocks[0].mlp[2].bias.add_(1.0)
    assert not torch.allclose(model(x, t, y), before)
    wide = DiT(DiTSpec(channels=8, width=32, depth=1, heads=2))
    assert forward_flops(wide) < forward_flops(model)


def test_noise_augment_range() -> None:
    gen = torch.Generator().manual_seed(0)
    z = torch.zeros(4000, 2, 8)
    assert torch.equal(noise_augment(z, 0.0, gen), z)
    noisy = noise_augment(z, 0.8, gen)
    per_sample = noisy.flatten(1).std(1)
    assert per_sample.max() < 0.8 * 1.5 and per_sample.mean() == pytest.approx(0.4, abs=0.03)


def test_frechet_distance_closed_form() -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(size=(20000, 3))
    b = rng.normal(size=(20000, 3)) * 2 + 1
    # N(0, I) vs N(1, 4I): ‖μ‖² + tr(I + 4I - 2·2I) = 3 + 3
    assert frechet_distance(a, b) == pytest.approx(6.0, rel=0.05)
    assert frechet_distance(a, a) == pytest.approx(0.0, abs=1e-6)


def test_frechet_distance_matches_sqrtm_and_stays_exact_when_singular() -> None:
    from scipy import linalg

    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(200, 6)), rng.normal(size=(200, 6)) @ rng.normal(size=(6, 6))
    cov_a, cov_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    want = ((a.mean(0) - b.mean(0)) ** 2).sum() + np.trace(
        cov_a + cov_b - 2 * linalg.sqrtm(cov_a @ cov_b).real
    )
    assert frechet_distance(a, b) == pytest.approx(want, rel=1e-8)
    few = rng.normal(size=(10, 40))  # 10 samples of 40 features: rank-9 covariance
    assert frechet_distance(few, few) == pytest.approx(0.0, abs=1e-8)


def test_fit_resumes_to_the_same_result(tmp_path) -> None:
    """A run killed after its step-5 checkpoint and restarted ends where an unbroken run does."""

    def run(root, crash_at=None):
        torch.manual_seed(0)
        lin = torch.nn.Linear(3, 1)
        data = torch.randn(32, 3, generator=torch.Generator().manual_seed(1))

        def loss_at(step, gen):
            if step == crash_at:
                raise KeyboardInterrupt
            idx = torch.randint(0, 32, (8,), generator=gen)
            return (lin(data[idx]) ** 2).mean()

        return lin, fit({"lin": lin}, loss_at, 12, 0.1, 0, root, every=5)

    full, losses = run(None)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "ck", crash_at=7)
    assert (tmp_path / "ck" / "step_00000005").is_dir()
    resumed, resumed_losses = run(tmp_path / "ck")
    assert torch.allclose(resumed.weight, full.weight) and resumed_losses == pytest.approx(losses)


def test_cache_builds_once(tmp_path) -> None:
    calls = []

    def build():
        calls.append(1)
        return {"w": torch.ones(2), "acc": 0.5}

    first = cached(tmp_path, "x", {"a": 1}, build)
    second = cached(tmp_path, "x", {"a": 1}, build)
    assert len(calls) == 1 and torch.equal(second["w"], first["w"]) and second["acc"] == 0.5
    cached(tmp_path, "x", {"a": 2}, build)
    assert len(calls) == 2


def test_bad_config_names_the_key() -> None:
    with pytest.raises(ValidationError, match=r"decoder\.tau"):
        RAEConfig.model_validate({"decoder": {"tau": -1}})
    with pytest.raises(ValidationError, match=r"dit_dh\.heads"):
        RAEConfig.model_validate({"dit_dh": {"width": 50}})
    with pytest.raises(ValidationError, match=r"width\.widths"):
        RAEConfig.model_validate({"width": {"widths": [10]}})
    RAEConfig.model_validate(RAEConfig.presets["smoke"])


def test_nt_xent_prefers_the_other_view_of_the_same_image() -> None:
    """Views paired with their own image's other view score lower than the same views
    paired with another image's (the positive is index i <-> i + B, as in SimCLR)."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(8, 16, generator=gen)
    b = a + 0.1 * torch.randn(8, 16, generator=gen)
    matched, shuffled = nt_xent(a, b, 0.2), nt_xent(a, b.roll(1, 0), 0.2)
    assert matched < 0.2 < shuffled  # near 0 when each view is closest to its pair
    # two images, exact closed form: positives at cos 1, negatives at cos 0 (orthogonal)
    e = torch.eye(2)
    expected = -torch.log(torch.exp(torch.tensor(5.0)) / (torch.exp(torch.tensor(5.0)) + 2))
    assert torch.isclose(nt_xent(e, e, 0.2), expected, atol=1e-6)


def test_supcon_objective_trains_the_encoder_towards_the_labels() -> None:
    """A few steps of CE + contrastive on a tiny encoder lower the loss, and every encoder
    parameter behind the patch tokens gets a gradient (the heads are not the only thing
    learning; the ViT's own classification `head` is unused by RAE)."""
    torch.manual_seed(0)
    cfg = RAEConfig(encoder={"depth": 1, "width": 16, "heads": 2}, decoder={"heads": 2})
    vit = ViT(encoder_spec(cfg.encoder.model_dump()))
    heads = SupConHeads(16, 8)
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(32, 1, 16, 16, generator=gen) * 2 - 1
    y = torch.arange(32) % 4
    x = x + y[:, None, None, None].float()  # a class signal to learn
    views = (x, x + 0.05 * torch.randn(x.shape, generator=gen))
    opt = torch.optim.Adam([*vit.parameters(), *heads.parameters()], lr=3e-3)
    losses = []
    for step in range(30):
        loss = supcon_loss(vit, heads, views, y, 1.0, 0.2)
        opt.zero_grad()
        loss.backward()
        if step == 0:
            body = [p for n, p in vit.named_parameters() if not n.startswith("head.")]
            assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in body)
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < 0.5 * losses[0]
