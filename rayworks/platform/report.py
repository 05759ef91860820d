"""`rayworks report`: one self-contained HTML page for run and bench directories.

Inputs are run dirs (holding config.yaml), bench dirs (holding bench.json) or any folder
above them (`runs/`, `runs/lm/`), which is expanded to every run/bench dir below it.
Plots are drawn on matplotlib's Agg canvas (no pyplot, no global backend change) and
embedded as base64 `data:` URIs, as are the PNGs in each run's `artifacts/` and each
bench's bench.png and curve.png, so the single index.html can be shared as it is (no JS,
no network). A run's `artifacts/**/*.table.json` files (`{"title", "columns", "rows"}`, e.g.
the lm-evaluation-harness metrics of `rayworks eval harness`) are shown as tables.
Malformed metrics lines are skipped, counted and shown; they never abort the report.
"""

from __future__ import annotations

import base64
import io
import json
import math
import os
import time
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from rayworks.core.errors import RayworksError
from rayworks.platform import registry

SKIP_KEYS = {"step", "time"}
NONFINITE = ("nan", "inf", "-inf", "infinity", "-infinity")
CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:1250px;color:#222}"
    "table{border-collapse:collapse;margin:.5em 0 1em}td,th{border:1px solid #ccc;"
    "padding:3px 8px;text-align:left;font-size:.9em}th{background:#f2f2f2}"
    "img{max-width:100%;border:1px solid #eee;margin:4px 0}pre{background:#f7f7f7;"
    "padding:8px;overflow-x:auto}.warn{color:#a40}section{border-top:2px solid #ddd;margin-top:2em}"
)
BENCH_HEAD = ["bench", "pipeline", "headline", "method mean [95% CI]", "baseline mean [95% CI]"]
RUNS_HEAD = ["pipeline", "run id", "status", "wall", "headline", "malformed metric lines"]
PAIR_HEAD = ["pair", "headline", "method mean", "baseline mean", "ratio method/baseline"]
Panels = dict[str, list[tuple[str, list[float], list[float]]]]


@dataclass
class Run:
    path: Path
    pipeline: str
    summary: dict[str, Any]
    config_text: str
    records: list[dict[str, Any]]
    malformed: int
    notes: list[str] = field(default_factory=list)
    progress: dict[str, Any] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return str(self.summary.get("run_id") or self.path.name)


def _is_run(p: Path) -> bool:
    return (p / "config.yaml").is_file()


def _is_bench(p: Path) -> bool:
    return (p / "bench.json").is_file()


def _is_dir(p: Path) -> bool:
    return _is_run(p) or _is_bench(p)


def expand(paths: list[str | Path]) -> tuple[list[Path], list[Path]]:
    """(run dirs, bench dirs) named by or found below `paths`, sorted, without duplicates."""
    runs: list[Path] = []
    benches: list[Path] = []
    for raw in paths:
        p = Path(raw).absolute()
        if not p.is_dir():
            raise RayworksError(
                f"report input {str(raw)!r} does not exist or is not a directory; expected a run "
                "dir (holding config.yaml), a bench dir (holding bench.json) or a folder above them."
            )
        found = 0
        for root, dirs, _ in os.walk(p):
            here = Path(root)
            if _is_dir(here):
                (runs if _is_run(here) else benches).append(here)
                found += 1
                dirs.clear()  # nothing below a run/bench dir is another one
            else:
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if not found:
            raise RayworksError(
                f"report input {str(raw)!r} holds no run dir (a folder with config.yaml) and no "
                "bench dir (a folder with bench.json), neither itself nor below it."
            )
    return sorted(set(runs)), sorted(set(benches))


