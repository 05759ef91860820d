"""`serve_model`: a tiny checkpoint behind Ray Serve, spoken to over OpenAI-style HTTP.

One deployment per module on the session's Ray head (loopback only); the overload test
redeploys the same app with one slot and one queue place, then puts the first one back.
"""

from __future__ import annotations

import ast
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
import torch
from conftest import free_port

from rayworks.core.errors import CheckpointNotFoundError, RayworksError
from rayworks.models import DecoderSpec, TokenizerSpec, build_decoder, train_tokenizer
from rayworks.platform import serve as rw_serve
from rayworks.platform.completion_engine import TextRow
from rayworks.platform.kv_serving import KVServing
from rayworks.platform.serve import base_url, default_model_name, serve_model, shutdown

KEY = "k"
AUTH = {"Authorization": f"Bearer {KEY}"}
TEXTS = ["hello world", "the quick brown fox jumps over the lazy dog", "abcdefghij 0123456789"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    tok = train_tokenizer(TokenizerSpec(), TEXTS)
    model = build_decoder(
        DecoderSpec(d_model=32, n_layer=1, n_head=2, max_seq_len=128),
        vocab_size=len(tok),
        bos=tok.bos_token_id,
        eos=tok.eos_token_id,
        pad=tok.pad_token_id,
    )
    path = tmp_path_factory.mktemp("tiny-lm")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def server(ray_session, model_dir: Path):
    port = free_port()
    kwargs = dict(port=port, api_key=KEY, model_name="tiny", blocking=False)
    url = serve_model(model_dir, **kwargs)
    yield {"url": url, "model_dir": model_dir, "kwargs": kwargs}
    shutdown()


def complete(server, **body) -> requests.Response:
    return requests.post(f"{server['url']}/v1/completions", json=body, headers=AUTH, timeout=30)


def ok(server, **body) -> dict:
    resp = complete(server, **body)
    assert resp.status_code == 200, resp.text
    return resp.json()


def sse(server, **body) -> list[dict]:
    """The chunks of a streamed completion; the stream must end with [DONE]."""
    resp = requests.post(
        f"{server['url']}/v1/completions",
        json={**body, "stream": True},
        headers=AUTH,
        stream=True,
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/event-stream")
    lines = [line for line in resp.iter_lines(decode_unicode=True) if line]
    assert all(line.startswith("data: ") for line in lines), lines
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line[len("data: ") :]) for line in lines[:-1]]


def test_module_does_not_import_ray_at_top_level() -> None:
    """Ray caches its auth settings when imported, so serve.py imports it only when serving."""
    tree = ast.parse(Path(rw_serve.__file__).read_text())
    top = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    names = [a.name for n in top if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in top if isinstance(n, ast.ImportFrom)]
    assert not [name for name in names if name == "ray" or name.startswith("ray.")], names


def test_missing_checkpoint_fails_before_ray(tmp_path: Path, monkeypatch) -> None:
    def forbidden(*args, **kwargs):
        raise AssertionError("Ray must not be touched for a missing checkpoint")

    monkeypatch.setattr("rayworks.platform.cluster.connect", forbidden)  # the first Ray call
    with pytest.raises(CheckpointNotFoundError, match="no model found"):
        serve_model(tmp_path / "nope", blocking=False)
    no_tokenizer = tmp_path / "model"
    no_tokenizer.mkdir()
    (no_tokenizer / "config.json").write_text("{}")
    with pytest.raises(CheckpointNotFoundError, match="no tokenizer"):
        serve_model(no_tokenizer, blocking=False)


def test_kv_settings_fail_before_ray(model_dir: Path, monkeypatch) -> None:
    def forbidden(*args, **kwargs):
        raise AssertionError("Ray must not be touched for bad KV settings")

    monkeypatch.setattr("rayworks.platform.cluster.connect", forbidden)
    with pytest.raises(RayworksError, match="--draft"):
        serve_model(model_dir, blocking=False, kv=KVServing(policy="speckv", budget=4))


