"""Configs (presets load, bad values name their key) and the LM q/k/v capture."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rayworks.core.config import build_config
from rayworks.core.errors import ConfigError
from rayworks.pipelines.attnrow.config import AttnRowConfig
from rayworks.pipelines.attnrow.inputs import capture_qkv
from rayworks.platform.registry import get_pipeline


@pytest.mark.parametrize("name", ["attnrow", "attnrow_uniform", "attnrow_performer"])
def test_presets_load(name: str) -> None:
    cls = get_pipeline(name).config
    for preset in (None, *cls.presets):
        cfg = build_config(cls, preset, (), [])
        assert cfg.headline_multiple in cfg.landmark_multiples
    performer = build_config(get_pipeline("attnrow_performer").config, "smoke", (), [])
    assert (performer.method, performer.compare) == ("performer", [])
    assert get_pipeline("attnrow").baselines == ("attnrow_uniform", "attnrow_performer")


@pytest.mark.parametrize(
    ("override", "names"),
    [
        (["headline_multiple=3"], "headline_multiple=3"),
        (["lambda_rel=0"], "lambda_rel"),
        (["n_grid=[512]"], "n_grid"),
        (["compare=[analogue]"], "compare"),
        (["method=flash"], "method"),
        (["lm_input.layer=9"], r"lm_input\.layer=9"),
        (["spectrum_n=100000"], "spectrum_n=100000"),
        (["rls.oversample=-1"], "oversample"),
        (["imbalanced.cluster_decay=0"], "cluster_decay"),
        (["imbalanced.cluster_decay=1.5"], "cluster_decay"),
        (["sublinear.exponents=[]"], r"sublinear\.exponents"),
        (["sublinear.n_grid=[0, 64]"], r"sublinear\.n_grid"),
        (["landmark_draws=0"], "landmark_draws"),
        (["estimator=both"], "estimator"),
    ],
)
def test_errors_name_the_bad_key(override: list[str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        build_config(AttnRowConfig, "smoke", (), override)


def test_capture_matches_the_projections(tiny_llama) -> None:
    ids = torch.randint(0, 40, (2, 6), generator=torch.Generator().manual_seed(0))
    q, k, v = capture_qkv(tiny_llama, ids, layer=1, head=2)
    assert q.shape == k.shape == v.shape == (12, 8) and q.dtype == np.float64
    with torch.no_grad():
        hidden = tiny_llama(input_ids=ids, output_hidden_states=True).hidden_states[1]
        layer = tiny_llama.model.layers[1]
        x = layer.input_layernorm(hidden)
        ref = layer.self_attn.k_proj(x)[..., 16:24].reshape(-1, 8)
    assert np.allclose(k, ref.double().numpy(), atol=1e-5)
