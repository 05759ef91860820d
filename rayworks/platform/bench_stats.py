"""`rayworks bench` statistics: per-arm headline and report keys as mean and 95% Student-t
interval over seeds (`platform/stats.py`), ratios against the baselines, and the curves of
the headline read from every run's metrics.jsonl."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rayworks.platform import stats

Stat = dict[str, Any]  # {"values": [...], "mean": m, "ci95": [lo, hi]}


def mean_ci(values: list[float]) -> tuple[float, tuple[float, float]]:
    """Mean and 95% t-interval (`stats.mean_ci`; a single value has a zero-width one)."""
    mean, lo, hi = stats.mean_ci(values)
    return mean, (lo, hi)


def as_number(value: Any) -> float:
    """A summary or metrics value as a float; missing or non-numeric values are NaN.

    RunContext writes non-finite floats as the strings 'nan'/'inf', which float() reads.
    """
    if isinstance(value, bool):
        return float("nan")
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def stat(values: list[float]) -> Stat:
    """Values with their mean and 95% t-interval, as stored in bench.json."""
    mean, ci = mean_ci(values)
    return {"values": values, "mean": mean, "ci95": list(ci)}


def summarize(
    name: str,
    key: str,
    mode: str,
    arms: Sequence[tuple[str, str]],
    values: Mapping[str, list[float]],
    command: str,
    failures: list[str],
    *,
    report: Sequence[str] = (),
    secondary: Mapping[str, Mapping[str, list[float]]] | None = None,
    curves: Mapping[str, Mapping[str, Stat]] | None = None,
    seeds: Mapping[str, list[int]] | None = None,
) -> dict[str, Any]:
    """bench.json's content: per-arm headline and `report` statistics, ratio and curves.

    `arms` is (name, role) in table order, the method first; `secondary[arm][k]` holds the
    per-seed values of report key `k` (absent: none); `curves` (see `curves()`) is stored
    in the same arm order. `seeds[arm]` names the seed of each of `values[arm]`; with it,
    every other arm gets `paired`: its headline minus the method's, seed by seed, over the
    seeds both completed (the interval of a difference the shared seeds make tighter).
    """
    rows = []
    method = arms[0][0] if arms else None
    for arm, role in arms:
        extra = (secondary or {}).get(arm, {})
        rows.append(
            {
                "name": arm,
                "role": role,
                **stat(list(values[arm])),
                "secondary": {k: stat(list(extra.get(k, []))) for k in report},
            }
        )
        if seeds is not None and arm != method:
            mine = dict(zip(seeds[arm], values[arm], strict=True))
            theirs = dict(zip(seeds[method], values[method], strict=True))
            rows[-1]["paired"] = stat([mine[s] - theirs[s] for s in sorted(mine) if s in theirs])
    base = next((r for r in rows if r["role"] == "baseline"), None)
    ratio = rows[0]["mean"] / base["mean"] if base and base["mean"] not in (0, None) else None
    return {
        "pipeline": name,
        "headline": [key, mode],
        "report": list(report),
        "command": command,
        "arms": rows,
        "ratio": ratio,
        "failures": failures,
        "curves": {a: dict(curves[a]) for a, _ in arms if curves and a in curves},
    }


def read_metric(path: Path, key: str) -> dict[int, float]:
    """`{step: value}` of `key` in one metrics.jsonl; the last value logged at a step wins.

    A missing file, malformed lines and lines without `key` or a numeric step are skipped.
    """
    out: dict[int, float] = {}
    lines = path.read_text(errors="replace").splitlines() if path.is_file() else []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or key not in rec:
            continue
        step = as_number(rec.get("step"))
        if math.isfinite(step):
            out[int(step)] = as_number(rec[key])
    return out


def curves(
    key: str, paths: Mapping[str, Sequence[Path]], prefixes: Mapping[str, str] | None = None
) -> dict[str, dict[str, Stat]]:
    """Per arm, per step (a string, as in JSON), the statistics of `key` over its runs.

    `paths` maps an arm to its runs' metrics.jsonl files; `prefixes[arm]` (an arm computed
    in the method's runs) is what that arm's keys carry there. Empty when no run logged
    `key` at more than one step: a single point is no curve.
    """
    prefixes = prefixes or {}
    logs = {
        arm: [read_metric(p, prefixes.get(arm, "") + key) for p in files]
        for arm, files in paths.items()
    }
    if not any(len(log) > 1 for runs in logs.values() for log in runs):
        return {}
    out: dict[str, dict[str, Stat]] = {}
    for arm, runs in logs.items():
        steps = sorted({s for log in runs for s in log})
        out[arm] = {str(s): stat([log[s] for log in runs if s in log]) for s in steps}
    return out
