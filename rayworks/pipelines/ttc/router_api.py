"""HTTP surface of the test-time-compute router: server settings, request bodies, replies.

Pure pydantic and dict building (no Ray, no FastAPI app) so that the CLI can validate the
settings before Ray starts and tests can check the shapes without a server.

A request body is OpenAI's (`/v1/completions`, `/v1/chat/completions`) plus an optional
`ttc` object; `/v1/batch/completions` takes `prompts: [...]` instead of `prompt`:

    {"prompt": "Q: 12+3=\\n", "max_tokens": 48,
     "ttc": {"budget": 8, "max_samples": 16, "aggregate": "majority",
             "allocator": {"rule": "elimination", "k": 1, "stop": "consistency"}}}

`ttc.allocator` holds `AllocatorConfig` fields laid over the server's default allocator;
an unknown key is a 400 naming `ttc.allocator.<key>`. The per-request limits of
`rayworks serve model` (`serve_limits.ServeLimits`) apply where they fit (`ROUTER_LIMITS`),
with the same flags, defaults and 400/413/408 answers naming the flag.
"""

from __future__ import annotations

import math
import re
import time
import uuid
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rayworks.core.config import Config
from rayworks.core.errors import RayworksError
from rayworks.pipelines.ttc.allocators import AllocatorConfig
from rayworks.platform.chat_prompt import chat_prompt_text
from rayworks.platform.openai_api import APIError
from rayworks.platform.openai_schema import SCHEMA_MAX, Body, ChatMessage
from rayworks.platform.plugins import import_callable
from rayworks.platform.serve_limits import ServeLimits

MAX_PROMPTS = 64  # prompts per request: bounds what one request can put in a window
# the ServeLimits the router applies; n is always 1 here and logprobs are not returned
ROUTER_LIMITS = (
    "max_prompt_tokens",
    "max_new_tokens",
    "max_stop",
    "max_stop_chars",
    "max_messages",
    "max_chat_chars",
    "max_body_bytes",
    "request_timeout_s",
)
Aggregate = Literal["majority", "best_score"]
Oracle = Callable[[str, str], float]


