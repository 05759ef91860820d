"""`run_vudg` in this process (fan_out runs the pieces here without Ray): scores, piece cache."""

from __future__ import annotations

import json

from rayworks.core.config import build_config
from rayworks.pipelines.vudg.config import VUDGConfig
from rayworks.pipelines.vudg.pipeline import run_vudg
from rayworks.platform.context import RunContext

TINY = [
    "data.domains=[fog,night]",
    "data.n_train=4",
    "data.n_test=3",
    "held_out=[night]",
    "sources=[fog]",
    "model.width=4",
    "model.hidden=8",
]


def test_in_process_run_scores_every_protocol_and_reuses_cached_pieces(tmp_path) -> None:
    cfg = build_config(VUDGConfig, "smoke", (), TINY)
    first = run_vudg(cfg, RunContext.create("vudg", cfg, tmp_path))
    pieces = sorted((tmp_path / "cache/vudg/pieces").glob("piece-*/result.json"))
    assert len(pieces) == 3  # lodo-night, all, single-fog
    stamps = [p.stat().st_mtime_ns for p in pieces]
    again = run_vudg(cfg, RunContext.create("vudg", cfg, tmp_path))
    assert [p.stat().st_mtime_ns for p in pieces] == stamps  # read back, not retrained
    assert again == first
    assert first["accuracy"] == first["lodo_accuracy"] == first["acc_night"]
    # single-source from fog is scored on night only: Avg_s = that accuracy
    single = json.loads(pieces[0].read_text())
    assert {r["label"] for r in map(json.loads, (p.read_text() for p in pieces))} == {
        "lodo-night",
        "all",
        "single-fog",
    }
    assert single["n_params"] == first["n_params"]
