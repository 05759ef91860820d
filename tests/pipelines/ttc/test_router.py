"""The TTC router: window batching and accounting without Ray, then one Serve app over HTTP.

The HTTP tests share one router (module fixture) in front of one tiny random model: a
300 ms window (so two threads land in one window on a busy machine), four ongoing and four
queued requests on the router (so a burst gets 503; a tighter queue also refuses two
requests that arrive together, as Serve queues a request while it picks a replica), the
arithmetic oracle, an API key, and two limits tighter than their defaults
(`--max-new-tokens 64`, `--max-body-bytes 4096`).
"""

from __future__ import annotations

import asyncio
import math
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from conftest import free_port

from rayworks.cli import main
from rayworks.pipelines.ttc.allocators import AllocatorConfig
from rayworks.pipelines.ttc.router_api import (
    ChatBody,
    CompletionBody,
    RouterSettings,
    extract_answer,
    render_chat,
    resolve_ttc,
)
from rayworks.pipelines.ttc.router_core import (
    Job,
    Query,
    Sampling,
    WindowBatcher,
    arithmetic_oracle,
    run_window,
)
from rayworks.platform.openai_api import APIError

KEY = "secret"
AUTH = {"Authorization": f"Bearer {KEY}"}
PATTERN = re.compile(r"A:\s*(\S+)")
ORACLE = "rayworks.pipelines.ttc.router_core:arithmetic_oracle"


# -- without Ray ------------------------------------------------------------------------------


def fake_call(answers: dict[str, list[str]], log: list):
    """A model call that answers prompt p with answers[p] in turn (one token per char)."""
    seen: dict[str, int] = {}

    async def call(sampling: Sampling, prompts: list[str]) -> list[tuple[str, int]]:
        log.append(list(prompts))
        await asyncio.sleep(0)
        out = []
        for p in prompts:
            i = seen.get(p, 0)
            seen[p] = i + 1
            text = answers[p][i % len(answers[p])]
            out.append((text, len(text)))
        return out

    return call


def query(prompt: str, budget: int, cap: int) -> Query:
    return Query(prompt, Sampling("m", 8, 1.0, 1.0, ()), budget, cap, len(prompt))


def test_window_pools_budget_and_respects_caps() -> None:
    """Two requests in one window: one allocation, spent <= sum of budgets, each <= cap;
    the easy prompt stops early and the hard one borrows what it left."""
    cfg = AllocatorConfig(rule="elimination", stop="consistency", min_samples=2)
    answers = {"easy": ["A: 1"], "hard": ["A: 1", "A: 2", "A: 3", "A: 4", "A: 5"]}
    log: list = []

    async def go():
        batcher = WindowBatcher(
            0.05,
            64,
            lambda jobs: run_window(jobs, fake_call(answers, log), PATTERN, None, rows_per_call=16),
        )
        a = Job([query("easy", 4, 8)], cfg, "majority")
        b = Job([query("hard", 4, 6)], cfg, "majority")
        return await asyncio.gather(batcher.submit(a), batcher.submit(b))

    [[easy], [hard]] = asyncio.run(go())
    assert easy["batch"]["batch_requests"] == 2 and easy["batch"]["batch_size"] == 2
    assert easy["usage"]["samples"] == 2 and easy["ttc"]["stop_reason"] == "consistent"
    assert easy["text"] == "A: 1" and easy["ttc"]["vote_share"] == 1.0
    assert hard["usage"]["samples"] == 6  # its cap: 2 more than its own budget of 4
    assert hard["ttc"]["stop_reason"] == "capped"
    assert easy["batch"]["window_spent"] == 8 <= easy["batch"]["window_budget"] == 8
    assert hard["usage"]["completion_tokens"] == sum(len(a) for a in answers["hard"][:5]) + 4
    assert all(len(rows) <= 2 for rows in log)  # each round is one call per setting


