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


def test_validation_split_comes_from_the_training_domains(tmp_path) -> None:
    """model.val_fraction holds out training clips (never test ones): fewer clips train,
    and every epoch leaves a per-type validation accuracy in val_curve_<run>.jsonl."""
    from rayworks.pipelines.vudg.dataset import cached_dataset
    from rayworks.pipelines.vudg.train import train_piece

    cfg = build_config(VUDGConfig, "smoke", (), [*TINY, "model.epochs=2"])
    data = cached_dataset(
        tmp_path, cfg.data.model_dump(mode="json"), cfg.annotation.model_dump(mode="json"), 0
    )
    model = cfg.model.model_dump(mode="json")
    args = {"data_dir": str(data), "train_domains": ["fog"], "test_domains": ["night"], "seed": 0}
    full = train_piece(model=model, label="a", **args)
    half = train_piece(model={**model, "val_fraction": 0.5}, label="b", **args)
    assert full["clips"] == {"train": 4, "val": 0} and "val_curve" not in full
    assert half["clips"] == {"train": 2, "val": 2}
    assert [c["epoch"] for c in half["val_curve"]] == [1, 2]
    for c in half["val_curve"]:
        assert all(
            0 <= c[f"val_acc_{t}"] <= 1 for t in ("action", "attribute", "object", "temporal")
        )
    assert len(half["predictions"]) == len(full["predictions"])  # the test set is untouched
    cfg = build_config(VUDGConfig, "smoke", (), [*TINY, "model.val_fraction=0.5"])
    ctx = RunContext.create("vudg", cfg, tmp_path)
    run_vudg(cfg, ctx)
    assert len((ctx.artifacts_dir / "val_curve_lodo-night.jsonl").read_text().splitlines()) == 1
