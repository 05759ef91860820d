"""The answers of the model endpoint in OpenAI's shapes: whole bodies and SSE chunks.

`/v1/completions` answers `text_completion` objects (legacy `logprobs`), and
`/v1/chat/completions` answers `chat.completion` objects, or streams of
`chat.completion.chunk` whose first chunk per choice carries `delta.role`. Both streams
end with a usage-only chunk (`choices: []`) when `stream_options.include_usage` is set,
then `data: [DONE]`; an error after the status line went out becomes one error event
instead (vLLM's server does the same).
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from rayworks.platform.logprobs import TextOf, TokenLogprob, chat_logprobs, completion_logprobs
from rayworks.platform.openai_schema import APIError, ChatRequest, CompletionRequest

if TYPE_CHECKING:
    from rayworks.platform.completion_engine import Event, Generation


def header(kind: str, model: str) -> dict[str, Any]:
    prefix = "chatcmpl" if kind.startswith("chat") else "cmpl"
    return {
        "id": f"{prefix}-{uuid.uuid4().hex}",
        "object": kind,
        "created": int(time.time()),
        "model": model,
    }


def stream_error(err: Exception) -> dict[str, Any]:
    """An error raised after a stream started, as the event that ends it (OpenAI's error
    object), instead of a stream that just stops."""
    if isinstance(err, APIError):
        return {"error": {**err.body, "status": err.status}}
    message = f"generation failed: {type(err).__name__}: {str(err)[-300:]}"
    return {
        "error": {
            "message": message,
            "type": "server_error",
            "param": None,
            "code": "internal_error",
            "status": 500,
        }
    }


def sse(
    head: dict[str, Any], batches: Iterable[list[dict[str, Any]]], gen: Generation, usage: bool
) -> Iterator[str]:
    """`data: {chunk}` per non-empty batch of choices, the usage chunk if asked, `[DONE]`.
    Closing the stream early (its client left) closes the generation, ending its loop."""
    extra = {"usage": None} if usage else {}
    try:
        for choices in batches:
            if choices:
                yield f"data: {json.dumps({**head, 'choices': choices, **extra})}\n\n"
        if usage:
            yield f"data: {json.dumps({**head, 'choices': [], 'usage': gen.usage()})}\n\n"
    except Exception as err:  # the status line is sent: the error becomes an event
        yield f"data: {json.dumps(stream_error(err))}\n\n"
    finally:
        gen.close()
    yield "data: [DONE]\n\n"


def echoed(gen: Generation, req: CompletionRequest, choice: int) -> list[TokenLogprob]:
    """The prompt's logprob entries a choice starts with (echo with logprobs), else []."""
    scored = gen.prompt_logprobs
    return scored[gen.prompt_of(choice)] if scored is not None and req.echo else []


def completion_body(
    gen: Generation, req: CompletionRequest, model: str, text_of: TextOf
) -> dict[str, Any]:
    """The whole `text_completion`: per choice the echo (if asked) plus the text."""
    choices = []
    for i, row in enumerate(gen.rows):
        logprobs = None
        if req.logprobs is not None:
            logprobs = completion_logprobs([*echoed(gen, req, i), *row.logprobs], text_of)
        text = gen.echoes[gen.prompt_of(i)] + row.text
        choices.append(
            {"index": i, "text": text, "finish_reason": row.finish, "logprobs": logprobs}
        )
    return {**header("text_completion", model), "choices": choices, "usage": gen.usage()}


def completion_chunks(
    gen: Generation, req: CompletionRequest, model: str, text_of: TextOf
) -> Iterator[str]:
    """The `text_completion` stream: the echo first (with its prompt logprobs), then each
    step's new text with the logprobs of the tokens it releases."""
    offsets = [0] * len(gen.rows)  # text_offset continues across a choice's chunks

    def choice(index: int, text: str, finish: str | None, entries: list) -> dict[str, Any]:
        logprobs = None
        if req.logprobs is not None:
            logprobs = completion_logprobs(entries, text_of, offsets[index])
            offsets[index] += sum(map(len, logprobs["tokens"]))
        return {"index": index, "text": text, "finish_reason": finish, "logprobs": logprobs}

    first = (
        [
            choice(i, gen.echoes[gen.prompt_of(i)], row.finish, echoed(gen, req, i))
            for i, row in enumerate(gen.rows)
        ]
        if req.echo
        else []
    )
    steps = ([choice(*event) for event in batch] for batch in gen.events)
    head = header("text_completion", model)
    return sse(head, itertools.chain([first], steps), gen, req.include_usage())


def chat_body(gen: Generation, req: ChatRequest, model: str, text_of: TextOf) -> dict[str, Any]:
    """The whole `chat.completion`: one assistant message per choice."""
    choices = [
        {
            "index": i,
            "message": {"role": "assistant", "content": row.text},
            "logprobs": chat_logprobs(row.logprobs, text_of) if req.logprobs else None,
            "finish_reason": row.finish,
        }
        for i, row in enumerate(gen.rows)
    ]
    return {**header("chat.completion", model), "choices": choices, "usage": gen.usage()}


def chat_chunks(gen: Generation, req: ChatRequest, model: str, text_of: TextOf) -> Iterator[str]:
    """The `chat.completion.chunk` stream: `delta.role` first, then content deltas."""

    def choice(event: Event) -> dict[str, Any]:
        logprobs = chat_logprobs(event.logprobs, text_of) if req.logprobs else None
        delta = {"content": event.text} if event.text else {}
        return {
            "index": event.index,
            "delta": delta,
            "logprobs": logprobs,
            "finish_reason": event.finish,
        }

    first = [
        {
            "index": i,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
        for i in range(len(gen.rows))
    ]
    steps = ([choice(event) for event in batch] for batch in gen.events)
    head = header("chat.completion.chunk", model)
    return sse(head, itertools.chain([first], steps), gen, req.include_usage())
