"""OpenAI compatibility of the model endpoint for evaluation harnesses: logprobs
equal to a direct forward pass, echo with prompt logprobs (lm-evaluation-harness's
loglikelihood request), token-id prompts, chat completions with and without a chat
template, `stream_options.include_usage`, and 400s naming every unsupported field or
exceeded limit. In process (FastAPI's TestClient), no Ray."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import openai
import pytest
import torch
from fastapi.testclient import TestClient

from rayworks.cli import build_parser
from rayworks.models import load_causal_lm, load_tokenizer
from rayworks.platform.completion_engine import CompletionEngine
from rayworks.platform.openai_api import build_app
from rayworks.platform.serve_limits import ServeLimits

AUTH = {"Authorization": "Bearer k"}
TEXTS = ["system: be terse\nuser: Q: 12+3=\nassistant: A: 15", "<|user|>hello world<|assistant|>"]
PROMPT = "Q: 12+3="
OTHER = "user: hello"
# A template that writes its own markers and refuses a chat that does not open with a user.
TEMPLATE = (
    "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first message must be the "
    "user') }}{% endif %}{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>"
    "{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="module")
def model_dir(tiny_lm) -> Path:
    return tiny_lm(TEXTS, n_layer=1)


@pytest.fixture(scope="module")
def templated_dir(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same model, its tokenizer carrying a chat template."""
    path = tmp_path_factory.mktemp("templated")
    shutil.copytree(model_dir, path, dirs_exist_ok=True)
    tok = load_tokenizer(path)
    tok.chat_template = TEMPLATE
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def client(model_dir: Path) -> TestClient:
    return make_client(model_dir)


@pytest.fixture(scope="module")
def model(model_dir: Path) -> torch.nn.Module:
    """The checkpoint loaded on its own: the reference forward pass."""
    return load_causal_lm(model_dir).eval()


@pytest.fixture(scope="module")
def tok(model_dir: Path):
    return load_tokenizer(model_dir)


def make_client(model_dir: Path, **limits) -> TestClient:
    engine = CompletionEngine(model_dir, "tiny", limits=ServeLimits(**limits))
    return TestClient(build_app(engine, api_key="k"), raise_server_exceptions=False)


def post(c: TestClient, route: str = "completions", **body) -> dict:
    resp = c.post(f"/v1/{route}", json=body, headers=AUTH)
    assert resp.status_code == 200, resp.text
    return resp.json()


def chunks(c: TestClient, route: str = "completions", **body) -> list[dict]:
    """The data chunks of a stream, which must end with [DONE]."""
    with c.stream("POST", f"/v1/{route}", json={**body, "stream": True}, headers=AUTH) as resp:
        assert resp.status_code == 200
        lines = [line for line in resp.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]


@torch.no_grad()
def forward_logprobs(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    """(T, V) log_softmax of the logits of a plain forward pass: row i predicts token i+1."""
    return torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)


def test_echo_with_max_tokens_0_scores_the_prompt_like_a_forward_pass(client, model, tok):
    ids = tok(PROMPT).input_ids
    body = post(client, prompt=PROMPT, echo=True, max_tokens=0, logprobs=1, temperature=0)
    [choice] = body["choices"]
    assert choice["text"] == PROMPT and choice["finish_reason"] == "length"
    assert body["usage"] == {
        "prompt_tokens": len(ids),
        "completion_tokens": 0,
        "total_tokens": len(ids),
    }
    lp = choice["logprobs"]
    assert lp["tokens"] == [tok.decode([i]) for i in ids]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None  # as OpenAI, vLLM
    reference = forward_logprobs(model, ids)
    for i in range(1, len(ids)):
        assert lp["token_logprobs"][i] == pytest.approx(float(reference[i - 1, ids[i]]), abs=1e-4)
        top = lp["top_logprobs"][i]
        assert tok.decode([ids[i]]) in top and len(top) <= 2  # top-1 plus the prompt's token
        assert max(top.values()) == pytest.approx(float(reference[i - 1].max()), abs=1e-4)
    assert lp["text_offset"] == list(range(len(ids)))  # one character per token


