"""The model endpoint's ingress (`serve_ingress.py`) over a scripted model handle: a dead
replica is retried, overload and a replica gone for good are JSON 503s, a stream that
already sent chunks ends with an error event. No Ray Serve here: the handle is a fake whose
calls raise what Serve's handle raises."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from ray.exceptions import ActorDiedError
from ray.serve.exceptions import BackPressureError

from rayworks.platform import serve_ingress
from rayworks.platform.serve_ingress import ModelIngress

AUTH = {"Authorization": "Bearer k"}
BODY = {"prompt": "hi", "max_tokens": 2}
ANSWER = {"object": "text_completion", "choices": [{"index": 0, "text": "ok"}]}


class Response:
    """What `handle.method.remote(...)` returns: awaitable, cancellable, or an async stream."""

    def __init__(self, outcome: Any) -> None:
        self.outcome, self.cancelled = outcome, False
        self.items = iter(outcome) if isinstance(outcome, list) else iter(())

    def __await__(self) -> Iterator[Any]:
        yield from asyncio.sleep(0).__await__()
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome

    def __aiter__(self) -> Response:
        return self

    async def __anext__(self) -> Any:
        item = next(self.items, StopAsyncIteration)
        if isinstance(item, BaseException) or item is StopAsyncIteration:
            raise item  # type: ignore[misc]
        return item

    def cancel(self) -> None:
        self.cancelled = True


class Method:
    def __init__(self, outcomes: Callable[[], Any]) -> None:
        self.outcomes, self.calls = outcomes, 0

    def remote(self, *_: Any) -> Response:
        self.calls += 1
        return Response(self.outcomes())


class Handle:
    """A model deployment handle whose `answer` / `answer_stream` calls play `script`."""

    def __init__(self, script: list[Any], stream: list[Any] | None = None) -> None:
        plays = iter(script)
        self.answer = Method(lambda: next(plays))
        self.answer_stream = Method(lambda: stream)
        self.metrics_text = Method(lambda: b"")

    def options(self, **_: Any) -> Handle:
        return self


def client(handle: Handle, **limits: Any) -> tuple[TestClient, ModelIngress]:
    ingress = ModelIngress(handle, "tiny", "k", False, limits)
    return TestClient(ingress.__serve_build_asgi_app__(), raise_server_exceptions=False), ingress


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve_ingress, "FIRST_BACKOFF_S", 0.001)


def died() -> ActorDiedError:
    return ActorDiedError()


def test_a_request_whose_replica_died_is_sent_again() -> None:
    handle = Handle([died(), died(), {"ok": ANSWER}])
    c, ingress = client(handle)
    resp = c.post("/v1/completions", json=BODY, headers=AUTH)
    assert resp.status_code == 200 and resp.json() == ANSWER
    assert handle.answer.calls == 3 and ingress.retries() == 2


def test_a_replica_gone_past_the_time_budget_is_a_json_503() -> None:
    handle = Handle([died()] * 1000)
    c, ingress = client(handle, request_timeout_s=0.05)
    resp = c.post("/v1/completions", json=BODY, headers=AUTH)
    assert resp.status_code == 503, resp.text
    error = resp.json()["error"]
    assert error["code"] == "replica_unavailable" and "ActorDiedError" in error["message"]
    assert 1 <= ingress.retries() < 1000


def test_overload_is_a_json_503_with_retry_after_and_is_not_retried() -> None:
    handle = Handle([BackPressureError(num_queued_requests=8, max_queued_requests=8)])
    c, _ = client(handle)
    resp = c.post("/v1/completions", json=BODY, headers=AUTH)
    assert resp.status_code == 503 and resp.json()["error"]["code"] == "overloaded"
    assert resp.headers["retry-after"] == str(serve_ingress.RETRY_AFTER_S)
    assert handle.answer.calls == 1


def test_a_replicas_request_error_keeps_its_status_and_fields() -> None:
    error = {"message": "max_tokens is 65, over", "type": "invalid_request_error"}
    handle = Handle([{"status": 400, "error": {**error, "param": "max_tokens", "code": None}}])
    c, _ = client(handle)
    resp = c.post("/v1/completions", json=BODY, headers=AUTH)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "max_tokens"


def test_a_stream_whose_replica_dies_after_its_first_chunk_ends_with_an_error_event() -> None:
    chunk = f"data: {json.dumps({'choices': [{'index': 0, 'text': 'o'}]})}\n\n"
    handle = Handle([], stream=[{"ok": True}, chunk, chunk, died()])
    c, ingress = client(handle)
    with c.stream("POST", "/v1/completions", json={**BODY, "stream": True}, headers=AUTH) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line]
    assert lines[:2] == [chunk.strip()] * 2 and lines[-1] == "data: [DONE]"
    error = json.loads(lines[2].removeprefix("data: "))["error"]
    assert error["status"] == 503 and error["code"] == "replica_unavailable"
    assert ingress.retries() == 0  # text had gone out: not sent again


def test_a_stream_refused_by_the_replica_is_a_plain_error_answer() -> None:
    refusal = {"status": 400, "error": {"message": "prompt too long", "param": "prompt"}}
    handle = Handle([], stream=[refusal])
    c, _ = client(handle)
    resp = c.post("/v1/completions", json={**BODY, "stream": True}, headers=AUTH)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "prompt"


def test_the_key_is_checked_at_the_ingress_before_any_model_call() -> None:
    handle = Handle([{"ok": ANSWER}])
    c, _ = client(handle)
    assert c.post("/v1/completions", json=BODY).status_code == 401
    assert handle.answer.calls == 0
