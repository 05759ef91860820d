"""Per-cell seed aggregation (`cells.py`) and which arms the seed can move at all."""

from __future__ import annotations

import json

import yaml

from rayworks.pipelines.aqer.cells import cell_lines, collect, headline_lines
from rayworks.pipelines.aqer.pieces import run_piece

SPEC = {
    "family": "tfim",
    "index": 0,
    "name": "tfim/h=1.0",
    "n_qubits": 4,
    "tfim_fields": [1.0],
    "depth": 3,
}
AQER = {
    "nm_tol": 1e-4,
    "nm_max_evals": 300,
    "nm_init_step": 0.5,
    "adam_steps": 5,
    "lr": 1e-2,
    "pair_order": "greedy",
    "init": "step_one",
}


def _run(root, name: str, seed: int, rows: list[dict]) -> None:
    run = root / name
    (run / "artifacts").mkdir(parents=True)
    (run / "config.yaml").write_text(
        yaml.safe_dump({"seed": seed, "gate_count": "cnot", "n_qubits": 10})
    )
    (run / "artifacts/table.jsonl").write_text("\n".join(json.dumps(r) for r in rows))


def test_cells_group_by_seed_and_count_wins(tmp_path) -> None:
    def row(arm: str, inf: float) -> dict:
        return {
            "arm": arm,
            "target": "tfim/h=1.0",
            "family": "tfim",
            "g": 54,
            "g_used": 54,
            "infidelity": inf,
        }

    for seed, (a, h, m) in enumerate([(0.01, 0.2, 0.005), (0.01, 0.3, 0.005), (0.01, 0.1, 0.02)]):
        _run(tmp_path, f"aqer{seed}", seed, [row("aqer", a)])
        _run(tmp_path, f"hec{seed}", seed, [row("hec", h)])
        _run(tmp_path, f"mps{seed}", seed, [row("mps", m)])
    _run(tmp_path, "aqer_again", 0, [row("aqer", 0.9)])  # a second seed-0 record is ignored
    settings, cells = collect([tmp_path])
    assert settings == {"gate_count": "cnot", "n_qubits": 10}
    line = cell_lines(cells)[-1]
    assert line.startswith("| tfim/h=1.0 | 54 | 0.01 [0.01, 0.01] (3) | 0.2 [")
    assert line.endswith("| 3/3 / 1/3 |") and "0.01 [-0.0115, 0.0315] (3) (54)" in line
    assert "| 54 | 0.01 [0.01, 0.01] (3) | 0.2 [-0.0484, 0.448] (3) |" in "\n".join(
        headline_lines(cells)
    )


def test_only_the_hec_arm_depends_on_the_seed() -> None:
    """AQER (greedy Step I, Step III from Steps I-II) and the MPS loader use no random
    numbers, so their seeds repeat one computation; the HEC's random starts do change."""
    out = {}
    for seed in (0, 1):
        spec = {**SPEC, "seed": seed}
        one = run_piece("step_one", spec=spec, n_blocks=4, settings=AQER)
        out[seed] = (
            run_piece("aqer", spec=spec, n_blocks=4, one=one, settings=AQER)["infidelity"],
            run_piece("mps", spec=spec, max_layers=2, chi=2)["curve"],
            run_piece(
                "hec", spec=spec, n_rzz=4, settings={"adam_steps": 5, "lr": 1e-2, "restarts": 1}
            )["infidelity"],
        )
    assert out[0][:2] == out[1][:2] and out[0][2] != out[1][2]
