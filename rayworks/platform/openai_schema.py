"""Request bodies of the model endpoint: `/v1/completions` and `/v1/chat/completions`.

Every field a body may carry is declared here with its type and bounds. A field we do not
declare is refused (`extra="forbid"`: a 400 naming it, see `openai_api.validation_error`)
rather than ignored, so a client never believes a setting took effect when it did not; a
field sent as `null` counts as not sent. Fields we declare but honour only at their
neutral value (penalties, `logit_bias`, `best_of`, `suffix`) are refused above it by
`check_supported`. `measures` lists what a request asks for against the server's limits
(`serve_limits.ServeLimits`), which the engine checks before any work.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_ROWS = 64  # prompts x n per request: bounds the memory one request can take
SCHEMA_MAX = 1024  # the schema's outer bound on n and stop strings; `ServeLimits` is tighter
LOGPROBS_MAX = 20  # OpenAI's bound on chat `top_logprobs` (5 on completions); --max-logprobs


class APIError(Exception):
    """An error answered as OpenAI's JSON error object with an HTTP status."""

    def __init__(self, status: int, message: str, **fields: str | None) -> None:
        """`fields`: OpenAI's `type` (default invalid_request_error), `param`, `code`."""
        super().__init__(message)
        self.status = status
        self.body = {
            "message": message,
            "type": "invalid_request_error",
            "param": None,
            "code": None,
            **fields,
        }


def unsupported(param: str, message: str) -> APIError:
    return APIError(400, f"{param}: {message}", param=param, code="unsupported_value")


class Body(BaseModel):
    """A JSON body whose unknown fields are errors; an unknown field sent as null is
    dropped (it asks for nothing)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _drop_unknown_nulls(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return {k: v for k, v in data.items() if v is not None or k in cls.model_fields}


class StreamOptions(Body):
    include_usage: bool = Field(False, description="a last chunk with usage, before [DONE]")


class SamplingFields(Body):
    """What both routes share: sampling, stop strings, streaming, the KV-policy extension."""

    model: str | None = None
    n: int = Field(1, ge=1, le=SCHEMA_MAX)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    seed: int | None = None
    stop: str | Annotated[list[str], Field(max_length=SCHEMA_MAX)] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(None, description="accepted, unused (OpenAI: abuse monitoring)")
    presence_penalty: float = Field(0.0, ge=-2, le=2)
    frequency_penalty: float = Field(0.0, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    kv_policy: str | None = Field(None, description="KV-cache policy (rayworks extension)")
    kv_budget: int | None = Field(None, ge=1, description="KV entries kept per layer and head")

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else [s for s in self.stop or [] if s]

    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def check_supported(self) -> None:
        """400 naming a declared field set to a value this server does not implement."""
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name) != 0:
                raise unsupported(name, "penalties are not implemented here; send 0 or omit it")
        if self.logit_bias:
            raise unsupported("logit_bias", "not implemented here; send {} or omit it")
        if self.stream_options is not None and not self.stream:
            raise unsupported("stream_options", "only allowed with stream=true")

    def measures(self) -> list[tuple[str, int, str, str]]:
        """(what, value, ServeLimits field, param) for the bounded quantities both routes
        share; each route's body adds its own (tokens to generate, logprobs, messages)."""
        stop = self.stops()
        return [
            ("n", self.n, "max_n", "n"),
            ("the number of stop strings", len(stop), "max_stop", "stop"),
            *[
                (f"stop string {i}'s length", len(s), "max_stop_chars", "stop")
                for i, s in enumerate(stop)
            ],
        ]


def cap_and_k(cap: tuple[int | None, str], k: tuple[int | None, str]) -> list:
    """The measures of the tokens to generate and of the top logprobs, when asked for."""
    return [
        (param, value, limit, param)
        for (value, param), limit in ((cap, "max_new_tokens"), (k, "max_logprobs"))
        if value is not None
    ]


