"""Rollout engines: `generate(prompts, n, sampling) -> [Rollout]` with per-token logprobs.

An engine holds one copy of the policy. The learner pushes new weights with
`load_weights(state_dict, version)`; versions rise strictly, and every `Rollout` carries
the version that produced it. A generate holds the engine's lock from start to end, so a
weight load issued meanwhile waits: a rollout never mixes versions.

Stored logprobs are log pi_old(o_t | s_t) of the *sampling policy*: the log-softmax of the
logits divided by the sampling temperature, because that tempered softmax is the
distribution the tokens were drawn from, and the learner scores log pi_theta the same way
(`learner.response_logits`), so the importance ratio, the clip range and the KL all refer
to the policy that acted. TRL and verl divide by the temperature in both places too.
Nucleus truncation (top_p < 1) is not part of the scored policy (as in TRL and verl): the
ratio then ignores that tokens outside the nucleus could not be drawn. A greedy rollout
(temperature 0) stores the raw (temperature 1) logprobs.

Engines: `hf` (below: transformers with a KV cache, CPU by default) and `vllm`
(`vllm_engine.py`, GPU). `make_engine_group` runs any of them as a group of Ray actors;
`rollout_group.py` places them (separate actors or colocated with the learner).

Vision-language policies (a folder with an image processor, `models/vlm.py`) take one
image per prompt: `generate(prompts, n, sampling, images)`. The engine puts the image
token in front of each prompt, the processor expands it into one token per patch, and
the first forward gets the pixel values; `prompt_ids` of a rollout hold the expanded ids.

Chat templates: a text policy whose tokenizer has a chat template gets each prompt as one
user turn of it, with the generation prompt (`encode_prompts`; off with
`chat_template=False`, i.e. `policy.chat_template=false`). The template is applied here,
in the engine, and nowhere else: examples, rewards, verifiers and sample logs keep the raw
prompt, and the learner re-scores the rollout's `prompt_ids`, the very ids generated from.
The templated text is tokenized without adding special tokens, so a template that writes
its BOS gets exactly one.
"""

from __future__ import annotations

import importlib
import math
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from pydantic import Field

from rayworks.core.config import Config
from rayworks.core.errors import RayworksError, UnknownNameError
from rayworks.models import load_causal_lm, load_tokenizer
from rayworks.models.generate import KVDecoder, prompt_ids
from rayworks.models.vlm import encode_multimodal, load_processor
from rayworks.platform.completion_engine import sample_next


class StaleWeightsError(RayworksError):
    """Weights were offered with a version not newer than the engine's."""


class SamplingConfig(Config):
    """How rollouts are sampled."""

    temperature: float = Field(1.0, ge=0, description="softmax temperature (0 = greedy)")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling mass")
    max_new_tokens: int = Field(64, ge=1, description="tokens generated per completion at most")
    seed: int | None = Field(None, ge=0, description="seed of the sampling stream (None: fresh)")


@dataclass
class Rollout:
    """One completion of one prompt.

    `completion_ids` ends with the EOS token when `finished`; its logprob is kept, since
    stopping is an action the policy learns. `text` is the decoded completion without it.
    """

    prompt_index: int
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]  # log pi_old(completion_ids[t] | prefix) at the sampling temperature
    text: str
    finished: bool  # stopped at EOS (else at max_new_tokens)
    version: int


class RolloutEngine(Protocol):
    version: int

    def generate(
        self, prompts: list[str], n: int, sampling: SamplingConfig, images: Images = None
    ) -> list[Rollout]:
        """`len(prompts) * n` rollouts; prompt i's n samples are contiguous, in order.

        `images`: one uint8 (H, W, 3) array per prompt, for a vision-language policy."""
        ...

    def load_weights(
        self, state_dict: dict[str, torch.Tensor], version: int, rollback: bool = False
    ) -> None:
        """Replace the policy's weights; `version` must exceed the current one unless
        `rollback` (a learner resuming from a checkpoint sets its own, older version)."""
        ...


Images = list[np.ndarray] | None
ENGINES: dict[str, type] = {}
ENGINE_MODULES = ("rayworks.platform.vllm_engine",)  # imported for their decorators


def register_engine(name: str) -> Callable[[type], type]:
    def decorate(cls: type) -> type:
        if name in ENGINES and ENGINES[name] is not cls:
            raise ValueError(f"rollout engine {name!r} is registered twice")
        ENGINES[name] = cls
        return cls

    return decorate


def get_engine(name: str) -> type:
    for module in ENGINE_MODULES:
        importlib.import_module(module)  # cheap: engines import their backends lazily
    if name not in ENGINES:
        raise UnknownNameError("rollout engine", name, list(ENGINES))
    return ENGINES[name]


