"""`speckv` end to end through the CLI (smoke preset), batched decoding, config errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rayworks.core.config import build_config
from rayworks.core.errors import ConfigError
from rayworks.models.kv_forward import KVCache, forward
from rayworks.pipelines.speckv.config import SnapKVConfig, SpecKVConfig
from rayworks.pipelines.speckv.evaluate import decode, decode_batch, recall_at, stack


def test_smoke_run_through_cli(cli, cli_env) -> None:
    cli(["run", "speckv", "--preset", "smoke", "--no-progress"])
    runs = Path(cli_env["RAYWORKS_RUNS_DIR"])
    [run] = list(runs.glob("speckv/*/"))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert 0 <= summary["accuracy"] <= 1 and summary["accuracy"] == summary["acc_speckv_c8"]
    assert 0 < summary["recall_speckv_c8"] <= summary["recall_speckv_c32"] <= 1
    assert summary["recall_diff_lo_c8"] <= summary["recall_diff_c8"] <= summary["recall_diff_hi_c8"]
    assert summary["pass_rule"] in (0.0, 1.0)
    assert 0 <= summary["agree_speckv_c8"] <= 1 and 0 <= summary["agree_specpc_c32"] <= 1
    rows = [json.loads(x) for x in (run / "artifacts" / "table.jsonl").read_text().splitlines()]
    got = {(r["row"], r["budget"]) for r in rows}
    cfg = build_config(SpecKVConfig, "smoke", (), [])
    for budget in cfg.budgets:
        assert {(row, budget) for row in [*cfg.kv_rows, *cfg.pc_rows]} <= got
    assert ("speckv_pc32", 8) in got and ("full", 0) in got
    small = [r for r in rows if r["budget"] == 8 and r["row"] in cfg.kv_rows]
    full_bytes = rows[0]["kv_bytes"]
    assert all(r["kv_bytes"] < full_bytes for r in small)
    assert (run / "artifacts" / "accuracy_vs_budget.png").stat().st_size > 1000
    steps = [
        m["step"]
        for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
        if "accuracy" in m
    ]
    assert steps == sorted(cfg.budgets)
    models = json.loads((run / "artifacts" / "models.json").read_text())
    assert all((Path(p) / "model.safetensors").is_file() for p in models.values())
    assert all((Path(p) / "tokenizer.json").is_file() for p in models.values())


def test_batched_decode_equals_one_by_one() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=30,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(3, 30, (1, 20))
    with torch.no_grad():
        full = KVCache()
        logits = forward(model, ids, cache=full, logits_rows=slice(-1, None))[:, -1]
        keeps = [[torch.randperm(19)[:6].sort().values.expand(1, 1, 6)] * 2 for _ in range(3)]
        caches = [full.select(k) for k in keeps]
        one = [decode(model, full.select(k), logits, 7, eos=2) for k in keeps]
        many = decode_batch(model, stack(caches), logits.expand(3, -1), 7, eos=2)
    assert many == one


def test_recall_at_counts_the_kept_mass() -> None:
    mass = torch.tensor([[[1.0, 2.0, 3.0, 4.0]]])  # [1, 1 head, 4 keys]
    assert recall_at([torch.tensor([[[3]]])], [mass]) == pytest.approx(0.4)
    assert recall_at([torch.tensor([[[0, 1, 2, 3]]])], [mass]) == pytest.approx(1.0)


def test_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match="kv_rows"):
        build_config(SpecKVConfig, "smoke", (), ["kv_rows=[snapkv,pyramid]"])
    with pytest.raises(ConfigError, match="budget=12"):
        build_config(SpecKVConfig, "smoke", (), ["budget=12"])
    with pytest.raises(ConfigError, match=r"kv\.window"):
        build_config(SpecKVConfig, "smoke", (), ["kv.window=0"])
    with pytest.raises(ConfigError, match="max_seq_len"):
        build_config(SpecKVConfig, "smoke", (), ["tasks.context_len=400"])
    snap = build_config(SnapKVConfig, "smoke", (), [])
    assert snap.method == "snapkv" and snap.kv_rows == ["snapkv"] and snap.pc_rows == []
    assert build_config(SpecKVConfig, None, (), []).budgets == [8, 16, 32, 64]