def test_window_closes_early_when_full_and_never_splits_a_job() -> None:
    cfg = AllocatorConfig(rule="uniform", stop="consistency")
    windows: list[list[int]] = []

    async def run(jobs):
        windows.append([len(j.queries) for j in jobs])
        for job in jobs:
            job.future.set_result([])

    async def go():
        batcher = WindowBatcher(10.0, 3, run)  # a long window: only size closes it
        jobs = [Job([query("a", 1, 1)] * n, cfg, "majority") for n in (2, 2, 1)]
        return await asyncio.wait_for(asyncio.gather(*(batcher.submit(j) for j in jobs)), 5)

    asyncio.run(go())
    assert windows == [[2], [2, 1]]


def test_oracle_selects_best_and_errors_reach_every_request() -> None:
    cfg = AllocatorConfig(rule="elimination", stop="oracle", k=2)
    prompts = {"Q: 2+3=\n": ["A: 4", "A: 5"], "Q: 9-9=\n": ["A: 1"]}

    async def go():
        jobs = [Job([query(p, 4, 4)], cfg, "best_score") for p in prompts]
        await run_window(jobs, fake_call(prompts, []), PATTERN, arithmetic_oracle, 16)
        return [j.future.result() for j in jobs]

    [[solved], [wrong]] = asyncio.run(go())
    assert solved["text"] == "A: 5" and solved["ttc"]["score"] == 1.0
    assert solved["ttc"]["stop_reason"] == "solved" and solved["usage"]["samples"] == 2
    assert wrong["ttc"]["score"] == 0.0 and wrong["usage"]["samples"] == 4

    async def broken(sampling, prompts):
        raise APIError(503, "model deployment 'm' is unavailable", code="model_unavailable")

    async def fails():
        batcher = WindowBatcher(0.01, 64, lambda jobs: run_window(jobs, broken, PATTERN, None, 4))
        jobs = [
            Job([query("x", 2, 2)], cfg.model_copy(update={"stop": "consistency"}), "majority")
            for _ in range(2)
        ]
        return await asyncio.gather(*(batcher.submit(j) for j in jobs), return_exceptions=True)

    errors = asyncio.run(fails())
    assert [getattr(e, "status", None) for e in errors] == [503, 503]


def test_answer_extraction_and_oracle() -> None:
    assert extract_answer("<think>..</think>A: 15 A: 16", PATTERN) == "16"
    assert extract_answer("  forty two \n", PATTERN) == "forty two"
    assert extract_answer("   ", PATTERN) is None  # malformed: never wins a vote
    assert extract_answer("x=3", re.compile(r"\d")) == "3"  # no group: the match itself
    assert arithmetic_oracle("Q: 12-30=\n", "A: -18") == 1.0
    assert arithmetic_oracle("Q: 12+3=\n", "A: 14") == 0.0
    assert arithmetic_oracle("hello", "A: 1") == 0.0


def ttc_error(settings: RouterSettings, oracle: bool = False, **body) -> APIError:
    with pytest.raises(APIError) as info:
        resolve_ttc(CompletionBody(prompt="x", **body), settings, oracle)
    assert info.value.status == 400
    return info.value


def test_request_options_merge_and_name_bad_fields() -> None:
    settings = RouterSettings(budget=4, cap_factor=1.5)
    cfg, budget, cap, aggregate = resolve_ttc(
        CompletionBody(prompt="x", ttc={"allocator": {"k": 2}}), settings, False
    )
    assert (cfg.rule, cfg.k, cfg.stop, budget, cap, aggregate) == (
        "elimination",
        2,
        "consistency",
        4,
        6,
        "majority",
    )
    assert resolve_ttc(CompletionBody(prompt="x"), RouterSettings(oracle=ORACLE), True)[3] == (
        "best_score"
    )
    assert ttc_error(settings, ttc={"allocator": {"bogus": 1}}).body["param"] == (
        "ttc.allocator.bogus"
    )
    assert ttc_error(settings, ttc={"allocator": {"k": 0}}).body["param"] == "ttc.allocator.k"
    assert ttc_error(settings, ttc={"allocator": {"stop": "oracle"}}).body["param"] == (
        "ttc.allocator.stop"
    )
    assert "ucb" in ttc_error(settings, ttc={"allocator": {"rule": "ucb"}}).body["message"]
    assert ttc_error(settings, ttc={"budget": 65}).body["param"] == "ttc.budget"
    assert ttc_error(settings, ttc={"aggregate": "best_score"}).body["param"] == "ttc.aggregate"
    assert ttc_error(settings, n=2).body["param"] == "n"
    assert ttc_error(settings, stream=True).body["param"] == "stream"
    tokens = {"allocator": {"unit": "tokens", "max_sample_tokens": 8}}
    assert ttc_error(settings, max_tokens=16, ttc=tokens).body["param"] == (
        "ttc.allocator.max_sample_tokens"
    )


