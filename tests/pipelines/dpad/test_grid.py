"""Paired accuracy differences of the decoder grid and their table."""

from __future__ import annotations

import pytest

from rayworks.pipelines.dpad.grid import accuracy_diffs
from rayworks.pipelines.dpad.report import diff_table


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