def test_lm_eval_loglikelihood_request(client, model, tok):
    """lm-evaluation-harness `local-completions` loglikelihood: a batch of token-id prompts
    with echo, max_tokens=1, logprobs=1, temperature=0, a seed; it sums token_logprobs over
    the continuation ([ctxlen:-1]) and calls a continuation greedy if every token's logprob
    is the best of its top_logprobs."""
    pairs = [("Q: 12+3=", " A: 15"), ("user: ", "hello")]
    rows = [tok(c).input_ids + tok(x).input_ids for c, x in pairs]
    body = post(
        client,
        prompt=rows,
        echo=True,
        max_tokens=1,
        logprobs=1,
        temperature=0,
        seed=1234,
        model="tiny",
    )
    for choice, row, (context, _) in zip(body["choices"], rows, pairs, strict=True):
        ctxlen = len(tok(context).input_ids)
        lp = choice["logprobs"]
        assert len(lp["token_logprobs"]) == len(row) + 1  # the prompt, then one new token
        got = sum(lp["token_logprobs"][ctxlen:-1])
        reference = forward_logprobs(model, row)
        want = sum(float(reference[i - 1, row[i]]) for i in range(ctxlen, len(row)))
        assert got == pytest.approx(want, abs=1e-4)
        scored = zip(lp["token_logprobs"][ctxlen:-1], lp["top_logprobs"][ctxlen:-1], strict=True)
        greedy = all(t == max(top.values()) for t, top in scored)
        want_greedy = all(int(reference[i - 1].argmax()) == row[i] for i in range(ctxlen, len(row)))
        assert greedy == want_greedy


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 1.5, "top_p": 0.9}])
def test_generated_logprobs_are_the_models_raw_logprobs(client, model, tok, sampling):
    """Greedy or not, a generated token's logprob is log_softmax of the model's logits
    (not scaled by temperature, not renormalised by top_p: vLLM's default)."""
    ids = tok(PROMPT).input_ids
    body = post(client, prompt=PROMPT, max_tokens=8, logprobs=3, seed=5, **sampling)
    lp = body["choices"][0]["logprobs"]
    generated = [tok.convert_tokens_to_ids(t) for t in lp["tokens"]]
    assert len(generated) == body["usage"]["completion_tokens"]
    reference = forward_logprobs(model, ids + generated)
    for j, (token, chosen) in enumerate(zip(generated, lp["token_logprobs"], strict=True)):
        expected = reference[len(ids) - 1 + j]
        assert chosen == pytest.approx(float(expected[token]), abs=1e-4)
        top = lp["top_logprobs"][j]
        values = list(top.values())
        assert values == sorted(values, reverse=True) and top[lp["tokens"][j]] == chosen
        assert values[:3] == pytest.approx(expected.topk(3).values.tolist(), abs=1e-4)
        assert len(top) == 3 or (len(top) == 4 and values[-1] == chosen)  # + the chosen
        if sampling["temperature"] == 0:
            assert next(iter(top)) == lp["tokens"][j] and len(top) == 3  # greedy: the best


def test_kv_policy_path_reports_the_same_logprobs(client, tok):
    """Under a KV policy that keeps the whole prompt, the per-row compressed loop samples
    through the same Sampler: same tokens, same logprobs as the plain batched loop."""
    body = dict(prompt=PROMPT, max_tokens=6, logprobs=2, temperature=0)
    plain = post(client, **body)
    kept = post(client, **body, kv_policy="snapkv", kv_budget=len(tok(PROMPT).input_ids))
    got, want = kept["choices"][0]["logprobs"], plain["choices"][0]["logprobs"]
    assert got["tokens"] == want["tokens"]
    assert got["token_logprobs"] == pytest.approx(want["token_logprobs"], abs=1e-4)


def test_stream_gives_the_same_logprobs_and_a_usage_chunk(client):
    body = dict(prompt=PROMPT, echo=True, max_tokens=6, logprobs=2, temperature=0)
    plain = post(client, **body)
    streamed = chunks(client, **body, stream_options={"include_usage": True})
    *parts, last = streamed
    assert last["choices"] == [] and last["usage"] == plain["usage"]
    assert all(part["usage"] is None for part in parts)
    pieces = [c for part in parts for c in part["choices"]]
    assert "".join(c["text"] for c in pieces) == plain["choices"][0]["text"]
    merged = {
        key: [v for c in pieces for v in c["logprobs"][key]]
        for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset")
    }
    assert merged == plain["choices"][0]["logprobs"]
    assert pieces[-1]["finish_reason"] == plain["choices"][0]["finish_reason"]
    no_usage = chunks(client, **body)
    assert all("usage" not in part for part in no_usage)


def test_token_id_prompts_answer_as_their_strings(client, tok):
    body = dict(echo=True, max_tokens=5, logprobs=2, temperature=0)
    as_text = post(client, prompt=PROMPT, **body)
    as_ids = post(client, prompt=tok(PROMPT).input_ids, **body)
    assert as_ids["choices"] == as_text["choices"] and as_ids["usage"] == as_text["usage"]
    batch_text = post(client, prompt=[PROMPT, OTHER], n=2, **body)
    batch_ids = post(client, prompt=[tok(PROMPT).input_ids, tok(OTHER).input_ids], n=2, **body)
    assert batch_ids["choices"] == batch_text["choices"]
    assert [c["index"] for c in batch_ids["choices"]] == [0, 1, 2, 3]
    resp = client.post("/v1/completions", json={"prompt": [1, 10_000]}, headers=AUTH)
    assert resp.status_code == 400 and "vocabulary" in resp.json()["error"]["message"]