def _num(v: Any) -> float | None:
    """A plottable number: int/float (not bool) or the 'nan'/'inf' strings RunContext writes."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str) and v.strip().lower() in NONFINITE:
        return float(v)
    return None


def _read_json(path: Path, notes: list[str]) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        notes.append(f"{path.name} is malformed ({exc}); ignored")
        return {}
    if not isinstance(data, dict):
        notes.append(f"{path.name} is not a JSON object; ignored")
        return {}
    return data


def load_run(path: Path) -> Run:
    notes: list[str] = []
    if not (path / "summary.json").is_file():
        notes.append("no summary.json (run still going, crashed or killed)")
    summary = _read_json(path / "summary.json", notes)
    progress = _read_json(path / "progress.json", notes)
    records: list[dict[str, Any]] = []
    malformed = 0
    mp = path / "metrics.jsonl"
    for line in mp.read_text(errors="replace").splitlines() if mp.is_file() else []:
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if isinstance(rec, dict) and _num(rec.get("step")) is not None:
            records.append(rec)
        else:
            malformed += 1
    pipeline = str(summary.get("pipeline") or path.parent.name)
    config_text = (path / "config.yaml").read_text(errors="replace")
    return Run(path, pipeline, summary, config_text, records, malformed, notes, progress)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return json.dumps(v) if isinstance(v, dict | list) else str(v)


def _img(data: bytes, alt: str) -> str:
    uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    return f'<img src="{uri}" alt="{escape(alt)}">'


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    cells = ("".join(f"<td>{escape(_fmt(c))}</td>" for c in row) for row in rows)
    return f"<table><tr>{head}</tr>" + "".join(f"<tr>{c}</tr>" for c in cells) + "</table>"


def _warn(text: str) -> str:
    return f'<p class="warn">{escape(text)}</p>'


def series(records: list[dict[str, Any]]) -> dict[str, tuple[list[float], list[float]]]:
    """Every numeric metric key -> (steps, values) in log order; non-finite values -> NaN gaps."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    for rec in records:
        for key, value in rec.items():
            y = _num(value)
            if key in SKIP_KEYS or y is None:
                continue
            xs, ys = out.setdefault(key, ([], []))
            xs.append(_num(rec["step"]))
            ys.append(y if math.isfinite(y) else math.nan)
    return out


def plot_grid(title: str, panels: Panels) -> bytes:
    """Small multiples: one axis per metric key, one line per (label, steps, values)."""
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    height = 3.0 * rows + 0.6
    fig = Figure(figsize=(4.2 * cols, height))  # manual spacing: 2x faster than "constrained"
    fig.subplots_adjust(left=0.7 / (4.2 * cols) + 0.04, right=0.97, bottom=0.5 / height)
    fig.subplots_adjust(top=1 - 0.6 / height, wspace=0.38, hspace=0.6)
    fig.suptitle(title)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, (key, lines) in zip(axes, sorted(panels.items()), strict=False):
        for label, xs, ys in lines:
            ax.plot(xs, ys, marker="o" if len(xs) <= 25 else None, ms=3, label=label)
        ax.set(title=key, xlabel="step", ylabel=key)
        ax.title.set_fontsize(10)
        ax.grid(alpha=0.3)
        if len(lines) > 1:
            ax.legend(fontsize=7)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return buf.getvalue()


def _spec(name: str, cache: dict[str, Any], notes: list[str]) -> Any:
    """The registry's PipelineSpec for `name`, or None when it is not registered."""
    if name not in cache:
        try:
            cache[name] = registry.get_pipeline(name)
        except RayworksError:
            cache[name] = None
        except Exception as exc:  # a broken pipeline module must not block the report
            notes.append(f"registry lookup of {name!r} failed: {type(exc).__name__}: {exc}")
            cache[name] = None
    return cache[name]


def _ci(arm: dict[str, Any] | None) -> str:
    if not arm:
        return "—"
    ci = arm.get("ci95")
    lo, hi = ci if isinstance(ci, list | tuple) and len(ci) == 2 else ("?", "?")
    return f"{arm.get('name')}: {_fmt(arm.get('mean'))} [{_fmt(lo)}, {_fmt(hi)}]"