def check_version(current: int, offered: int) -> None:
    if offered <= current:
        raise StaleWeightsError(
            f"weights of version {offered} offered to an engine at version {current}; "
            "versions must increase strictly (a stale or repeated sync is refused)."
        )


def uses_chat_template(tok: Any, wanted: bool) -> bool:
    """Whether prompts are wrapped: asked for (`policy.chat_template`) and the tokenizer has
    a template."""
    return wanted and bool(getattr(tok, "chat_template", None))


def encode_prompts(
    tok: Any, prompts: list[str], context: int, max_new: int, chat: bool = False
) -> list[list[int]]:
    """Token ids per prompt (`models.generate.prompt_ids`, as one chat turn when `chat`);
    error if a prompt is empty without a BOS token or cannot fit."""
    rows = []
    for prompt in prompts:
        ids = prompt_ids(tok, prompt, chat)
        if not ids:
            raise RayworksError(f"prompt {len(rows)} is empty and the tokenizer has no BOS token.")
        rows.append(ids)
    return check_fits_context(rows, context, max_new)


def check_fits_context(rows: list[list[int]], context: int, max_new: int) -> list[list[int]]:
    for i, ids in enumerate(rows):
        if len(ids) + max_new > context:
            raise RayworksError(
                f"prompt {i} has {len(ids)} tokens; with max_new_tokens={max_new} it exceeds "
                f"the model's context of {context} tokens. Shorten it or lower max_new_tokens."
            )
    return rows