def test_chat_prompt_is_the_model_endpoints_and_unknown_fields_are_named() -> None:
    """The router's chat prompt is the model endpoint's (roles kept: the plain template
    when the tokenizer has none, its own template otherwise, a template's refusal a 400
    on `messages`); a field the router does not honour is a 400 naming it."""
    from jinja2 import TemplateError
    from pydantic import ValidationError

    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "2+2?"}]
    body = ChatBody.model_validate({"messages": messages, "logit_bias": None})  # null: dropped
    plain = type("Tok", (), {"chat_template": None})()
    assert render_chat(body.messages, plain) == "system: Be terse.\nuser: 2+2?\nassistant:"

    class Templated:
        chat_template = "{{ messages }}"

        def apply_chat_template(self, rows, tokenize, add_generation_prompt):
            if rows[0]["role"] == "system":
                raise TemplateError("System role not supported")
            return "|".join(f"<{r['role']}>{r['content']}" for r in rows) + "|<assistant>"

    with pytest.raises(APIError, match="refused these messages") as err:
        render_chat(body.messages, Templated())
    assert err.value.status == 400 and err.value.body["param"] == "messages"
    user = ChatBody.model_validate({"messages": messages[1:]})
    assert render_chat(user.messages, Templated()) == "<user>2+2?|<assistant>"
    with pytest.raises(ValidationError, match="logprobs"):
        CompletionBody.model_validate({"prompt": "x", "logprobs": 2})


def test_cli_checks_flags_before_ray(tmp_path, monkeypatch, capsys, tiny_lm) -> None:
    def forbidden(*args, **kwargs):
        raise AssertionError("Ray must not be touched for bad flags")

    monkeypatch.setattr("rayworks.platform.cluster.connect", forbidden)
    model = tiny_lm()
    assert main(["serve", "ttc", "--checkpoint", str(model), "--rule", "nope"]) != 0
    assert "rule" in capsys.readouterr().err
    assert main(["serve", "ttc", "--checkpoint", str(model), "--oracle", "os:nothing"]) != 0
    assert "os:nothing" in capsys.readouterr().err
    assert main(["serve", "ttc", "--checkpoint", str(tmp_path / "none")]) != 0
    assert "no model found" in capsys.readouterr().err
    assert main(["serve", "model", "--checkpoint", str(model), "--checkpoint", str(model)]) != 0
    assert main(["serve", "ttc", "--checkpoint", str(model), "--max-n", "2"]) != 0
    assert "--max-n: not a limit of `serve ttc`" in capsys.readouterr().err


def test_cli_limit_flags_reach_the_router_settings(tiny_lm, monkeypatch) -> None:
    seen = {}
    monkeypatch.setattr(
        "rayworks.pipelines.ttc.router.serve_ttc",
        lambda checkpoints, settings, **kw: seen.update(settings=settings),
    )
    flags = ["--max-new-tokens", "64", "--max-stop", "2", "--request-timeout", "30"]
    assert main(["serve", "ttc", "--checkpoint", str(tiny_lm()), *flags]) == 0
    limits = seen["settings"].limits
    assert (limits.max_new_tokens, limits.max_stop, limits.request_timeout_s) == (64, 2, 30.0)
    assert limits.max_prompt_tokens == 2048  # the model endpoint's default


