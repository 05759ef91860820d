"""The `vllm` rollout engine: `vllm.LLM` on our HF-format checkpoint, weights updated in place.

GPU only; vLLM is imported when the engine is built, never at module import, so the
registry (and CPU CI) works without it. Written against vLLM's documented offline API:

- `LLM(model=dir, worker_extension_cls=...)` and `LLM.collective_rpc(method, args=...)`,
  the route of vLLM's own RLHF examples for reaching the model inside each worker;
  the worker then calls the model's `load_weights(iterable of (HF name, tensor))`, which
  maps HF names onto vLLM's fused layers (q/k/v -> qkv_proj).
- `SamplingParams(n, temperature, top_p, max_tokens, seed, logprobs=0)`: logprobs of the
  sampled tokens. With `logprobs_mode="processed_logprobs"` they come from the logits after
  temperature scaling, the policy the `hf` engine and the learner score (rollout.py); vLLM
  also applies the top-p mask there, so at top_p < 1 its logprobs are the nucleus's
  renormalised ones while the learner's are not (keep top_p = 1 for exact ratios).
- Prompts go in as token ids encoded by our tokenizer (chat template included, as in the
  `hf` engine), so both engines see the same ids.
  A vision-language policy's prompts go in as `<image>` + text with the image in
  `multi_modal_data`; vLLM's LLaVA processor expands the image token, and each output's
  `prompt_token_ids` (the expanded ids) become the rollout's prompt ids.

Uncertain (not run in CI): the tensor transport of `collective_rpc` (fine for small
models; large ones want CUDA IPC or NCCL as in vLLM's RLHF examples), and, for a VLM,
whether vLLM's LLaVA `load_weights` maps transformers 5's parameter names
(`model.language_model.*`) as it does the hub checkpoints' names.
"""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path
from typing import Any

import torch

from rayworks.core.errors import RayworksError
from rayworks.models import load_tokenizer
from rayworks.models.vlm import IMAGE_TOKEN
from rayworks.platform.rollout import (
    Images,
    Rollout,
    SamplingConfig,
    check_version,
    encode_prompts,
    register_engine,
    uses_chat_template,
)

EXTENSION = f"{__name__}.WeightLoaderExtension"


def import_vllm() -> Any:
    try:
        import vllm
    except ImportError as err:
        raise RayworksError(
            f"the 'vllm' rollout engine needs vLLM, which is not installed ({err}). "
            'Install it on a CUDA machine with `pip install -e ".[gpu]"`, or use the '
            "'hf' engine (CPU or GPU)."
        ) from err
    return vllm


class WeightLoaderExtension:
    """Mixed into each vLLM worker (`worker_extension_cls`): load weights in place."""

    def rayworks_load_weights(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        self.model_runner.model.load_weights(weights=weights)  # type: ignore[attr-defined]


@register_engine("vllm")
class VLLMEngine:
    """`vllm.LLM` holding the policy; one engine per GPU (tensor parallel size 1)."""

    def __init__(
        self,
        model_dir: str | Path,
        dtype: str = "bfloat16",
        gpu_memory_utilization: float = 0.5,
        chat_template: bool = True,
        **llm_kwargs: Any,
    ) -> None:
        vllm = import_vllm()
        self._vllm = vllm
        self.llm = vllm.LLM(
            model=str(model_dir),
            dtype=dtype,
            enforce_eager=True,  # no CUDA graphs: faster start, weights swap freely
            gpu_memory_utilization=gpu_memory_utilization,
            worker_extension_cls=EXTENSION,
            logprobs_mode="processed_logprobs",
            **llm_kwargs,
        )
        self.tok = load_tokenizer(model_dir)
        self.chat = uses_chat_template(self.tok, chat_template)  # as the hf engine (rollout.py)
        self.context = int(self.llm.llm_engine.model_config.max_model_len)
        self.version = 0
        self.born = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._lock = threading.Lock()

    def get_version(self) -> int:
        return self.version

    def incarnation(self) -> str:
        """Which process answers (a restarted actor answers with a new one)."""
        return self.born

    def load_weights(
        self, state_dict: dict[str, torch.Tensor], version: int, rollback: bool = False
    ) -> None:
        with self._lock:
            if not rollback:
                check_version(self.version, version)
            weights = [(k, v.detach().cpu()) for k, v in state_dict.items()]
            self.llm.collective_rpc("rayworks_load_weights", args=(weights,))
            self.llm.reset_prefix_cache()  # cached KV of old weights must not be reused
            self.version = version

    def requests(self, prompts: list[str], images: Images, max_new: int) -> list[dict[str, Any]]:
        """Token prompts; a VLM's are text with the image token plus the image, which vLLM's
        own LLaVA processor expands (the expanded ids come back in each output)."""
        if images is None:
            encoded = encode_prompts(self.tok, prompts, self.context, max_new, self.chat)
            return [{"prompt_token_ids": ids} for ids in encoded]
        from PIL import Image

        return [
            {"prompt": IMAGE_TOKEN + text, "multi_modal_data": {"image": Image.fromarray(image)}}
            for text, image in zip(prompts, images, strict=True)
        ]

    def generate(
        self, prompts: list[str], n: int, sampling: SamplingConfig, images: Images = None
    ) -> list[Rollout]:
        with self._lock:
            version = self.version
            requests = self.requests(prompts, images, sampling.max_new_tokens)
            params = self._vllm.SamplingParams(
                n=n,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_new_tokens,
                seed=sampling.seed,
                logprobs=0,  # the sampled token's logprob only
                bad_words=[IMAGE_TOKEN] if images is not None else None,  # as the hf engine
            )
            outputs = self.llm.generate(requests, params, use_tqdm=False)
        rollouts = []
        for i, request in enumerate(outputs):
            ids = list(request.prompt_token_ids)
            for choice in request.outputs:
                tokens = list(choice.token_ids)
                logprobs = [
                    step[t].logprob for t, step in zip(tokens, choice.logprobs, strict=True)
                ]
                rollouts.append(
                    Rollout(
                        i,
                        ids,
                        tokens,
                        logprobs,
                        choice.text,
                        choice.finish_reason == "stop",
                        version,
                    )
                )
        return rollouts
