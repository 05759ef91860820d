"""`rayworks eval NAME`: run a registered evaluation on a checkpoint or a predictions file.

Inputs are checked before any model is loaded; metrics are printed and optionally written
as JSON (`--out`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rayworks.core.config import build_config
from rayworks.platform.registry import get_evaluation


def run_evaluation(
    name: str,
    checkpoint: str | None = None,
    predictions: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    out: str | None = None,
) -> dict[str, Any]:
    spec = get_evaluation(name)
    extra = [f"checkpoint={checkpoint}"] if checkpoint else []
    extra += [f"predictions={predictions}"] if predictions else []
    cfg = build_config(spec.config, None, (), [*extra, *overrides])
    metrics = spec.fn(cfg)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(metrics, indent=2, sort_keys=True))
    return metrics