# -- over HTTP ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(ray_session, tiny_lm):
    from ray import serve

    from rayworks.pipelines.ttc.router import serve_ttc

    settings = {
        "budget": 4,
        "window_ms": 300,
        "oracle": ORACLE,
        "model_retries": 4,
        "limits": {"max_new_tokens": 64, "max_body_bytes": 4096},
    }
    url = serve_ttc(
        [tiny_lm()],
        settings,
        port=free_port(),
        api_key=KEY,
        min_replicas=1,
        max_replicas=2,
        model_cpus=0.5,
        max_ongoing_requests=4,
        max_queued_requests=4,
        blocking=False,
    )
    yield url
    serve.shutdown()


def post(url: str, path: str, timeout: float = 60, **body) -> requests.Response:
    return requests.post(f"{url}{path}", json=body, headers=AUTH, timeout=timeout)


def ok(url: str, path: str, **body) -> dict:
    resp = post(url, path, **body)
    assert resp.status_code == 200, resp.text
    return resp.json()


def check_usage(usage: dict, max_tokens: int) -> None:
    assert 1 <= usage["samples"] <= usage["max_samples"]
    assert usage["completion_tokens"] <= usage["samples"] * max_tokens
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_completion_route_reports_usage_and_allocation(server) -> None:
    ttc = {"budget": 3, "max_samples": 3, "aggregate": "majority"}
    body = ok(server, "/v1/completions", prompt="Q: 12+3=\n", max_tokens=6, ttc=ttc)
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    [choice] = body["choices"]
    usage = body["usage"]
    check_usage(usage, 6)
    assert usage["budget"] == 3 and usage["samples"] <= 3  # capped at its own budget
    assert usage["prompt_tokens"] == len("Q: 12+3=\n")  # char tokenizer
    details = body["ttc"]
    assert details["rule"] == "elimination" and details["stop"] == "consistency"
    assert details["rounds"] >= 1 and details["window_spent"] <= details["window_budget"]
    [prompt] = details["prompts"]
    assert prompt["samples"] == usage["samples"] and 0 < prompt["vote_share"] <= 1
    assert prompt["score"] == arithmetic_oracle("Q: 12+3=\n", choice["text"])
    many = ok(server, "/v1/completions", prompt=["a", "b"], max_tokens=3, echo=True)
    assert [c["text"][:1] for c in many["choices"]] == ["a", "b"]
    assert many["usage"]["samples"] <= 2 * many["usage"]["max_samples"]


def test_batch_route_allocates_across_prompts(server) -> None:
    prompts = ["Q: 1+1=\n", "Q: 20+22=\n", "Q: 9-3=\n"]
    ttc = {"budget": 2, "allocator": {"stop": "oracle"}, "aggregate": "best_score"}
    body = ok(server, "/v1/batch/completions", prompts=prompts, max_tokens=5, ttc=ttc)
    assert body["object"] == "list" and len(body["data"]) == 3
    assert body["ttc"]["batch_size"] >= 3 and body["ttc"]["stop"] == "oracle"
    for item in body["data"]:
        check_usage(item["usage"], 5)
        assert item["usage"]["budget"] == 2 and item["usage"]["max_samples"] == 4
    assert sum(d["usage"]["samples"] for d in body["data"]) == body["usage"]["samples"]
    assert body["usage"]["samples"] <= body["ttc"]["window_budget"]  # never past the pool


def test_two_requests_in_one_window_are_allocated_together(server) -> None:
    barrier = threading.Barrier(2)

    def send(prompt: str) -> dict:
        barrier.wait()
        return ok(server, "/v1/completions", prompt=prompt, max_tokens=4, ttc={"budget": 2})

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(send, ["Q: 5+5=\n", "Q: 7+1=\n"])
    for body in (first, second):
        assert body["ttc"]["batch_requests"] == 2 and body["ttc"]["batch_size"] == 2
        assert body["ttc"]["window_budget"] == 4
    spent = first["usage"]["samples"] + second["usage"]["samples"]
    assert spent == first["ttc"]["window_spent"] <= 4


