"""Faults of `serve_model` through Ray Serve: a client that disconnects frees its
generation, an error mid-stream ends the stream with an error event, the time limit is a
408 naming its flag, a killed replica is replaced, and the series reach Ray's metrics.

One deployment per module on the session's Ray head: a tiny model with a long context, so
that a greedy request for 30,000 tokens runs for minutes unless something stops it. Every
wait polls a condition under a deadline, and every client call has a timeout.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
import torch
from conftest import free_port

from rayworks.models import DecoderSpec, TokenizerSpec, build_decoder, train_tokenizer
from rayworks.platform.serve import APP_NAME, MODEL_DEPLOYMENT, serve_model, shutdown
from rayworks.platform.serve_front import FRONT_NAME, find_front
from rayworks.platform.serve_limits import ServeLimits
from rayworks.platform.serve_metrics import GENERATED_TOKENS, REQUESTS, RUNNING

KEY = "k"
AUTH = {"Authorization": f"Bearer {KEY}"}
TEXTS = ["hello world", "the quick brown fox jumps over the lazy dog", "abcdefghij 0123456789"]
LONG = 30_000  # tokens: minutes of greedy generation (the prompt below never reaches EOS)
LONG_BODY = {"prompt": ["hello"] * 4, "n": 16, "max_tokens": LONG, "temperature": 0}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    tok = train_tokenizer(TokenizerSpec(), TEXTS)
    spec = DecoderSpec(d_model=32, n_layer=1, n_head=2, max_seq_len=LONG + 64)
    model = build_decoder(
        spec, vocab_size=len(tok), bos=tok.bos_token_id, eos=tok.eos_token_id, pad=tok.pad_token_id
    )
    path = tmp_path_factory.mktemp("long-lm")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def server(ray_session, model_dir: Path):
    kwargs = dict(
        port=free_port(),
        api_key=KEY,
        model_name="tiny",
        blocking=False,
        limits=ServeLimits(max_new_tokens=LONG),
    )
    url = serve_model(model_dir, **kwargs)
    yield {"url": url, "model_dir": model_dir, "kwargs": kwargs}
    shutdown()


def metrics(url: str) -> dict[str, float]:
    """`/metrics` of the replica as {series with labels: value}."""
    text = requests.get(f"{url}/metrics", headers=AUTH, timeout=10).text
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\S+) (\S+)$", text, re.M)}


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll `check` until true; the seconds it took, or AssertionError naming `what`."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout:.0f}s: {what}")
        time.sleep(0.1)
    return time.monotonic() - start


def running(url: str) -> float:
    return metrics(url).get(RUNNING, -1)


def open_request(url: str, body: dict, path: str = "/v1/completions") -> socket.socket:
    """A request sent on a raw socket (so the test decides when the connection closes)."""
    where = urlsplit(url)
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {where.netloc}\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    sock = socket.create_connection((where.hostname, where.port), timeout=30)
    sock.sendall(head.encode() + payload)
    return sock


def closed_count(url: str, route: str = "/v1/completions") -> float:
    return metrics(url).get(f'{REQUESTS}_total{{route="{route}",status="499"}}', 0.0)


@pytest.mark.parametrize("stream", [False, True])
def test_disconnect_stops_the_generation_and_frees_its_slot(server, stream: bool) -> None:
    url = server["url"]
    wait_for(lambda: running(url) == 0, 30, "no generation running before the test")
    closed_before = closed_count(url)
    sock = open_request(url, {**LONG_BODY, "stream": stream})
    try:
        wait_for(lambda: running(url) >= 1, 30, "the long generation started")
        if stream:  # the status line and a first event came back: the stream is open
            assert sock.recv(4096).startswith(b"HTTP/1.1 200"), "stream did not start"
    finally:
        sock.close()
    took = wait_for(lambda: running(url) == 0, 20, "the generation stopped after disconnect")
    after = metrics(url)
    print(f"\ndisconnect (stream={stream}): generation stopped {took:.2f}s after close")
    assert after[f"{GENERATED_TOKENS}_total"] < 64 * LONG  # cut short, not run to the end
    statuses = lambda: {k: v for k, v in metrics(url).items() if k.startswith(REQUESTS)}  # noqa: E731
    wait_for(lambda: closed_count(url) > closed_before, 30, f"counted as 499: {statuses()}")
    resp = requests.post(
        f"{url}/v1/completions", json={"prompt": "hi", "max_tokens": 3}, headers=AUTH, timeout=30
    )
    assert resp.status_code == 200, resp.text  # the slot serves the next request


def test_series_reach_rays_metrics_export(server) -> None:
    """The same series go through Ray's metrics API: the node's metrics agent exports them
    (prefixed `ray_`) with the replica's deployment and application tags, about every 10 s."""
    import ray

    reply = requests.post(
        f"{server['url']}/v1/completions",
        headers=AUTH,
        timeout=30,
        json={"prompt": "hello", "max_tokens": 4, "temperature": 0},
    )
    assert reply.status_code == 200, reply.text
    node = next(n for n in ray.nodes() if n["Alive"])
    export = f"http://127.0.0.1:{node['MetricsExportPort']}/metrics"
    wanted = re.compile(
        rf'^ray_{REQUESTS}_total{{[^}}]*application="{APP_NAME}"[^}}]*'
        rf'deployment="{FRONT_NAME}"[^}}]*route="/v1/completions"[^}}]*'
        r'status="200"[^}]*} (\S+)$',
        re.M,
    )

    def exported() -> bool:
        found = wanted.search(requests.get(export, timeout=10).text)
        return found is not None and float(found.group(1)) >= 1

    took = wait_for(exported, 45, f"{REQUESTS} in Ray's export at {export}")
    text = requests.get(export, timeout=10).text
    print(f"\nin Ray's metrics export after {took:.1f}s")
    for name in (GENERATED_TOKENS, "rayworks_model_time_to_first_token_seconds"):
        assert f"ray_{name}" in text, name