def _bench(path: Path, rows: list[list[Any]]) -> str:
    """The bench's section; appends its row to the headline table `rows`."""
    name = f"{path.parent.name}/{path.name}"
    html = f"<section><h2>Bench {escape(name)}</h2><p><code>{escape(str(path))}</code></p>"
    notes: list[str] = []
    bench = _read_json(path / "bench.json", notes)
    arms = [a for a in bench.get("arms") or [] if isinstance(a, dict)]
    if notes or not arms:
        rows.append([name, bench.get("pipeline", "?"), "bench.json unreadable", "", "", "—"])
        return html + _warn("; ".join(notes) or "bench.json has no arms") + "</section>"
    head = bench.get("headline")
    key, mode = head if isinstance(head, list | tuple) and len(head) == 2 else ("?", "?")
    method = next((a for a in arms if a.get("role") == "method"), None)
    base = next((a for a in arms if a.get("role") == "baseline"), None)
    ratio = bench.get("ratio")
    ratio_text = "—" if ratio is None else _fmt(ratio)
    rows.append([name, bench.get("pipeline", "?"), f"{key} ({mode})", _ci(method), _ci(base)])
    rows[-1].append(ratio_text)
    html += f"<p>command: <code>{escape(str(bench.get('command', '')))}</code></p>"
    arm_rows = [[a.get("name"), a.get("role"), _ci(a), a.get("values")] for a in arms]
    html += _table(["arm", "role", f"{key} mean [95% CI]", "per-seed values"], arm_rows)
    html += f"<p>ratio method / baseline: <b>{escape(ratio_text)}</b></p>"
    for png, alt in (("bench.png", "bench plot"), ("curve.png", "bench curve")):
        if (path / png).is_file():
            html += _img((path / png).read_bytes(), f"{alt} {name}")
    if (path / "bench.md").is_file():
        md = escape((path / "bench.md").read_text(errors="replace"))
        html += f"<details><summary>bench.md</summary><pre>{md}</pre></details>"
    return html + "</section>"


def _run(run: Run) -> str:
    parts = [f"<section><h2>{escape(run.pipeline)} / {escape(run.run_id)}</h2>"]
    parts.append(f"<p><code>{escape(str(run.path))}</code></p>")
    parts += [_warn(n) for n in run.notes]
    if run.malformed:
        n = len(run.records)
        parts.append(_warn(f"metrics.jsonl: {run.malformed} malformed line(s) skipped, {n} read"))
    if run.progress:
        last = max((_num(r["step"]) for r in run.records), default=None)
        total = run.progress.get("total")
        parts.append(
            f"<p>progress: last logged step {escape(_fmt(last))} of {escape(_fmt(total))}</p>"
        )
    parts.append(_table(["key", "value"], [[k, v] for k, v in sorted(run.summary.items())]))
    parts.append(f"<details><summary>config.yaml</summary><pre>{escape(run.config_text)}</pre>")
    parts.append("</details>")
    data = series(run.records)
    if data:
        panels = {k: [(run.run_id, xs, ys)] for k, (xs, ys) in data.items()}
        title = f"{run.pipeline} / {run.run_id}"
        parts.append(_img(plot_grid(title, panels), f"metrics of {run.run_id}"))
    else:
        parts.append("<p>no numeric metrics logged</p>")
    art = run.path / "artifacts"
    tables = sorted(art.rglob("*.table.json")) if art.is_dir() else []
    parts += [_artifact_table(path, art) for path in tables]
    for png in sorted(art.rglob("*.png")) if art.is_dir() else []:
        rel = str(png.relative_to(art))
        parts.append(f"<h3>artifact {escape(rel)}</h3>{_img(png.read_bytes(), rel)}")
    return "".join(parts) + "</section>"


def _artifact_table(path: Path, art: Path) -> str:
    """A table a run wrote as {"title", "columns": [...], "rows": [[one cell per column]]}."""
    rel, notes = str(path.relative_to(art)), []
    data = _read_json(path, notes)
    columns, rows = data.get("columns"), data.get("rows")
    shaped = isinstance(columns, list) and isinstance(rows, list)
    if notes or not shaped or any(not isinstance(r, list) or len(r) != len(columns) for r in rows):
        why = "; ".join(notes) or "expected columns: [...] and rows of one cell per column"
        return _warn(f"artifact {rel}: not a table ({why}); ignored")
    title = escape(str(data.get("title") or rel))
    return f"<h3>{title}</h3>" + _table([str(c) for c in columns], rows)


def _mean(runs: list[Run], key: str) -> tuple[float | None, int]:
    vals = [v for r in runs if (v := _num(r.summary.get(key))) is not None]
    return (sum(vals) / len(vals) if vals else None), len(vals)