def test_real_openai_client(server) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{server}/v1", api_key=KEY, max_retries=0)
    [model] = [m.id for m in client.models.list()]
    reply = client.completions.create(
        model=model, prompt="Q: 3+4=\n", max_tokens=4, extra_body={"ttc": {"budget": 2}}
    )
    assert isinstance(reply.choices[0].text, str) and reply.usage.completion_tokens >= 1
    chat = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Q: 3+4="}], max_tokens=4
    )
    assert chat.object == "chat.completion" and chat.choices[0].message.role == "assistant"
    assert isinstance(chat.choices[0].message.content, str)
    assert chat.model_extra["ttc"]["prompts"][0]["samples"] >= 1
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{server}/v1", api_key="no", max_retries=0).models.list()
    with pytest.raises(openai.BadRequestError, match=r"ttc\.allocator\.bogus"):
        client.completions.create(
            model=model, prompt="x", extra_body={"ttc": {"allocator": {"bogus": 1}}}
        )
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-4", prompt="x")


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}])
def test_auth_required_except_health(server, headers) -> None:
    for method, path in [
        ("get", "/v1/models"),
        ("post", "/v1/completions"),
        ("post", "/v1/batch/completions"),
        ("get", "/metrics"),
    ]:
        resp = requests.request(
            method, f"{server}{path}", json={"prompt": "x"}, headers=headers, timeout=10
        )
        assert resp.status_code == 401, (path, resp.text)
        assert resp.json()["error"]["type"] == "authentication_error"
    assert requests.get(f"{server}/health", timeout=10).status_code == 200


def test_bad_body_is_400_naming_field(server) -> None:
    resp = post(server, "/v1/completions", prompt="x", ttc={"budgte": 3})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "ttc.budgte"
    resp = post(server, "/v1/chat/completions", messages=[])
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "messages"
    resp = post(server, "/v1/completions", prompt="x", presence_penalty=0.5)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "presence_penalty"
    resp = post(server, "/v1/completions", prompt="a" * 400)
    assert resp.status_code == 400 and "max_position_embeddings" in resp.text


def test_limit_flags_bound_router_requests(server) -> None:
    """The model endpoint's limits, on the router: 400 / 413 naming the flag."""
    chat = [{"role": "user", "content": "x"}]
    over = {
        "/v1/completions": ({"prompt": "x", "max_tokens": 65}, "max_tokens", "--max-new-tokens"),
        "/v1/batch/completions": ({"prompts": ["x"], "stop": list("abcde")}, "stop", "--max-stop"),
        "/v1/chat/completions": ({"messages": chat, "stop": "y" * 300}, "stop", "--max-stop-chars"),
    }
    for path, (body, param, flag) in over.items():
        resp = post(server, path, **body)
        assert resp.status_code == 400, (path, resp.text)
        error = resp.json()["error"]
        assert error["param"] == param and flag in error["message"], (path, error)
    resp = post(server, "/v1/completions", prompt="x" * 5000)
    assert resp.status_code == 413 and "--max-body-bytes" in resp.json()["error"]["message"]
    assert post(server, "/v1/completions", prompt="x", max_tokens=64, ttc={"budget": 1}).ok


def test_overload_answers_503_fast(server) -> None:
    """Four ongoing and four queued: a burst of 24 gets 503s at once, the rest finish."""
    body = {"prompt": "Q: 1+2=\n", "max_tokens": 24, "ttc": {"budget": 4, "max_samples": 4}}

    def call(_: int) -> tuple[int, float]:
        start = time.monotonic()
        resp = requests.post(f"{server}/v1/completions", json=body, headers=AUTH, timeout=120)
        return resp.status_code, time.monotonic() - start

    with ThreadPoolExecutor(24) as pool:
        results = list(pool.map(call, range(24)))
    codes = [code for code, _ in results]
    assert codes.count(503) >= 1 and codes.count(200) >= 1, codes
    assert set(codes) <= {200, 503}, codes
    assert max(t for code, t in results if code == 503) < 5.0, results


