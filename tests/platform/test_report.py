"""`rayworks report`: HTML from fake run and bench dirs written straight to tmp_path."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path
from typing import Any, ClassVar

import pytest

from rayworks.core.config import PipelineConfig
from rayworks.core.errors import RayworksError
from rayworks.platform import registry
from rayworks.platform.context import RunContext
from rayworks.platform.report import render_report

PNG_SIG = b"\x89PNG\r\n\x1a\n"


class ToyConfig(PipelineConfig):
    presets: ClassVar[dict[str, dict[str, Any]]] = {"smoke": {}}
    lr: float = 0.01


@pytest.fixture(autouse=True)
def toy_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register `toymethod` (baseline `toybase`) without importing the real pipelines."""
    monkeypatch.setattr(registry, "load_all", lambda: None)
    monkeypatch.setattr(registry, "PIPELINES", dict(registry.PIPELINES))
    for name, base in (("toymethod", "toybase"), ("toybase", None)):
        registry.pipeline(name, config=ToyConfig, baseline=base, headline=("test_accuracy", "max"))(
            lambda cfg, ctx: {}
        )


def make_run(
    runs: Path, pipeline: str, acc: float, *, steps: int = 5, bad_lines: int = 0
) -> RunContext:
    ctx = RunContext.create(pipeline, ToyConfig(lr=0.02), runs)
    ctx._tb = _NoTB()
    ctx.progress(steps)
    for s in range(steps):
        ctx.log(s, loss=2.0 - 0.3 * s, lr=0.01, note="text is not plotted")
        if s % 2 == 0:
            ctx.log(s, val_loss=2.1 - 0.3 * s, exact_match=0.1 * s)
    if bad_lines:
        with ctx.metrics_path.open("a") as fh:
            fh.write("{not json\n" * (bad_lines - 1) + '["a list", 1]\n')
    ctx.write_summary(
        {"test_accuracy": acc, "pipeline": pipeline, "run_id": ctx.run_id, "status": "ok"}
        | {"wall_s": 12.34}
    )
    return ctx


class _NoTB:
    def add_scalar(self, *args: Any) -> None: ...

    def flush(self) -> None: ...


def make_bench(runs: Path, ratio: float = 1.2345) -> Path:
    bench = runs / "bench" / "toymethod" / "20260101-000000-abc"
    bench.mkdir(parents=True)
    arms = [
        {"name": "toymethod", "role": "method", "values": [0.6, 0.62], "mean": 0.61}
        | {"ci95": [0.58, 0.64]},
        {"name": "toybase", "role": "baseline", "values": [0.5, 0.49], "mean": 0.495}
        | {"ci95": [0.47, 0.52]},
    ]
    spec = {"pipeline": "toymethod", "headline": ["test_accuracy", "max"], "arms": arms}
    spec |= {"command": "rayworks bench toymethod --seeds 2", "ratio": ratio}
    (bench / "bench.json").write_text(json.dumps(spec))
    (bench / "bench.md").write_text("`rayworks bench toymethod --seeds 2`\n\n| arm | mean |\n")
    (bench / "bench.png").write_bytes(_tiny_png())
    return bench


def _tiny_png() -> bytes:
    from matplotlib.figure import Figure

    buf = io.BytesIO()
    Figure(figsize=(1, 1)).savefig(buf, format="png")
    return buf.getvalue()


def images(html: str) -> list[bytes]:
    uris = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(uris) == html.count("<img ")
    return [base64.b64decode(u) for u in uris]


def test_report_of_runs_and_bench(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    a = make_run(runs, "toymethod", 0.75, bad_lines=3)
    b = make_run(runs, "toymethod", 0.8)
    base = make_run(runs, "toybase", 0.5)
    (a.artifacts_dir / "samples.png").write_bytes(_tiny_png())
    make_bench(runs)
    out = render_report([runs], out=tmp_path / "rep")
    assert out == tmp_path / "rep" / "index.html" and out.is_file()
    html = out.read_text()
    for ctx in (a, b, base):
        assert ctx.run_id in html
    assert "test_accuracy (max) = 0.75" in html and "12.3 s" in html
    assert "3 malformed line(s) skipped" in html
    assert "1.2345" in html  # the bench ratio
    assert "toymethod: 0.61 [0.58, 0.64]" in html and "toybase: 0.495 [0.47, 0.52]" in html
    # runs given side by side: mean(0.75, 0.8) / 0.5
    assert "toymethod vs toybase" in html and "1.55" in html
    assert "lr: 0.02" in html  # config.yaml
    pngs = images(html)
    # 3 per-run grids + 1 overlay (toymethod) + 1 artifact + 1 bench.png
    assert len(pngs) == 6
    assert all(p.startswith(PNG_SIG) and len(p) > 100 for p in pngs)
    assert "<script" not in html and "http://" not in html and "https://" not in html


def test_parent_expansion_default_output_and_unregistered(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    ctxs = [make_run(runs, "toymethod", 0.7), make_run(runs, "mystery", 0.1)]
    (ctxs[1].summary_path).write_text('{"pipeline": "mystery", "weird<key>": 1}')
    out = render_report([runs / "toymethod", runs / "mystery"])
    assert out.parent.parent == runs and out.parent.name.startswith("report-")
    html = out.read_text()
    assert all(c.run_id in html for c in ctxs)
    assert "not registered" in html and "weird&lt;key&gt;" in html and "weird<key>" not in html
    # the report folder now inside runs/ is no run: a second report of runs/ still works
    again = render_report([runs], out=tmp_path / "r.html")
    assert again == tmp_path / "r.html" and html.count("<section>") == 2


def test_single_run_dir_no_summary_nonfinite(tmp_path: Path) -> None:
    ctx = make_run(tmp_path / "runs", "toymethod", 0.7)
    ctx.summary_path.unlink()
    ctx.log(9, loss=float("nan"), grad_norm=float("inf"))  # written as "nan" / "inf"
    out = render_report([ctx.run_dir])
    assert out.parent.parent == tmp_path / "runs"  # not among the runs of runs/toymethod/
    html = out.read_text()
    assert "no summary.json" in html and "(no summary)" in html
    assert ctx.run_id in html and len(images(html)) == 1


def test_bad_inputs_raise(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(RayworksError, match=re.escape(str(missing))):
        render_report([missing])
    (tmp_path / "empty").mkdir()
    with pytest.raises(RayworksError, match=re.escape(str(tmp_path / "empty"))):
        render_report([tmp_path / "empty"])


def test_malformed_bench_json_is_shown(tmp_path: Path) -> None:
    bench = make_bench(tmp_path)
    (bench / "bench.json").write_text("{broken")
    html = render_report([bench], out=tmp_path / "b.html").read_text()
    assert "bench.json is malformed" in html and "bench.json unreadable" in html
