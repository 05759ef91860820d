"""The completed runs of one pipeline under bench or run folders, with their configs: the
input of the per-seed tables (`dpad_seeds.py`, `vudg_seeds.py`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml


def completed_runs(paths: list[Path], pipeline: str) -> list[tuple[Path, dict, dict[str, Any]]]:
    """(run folder, summary, config) of every completed run: a bench folder gives its
    `runs/<pipeline>/*`, a run folder itself; SystemExit naming the folders if none."""
    runs: list[Path] = []
    for path in paths:
        runs += sorted(path.glob(f"runs/{pipeline}/*")) if (path / "runs").is_dir() else [path]
    done = []
    for run in runs:
        if not (run / "summary.json").is_file():
            continue
        summary = json.loads((run / "summary.json").read_text())
        if summary.get("status", "completed") == "completed":
            done.append((run, summary, yaml.safe_load((run / "config.yaml").read_text())))
    if not done:
        raise SystemExit(f"no completed {pipeline} run under {[str(p) for p in paths]}")
    return done