def _metric(server: str, name: str) -> float:
    """The value of the router's labelled metric `name` (0 before its first sample)."""
    text = requests.get(f"{server}/metrics", headers=AUTH, timeout=10).text
    found = re.search(rf"{name}\{{[^}}]*\}} (\S+)", text)
    return float(found.group(1)) if found else 0.0


def _wait_for_a_call_in_flight(server: str, timeout: float = 60) -> None:
    """Until the router awaits a model replica (a kill before that would test nothing)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if _metric(server, "rayworks_ttc_model_calls_in_flight") >= 1:
            return
        time.sleep(0.05)
    raise AssertionError("no model call went in flight within the timeout")


def _model_replicas() -> list[dict]:
    import ray

    replicas = [
        a
        for a in ray.util.list_named_actors(all_namespaces=True)
        if "SERVE_REPLICA" in a["name"] and "Model0" in a["name"]
    ]
    assert replicas, ray.util.list_named_actors(all_namespaces=True)
    return replicas


def _wait_until_served(server: str, timeout: float = 60) -> requests.Response:
    deadline = time.monotonic() + timeout
    while True:
        resp = post(server, "/v1/completions", prompt="Q: 1+1=\n", max_tokens=3)
        if resp.status_code == 200 or time.monotonic() > deadline:
            return resp
        time.sleep(1)


def test_killed_model_replica_is_replaced(server) -> None:
    """Kill the model replica under in-flight requests: each ends with 200 or a clear 503,
    none hangs, the dead replica's calls are retried, and the replaced replica serves the
    next request. A kill can land just after the last model call of both requests has
    returned (it did once in CI, on a loaded machine): then nothing was in flight to retry,
    and the kill is repeated on the replacement replica, at most three times."""
    import ray

    body = {"prompt": "Q: 4+4=\n", "max_tokens": 60, "ttc": {"budget": 16, "max_samples": 16}}

    def call(_: int) -> requests.Response:
        return requests.post(f"{server}/v1/completions", json=body, headers=AUTH, timeout=120)

    retries = "rayworks_ttc_model_retries_total"
    replies, attempts, before = [], 0, _metric(server, retries)
    while attempts < 3 and _metric(server, retries) == before:
        attempts += 1
        if attempts > 1:
            assert _wait_until_served(server).status_code == 200
        replicas = _model_replicas()
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(call, i) for i in range(2)]
            _wait_for_a_call_in_flight(server)
            for actor in replicas:
                ray.kill(
                    ray.get_actor(actor["name"], namespace=actor["namespace"]), no_restart=True
                )
            replies += [f.result(timeout=150) for f in futures]
    for resp in replies:
        assert resp.status_code in (200, 503), resp.text
        if resp.status_code == 503:
            assert "model_unavailable" in resp.text, resp.text
    assert _metric(server, retries) > before, f"no model call was retried in {attempts} kills"
    resp = _wait_until_served(server)
    assert resp.status_code == 200, resp.text


def test_metrics_count_requests_samples_and_windows(server) -> None:
    ok(server, "/v1/completions", prompt="Q: 2+2=\n", max_tokens=3, ttc={"budget": 2})
    assert requests.get(f"{server}/v1/models", timeout=10).status_code == 401
    text = requests.get(f"{server}/metrics", headers=AUTH, timeout=10).text
    value = {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\S+) (\S+)$", text, re.M)}
    assert value['rayworks_ttc_requests_total{route="/v1/completions",status="200"}'] >= 1
    assert value['rayworks_ttc_requests_total{route="/v1/models",status="401"}'] >= 1
    assert value["rayworks_ttc_samples_per_prompt_count"] >= 1
    assert value["rayworks_ttc_window_prompts_count"] >= 1
    assert value["rayworks_ttc_budget_used_ratio_count"] >= 1
    assert not math.isnan(value['rayworks_ttc_latency_seconds_sum{route="/v1/completions"}'])