def test_chat_without_a_template_uses_the_plain_lines(client, tok):
    messages = [{"role": "system", "content": "be terse"}, {"role": "user", "content": PROMPT}]
    chat = post(
        client,
        "chat/completions",
        messages=messages,
        max_completion_tokens=6,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
    )
    rendered = f"system: be terse\nuser: {PROMPT}\nassistant:"
    plain = post(client, prompt=rendered, max_tokens=6, temperature=0, logprobs=2)
    [choice] = chat["choices"]
    assert chat["object"] == "chat.completion" and chat["id"].startswith("chatcmpl-")
    assert choice["message"] == {"role": "assistant", "content": plain["choices"][0]["text"]}
    assert chat["usage"] == plain["usage"]
    content = choice["logprobs"]["content"]
    assert [c["logprob"] for c in content] == plain["choices"][0]["logprobs"]["token_logprobs"]
    for entry in content:
        top = entry["top_logprobs"]
        assert len(top) == 2 and top[0]["logprob"] >= top[1]["logprob"]
        assert top[0]["token"] == entry["token"]  # greedy: the chosen token is the best
        assert entry["bytes"] == list(entry["token"].encode())
    parts = [{"type": "text", "text": "be"}, {"type": "text", "text": "terse"}]
    as_parts = post(
        client,
        "chat/completions",
        max_tokens=3,
        temperature=0,
        messages=[{"role": "system", "content": parts}, messages[1]],
    )
    as_lines = post(
        client,
        "chat/completions",
        max_tokens=3,
        temperature=0,
        messages=[{"role": "system", "content": "be\nterse"}, messages[1]],
    )
    assert as_parts["choices"] == as_lines["choices"]  # text parts join with newlines


def test_chat_with_a_template_renders_it(templated_dir, tok):
    c = make_client(templated_dir)
    messages = [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "world"},
        {"role": "user", "content": PROMPT},
    ]
    chat = post(c, "chat/completions", messages=messages, max_tokens=5, temperature=0)
    rendered = f"<s><|user|>hello<|assistant|>world<|user|>{PROMPT}<|assistant|>"
    ids = tok(rendered, add_special_tokens=False).input_ids
    plain = post(c, prompt=ids, max_tokens=5, temperature=0)
    assert chat["choices"][0]["message"]["content"] == plain["choices"][0]["text"]
    assert chat["usage"]["prompt_tokens"] == len(ids) and ids.count(tok.bos_token_id) == 1
    resp = c.post(
        "/v1/chat/completions",
        headers=AUTH,
        json={"messages": [{"role": "system", "content": "x"}]},
    )
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "messages"
    assert "first message must be the user" in resp.json()["error"]["message"]


def test_chat_stream_starts_with_the_role_and_ends_with_usage(client):
    body = dict(messages=[{"role": "user", "content": PROMPT}], max_tokens=6, temperature=0, n=2)
    plain = post(client, "chat/completions", **body)
    *parts, last = chunks(
        client, "chat/completions", **body, stream_options={"include_usage": True}
    )
    assert all(p["object"] == "chat.completion.chunk" for p in [*parts, last])
    assert parts[0]["choices"] == [
        {
            "index": i,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
        for i in (0, 1)
    ]
    for i in (0, 1):
        mine = [c for p in parts[1:] for c in p["choices"] if c["index"] == i]
        text = "".join(c["delta"].get("content", "") for c in mine)
        assert text == plain["choices"][i]["message"]["content"]
        assert mine[-1]["finish_reason"] == plain["choices"][i]["finish_reason"]
    assert last["choices"] == [] and last["usage"] == plain["usage"]


UNSUPPORTED = [
    ("completions", "logit_bias", {"5": 10}),
    ("completions", "best_of", 3),
    ("completions", "suffix", "tail"),
    ("completions", "presence_penalty", 0.5),
    ("completions", "frequency_penalty", -0.5),
    ("completions", "tools", [{"type": "function"}]),
    ("completions", "top_k", 5),  # a vLLM extension we do not implement
    ("completions", "stream_options", {"include_usage": True}),  # without stream
    ("completions", "max_tokens", 0),  # without echo
    ("chat/completions", "tools", [{"type": "function", "function": {"name": "f"}}]),
    ("chat/completions", "functions", [{"name": "f"}]),
    ("chat/completions", "tool_choice", "auto"),
    ("chat/completions", "response_format", {"type": "json_object"}),
    ("chat/completions", "logit_bias", {"5": 10}),
    ("chat/completions", "presence_penalty", 1.0),
    ("chat/completions", "top_logprobs", 2),  # without logprobs=true
    ("chat/completions", "echo", True),
]


@pytest.mark.parametrize(("route", "field", "value"), UNSUPPORTED)
def test_unsupported_fields_are_400_naming_them(client, route, field, value):
    base = (
        {"prompt": PROMPT}
        if route == "completions"
        else {"messages": [{"role": "user", "content": PROMPT}]}
    )
    resp = client.post(f"/v1/{route}", json={**base, "max_tokens": 2, field: value}, headers=AUTH)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == field and field in error["message"]


def test_unsupported_message_fields_and_a_null_field(client):
    for message, param in [
        ({"role": "tool", "content": "4", "tool_call_id": "1"}, "messages.0.role"),
        ({"role": "user", "content": "hi", "name": "ann"}, "messages.0.name"),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
            "messages.0.content",
        ),
    ]:
        resp = client.post("/v1/chat/completions", json={"messages": [message]}, headers=AUTH)
        assert resp.status_code == 400 and resp.json()["error"]["param"] == param, resp.text
    # an unknown field sent as null asks for nothing: accepted
    post(
        client,
        "chat/completions",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=1,
        tools=None,
        response_format=None,
    )