def sse_lines(resp: requests.Response) -> list[str]:
    return [line for line in resp.iter_lines(decode_unicode=True) if line]


def test_time_limit_is_408_and_a_mid_stream_error_is_an_event(server) -> None:
    """A 2 s time limit: the plain answer is a 408 naming --request-timeout; a stream that
    already sent text ends with the error event, then [DONE], then closes."""
    url = serve_model(
        server["model_dir"],
        **{**server["kwargs"], "limits": ServeLimits(max_new_tokens=LONG, request_timeout_s=2)},
    )
    try:
        start = time.monotonic()
        resp = requests.post(f"{url}/v1/completions", json=LONG_BODY, headers=AUTH, timeout=60)
        assert resp.status_code == 408, resp.text
        error = resp.json()["error"]
        assert error["code"] == "request_timeout" and "--request-timeout" in error["message"]
        assert time.monotonic() - start < 30
        body = {"prompt": "hello", "max_tokens": LONG, "temperature": 0, "stream": True}
        with requests.post(
            f"{url}/v1/completions", json=body, headers=AUTH, stream=True, timeout=60
        ) as resp:
            assert resp.status_code == 200
            lines = sse_lines(resp)  # returns only once the server closed the stream
    finally:
        serve_model(server["model_dir"], **server["kwargs"])  # the module's deployment back
    assert lines[-1] == "data: [DONE]"
    events = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    text = "".join(e["choices"][0]["text"] for e in events[:-1])
    assert events[-1]["error"]["status"] == 408 and "--request-timeout" in lines[-2]
    assert text and set(text) == {"o"}  # greedy text went out before the error
    print(f"\nmid-stream 408 after {len(events) - 1} events, {len(text)} characters")


def replicas() -> list[dict]:
    """The model deployment's live replica actors (name, namespace)."""
    import ray

    return [
        a
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith(f"SERVE_REPLICA::{APP_NAME}#{MODEL_DEPLOYMENT}#")
    ]


def healthy() -> bool:
    """The model app runs and every deployment of it is healthy (`serve.status`)."""
    from ray import serve

    app = serve.status().applications.get(APP_NAME)
    if app is None or app.status != "RUNNING":
        return False
    return all(d.status == "HEALTHY" for d in app.deployments.values())


def test_killed_replica_is_replaced_and_the_request_in_flight_is_sent_again(server) -> None:
    """Kill the only model replica under a request: the ingress sends the request again
    once Serve has started a new replica, and answers it (a 200, not the proxy's plain-text
    500); a stream that already sent chunks ends with an error event and [DONE]."""
    import ray

    url = server["url"]
    wait_for(healthy, 60, "the app healthy before the kill")
    [victim] = replicas()
    # long enough to be running at the kill, short enough to finish after the retry
    body = {"prompt": "hello", "max_tokens": 6_000, "temperature": 0}
    stream_body = {**LONG_BODY, "n": 1, "prompt": "hello", "stream": True}
    with ThreadPoolExecutor(2) as pool:
        plain = pool.submit(
            requests.post, f"{url}/v1/completions", json=body, headers=AUTH, timeout=120
        )
        wait_for(lambda: running(url) >= 1, 30, "the generation started")
        with requests.post(
            f"{url}/v1/completions", json=stream_body, headers=AUTH, stream=True, timeout=120
        ) as streamed:
            assert streamed.status_code == 200, streamed.text
            lines = streamed.iter_lines(decode_unicode=True)
            first = next(line for line in lines if line)  # a chunk went out: no retry now
            wait_for(lambda: running(url) >= 2, 30, "both generations running")
            ray.kill(ray.get_actor(victim["name"], namespace=victim["namespace"]), no_restart=True)
            killed = time.monotonic()
            rest = [line for line in lines if line]
        resp = plain.result(timeout=150)
        answered = time.monotonic() - killed
    assert first.startswith("data: {")
    assert rest[-1] == "data: [DONE]", rest[-3:]
    error = json.loads(rest[-2].removeprefix("data: "))["error"]
    assert error["status"] == 503 and error["code"] == "replica_unavailable", error
    print(f"\nin flight at the kill: {resp.status_code}, answered {answered:.1f}s after it")
    assert resp.status_code == 200, resp.text
    assert len(resp.json()["choices"][0]["text"]) > 0
    names = [r["name"] for r in replicas()]
    assert len(names) == 1 and names != [victim["name"]]
    retries = front_retries()
    assert retries >= 1


def front_retries() -> int:
    import ray

    return ray.get(find_front().retries.remote(), timeout=30)


def test_killed_front_comes_back_on_its_address(server) -> None:
    """Kill the HTTP front's process: Ray restarts the actor on the same node, it binds the
    same address again, and requests are answered as before; its requests in flight end
    with the connection (a client error, not a hang)."""
    import ray

    url = server["url"]
    front = find_front()
    before = ray.get(front.where.remote(), timeout=30)
    ray.kill(front, no_restart=False)  # the process dies; the actor may restart

    def answers() -> bool:
        try:
            body = {"prompt": "hi", "max_tokens": 2}
            resp = requests.post(f"{url}/v1/completions", json=body, headers=AUTH, timeout=10)
        except requests.RequestException:
            return False
        return resp.status_code == 200

    took = wait_for(answers, 90, f"{url} answers again after the front was killed")
    print(f"\nfront back {took:.1f}s after the kill")
    assert tuple(ray.get(find_front().where.remote(), timeout=30)) == tuple(before)
