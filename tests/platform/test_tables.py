"""tables.cell: numbers by spec, gaps as "-", anything else as its str."""

from __future__ import annotations

import math

from rayworks.platform.tables import cell


def test_cell_formats_numbers_and_marks_gaps() -> None:
    assert cell(0.123456) == "0.1235" and cell(0.123456, ".3f") == "0.123"
    assert cell(7, ".3g") == "7" and cell(True) == "1"
    assert cell(None) == "-" and cell(math.nan, ".3f") == "-"
    assert cell("rae_noshift") == "rae_noshift"


def test_write_table_writes_the_same_rows_to_jsonl_and_markdown(tmp_path) -> None:
    import json

    from rayworks.platform.tables import Column, write_table

    rows = [
        {"arm": "vulcan", "acc": 0.94444, "gap": None, "extra": [1, 2]},
        {"arm": "direct", "acc": math.nan},
    ]
    md = write_table(
        tmp_path,
        rows,
        ["arm", Column("acc", "S-test acc", ".2%"), Column("gap", "prune gap")],
        title="r = 0.8",
    )
    assert md.read_text().splitlines() == [
        "r = 0.8",
        "",
        "| arm | S-test acc | prune gap |",
        "|---|---|---|",
        "| vulcan | 94.44% | - |",
        "| direct | - | - |",
    ]
    back = [json.loads(line) for line in (tmp_path / "table.jsonl").read_text().splitlines()]
    assert back[0] == {"arm": "vulcan", "acc": 0.94444, "gap": None, "extra": [1, 2]}
    assert math.isnan(back[1]["acc"]) and len(back) == 2


def test_rendered_and_right_aligned_columns_further_tables_and_other_jsonl_rows(tmp_path) -> None:
    import json

    from rayworks.platform.tables import Column, Table, write_table

    rows = [{"m": "map", "p": 0.5, "r": 0.25, "mre": 0.0123}]
    pr = Column("p", "P / R", render=lambda r: f"{r['p']:.3f} / {r['r']:.3f}")
    md = write_table(
        tmp_path,
        rows,
        ["m", pr, Column("mre", "MRE", ".2%", right=True)],
        more=[Table([{"n": 8, "s": 1.5}], ["n", "s"], "scaling")],
        jsonl=[{"piece": 1}, {"piece": 2}],
        footer="slopes: 1.00",
    )
    assert md.read_text().splitlines() == [
        "| m | P / R | MRE |",
        "|---|---|---:|",
        "| map | 0.500 / 0.250 | 1.23% |",
        "",
        "scaling",
        "",
        "| n | s |",
        "|---|---|",
        "| 8 | 1.5 |",
        "",
        "slopes: 1.00",
    ]
    back = [json.loads(line) for line in (tmp_path / "table.jsonl").read_text().splitlines()]
    assert back == [{"piece": 1}, {"piece": 2}]
