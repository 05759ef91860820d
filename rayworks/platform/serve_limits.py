"""What one request to the model endpoint may ask for: its limits and timeouts.

Every bound is a `rayworks serve` flag with a safe default, and a request over one is
answered with the status that fits — 400 (prompt, n, max_tokens, stop strings, logprobs,
chat messages), 413 (the body), 408 (the time) — and a message that names the limit and
the flag that raises it.
Without them one request could hold a replica for hours (a 100 KB stop string, a 1 GB
body, a prompt at the context length with n=16).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from pydantic import Field

from rayworks.core.config import Config
from rayworks.platform.openai_schema import APIError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class ServeLimits(Config):
    """Per-request bounds of the model endpoint (flags of `rayworks serve model`); the TTC
    router applies those that fit it (`router_api.ROUTER_LIMITS`)."""

    max_prompt_tokens: int = Field(2048, ge=1, description="per prompt")
    max_new_tokens: int = Field(1024, ge=0, description="cap on max_tokens")
    max_n: int = Field(16, ge=1, description="completions per prompt")
    max_stop: int = Field(4, ge=0, description="stop strings per request")
    max_stop_chars: int = Field(256, ge=1, description="per stop string")
    max_logprobs: int = Field(5, ge=0, le=20, description="top logprobs per token")
    max_messages: int = Field(128, ge=1, description="messages per chat")
    max_chat_chars: int = Field(32768, ge=1, description="characters in all of a chat's messages")
    max_body_bytes: int = Field(1 << 20, ge=1024, description="request body")
    request_timeout_s: float = Field(120.0, gt=0, description="seconds")


FLAGS = {
    "max_prompt_tokens": "--max-prompt-tokens",
    "max_new_tokens": "--max-new-tokens",
    "max_n": "--max-n",
    "max_stop": "--max-stop",
    "max_stop_chars": "--max-stop-chars",
    "max_logprobs": "--max-logprobs",
    "max_messages": "--max-messages",
    "max_chat_chars": "--max-chat-chars",
    "max_body_bytes": "--max-body-bytes",
    "request_timeout_s": "--request-timeout",
}


def over_limit(what: str, value: int | float | str, limit: str, bound: object) -> str:
    """The message of a request over `limit`: what, how much, the bound and its flag."""
    return (
        f"{what} is {value}, over this server's limit of {bound} "
        f"(set by `rayworks serve {FLAGS[limit]}`)"
    )


def check_limits(limits: ServeLimits, measures: list[tuple[str, int, str, str]]) -> None:
    """400 naming the first of `measures` — (what, value, ServeLimits field, param) — over
    its limit, and the flag that raises it. Shared by the model endpoint and the TTC router."""
    for what, value, limit, param in measures:
        bound = getattr(limits, limit)
        if value > bound:
            message = over_limit(what, value, limit, bound)
            raise APIError(400, message, param=param, code="limit_exceeded")


def check_prompt_tokens(limits: ServeLimits, rows: list[list[int]], param: str = "prompt") -> None:
    """400 naming `--max-prompt-tokens` for the first prompt (token ids) longer than it."""
    for i, ids in enumerate(rows):
        if len(ids) > limits.max_prompt_tokens:
            message = over_limit(
                f"prompt {i}'s length in tokens",
                len(ids),
                "max_prompt_tokens",
                limits.max_prompt_tokens,
            )
            raise APIError(400, message, param=param, code="prompt_too_long")


def timeout_error(limits: ServeLimits) -> APIError:
    """The 408 of a request past `--request-timeout`."""
    limit = f"{limits.request_timeout_s:g}"
    message = over_limit(
        "the request's time in seconds", f"at least {limit}", "request_timeout_s", limit
    )
    return APIError(408, message, type="timeout_error", code="request_timeout")


class BodyLimit:
    """ASGI middleware: 413 for a body over `max_bytes`, by Content-Length or while read.

    A chunked body has no Content-Length, so the body is read here, at most `max_bytes`
    of it (a request is cut off as soon as it passes the limit, never buffered whole),
    then handed to the app; later `receive` calls (disconnect notices) pass through.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await self._reject(send, int(length))
            return
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client left before sending it all
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                await self._reject(send, len(body), at_least=more)
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    async def _reject(self, send: Send, size: int, at_least: bool = False) -> None:
        shown = f"at least {size}" if at_least else str(size)
        message = over_limit("the request body in bytes", shown, "max_body_bytes", self.max_bytes)
        error = {"message": message, "type": "invalid_request_error", "param": None}
        body = json.dumps({"error": {**error, "code": "body_too_large"}}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})
