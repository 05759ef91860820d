"""Base models: a given policy folder is used as is; critics share its tokenizer; caching."""

from __future__ import annotations

from pathlib import Path

import torch

from rayworks.core.config import build_config
from rayworks.models import DecoderSpec, load_tokenizer
from rayworks.pipelines.rl.base import base_models, cache_key, sft_config
from rayworks.pipelines.rl.config import PPOConfig, SFTConfig


def test_given_policy_and_random_critic_backbone_are_built_once(tmp_path: Path, tiny_lm):
    policy = tiny_lm(d_model=16, n_layer=1)
    tok = load_tokenizer(policy)
    cfg = build_config(
        PPOConfig, "smoke", (), [f"policy.init_from={policy}", "critic.pretrained=false"]
    )
    got_policy, critic = base_models(cfg, tmp_path / "cache")
    assert got_policy == policy
    assert load_tokenizer(critic).get_vocab() == tok.get_vocab()  # token ids line up
    weights = (critic / "model.safetensors").read_bytes()
    torch.manual_seed(123)  # a second call reuses the cached backbone, whatever the RNG
    assert base_models(cfg, tmp_path / "cache")[1] == critic
    assert (critic / "model.safetensors").read_bytes() == weights


def test_sft_config_trains_on_completions_and_keys_follow_the_config():
    small = DecoderSpec(d_model=32, n_layer=1, n_head=2, max_seq_len=64)
    cfg = sft_config("countdown", small, SFTConfig(steps=10, seq_len=112), max_new_tokens=40)
    assert cfg.data.loss_on == "completion" and not cfg.data.packing
    assert cfg.data.task == "countdown" and cfg.data.seq_len == 64  # capped by the model
    other = sft_config("countdown", small, SFTConfig(steps=11), max_new_tokens=40)
    assert cache_key("policy", cfg) != cache_key("policy", other)
    assert cache_key("policy", cfg) == cache_key("policy", cfg.model_copy())


def test_a_symmetric_critic_is_built_at_the_policys_size(tmp_path, monkeypatch):
    from rayworks.core.config import build_config
    from rayworks.pipelines.rl import base
    from rayworks.pipelines.rl.config import PPOConfig

    built = []
    monkeypatch.setattr(
        base,
        "build_base",
        lambda cache, name, cfg, **kw: built.append((name, cfg.model)) or tmp_path / name,
    )
    cfg = build_config(PPOConfig, "smoke", (), ["critic.symmetric=true"])
    base.base_models(cfg, tmp_path)
    assert dict(built)["critic"] == cfg.policy.model != cfg.critic.model
