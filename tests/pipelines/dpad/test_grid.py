"""Paired accuracy differences of the decoder grid and their table."""

from __future__ import annotations

import pytest

from rayworks.pipelines.dpad.grid import accuracy_diffs
from rayworks.pipelines.dpad.report import diff_table, seed_rows
from rayworks.platform.stats import t95


def test_accuracy_diffs_pair_each_variant_with_its_reference() -> None:
    correct = {
        "vanilla_et": [True, False, True, False],
        "dpad_et": [True, True, True, False],
        "w0_et": [False, False, True, False],
    }
    out = accuracy_diffs(correct)
    assert out["dpad_et/acc_diff_vs_vanilla_et"] == pytest.approx(0.25)
    assert out["w0_et/acc_diff_vs_vanilla_et"] == pytest.approx(-0.25)
    assert out["w0_et/acc_diff_vs_dpad_et"] == pytest.approx(-0.5)
    assert (
        out["dpad_et/acc_diff_vs_vanilla_et_lo"] < 0.25 < out["dpad_et/acc_diff_vs_vanilla_et_hi"]
    )
    # pairs whose reference did not run are left out, not filled with zeros
    assert not any("uniform" in key or "parallel" in key for key in out)


def test_diff_table_has_one_line_per_pair_and_a_column_per_length() -> None:
    rows = []
    for g, flips in ((64, 0), (128, 1)):
        ref = [True, True, False, False]
        rows.append(
            {
                "gen_length": float(g),
                **accuracy_diffs(
                    {
                        "vanilla_et": ref,
                        "dpad_et": [not c if i < flips else c for i, c in enumerate(ref)],
                    }
                ),
            }
        )
    table = diff_table(rows).splitlines()
    assert table[0] == "| decoder - reference | gen 64 | gen 128 |"
    assert table[2].startswith("| dpad_et - vanilla_et | +0.000 [+0.000, +0.000] | -0.250 [")
    assert len(table) == 3
    assert diff_table([{"gen_length": 64.0}]) == ""


def test_seed_rows_pair_decoders_over_seeds() -> None:
    """Differences are paired over seeds: a constant gap has a zero-width interval even
    when the accuracies themselves vary from seed to seed."""
    summaries = [
        {
            "accuracy_g64": d,
            "dpad_et_acc_g64": d,
            "vanilla_et_acc_g64": d - 0.1,
            "w0_et_acc_g64": w,
            "dpad_et_speedup_tokens_vs_vanilla_et_g64": 2.0,
        }
        for d, w in ((0.9, 0.5), (0.7, 0.6), (0.8, 0.4))
    ]
    [row] = seed_rows(summaries)
    assert row["gen"] == 64 and row["seeds"] == 3
    assert row["dpad-van_mean"] == pytest.approx(0.1)
    assert row["dpad-van_lo"] == pytest.approx(0.1) and row["dpad-van_hi"] == pytest.approx(0.1)
    assert row["w0-dpad_mean"] == pytest.approx(-0.3)
    # w0 - dpad = -0.4, -0.1, -0.4: std 0.1 * sqrt(3), half-width t95(2) * std / sqrt(3)
    assert row["w0-dpad_hi"] - row["w0-dpad_mean"] == pytest.approx(t95(2) * 0.1)
    assert row["dpad_et_acc_lo"] < 0.8 < row["dpad_et_acc_hi"]
    assert row["speedup_tokens"] == "2.000 [2.000, 2.000]" and "dpad-unif" not in row