class RouterSettings(Config):
    """Server-side defaults and limits of the router (`rayworks serve ttc` flags)."""

    allocator: AllocatorConfig = Field(
        default_factory=lambda: AllocatorConfig(stop="consistency"),
        description="default allocation rule; requests override fields in ttc.allocator",
    )
    budget: int = Field(8, ge=1, description="default samples (or tokens) per prompt")
    max_budget: int = Field(64, ge=1, description="largest per-prompt budget a request may ask")
    cap_factor: float = Field(
        2.0,
        ge=1,
        description="default max_samples = ceil(cap_factor x budget): how far one prompt may "
        "borrow budget that other prompts of its window left unused (1 = never)",
    )
    aggregate: Aggregate | None = Field(
        None, description="default answer choice; None: best_score with an oracle, else majority"
    )
    answer_pattern: str = Field(
        r"A:\s*(\S+)", description="regex whose group 1 (or match) is a sample's final answer"
    )
    oracle: str | None = Field(
        None, description="module:function(prompt, completion) -> score in [0, 1], trusted code"
    )
    window_ms: float = Field(20.0, ge=0, description="requests arriving this close share one run")
    max_window_prompts: int = Field(64, ge=1, description="a window closes early at this size")
    rows_per_call: int = Field(16, ge=1, le=64, description="samples per model-deployment call")
    model_retries: int = Field(3, ge=0, description="retries of a call whose replica died")
    model_timeout_s: float = Field(120.0, gt=0, description="one model call's deadline")
    limits: ServeLimits = Field(
        default_factory=ServeLimits,
        description="per-request limits (ROUTER_LIMITS of them; also each model call's)",
    )

    @field_validator("answer_pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as err:
            raise ValueError(f"not a regular expression: {err}") from err
        return value

    @field_validator("oracle")
    @classmethod
    def _importable(cls, value: str | None) -> str | None:
        if value is not None:
            load_oracle(value)
        return value

    def default_aggregate(self) -> Aggregate:
        return self.aggregate or ("best_score" if self.oracle else "majority")


def load_oracle(spec: str) -> Oracle:
    """Import `module:function` by name. Oracles are code the operator installed, imported
    like any module: never unpickled from a request or a file. A bad name is a ValueError,
    so the settings validator reports it against the `oracle` field."""
    try:
        return import_callable(spec, "oracle")
    except RayworksError as err:
        raise ValueError(str(err)) from None


def extract_answer(text: str, pattern: re.Pattern[str]) -> str | None:
    """A sample's final answer: the pattern's last match (group 1 if it has one), else the
    stripped text; None (a malformed sample, which never wins a vote) if that is empty."""
    found = list(pattern.finditer(text))
    if found:
        last = found[-1]
        return last.group(1) if pattern.groups else last.group(0)
    return text.strip() or None


class TTCOptions(BaseModel):
    """The per-request `ttc` object; every field defaults to the server's setting."""

    model_config = ConfigDict(extra="forbid")
    budget: int | None = Field(None, ge=1, description="samples (or tokens) per prompt")
    max_samples: int | None = Field(None, ge=1, description="most samples one prompt may take")
    aggregate: Aggregate | None = None
    allocator: dict[str, Any] | None = None


class RouterFields(Body):
    """Sampling fields shared by the three routes (OpenAI names). A field not declared
    here is a 400 naming it, as on the model endpoint (`openai_schema.Body`; sent as null,
    it is dropped): silence would let a client believe it was honoured."""

    model: str | None = None
    seed: int | None = Field(None, description="accepted and not honoured: docs/ttc_serve.md")
    max_tokens: int = Field(16, ge=1)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    n: int = Field(1, ge=1)
    stop: str | Annotated[list[str], Field(max_length=SCHEMA_MAX)] | None = None
    stream: bool = False
    echo: bool = False
    ttc: TTCOptions | None = None

    def stops(self) -> tuple[str, ...]:
        return (
            (self.stop,) if isinstance(self.stop, str) else tuple(s for s in self.stop or [] if s)
        )

    def measures(self) -> list[tuple[str, int, str, str]]:
        """(what, value, ServeLimits field, param) checked against `--max-*` flags, as the
        model endpoint's `openai_schema.SamplingFields.measures`."""
        stop = self.stops()
        return [
            ("max_tokens", self.max_tokens, "max_new_tokens", "max_tokens"),
            ("the number of stop strings", len(stop), "max_stop", "stop"),
            *[
                (f"stop string {i}'s length", len(s), "max_stop_chars", "stop")
                for i, s in enumerate(stop)
            ],
        ]


Prompts = str | Annotated[list[str], Field(min_length=1, max_length=MAX_PROMPTS)]


class CompletionBody(RouterFields):
    prompt: Prompts


class BatchBody(RouterFields):
    prompts: Annotated[list[str], Field(min_length=1, max_length=MAX_PROMPTS)]


class ChatBody(RouterFields):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: int | None = Field(None, ge=1)

    def measures(self) -> list[tuple[str, int, str, str]]:
        chars = sum(len(m.content) for m in self.messages)
        tokens, *rest = super().measures()
        if self.max_completion_tokens is not None:
            tokens = (
                "max_completion_tokens",
                self.max_completion_tokens,
                "max_new_tokens",
                "max_completion_tokens",
            )
        return [
            tokens,
            *rest,
            ("the number of messages", len(self.messages), "max_messages", "messages"),
            ("the characters of all messages", chars, "max_chat_chars", "messages"),
        ]


def resolve_ttc(
    body: RouterFields, settings: RouterSettings, has_oracle: bool
) -> tuple[AllocatorConfig, int, int, Aggregate]:
    """(allocator config, budget, max_samples, aggregate) of one request, or a 400 naming
    the `ttc` field at fault. Also rejects what the router cannot do (n > 1, stream)."""
    if body.n != 1:
        raise APIError(
            400,
            "the router returns one aggregated completion per prompt, so n "
            "must be 1; ask for more samples with ttc.budget",
            param="n",
        )
    if body.stream:
        raise APIError(
            400,
            "stream is not supported: the answer is chosen after all samples are drawn",
            param="stream",
        )
    opts = body.ttc or TTCOptions()
    merged = {**settings.allocator.model_dump(), **(opts.allocator or {})}
    try:
        cfg = AllocatorConfig.model_validate(merged)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        param = f"ttc.allocator.{loc}" if loc else "ttc.allocator"
        raise APIError(
            400, f"invalid value for '{param}': {first['msg']}", param=param, code="invalid_value"
        ) from None
    if cfg.stop == "oracle" and not has_oracle:
        raise APIError(
            400,
            "ttc.allocator.stop='oracle' needs a server started with --oracle; "
            "use stop='consistency'",
            param="ttc.allocator.stop",
        )
    if cfg.unit == "tokens" and cfg.max_sample_tokens < body.max_tokens:
        raise APIError(
            400,
            f"with unit='tokens', max_sample_tokens={cfg.max_sample_tokens} "
            f"must be >= max_tokens={body.max_tokens} so the budget holds",
            param="ttc.allocator.max_sample_tokens",
        )
    budget = opts.budget or settings.budget
    if budget > settings.max_budget:
        raise APIError(
            400,
            f"ttc.budget={budget} exceeds this server's max_budget={settings.max_budget}",
            param="ttc.budget",
        )
    per_sample = cfg.max_sample_tokens if cfg.unit == "tokens" else 1
    cap = opts.max_samples or max(1, math.ceil(settings.cap_factor * budget / per_sample))
    aggregate = opts.aggregate or settings.default_aggregate()
    if aggregate == "best_score" and not has_oracle:
        raise APIError(
            400,
            "aggregate='best_score' needs an oracle (--oracle); use 'majority'",
            param="ttc.aggregate",
        )
    return cfg, budget, cap, aggregate


def render_chat(messages: list[ChatMessage], tok: Any) -> str:
    """The prompt of a chat, as the model endpoint builds it (`platform/chat_prompt.py`):
    the tokenizer's chat template when it has one, else the plain `role: content` lines
    ending in `assistant:`; 400 naming `messages` if the template refuses them."""
    return chat_prompt_text(tok, messages)


def completion_reply(
    model: str, results: list[dict[str, Any]], prompts: list[str], echo: bool, chat: bool
) -> dict[str, Any]:
    """One OpenAI `text_completion` (or `chat.completion`) over the prompts' results, with
    usage summed over the prompts and the per-prompt `ttc` details."""
    if chat:
        [result] = results
        choices = [
            {
                "index": 0,
                "finish_reason": result["finish_reason"],
                "logprobs": None,
                "message": {"role": "assistant", "content": result["text"]},
            }
        ]
    else:
        choices = [
            {
                "index": i,
                "logprobs": None,
                "finish_reason": r["finish_reason"],
                "text": (p if echo else "") + r["text"],
            }
            for i, (r, p) in enumerate(zip(results, prompts, strict=True))
        ]
    return {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": sum_usage([r["usage"] for r in results]),
        "ttc": {**results[0]["batch"], "prompts": [r["ttc"] for r in results]},
    }


def sum_usage(usages: list[dict[str, int]]) -> dict[str, int]:
    return {key: sum(u[key] for u in usages) for key in usages[0]}