def test_default_name_and_url(tmp_path: Path) -> None:
    run = tmp_path / "20260101-000000-abc123"
    step = run / "checkpoints" / "step_00000010"
    step.mkdir(parents=True)
    (step / "config.json").write_text("{}")
    assert default_model_name(run, step) == run.name
    assert default_model_name(step, step) == f"{run.name}/step_00000010"
    assert base_url("0.0.0.0", 8000) == "http://127.0.0.1:8000"
    assert base_url("::1", 9) == "http://[::1]:9"


def test_stream_holds_back_partial_stop_strings(model_dir: Path) -> None:
    from rayworks.models import load_tokenizer

    tok = load_tokenizer(model_dir)
    row = TextRow(tok, {tok.eos_token_id}, stop=["fox"], limit=100)
    pieces = [row.push(tok.convert_tokens_to_ids(c)) for c in "a fo"]
    assert "".join(pieces) == "a " and row.finish is None  # "fo" may start "fox"
    assert row.push(tok.convert_tokens_to_ids("o")) == "foo"  # "foo" cannot start "fox"
    pieces = [row.push(tok.convert_tokens_to_ids(c)) for c in " fox"]
    assert "".join(pieces) == " " and row.text == "a foo " and row.finish == "stop"
    row = TextRow(tok, {tok.eos_token_id}, stop=["fox"], limit=3)
    assert row.push(tok.convert_tokens_to_ids("f")) == ""  # held: may start "fox"
    assert row.push(tok.eos_token_id) == "f" and row.finish == "stop"  # EOS releases it
    row = TextRow(tok, {tok.eos_token_id}, stop=[], limit=2)
    assert [row.push(tok.convert_tokens_to_ids(c)) for c in "ab"] == ["a", "b"]
    assert row.finish == "length" and row.n_tokens == 2


def test_models_lists_name(server) -> None:
    resp = requests.get(f"{server['url']}/v1/models", headers=AUTH, timeout=10)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["object"] == "list"
    assert [(m["id"], m["object"], m["owned_by"]) for m in body["data"]] == [
        ("tiny", "model", "rayworks")
    ]
    assert requests.get(f"{server['url']}/health", timeout=10).status_code == 200


def test_completion_shape_and_usage(server) -> None:
    body = ok(server, model="tiny", prompt="hello", max_tokens=7, temperature=0)
    assert body["object"] == "text_completion" and body["model"] == "tiny"
    assert body["id"].startswith("cmpl-") and isinstance(body["created"], int)
    [choice] = body["choices"]
    assert choice["index"] == 0 and choice["logprobs"] is None
    assert choice["finish_reason"] in ("stop", "length")
    usage = body["usage"]
    assert usage["prompt_tokens"] == len("hello")  # char tokenizer, no special tokens added
    assert 1 <= usage["completion_tokens"] <= 7
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    if choice["finish_reason"] == "length":
        assert usage["completion_tokens"] == 7 and len(choice["text"]) == 7
    echoed = ok(server, prompt="hello", max_tokens=7, temperature=0, echo=True)
    assert echoed["choices"][0]["text"] == "hello" + choice["text"]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}])
def test_auth_required(server, headers) -> None:
    for method, path in [("get", "/v1/models"), ("post", "/v1/completions")]:
        resp = requests.request(
            method, f"{server['url']}{path}", json={"prompt": "hi"}, headers=headers, timeout=10
        )
        assert resp.status_code == 401, resp.text
        assert resp.json()["error"]["type"] == "authentication_error"


@pytest.mark.parametrize(
    ("field", "value"),
    [("temperature", -1), ("temperature", 3), ("n", 0), ("top_p", 0), ("max_tokens", 0), ("n", 17)],
)
def test_invalid_body_is_400_naming_field(server, field, value) -> None:
    resp = complete(server, prompt="hi", **{field: value})
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["param"] == field
    assert field in err["message"] and str(value) in err["message"]
    assert err["type"] == "invalid_request_error"