@register_engine("hf")
class HFEngine:
    """A transformers causal LM sampled by a batched KV-cache loop (CPU by default)."""

    def __init__(
        self,
        model_dir: str | Path,
        device: str = "cpu",
        threads: int = 1,
        chat_template: bool = True,
    ) -> None:
        torch.set_num_threads(threads)  # 2 torch threads on 2 busy cores stall (80 ms -> seconds)
        model = load_causal_lm(model_dir).to(torch.device(device)).eval()
        processor = load_processor(model_dir)  # None for a text-only policy
        tok = processor.tokenizer if processor else load_tokenizer(model_dir)
        self._attach(model, tok, processor, chat_template)

    @classmethod
    def wrap(
        cls, model: torch.nn.Module, tok: Any, processor: Any, chat_template: bool = True
    ) -> HFEngine:
        """An engine around a model already loaded (the colocated placement hands it the
        learner's module: generation switches it to eval mode and back)."""
        engine = cls.__new__(cls)
        engine._attach(model, tok, processor, chat_template)
        return engine

    def _attach(self, model: torch.nn.Module, tok: Any, processor: Any, chat: bool) -> None:
        self.model, self.tok, self.processor = model, tok, processor
        self.device = next(model.parameters()).device
        self.chat = processor is None and uses_chat_template(tok, chat)
        config = self.model.config
        text_config = getattr(config, "text_config", None) or config
        self.context = int(getattr(text_config, "max_position_embeddings", 2048))
        self.pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else 0
        extra = getattr(self.model.generation_config, "eos_token_id", None)  # int or list
        ids = [self.tok.eos_token_id, *(extra if isinstance(extra, list) else [extra])]
        self.eos = torch.tensor(sorted({i for i in ids if i is not None}), device=self.device)
        # a VLM never samples its image placeholder: a response holding one could not be
        # re-scored (the learner's forward would look for an image behind it)
        self.banned = getattr(config, "image_token_index", None)
        self.version = 0
        self.born = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._lock = threading.Lock()

    def get_version(self) -> int:  # Ray actors expose methods, not attributes
        return self.version

    def incarnation(self) -> str:
        """Which process answers (a restarted actor answers with a new one)."""
        return self.born

    def load_weights(
        self, state_dict: dict[str, torch.Tensor], version: int, rollback: bool = False
    ) -> None:
        with self._lock:  # waits for a generate in progress
            if not rollback:
                check_version(self.version, version)
            missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
            own = self.model.state_dict()
            loaded = {own[k].data_ptr() for k in state_dict if k in own}
            missing = [k for k in missing if own[k].data_ptr() not in loaded]  # tied: fine
            if missing or unexpected:
                raise RayworksError(
                    f"weights of version {version} do not match the model: missing "
                    f"{missing[:5]}, unexpected {unexpected[:5]}."
                )
            self.version = version

    def encode(
        self, prompts: list[str], images: Images, max_new: int
    ) -> tuple[list[list[int]], torch.Tensor | None]:
        """Prompt token ids (and pixel values of a VLM's images)."""
        if (images is None) != (self.processor is None):
            kind = "a vision-language" if self.processor else "a text-only"
            raise RayworksError(
                f"{kind} policy got {'no' if images is None else len(images)} images: "
                "pass one image per prompt to a VLM and none to a text model."
            )
        if images is None:
            return encode_prompts(self.tok, prompts, self.context, max_new, self.chat), None
        rows, pixels = encode_multimodal(self.processor, prompts, images)
        return check_fits_context(rows, self.context, max_new), pixels

    def generate(
        self, prompts: list[str], n: int, sampling: SamplingConfig, images: Images = None
    ) -> list[Rollout]:
        with self._lock:
            version = self.version
            encoded, pixels = self.encode(prompts, images, sampling.max_new_tokens)
            batch = [ids for ids in encoded for _ in range(n)]
            if pixels is not None:
                pixels = pixels.repeat_interleave(n, dim=0).to(self.device)
            training = self.model.training  # a colocated engine shares the learner's module
            self.model.eval()
            try:
                tokens, logprobs, lengths = self._sample(batch, sampling, pixels)
            finally:
                self.model.train(training)
        out = []
        for row, ids in enumerate(batch):
            k = int(lengths[row])
            done = k < tokens.shape[1] or bool(torch.isin(tokens[row, k - 1], self.eos))
            completion = tokens[row, :k].tolist()
            text = self.tok.decode(completion, skip_special_tokens=True)
            out.append(
                Rollout(row // n, ids, completion, logprobs[row, :k].tolist(), text, done, version)
            )
        return out

    @torch.no_grad()
    def _sample(
        self, rows: list[list[int]], sampling: SamplingConfig, pixels: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Left-padded batched decoding: (tokens, logprobs) of shape (B, T) and lengths (B,).

        Each row's length counts its tokens up to and including its first EOS. A VLM's
        pixel values go into the first (prefill) forward only.
        """
        dev = self.device
        gen = torch.Generator(device=dev)
        if sampling.seed is None:
            gen.seed()
        else:
            gen.manual_seed(sampling.seed)
        alive = torch.ones(len(rows), dtype=torch.bool, device=dev)
        lengths = torch.zeros(len(rows), dtype=torch.long, device=dev)
        tokens, logprobs = [], []
        scale = sampling.temperature or 1.0  # the scored policy: logits / temperature
        extra = {"pixel_values": pixels} if pixels is not None else {}
        decoder = KVDecoder(self.model, rows, self.pad, dev, extra)
        for i in range(sampling.max_new_tokens):
            if i:
                decoder.step(tokens[-1])
            logits = decoder.logits.float()  # (B, V)
            allowed = logits
            if self.banned is not None:
                allowed = logits.index_fill(-1, torch.tensor([self.banned], device=dev), -math.inf)
            nxt = sample_next(allowed, sampling.temperature, sampling.top_p, gen)
            logp = torch.log_softmax(logits / scale, -1).gather(-1, nxt[:, None]).squeeze(-1)
            tokens.append(nxt)
            logprobs.append(logp)
            lengths += alive
            alive &= ~torch.isin(nxt, self.eos)
            if not alive.any():
                break
        return torch.stack(tokens, 1).cpu(), torch.stack(logprobs, 1).cpu(), lengths.cpu()


# --- Ray actor group ---------------------------------------------------------------------


def make_engine_group(
    name: str,
    model_dir: str | Path,
    num_engines: int,
    resources: dict[str, float] | None = None,
    max_restarts: int = 0,
    run_id: str | None = None,
    **engine_kwargs: Any,
) -> list[Any]:
    """`num_engines` Ray actors of engine `name`, each with `resources` (default 1 CPU);
    Ray restarts a dead one up to `max_restarts` times (`rollout_group.EngineGroup`
    reloads its weights). With a `run_id` they are named (`engine_actor_name`, namespace
    `rayworks`) so operators and tests can find them."""
    import ray

    res = dict(resources or {"CPU": 1})
    options = {
        "num_cpus": res.pop("CPU", 1),
        "num_gpus": res.pop("GPU", 0),
        "resources": res,
        "max_restarts": max_restarts,
        # reserve their own resources, outside a Tune trial's placement group
        "scheduling_strategy": "DEFAULT",
    }
    actor = ray.remote(get_engine(name))
    return [
        actor.options(
            **options,
            **({"name": engine_actor_name(run_id, i), "namespace": "rayworks"} if run_id else {}),
        ).remote(str(model_dir), **engine_kwargs)
        for i in range(num_engines)
    ]


def engine_actor_name(run_id: str, index: int) -> str:
    return f"rollout-{run_id}-{index}"