def check_prompt_shape(value: Any) -> Any:
    """A prompt is a string, a list of strings, a list of token ids or a list of lists of
    token ids (a batch), at most MAX_ROWS of them; anything else is one clear error."""
    if isinstance(value, str):
        return value
    shape = "a string, a list of strings, a list of token ids or a list of lists of token ids"
    if not isinstance(value, list) or not value:
        raise ValueError(f"must be {shape}")

    def is_id(x: Any) -> bool:
        return isinstance(x, int) and not isinstance(x, bool) and x >= 0

    if all(isinstance(x, str) for x in value) or all(is_id(x) for x in value):
        rows = 1 if is_id(value[0]) else len(value)
    elif all(isinstance(r, list) and r and all(is_id(x) for x in r) for r in value):
        rows = len(value)
    else:
        raise ValueError(f"must be {shape} (token ids are ints >= 0; no empty lists)")
    if rows > MAX_ROWS:
        raise ValueError(f"has {rows} prompts; at most {MAX_ROWS} per request")
    return value


class CompletionRequest(SamplingFields):
    """`POST /v1/completions`: OpenAI's legacy completions body (see docs/serving.md)."""

    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(16, ge=0, description="0: score the prompt (needs echo)")
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=LOGPROBS_MAX, description="top-k per token")
    best_of: int | None = Field(None, ge=1)
    suffix: str | None = None

    _prompt_shape = field_validator("prompt", mode="before")(check_prompt_shape)

    def token_cap(self) -> tuple[int | None, str]:
        """(tokens to generate per choice or None for the server's cap, the field named)."""
        return self.max_tokens, "max_tokens"

    def top_k(self) -> tuple[int | None, str]:
        """(top logprobs per token or None for no logprobs, the field named)."""
        return self.logprobs, "logprobs"

    def measures(self) -> list[tuple[str, int, str, str]]:
        return [*super().measures(), *cap_and_k(self.token_cap(), self.top_k())]

    def check_supported(self) -> None:
        super().check_supported()
        if self.best_of is not None and self.best_of != self.n:
            raise unsupported(
                "best_of",
                "ranking best_of candidates is not implemented; send best_of equal to n or omit it",
            )
        if self.suffix:
            raise unsupported("suffix", "insertion (suffix) is not implemented here")
        if self.max_tokens == 0 and not self.echo:
            raise unsupported(
                "max_tokens",
                "0 generates nothing: it is only meaningful with echo=true (scoring the prompt)",
            )


def text_parts(value: Any) -> Any:
    """OpenAI's list-of-parts content as one string (parts joined by newlines, as vLLM
    does); only `{"type": "text", "text": ...}` parts are accepted."""
    if not isinstance(value, list):
        return value
    texts = []
    for j, part in enumerate(value):
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if kind != "text" or set(part) != {"type", "text"} or not isinstance(part["text"], str):
            raise ValueError(
                f"content part {j} (type {kind!r}) is not supported; only "
                "{'type': 'text', 'text': ...} parts are"
            )
        texts.append(part["text"])
    return "\n".join(texts)


class ChatMessage(Body):
    """One chat turn; tool and function turns are not supported (no tool calling here)."""

    role: Literal["system", "developer", "user", "assistant"]
    content: str

    _text = field_validator("content", mode="before")(text_parts)


class ChatRequest(SamplingFields):
    """`POST /v1/chat/completions`: OpenAI's chat body (see docs/serving.md)."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1, description="deprecated name of the next")
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=LOGPROBS_MAX)

    def token_cap(self) -> tuple[int | None, str]:
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens, "max_completion_tokens"
        return self.max_tokens, "max_tokens"

    def top_k(self) -> tuple[int | None, str]:
        if not self.logprobs:
            return None, "logprobs"
        return self.top_logprobs or 0, "top_logprobs"

    def check_supported(self) -> None:
        super().check_supported()
        if self.top_logprobs is not None and not self.logprobs:
            raise unsupported("top_logprobs", "needs logprobs=true")

    def measures(self) -> list[tuple[str, int, str, str]]:
        chars = sum(len(m.content) for m in self.messages)
        return [
            *super().measures(),
            *cap_and_k(self.token_cap(), self.top_k()),
            ("the number of messages", len(self.messages), "max_messages", "messages"),
            ("the characters of all messages", chars, "max_chat_chars", "messages"),
        ]