def test_other_errors(server) -> None:
    resp = complete(server, model="gpt-4", prompt="hi")
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "model_not_found"
    resp = complete(server, prompt="a" * 200)
    assert resp.status_code == 400 and "max_position_embeddings" in resp.text
    for content_type in ("application/json", "text/plain"):
        headers = {**AUTH, "Content-Type": content_type}
        resp = requests.post(
            f"{server['url']}/v1/completions", data="{", headers=headers, timeout=10
        )
        assert resp.status_code == 400 and "JSON" in resp.json()["error"]["message"]
    resp = complete(server, max_tokens=3)  # no prompt
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "prompt"


def test_max_tokens_is_capped_by_context(server) -> None:
    body = ok(server, prompt="a" * 120, max_tokens=1000, temperature=1.0, seed=0, stop=None)
    assert body["usage"]["completion_tokens"] <= 128 - 120


def test_kv_policy_over_http_reports_the_memory_saved(server) -> None:
    body = ok(
        server,
        prompt="the quick brown fox jumps",
        max_tokens=8,
        temperature=0,
        kv_policy="snapkv",
        kv_budget=6,
    )
    kv = body["usage"]["kv_cache"]
    assert kv["policy"] == "snapkv" and 0 < kv["bytes"] < kv["bytes_full"]
    assert kv["bytes_saved"] == kv["bytes_full"] - kv["bytes"]
    bad = complete(server, prompt="abc", kv_policy="speckv", kv_budget=6)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "kv_policy"


def test_greedy_is_deterministic(server) -> None:
    first = ok(server, prompt="the quick", max_tokens=20, temperature=0)
    second = ok(server, prompt="the quick", max_tokens=20, temperature=0)
    assert first["choices"][0]["text"] == second["choices"][0]["text"]


def sampled(server, seed: int, **body) -> list[str]:
    reply = ok(server, prompt="hello", max_tokens=24, temperature=1.0, n=3, seed=seed, **body)
    return [c["text"] for c in reply["choices"]]


def test_seed_makes_sampling_reproducible(server) -> None:
    assert sampled(server, 1) == sampled(server, 1)
    draws = {tuple(sampled(server, seed)) for seed in (1, 2, 3)}
    assert len(draws) > 1  # different seeds, different samples


def test_stop_string_truncates(server) -> None:
    texts = [t for seed in range(10) for t in sampled(server, seed) if len(t) >= 8]
    assert texts, "no sampled text long enough to cut"
    text = texts[0]
    seed = next(s for s in range(10) if text in sampled(server, s))
    stop = text[4:6]
    index = sampled(server, seed).index(text)
    cut = sampled(server, seed, stop=[stop, "never-there"])[index]
    assert cut == text[: text.find(stop)]
    reply = ok(server, prompt="hello", max_tokens=24, temperature=1.0, n=3, seed=seed, stop=stop)
    assert reply["choices"][index]["finish_reason"] == "stop"


def test_stream_matches_plain_greedy(server) -> None:
    plain = ok(server, prompt="hello", max_tokens=20, temperature=0)
    chunks = sse(server, prompt="hello", max_tokens=20, temperature=0)
    assert len(chunks) >= 2
    assert all(c["object"] == "text_completion" and c["model"] == "tiny" for c in chunks)
    streamed = "".join(c["choices"][0]["text"] for c in chunks)
    assert streamed == plain["choices"][0]["text"]
    assert chunks[-1]["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"]
    multi = sse(server, prompt=["hello", "the"], n=2, max_tokens=5, temperature=1.0, seed=4)
    finished = {c["index"] for chunk in multi for c in chunk["choices"] if c["finish_reason"]}
    assert finished == {0, 1, 2, 3}


