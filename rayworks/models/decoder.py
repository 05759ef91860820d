"""Tiny Llama-style decoder LMs built from small configs, saved in HF format.

A model built here is a plain `transformers.LlamaForCausalLM`: `save_pretrained` writes
`config.json` + `model.safetensors`, which transformers, vLLM and DeepSpeed all load.
`load_causal_lm` takes any local HF directory, ours or a real downloaded checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
)

from rayworks.core import checkpoint as ckpt
from rayworks.core.config import Config
from rayworks.core.errors import CheckpointNotFoundError


class DecoderSpec(Config):
    """Size of a tiny Llama decoder (a few 100k to a few M parameters by default)."""

    d_model: int = Field(128, ge=8, description="hidden size")
    n_layer: int = Field(4, ge=1, le=64, description="transformer blocks")
    n_head: int = Field(4, ge=1, description="attention heads (must divide d_model)")
    n_kv_head: int | None = Field(None, ge=1, description="KV heads for GQA (None = n_head)")
    ffn_mult: float = Field(2.75, gt=0, description="intermediate size / d_model (SwiGLU)")
    max_seq_len: int = Field(256, ge=8, description="RoPE positions available")
    rope_theta: float = Field(10000.0, gt=0, description="RoPE base")
    tie_embeddings: bool = Field(True, description="share input and output embeddings")
    init_from: str | None = Field(
        None, description="local HF model directory to start from instead of random init"
    )


def llama_config(spec: DecoderSpec, vocab_size: int, bos: int, eos: int, pad: int) -> LlamaConfig:
    if spec.d_model % spec.n_head:
        raise ValueError(f"d_model={spec.d_model} is not divisible by n_head={spec.n_head}")
    intermediate = round(spec.d_model * spec.ffn_mult / 8) * 8
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=spec.d_model,
        intermediate_size=max(8, intermediate),
        num_hidden_layers=spec.n_layer,
        num_attention_heads=spec.n_head,
        num_key_value_heads=spec.n_kv_head or spec.n_head,
        max_position_embeddings=spec.max_seq_len,
        rope_theta=spec.rope_theta,
        tie_word_embeddings=spec.tie_embeddings,
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=pad,
    )


def build_decoder(
    spec: DecoderSpec, vocab_size: int, bos: int = 1, eos: int = 2, pad: int = 0
) -> PreTrainedModel:
    """A randomly initialised decoder of `spec`'s size, or `spec.init_from` if set."""
    if spec.init_from:
        return load_causal_lm(spec.init_from)
    return LlamaForCausalLM(llama_config(spec, vocab_size, bos, eos, pad))


def decoder_for(spec: DecoderSpec, tokenizer: Any) -> PreTrainedModel:
    """`build_decoder` sized to `tokenizer`'s vocabulary and special-token ids."""
    return build_decoder(
        spec, len(tokenizer), tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id
    )


def resolve_model_dir(path: str | Path) -> Path:
    """The HF model folder behind `path`: a model folder, a checkpoint or a run directory.

    A run directory resolves to `artifacts/model` when the run finished, else to its latest
    checkpoint; a folder holding `config.json` is taken as is.
    """
    path = Path(path)
    if (path / "config.json").is_file():
        return path
    final = path / "artifacts" / "model"
    if (final / "config.json").is_file():
        return final
    latest = ckpt.latest_checkpoint(path / "checkpoints")
    if latest is not None and (latest / "config.json").is_file():
        return latest
    raise CheckpointNotFoundError(
        f"no model found at {str(path)!r}: expected a folder with config.json (a HF model or "
        f"a checkpoints/step_* folder) or a run directory with artifacts/model or checkpoints."
    )


def load_causal_lm(path: str | Path) -> PreTrainedModel:
    """A local HF folder's generative model, safetensors only.

    Text models load with `AutoModelForCausalLM`; a vision-language model (its config has a
    `vision_config`, e.g. our tiny LLaVA) with `AutoModelForImageTextToText`.
    """
    model_dir = str(resolve_model_dir(path))
    multimodal = getattr(AutoConfig.from_pretrained(model_dir), "vision_config", None) is not None
    auto = AutoModelForImageTextToText if multimodal else AutoModelForCausalLM
    return auto.from_pretrained(model_dir, use_safetensors=True)


def n_params(model: PreTrainedModel) -> int:
    return sum(p.numel() for p in model.parameters())
