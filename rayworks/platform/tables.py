"""One cell of a results table (`artifacts/table.md`): numbers formatted, gaps shown as "-"."""

from __future__ import annotations

import math
from typing import Any


def cell(x: Any, spec: str = ".4g") -> str:
    """`x` formatted with `spec` if it is a number, "-" if it is None or NaN, else str(x)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec) if isinstance(x, int | float) else str(x)
