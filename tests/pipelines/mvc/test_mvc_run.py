"""`mvc` end to end through the CLI (smoke preset): records, summary, table, plots, wavs,
checkpoints."""

from __future__ import annotations

import json
import math
import shutil
import wave

import pytest


@pytest.mark.skipif(
    shutil.which("espeak-ng") is None,
    reason="espeak-ng is not installed (apt-get install espeak-ng)",
)
def test_smoke_run_through_cli(smoke_run) -> None:
    done = smoke_run("mvc")
    run, summary, rows = done.dir, done.summary, done.records
    arms = {r["arm"] for r in rows if "arm" in r}
    assert arms == {"mvc", "attn", "meanprosody"}
    assert {r["step"] for r in rows if r.get("arm") == "mvc"} == {2, 4, 6}
    for key in ("mcd", "mcd_dtw", "log_f0_rmse", "log_dur_mae", "per", "attn_mcd", "attn_per"):
        assert math.isfinite(summary[key]) and summary[key] >= 0, key
    assert summary["pass_rule"] in (0.0, 1.0) and summary["stream_max_abs_diff"] < 1e-4
    # MCD above the decoder floor, and the gain over the mean-prosody (floor) arm, per arm
    floor, flat = summary["mcd_decoder_floor"], summary["meanprosody_mcd"]
    for prefix in ("", "attn_", "meanprosody_"):
        mcd = summary[prefix + "mcd"]
        assert summary[prefix + "mcd_above_floor"] == pytest.approx(mcd - floor)
        gain = summary[prefix + "gain_vs_meanprosody"]
        assert gain == pytest.approx((flat - mcd) / (flat - floor))
    assert summary["meanprosody_gain_vs_meanprosody"] == 0.0
    assert summary["above_floor_ratio"] == pytest.approx(
        summary["mcd_above_floor"] / summary["attn_mcd_above_floor"]
    )
    assert summary["pass_parity_mcd"] == float(abs(summary["above_floor_ratio"] - 1) <= 0.05)
    assert summary["attn_mem_slope"] > 0 and summary["mvc_time_slope"] == summary["mvc_time_slope"]
    table = [json.loads(line) for line in (run / "artifacts/table.jsonl").read_text().splitlines()]
    assert {t["label"] for t in table if t.get("kind") == "arm"} == {"mvc", "attn", "meanprosody"}
    assert {t["encoder"] for t in table if "encoder" in t} == {"attn", "mvc", "mvc_causal"}
    assert "| mvc |" in (run / "artifacts/table.md").read_text()
    for name in ("loss_curves", "scaling"):
        assert (run / f"artifacts/{name}.png").stat().st_size > 1000
    wavs = sorted(p.name for p in (run / "artifacts/samples").glob("*.wav"))
    assert len(wavs) == 5 and any(n.startswith("ground_truth") for n in wavs)
    with wave.open(str(run / "artifacts/samples" / wavs[0])) as fh:
        assert fh.getframerate() == 16000 and fh.getnframes() > 1000
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["attn", "meanprosody", "mvc"]
    assert (run / "checkpoints/mvc/step_00000006/stack.safetensors").is_file()