def _runs_tables(runs: list[Run], by_pipe: dict[str, list[Run]], notes: list[str]) -> str:
    cache: dict[str, Any] = {}
    rows = []
    for run in runs:
        spec = _spec(run.pipeline, cache, notes)
        head = "(pipeline not registered; see summary)"
        if spec is not None:
            key, mode = spec.headline
            head = f"{key} ({mode}) = {_fmt(run.summary.get(key, 'missing'))}"
        wall = _num(run.summary.get("wall_s"))
        status = run.summary.get("status", "(no summary)")
        wall_text = "—" if wall is None else f"{wall:.1f} s"
        rows.append([run.pipeline, run.run_id, status, wall_text, head, run.malformed])
    pairs = []
    for name, group in sorted(by_pipe.items()):
        spec = _spec(name, cache, notes)
        for base in [b for b in (spec.baselines if spec else ()) if b in by_pipe]:
            key, mode = spec.headline
            (m, nm), (b, nb) = _mean(group, key), _mean(by_pipe[base], key)
            ratio = f"{m / b:.4g}" if m is not None and b else "—"
            pairs.append([f"{name} vs {base}", f"{key} ({mode})", f"{_fmt(m)} (n={nm})"])
            pairs[-1] += [f"{_fmt(b)} (n={nb})", ratio]
    html = "<h2>Runs</h2>" + _table(RUNS_HEAD, rows) if rows else ""
    if pairs:
        html += "<h2>Headline vs baseline (runs given)</h2>" + _table(PAIR_HEAD, pairs)
    return html + "".join(_warn(n) for n in notes)


def _overlays(by_pipe: dict[str, list[Run]]) -> str:
    html = ""
    for name, group in sorted(by_pipe.items()):
        panels: Panels = {}
        for run in group:
            for key, (xs, ys) in series(run.records).items():
                panels.setdefault(key, []).append((run.run_id, xs, ys))
        panels = {k: v for k, v in panels.items() if len(v) >= 2}
        if len(group) >= 2 and panels:
            html += f"<h2>Overlay: {escape(name)} ({len(group)} runs)</h2>"
            html += _img(plot_grid(f"{name}: runs overlaid", panels), f"overlay of {name}")
    return html


def _target(paths: list[str | Path], out: str | Path | None) -> Path:
    if out is not None:
        out = Path(out)
        return out if out.suffix.lower() == ".html" else out / "index.html"
    roots = [Path(p).absolute() for p in paths]
    common = Path(os.path.commonpath([r.parent if _is_dir(r) else r for r in roots]))
    # never inside a pipeline folder (runs/lm/), where it would sit among the runs
    while common.parent != common and any(_is_dir(d) for d in common.iterdir() if d.is_dir()):
        common = common.parent
    base = common / f"report-{time.strftime('%Y%m%d-%H%M%S')}"
    folder, n = base, 1
    while folder.exists():
        folder, n = base.with_name(f"{base.name}-{n}"), n + 1
    return folder / "index.html"


def render_report(
    paths: list[str | Path], out: str | Path | None = None, title: str = "rayworks report"
) -> Path:
    """Write the HTML report of `paths` (runs, benches or folders above them); return its path.

    Default output: `<common parent of the inputs>/report-<timestamp>/index.html`; `out`
    ending in .html is the file itself, any other `out` is a folder for index.html.
    """
    if not paths:
        raise RayworksError("report needs at least one run dir, bench dir or runs folder.")
    run_dirs, bench_dirs = expand(paths)
    runs = [load_run(p) for p in run_dirs]
    by_pipe: dict[str, list[Run]] = {}
    for run in runs:
        by_pipe.setdefault(run.pipeline, []).append(run)
    bench_rows: list[list[Any]] = []
    bench_html = "".join(_bench(p, bench_rows) for p in bench_dirs)
    body = f"<h1>{escape(title)}</h1><p>generated {escape(time.strftime('%Y-%m-%d %H:%M:%S'))}"
    body += f" from {len(runs)} run(s) and {len(bench_dirs)} bench(es)</p>"
    if bench_rows:
        body += "<h2>Headline vs baseline (bench)</h2>" + _table([*BENCH_HEAD, "ratio"], bench_rows)
    body += _runs_tables(runs, by_pipe, []) + _overlays(by_pipe) + bench_html
    body += "".join(_run(run) for run in runs)
    target = _target(paths, out)
    target.parent.mkdir(parents=True, exist_ok=True)
    head = f'<meta charset="utf-8"><title>{escape(title)}</title><style>{CSS}</style>'
    target.write_text(
        f"<!DOCTYPE html><html><head>{head}</head><body>{body}</body></html>\n", "utf-8"
    )
    return target