@pytest.mark.parametrize(
    ("route", "body", "limits", "param", "flag"),
    [
        (
            "chat/completions",
            {"messages": [{"role": "user", "content": "a"}] * 3},
            {"max_messages": 2},
            "messages",
            "--max-messages",
        ),
        (
            "chat/completions",
            {"messages": [{"role": "user", "content": "abcdef"}] * 2},
            {"max_chat_chars": 10},
            "messages",
            "--max-chat-chars",
        ),
        (
            "chat/completions",
            {"messages": [{"role": "user", "content": "a" * 40}]},
            {"max_prompt_tokens": 16},
            "messages",
            "--max-prompt-tokens",
        ),
        (
            "chat/completions",
            {"messages": [{"role": "user", "content": "a"}], "max_tokens": 9},
            {"max_new_tokens": 8},
            "max_tokens",
            "--max-new-tokens",
        ),
        (
            "chat/completions",
            {"messages": [{"role": "user", "content": "a"}], "max_completion_tokens": 9},
            {"max_new_tokens": 8},
            "max_completion_tokens",
            "--max-new-tokens",
        ),
        (
            "chat/completions",
            {"messages": [{"role": "user", "content": "a"}], "logprobs": True, "top_logprobs": 3},
            {"max_logprobs": 2},
            "top_logprobs",
            "--max-logprobs",
        ),
        (
            "completions",
            {"prompt": PROMPT, "logprobs": 3},
            {"max_logprobs": 2},
            "logprobs",
            "--max-logprobs",
        ),
        (
            "completions",
            {"prompt": list(range(1, 30))},
            {"max_prompt_tokens": 16},
            "prompt",
            "--max-prompt-tokens",
        ),
    ],
)
def test_over_a_limit_is_400_naming_the_flag(model_dir, route, body, limits, param, flag):
    resp = make_client(model_dir, **limits).post(f"/v1/{route}", json=body, headers=AUTH)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == param and flag in error["message"]


def test_limit_flags_reach_the_cli():
    args = build_parser().parse_args(
        [
            "serve",
            "model",
            "--checkpoint",
            "m",
            "--max-messages",
            "3",
            "--max-chat-chars",
            "99",
            "--max-logprobs",
            "1",
        ]
    )
    assert (args.limit_max_messages, args.limit_max_chat_chars, args.limit_max_logprobs) == (
        3,
        99,
        1,
    )


def test_the_openai_client_speaks_to_both_routes(client, tok):
    """The `openai` package itself, over the in-process app, parses our answers."""
    api = openai.OpenAI(
        api_key="k", base_url="http://testserver/v1", http_client=client, max_retries=0
    )
    scored = api.completions.create(
        model="tiny", prompt=PROMPT, echo=True, max_tokens=0, logprobs=1, temperature=0
    )
    assert scored.choices[0].logprobs.token_logprobs[0] is None
    assert len(scored.choices[0].logprobs.tokens) == len(tok(PROMPT).input_ids)
    chat = api.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "hi"}],
        max_completion_tokens=3,
        temperature=0,
        logprobs=True,
        top_logprobs=1,
    )
    assert chat.choices[0].message.role == "assistant"
    assert len(chat.choices[0].logprobs.content) == chat.usage.completion_tokens
    stream = api.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=3,
        stream=True,
        stream_options={"include_usage": True},
        temperature=0,
    )
    parts = list(stream)
    text = "".join(p.choices[0].delta.content or "" for p in parts if p.choices)
    assert text == chat.choices[0].message.content and parts[-1].usage.completion_tokens == 3
    with pytest.raises(openai.BadRequestError, match="logit_bias"):
        api.completions.create(model="tiny", prompt=PROMPT, logit_bias={"5": 1})
