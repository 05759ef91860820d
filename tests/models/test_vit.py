"""The tiny ViT: shapes, per-layer widths, MAC count, safetensors round trip, cached pretraining."""

from __future__ import annotations

import json

import pytest
import torch

from rayworks.core.config import build_config
from rayworks.core.errors import CheckpointNotFoundError, ConfigError
from rayworks.data.digits import DigitsConfig
from rayworks.models.vit import ViT, ViTSpec, load_vit, n_params, save_vit, vit_macs
from rayworks.models.vit_train import ClassifierTrainConfig, load_pretrained, pretrained_vit


def test_patches_are_row_major_and_logits_come_from_the_class_token() -> None:
    model = ViT(ViTSpec(image_size=4, patch_size=2, d_model=8, n_head=2, n_layer=1, ffn_dim=8))
    img = torch.arange(16.0).view(1, 1, 4, 4)
    assert model.patches(img)[0].tolist() == [
        [0, 1, 4, 5],
        [2, 3, 6, 7],
        [8, 9, 12, 13],
        [10, 11, 14, 15],
    ]
    assert model(torch.rand(3, 1, 4, 4)).shape == (3, 10)


def test_pruned_widths_shrink_params_and_macs_consistently() -> None:
    base = ViTSpec(d_model=32, n_layer=2, n_head=4, ffn_dim=64)
    pruned = base.model_copy(update={"ffn_dims": [16, 8], "qk_dims": [4, 2], "vo_dims": [8, 3]})
    big, small = ViT(base), ViT(pruned)
    assert small.blocks[1].fc1.out_features == 8 and small.blocks[1].attn.q.out_features == 8
    assert small.blocks[0].attn.scale == big.blocks[0].attn.scale == 8**-0.5
    assert n_params(small) < n_params(big) and vit_macs(pruned) < vit_macs(base)
    # one FFN neuron less in layer 0 saves exactly 17 tokens x 2 x d_model MACs
    fewer = pruned.model_copy(update={"ffn_dims": [15, 8]})
    assert vit_macs(pruned) - vit_macs(fewer) == 17 * 2 * 32
    with pytest.raises(ConfigError, match="ffn_dims"):
        build_config(ViTSpec, None, (), ["n_layer=2", "ffn_dims=[4]"])


def test_save_load_round_trip_and_bad_folder(tmp_path) -> None:
    model = ViT(ViTSpec(d_model=16, n_layer=1, n_head=2, ffn_dim=8, vo_dims=[3])).eval()
    save_vit(model, tmp_path / "m")
    again = load_vit(tmp_path / "m").eval()
    x = torch.rand(2, 1, 16, 16)
    assert torch.equal(model(x), again(x)) and again.spec.vo_dims == [3]
    with pytest.raises(CheckpointNotFoundError, match="no ViT"):
        load_vit(tmp_path / "missing")
    (tmp_path / "m" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(CheckpointNotFoundError, match="not a rayworks ViT"):
        load_vit(tmp_path / "m")


def test_pretraining_is_cached_and_learns(tmp_path) -> None:
    spec = ViTSpec(d_model=16, n_layer=1, n_head=2, ffn_dim=32, n_classes=3)
    train = ClassifierTrainConfig(epochs=4, lr=3e-3, threads=1)
    data = DigitsConfig(noise_std=0, max_shift=0, eval_noise_std=0)
    folder = pretrained_vit(tmp_path, spec, train, data, classes=(0, 1, 2))
    _, metrics = load_pretrained(folder)
    assert metrics["val_accuracy"] > 0.6 and metrics["classes"] == [0, 1, 2]  # chance is 1/3
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert pretrained_vit(tmp_path, spec, train, data, classes=(0, 1, 2)) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp  # reused, not retrained
    with pytest.raises(ValueError, match="n_classes=3"):
        pretrained_vit(tmp_path, spec, train, data, classes=(0, 1))
