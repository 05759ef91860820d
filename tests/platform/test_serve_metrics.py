"""The model endpoint's Prometheus series, a generation's cancellation and an error raised
mid-stream. In process (FastAPI's TestClient), no Ray: `test_serve_faults.py`
checks the same through Ray Serve."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rayworks.models.generate import KVDecoder
from rayworks.platform.completion_engine import CompletionEngine
from rayworks.platform.openai_api import build_app
from rayworks.platform.openai_schema import APIError, CompletionRequest
from rayworks.platform.serve_limits import ServeLimits
from rayworks.platform.serve_metrics import (
    FIRST_TOKEN,
    GENERATED_TOKENS,
    IN_FLIGHT,
    LATENCY,
    PROMPT_TOKENS,
    REQUESTS,
    RUNNING,
)

AUTH = {"Authorization": "Bearer k"}
PROMPT = "Q: 12+3=\n"


@pytest.fixture(scope="module")
def model_dir(tiny_lm) -> Path:
    return tiny_lm()


@pytest.fixture
def engine(model_dir: Path) -> CompletionEngine:
    return CompletionEngine(model_dir, "tiny", limits=ServeLimits())


def scrape(c: TestClient) -> dict[str, float]:
    resp = c.get("/metrics", headers=AUTH)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\S+) (\S+)$", resp.text, re.M)}


def requests_of(route: str, status: int) -> str:
    return f'{REQUESTS}_total{{route="{route}",status="{status}"}}'


def test_series_count_requests_tokens_and_latency(engine: CompletionEngine) -> None:
    c = TestClient(build_app(engine, api_key="k"), raise_server_exceptions=False)
    body = {"prompt": PROMPT, "max_tokens": 5, "temperature": 0}
    usage = c.post("/v1/completions", json=body, headers=AUTH).json()["usage"]
    with c.stream("POST", "/v1/completions", json={**body, "stream": True}, headers=AUTH) as r:
        assert r.status_code == 200
        assert [line for line in r.iter_lines() if line][-1] == "data: [DONE]"
    assert c.get("/v1/models").status_code == 401  # counted, and /metrics needs the key too
    assert c.get("/metrics").status_code == 401
    bad = c.post("/v1/completions", json={"prompt": PROMPT, "n": 0}, headers=AUTH)
    assert bad.status_code == 400
    value = scrape(c)
    assert value[requests_of("/v1/completions", 200)] == 2
    assert value[requests_of("/v1/completions", 400)] == 1
    assert value[requests_of("/v1/models", 401)] == 1 and value[requests_of("/metrics", 401)] == 1
    assert value[f"{PROMPT_TOKENS}_total"] == 2 * usage["prompt_tokens"]
    assert value[f"{GENERATED_TOKENS}_total"] == 2 * usage["completion_tokens"]
    assert value[f'{LATENCY}_count{{route="/v1/completions"}}'] == 3
    assert value[f"{FIRST_TOKEN}_count"] == 2  # one per generation
    assert value[IN_FLIGHT] == 1 and value[RUNNING] == 0  # this scrape is the one in flight
    assert engine.running == 0


def test_cancel_ends_a_generation_at_its_next_step(engine: CompletionEngine) -> None:
    cancel = threading.Event()
    gen = engine.run(CompletionRequest(prompt=PROMPT, max_tokens=200, temperature=0), cancel)
    events = iter(gen.events)
    next(events)
    assert engine.running == 1
    cancel.set()
    with pytest.raises(APIError) as info:
        for _ in events:
            pass
    assert info.value.status == 499 and engine.running == 0
    assert gen.usage()["completion_tokens"] < 200


def test_closing_a_stream_closes_its_generation(engine: CompletionEngine) -> None:
    """What `GenerationStream` does when its client leaves between two steps."""
    chunks = engine.stream(CompletionRequest(prompt=PROMPT, max_tokens=200, temperature=0))
    next(chunks)
    assert engine.running == 1
    chunks.close()
    assert engine.running == 0


def test_error_mid_stream_is_an_error_event_then_done(engine: CompletionEngine, monkeypatch):
    """The third forward pass raises: the text already sent stands, then one OpenAI error
    event, then [DONE], and the sampling loop is over."""
    forward, calls = KVDecoder._forward, []

    def failing(self, *args):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("device lost")
        return forward(self, *args)

    monkeypatch.setattr(KVDecoder, "_forward", failing)
    c = TestClient(build_app(engine, api_key="k"), raise_server_exceptions=False)
    body = {"prompt": PROMPT, "max_tokens": 50, "temperature": 0, "stream": True}
    with c.stream("POST", "/v1/completions", json=body, headers=AUTH) as resp:
        assert resp.status_code == 200
        lines = [line for line in resp.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    events = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert [e["choices"][0]["text"] != "" for e in events[:-1]] == [True, True]  # two steps
    error = events[-1]["error"]
    assert error["status"] == 500 and error["code"] == "internal_error"
    assert error["message"] == "generation failed: RuntimeError: device lost"
    assert engine.running == 0
