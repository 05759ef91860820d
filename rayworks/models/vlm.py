"""Tiny LLaVA-style vision-language models built from small configs, saved in HF format.

A model built here is a plain `transformers.LlavaForConditionalGeneration`: a CLIP vision
tower (ViT over `patch_size` patches), a two-layer GELU projector and a Llama decoder (the
same `DecoderSpec` as the text models). Its processor is a `LlavaProcessor` built locally:
a `CLIPImageProcessor` (no resize or crop: images are rendered at the tower's size, scaled
to [-1, 1]) and our char tokenizer with an `<image>` token added. The processor expands
one `<image>` in a prompt into one token per patch, whose embeddings the model replaces
by the projected patch features ("default" strategy: the CLS feature is dropped).

`save_pretrained` writes config, safetensors weights, tokenizer and processor files that
`AutoModelForImageTextToText` / `AutoProcessor` load back offline (and vLLM serves).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import Field
from transformers import (
    AutoProcessor,
    CLIPVisionConfig,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LlavaProcessor,
    PreTrainedModel,
)

from rayworks.core.config import Config
from rayworks.models.decoder import DecoderSpec, llama_config

IMAGE_TOKEN = "<image>"


class VLMSpec(Config):
    """Size of a tiny LLaVA: CLIP-style vision tower + projector + Llama decoder."""

    image_size: int = Field(32, ge=8, description="square input images, pixels")
    patch_size: int = Field(8, ge=1, description="ViT patch size (image tokens = (size/patch)^2)")
    vision_d: int = Field(32, ge=8, description="vision tower hidden size")
    vision_layers: int = Field(1, ge=1, description="vision transformer blocks")
    vision_heads: int = Field(2, ge=1, description="vision attention heads")
    text: DecoderSpec = Field(
        default_factory=lambda: DecoderSpec(d_model=64, n_layer=2, n_head=4, max_seq_len=128),
        description="the language model",
    )

    @property
    def image_tokens(self) -> int:
        return (self.image_size // self.patch_size) ** 2


def with_image_token(tokenizer: Any) -> Any:
    """`tokenizer` with the `<image>` special token added (idempotent)."""
    if IMAGE_TOKEN not in tokenizer.get_vocab():
        tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    return tokenizer


def build_processor(spec: VLMSpec, tokenizer: Any) -> LlavaProcessor:
    from transformers import CLIPImageProcessor

    size = spec.image_size
    images = CLIPImageProcessor(
        do_resize=False,
        do_center_crop=False,
        size={"shortest_edge": size},
        crop_size={"height": size, "width": size},
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
    )
    return LlavaProcessor(
        image_processor=images,
        tokenizer=with_image_token(tokenizer),
        patch_size=spec.patch_size,
        vision_feature_select_strategy="default",
        image_token=IMAGE_TOKEN,
        num_additional_image_tokens=1,
    )


def build_vlm(spec: VLMSpec, tokenizer: Any) -> tuple[PreTrainedModel, LlavaProcessor]:
    """A randomly initialised VLM of `spec`'s size and its processor (tokenizer gets <image>)."""
    if spec.image_size % spec.patch_size:
        raise ValueError(
            f"image_size={spec.image_size} is not a multiple of patch_size={spec.patch_size}"
        )
    if spec.vision_d % spec.vision_heads:
        raise ValueError(
            f"vision_d={spec.vision_d} is not divisible by vision_heads={spec.vision_heads}"
        )
    processor = build_processor(spec, tokenizer)
    tok = processor.tokenizer
    text = llama_config(spec.text, len(tok), tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)
    vision = CLIPVisionConfig(
        hidden_size=spec.vision_d,
        intermediate_size=4 * spec.vision_d,
        num_hidden_layers=spec.vision_layers,
        num_attention_heads=spec.vision_heads,
        image_size=spec.image_size,
        patch_size=spec.patch_size,
        projection_dim=spec.vision_d,
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tok.convert_tokens_to_ids(IMAGE_TOKEN),
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
        tie_word_embeddings=spec.text.tie_embeddings,
    )
    return LlavaForConditionalGeneration(config), processor


def is_multimodal(model_dir: str | Path) -> bool:
    """True when the HF folder's model config has a vision tower (a VLM)."""
    config = Path(model_dir) / "config.json"
    return config.is_file() and "vision_config" in json.loads(config.read_text())


def load_processor(model_dir: str | Path) -> Any:
    """The folder's `AutoProcessor` for a VLM, else None (a text model: use its tokenizer)."""
    if not is_multimodal(model_dir):
        return None
    return AutoProcessor.from_pretrained(str(model_dir))


def encode_multimodal(
    processor: Any, texts: list[str], images: list[np.ndarray]
) -> tuple[list[list[int]], torch.Tensor]:
    """Token ids of `<image>` + text per prompt (image tokens expanded) and pixel values."""
    if len(texts) != len(images):
        raise ValueError(f"{len(texts)} prompts but {len(images)} images")
    rows = [
        processor(text=IMAGE_TOKEN + text, images=image).input_ids[0]
        for text, image in zip(texts, images, strict=True)
    ]
    return [list(map(int, r)) for r in rows], pixel_values(processor, images)


def pixel_values(processor: Any, images: list[np.ndarray]) -> torch.Tensor:
    """(N, 3, H, W) float pixel values of uint8 (H, W, 3) images."""
    return torch.as_tensor(
        np.asarray(
            processor.image_processor(images=list(images), return_tensors="np")["pixel_values"]
        ),
    ).float()
