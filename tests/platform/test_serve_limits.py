"""Per-request limits of the model endpoint: each over-limit request gets the
status that fits and names the flag; errors mid-stream end the stream with an error event;
an unexpected exception is a JSON 500. In process (FastAPI's TestClient), no Ray."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rayworks.platform.completion_engine import CompletionEngine
from rayworks.platform.openai_api import build_app
from rayworks.platform.serve_limits import ServeLimits

AUTH = {"Authorization": "Bearer k"}


@pytest.fixture(scope="module")
def model_dir(tiny_lm) -> Path:
    return tiny_lm()


def client(model_dir: Path, **limits) -> TestClient:
    engine = CompletionEngine(model_dir, "tiny", limits=ServeLimits(**limits))
    return TestClient(build_app(engine, api_key="k"), raise_server_exceptions=False)


def post(c: TestClient, **body):
    return c.post("/v1/completions", json=body, headers=AUTH)


@pytest.mark.parametrize(
    ("body", "limits", "param", "flag"),
    [
        ({"prompt": "1+2", "n": 3}, {"max_n": 2}, "n", "--max-n"),
        (
            {"prompt": "1+2", "max_tokens": 9},
            {"max_new_tokens": 8},
            "max_tokens",
            "--max-new-tokens",
        ),
        ({"prompt": "1+2", "stop": ["a", "b", "c"]}, {"max_stop": 2}, "stop", "--max-stop"),
        ({"prompt": "1+2", "stop": "x" * 300}, {}, "stop", "--max-stop-chars"),
        ({"prompt": "1+2 " * 40}, {"max_prompt_tokens": 16}, "prompt", "--max-prompt-tokens"),
    ],
)
def test_over_a_limit_is_400_naming_the_flag(model_dir, body, limits, param, flag) -> None:
    resp = post(client(model_dir, **limits), **body)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == param and flag in error["message"]


def test_body_over_the_limit_is_413(model_dir) -> None:
    c = client(model_dir, max_body_bytes=2048)
    resp = post(c, prompt="1+2", user="x" * 4096)  # by Content-Length
    assert resp.status_code == 413 and "--max-body-bytes" in resp.json()["error"]["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while read
        yield b'{"prompt": "1+2", "user": "'
        yield b"x" * 4096
        yield b'"}'

    resp = c.post(
        "/v1/completions", content=chunks(), headers={**AUTH, "content-type": "application/json"}
    )
    assert resp.status_code == 413 and "--max-body-bytes" in resp.json()["error"]["message"]
    assert post(c, prompt="1+2", max_tokens=2).status_code == 200  # under the limit: served


def test_request_timeout_is_408_and_ends_a_stream_with_an_error_event(model_dir) -> None:
    c = client(model_dir, request_timeout_s=1e-6)
    resp = post(c, prompt="1+2", max_tokens=8)
    assert resp.status_code == 408 and "--request-timeout" in resp.json()["error"]["message"]
    with c.stream(
        "POST",
        "/v1/completions",
        headers=AUTH,
        json={"prompt": "1+2", "max_tokens": 8, "stream": True},
    ) as resp:
        assert resp.status_code == 200  # the status line went out before the time ran out
        lines = [line for line in resp.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    event = json.loads(lines[-2].removeprefix("data: "))
    assert event["error"]["status"] == 408 and event["error"]["code"] == "request_timeout"


def test_unexpected_exception_is_a_json_500(model_dir, monkeypatch) -> None:
    c = client(model_dir)

    def boom(*_: object) -> None:
        raise RuntimeError("kaput")

    monkeypatch.setattr(CompletionEngine, "run", boom)
    resp = post(c, prompt="1+2")
    assert resp.status_code == 500
    assert resp.json()["error"]["message"] == "internal error: RuntimeError: kaput"
