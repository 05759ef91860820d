"""`lestd` end to end through the CLI (smoke preset): records, summary, table and plot."""

from __future__ import annotations

import json

import pytest


def test_smoke_run_through_cli(smoke_run) -> None:
    done = smoke_run("lestd")
    run, summary, rows, runs = done.dir, done.summary, done.records, done.runs
    assert [r["step"] for r in rows if "val_bpc" in r] == [4, 16]
    for r in rows:
        assert r["achieved_ratio"] >= r["step"] and r["domain_gap"] < 1e-3
        assert r["tucker_achieved_ratio"] >= r["step"] and r["svd_achieved_ratio"] >= r["step"]
        assert 0 < r["density"] <= 1 and r["logit_err"] > 0
    assert summary["val_bpc"] == pytest.approx(summary["val_bpc_r16"])
    assert summary["lm_val_bpc"] > 0 and "pass_rule" in summary
    for prefix in ("", "tucker_", "svd_", "lestd_norefit_"):
        lo, mid, hi = (summary[f"{prefix}val_bpc{k}_r16"] for k in ("_lo", "", "_hi"))
        assert lo <= mid <= hi and lo < hi
    for rival in ("tucker_", "svd_", "lestd_norefit_"):
        diff = summary[f"{rival}val_bpc_r16"] - summary["val_bpc_r16"]
        assert summary[f"{rival}diff_r16"] == pytest.approx(diff)
        assert summary[f"{rival}diff_lo_r16"] <= summary[f"{rival}diff_hi_r16"]
        # the headline ratio's values unsuffixed: bench reads in-run arms' rows from them
        assert summary[f"{rival}val_bpc"] == summary[f"{rival}val_bpc_r16"]
    table = [json.loads(line) for line in (run / "artifacts/table.jsonl").read_text().splitlines()]
    assert {(t["method"], t["ratio"]) for t in table} == {
        (m, r) for m in ("lestd", "lestd_norefit", "tucker", "svd") for r in (4, 16)
    }
    assert "| 16 | lestd |" in (run / "artifacts/table.md").read_text()
    assert (run / "artifacts/bpc_vs_ratio.png").stat().st_size > 1000
    [lm] = list(runs.glob("cache/lestd_lm/lm-*/train.json"))
    assert json.loads(lm.read_text())["train_rows"] > 0
    log = [json.loads(line) for line in (lm.parent / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [30, 60] and all(r["val_bpc"] > 0 for r in log)
    assert json.loads(lm.read_text())["lm_monitor_bpc"] == pytest.approx(log[-1]["val_bpc"])
