"""The completion engine under a KV policy: same text when nothing is dropped, bytes saved
when something is, and 400s naming `kv_policy` / `kv_budget` (no Ray Serve needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rayworks.core.errors import RayworksError
from rayworks.models import DecoderSpec, TokenizerSpec, build_decoder, train_tokenizer
from rayworks.platform.completion_engine import CompletionEngine
from rayworks.platform.kv_serving import KVServing
from rayworks.platform.openai_api import APIError, CompletionRequest

TEXTS = ["the quick brown fox jumps over the lazy dog", "0123456789 abcdefghij klmnop"]
PROMPT = "the lazy dog jumps over the quick brown fox 0123456789 abc"


def save_model(path: Path, seed: int, n_layer: int) -> Path:
    torch.manual_seed(seed)
    tok = train_tokenizer(TokenizerSpec(), TEXTS)
    spec = DecoderSpec(d_model=32, n_layer=n_layer, n_head=4, n_kv_head=2, max_seq_len=256)
    model = build_decoder(spec, len(tok), tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("kv")
    return save_model(root / "target", 0, 2), save_model(root / "draft", 1, 1)


@pytest.fixture(scope="module")
def engine(folders) -> CompletionEngine:
    target, draft = folders
    return CompletionEngine(target, "t", KVServing(draft=str(draft), lookahead=8))


def greedy(engine: CompletionEngine, **extra) -> dict:
    req = CompletionRequest(prompt=[PROMPT, "abc"], max_tokens=12, temperature=0, **extra)
    return engine.complete(req)


def texts(answer: dict) -> list[str]:
    return [c["text"] for c in answer["choices"]]


def test_policies_that_keep_everything_decode_like_the_plain_engine(engine) -> None:
    plain = greedy(engine)
    assert "kv_cache" not in plain["usage"]
    n_prompt = len(engine.encode([PROMPT])[0])
    for policy in ("full", "snapkv", "speckv", "streaming", "h2o", "random"):
        kept = greedy(engine, kv_policy=policy, kv_budget=n_prompt)
        assert texts(kept) == texts(plain), policy
        assert kept["usage"]["kv_cache"]["bytes_saved"] == 0


def test_a_small_budget_saves_memory_and_speckv_runs_its_draft(engine) -> None:
    n_prompt = len(engine.encode([PROMPT])[0])
    out = greedy(engine, kv_policy="speckv", kv_budget=8)
    kv = out["usage"]["kv_cache"]
    per_entry = 2 * 2 * 2 * 8 * 4  # layers x (k, v) x kv heads x head_dim x fp32
    assert kv["policy"] == "speckv" and kv["budget"] == 8
    assert kv["bytes_full"] == per_entry * (n_prompt + 3)  # the two prompts: PROMPT and "abc"
    assert kv["bytes"] == per_entry * (8 + 3)  # "abc" is under the budget: kept whole
    assert kv["bytes_saved"] == kv["bytes_full"] - kv["bytes"] > 0
    assert kv["draft_seconds"] > 0
    assert all(c["finish_reason"] in ("length", "stop") for c in out["choices"])


def test_request_errors_name_the_field(engine, folders) -> None:
    with pytest.raises(APIError, match="allowed") as err:
        greedy(engine, kv_policy="lru", kv_budget=8)
    assert err.value.status == 400 and err.value.body["param"] == "kv_policy"
    with pytest.raises(APIError) as err:
        greedy(engine, kv_policy="snapkv")
    assert err.value.body["param"] == "kv_budget"
    no_draft = CompletionEngine(folders[0], "t")
    with pytest.raises(APIError, match="draft") as err:
        greedy(no_draft, kv_policy="speckv", kv_budget=8)
    assert err.value.body["param"] == "kv_policy"


def test_server_settings_are_checked_before_serving(folders, tmp_path) -> None:
    with pytest.raises(RayworksError, match="--draft"):
        KVServing(policy="speckv", budget=8).check()
    with pytest.raises(RayworksError, match="--kv-budget"):
        KVServing(policy="snapkv").check()
    with pytest.raises(RayworksError, match="unknown"):
        KVServing(policy="lru").check()
    odd = save_model(tmp_path / "odd", 2, 1)
    (odd / "tokenizer.json").unlink()
    cfg = build_decoder(DecoderSpec(d_model=16, n_layer=1, n_head=2), vocab_size=7)
    cfg.save_pretrained(odd)
    with pytest.raises(RayworksError, match="vocab_size 7"):
        CompletionEngine(folders[0], "t", KVServing(draft=str(odd)))
