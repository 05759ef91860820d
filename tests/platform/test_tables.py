"""tables.cell: numbers by spec, gaps as "-", anything else as its str."""

from __future__ import annotations

import math

from rayworks.platform.tables import cell


def test_cell_formats_numbers_and_marks_gaps() -> None:
    assert cell(0.123456) == "0.1235" and cell(0.123456, ".3f") == "0.123"
    assert cell(7, ".3g") == "7" and cell(True) == "1"
    assert cell(None) == "-" and cell(math.nan, ".3f") == "-"
    assert cell("rae_noshift") == "rae_noshift"