def test_list_prompts_give_prompts_times_n_choices(server) -> None:
    body = ok(server, prompt=["hello", "the quick", "abc"], n=2, max_tokens=4, temperature=0)
    assert [c["index"] for c in body["choices"]] == list(range(6))
    texts = [c["text"] for c in body["choices"]]
    assert texts[0] == texts[1] and texts[2] == texts[3]  # greedy: n copies agree
    single = ok(server, prompt="the quick", max_tokens=4, temperature=0)
    assert texts[2] == single["choices"][0]["text"]  # batching (left padding) changes nothing
    assert body["usage"]["prompt_tokens"] == len("hello") + len("the quick") + len("abc")


def test_overload_answers_503_fast(server) -> None:
    """One slot, one queue place: a burst gets 503s at once, the rest finish; none hangs."""
    url = serve_model(
        server["model_dir"],
        **{**server["kwargs"], "max_ongoing_requests": 1, "max_queued_requests": 1},
    )
    long_body = {"prompt": ["hello"] * 4, "n": 16, "max_tokens": 120, "temperature": 1.0}

    def call(_: int) -> tuple[int, float]:
        start = time.monotonic()
        resp = requests.post(f"{url}/v1/completions", json=long_body, headers=AUTH, timeout=60)
        return resp.status_code, time.monotonic() - start

    try:
        with ThreadPoolExecutor(12) as pool:
            results = list(pool.map(call, range(12)))
    finally:
        serve_model(server["model_dir"], **server["kwargs"])  # the module's deployment back
    codes = [code for code, _ in results]
    assert codes.count(503) >= 1 and codes.count(200) >= 1, codes
    assert set(codes) <= {200, 503}, codes
    slowest_503 = max(t for code, t in results if code == 503)
    slowest_200 = max(t for code, t in results if code == 200)
    print(f"\noverload: codes={codes} slowest 503 {slowest_503:.3f}s, 200 {slowest_200:.3f}s")
    assert slowest_503 < 5.0  # answered at once, not after the running requests finish


def test_other_port_is_refused_while_serving(server) -> None:
    with pytest.raises(RayworksError, match="already listens"):
        serve_model(server["model_dir"], **{**server["kwargs"], "port": free_port()})
    assert ok(server, prompt="hi", max_tokens=2)["model"] == "tiny"  # left untouched


def test_the_endpoint_listens_on_loopback_only(server) -> None:
    """Serve's HTTP proxy for the model binds 127.0.0.1 only (Ray's own gRPC servers listen
    on every interface in Ray 2.60, token-guarded: docs/serving.md, Security defaults)."""
    import psutil

    port = server["kwargs"]["port"]
    assert complete(server, prompt="ab", max_tokens=1).status_code == 200
    binds = [
        c.laddr.ip
        for c in psutil.net_connections("inet")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    ]
    assert binds and all(ip.startswith("127.") for ip in binds), binds


def test_a_deployment_handle_completes_like_the_http_route(server) -> None:
    """`CompletionServer.complete`: the same request model and engine call as the route."""
    from ray import serve

    from rayworks.platform.serve import APP_NAME

    body = {"model": "tiny", "prompt": "ab", "max_tokens": 3, "temperature": 0.0}
    via_http = ok(server, **body)
    via_handle = serve.get_app_handle(APP_NAME).complete.remote(body).result(timeout_s=120)
    assert via_handle["choices"][0]["text"] == via_http["choices"][0]["text"]
    assert via_handle["usage"] == via_http["usage"]


def test_the_proxy_front_answers_like_the_actor_front(server) -> None:
    """`front="proxy"` (Serve's HTTP proxy and an ingress deployment) gives the same greedy
    answer as the default actor front, and replaces it on the same port."""
    from rayworks.platform.serve_front import find_front

    body = {"model": "tiny", "prompt": "ab", "max_tokens": 5, "temperature": 0.0}
    via_actor = ok(server, **body)
    try:
        serve_model(server["model_dir"], **{**server["kwargs"], "front": "proxy"})
        assert find_front() is None  # the actor let the port go to the proxy
        assert ok(server, **body)["choices"] == via_actor["choices"]
    finally:
        shutdown()
        serve_model(server["model_dir"], **server["kwargs"])  # the module's deployment back
    assert find_front() is not None
