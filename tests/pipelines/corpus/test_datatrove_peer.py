"""The DataTrove peer of `corpus` on seven hand-made documents in two jsonl files.

Two are too short for Gopher, one is a near duplicate (one word changed) of a document in
the other file and one an exact duplicate, so every count is known: in 7, Gopher drops 2,
MinHash drops 2, 3 kept. One CPU keeps DataTrove in this process (a worker pool costs
seconds per stage); that the lazily built step classes unpickle in a fresh interpreter, as
in DataTrove's forkserver workers, is checked on its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip(
    "datatrove", reason="the DataTrove peer needs datatrove (pip install -e '.[dev]')"
)

from _corpus_prose import near_copy, prose

from rayworks.pipelines.corpus.datatrove_peer import DatatroveConfig, run
from rayworks.platform.context import RunContext


def write_jsonl(path: Path, texts: list[str]) -> None:
    rows = [
        {"id": f"{path.stem}-{i}", "text": t, "collection": "web", "license": "MIT"}
        for i, t in enumerate(texts)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_peer_drops_short_docs_and_near_duplicates(tmp_path: Path):
    a, b = tmp_path / "in" / "a.jsonl", tmp_path / "in" / "b.jsonl"
    a.parent.mkdir()
    write_jsonl(a, [prose(0), prose(1), "Far too short to keep."])
    write_jsonl(b, [near_copy(prose(0)), prose(2), "Another tiny line.", prose(1)])
    cfg = DatatroveConfig(inputs=[str(a.parent)], cpus=1)
    ctx = RunContext.create("corpus_datatrove", cfg, runs_dir=tmp_path / "runs")

    summary = run(cfg, ctx)

    assert (summary["in"], summary["kept"], summary["dropped"]) == (7, 3, 4)
    assert summary["dropped_gopher"] == summary["dropped_gopher_short_doc"] == 2
    assert summary["dropped_minhash"] == 2
    assert summary["dropped_language"] == summary["dropped_repetition"] == 0
    assert summary["in"] == summary["read"] == summary["kept"] + summary["dropped"]
    assert summary["rejected"] == 0
    assert summary["kept_share"] == pytest.approx(3 / 7)
    assert summary["docs_per_s"] > 0 and summary["mb_per_s"] > 0 and summary["text_mb_per_s"] > 0
    assert summary["files"] == 2 and summary["word_tokenizer"].startswith("str.split")
    kept = [
        json.loads(line)
        for f in sorted((ctx.artifacts_dir / "output").glob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    texts = sorted(r["text"] for r in kept)
    assert len(texts) == 3 and prose(2) in texts and prose(1) in texts
    assert (prose(0) in texts) != (near_copy(prose(0)) in texts)  # one of the pair survives
    assert all(r["metadata"]["language"] == "en" for r in kept)


def write_with_bad_lines(folder: Path) -> Path:
    """Three documents, then a blank line, a line that is not JSON and one without text:
    our reader rejects the last three, DataTrove's reader skips them."""
    folder.mkdir(parents=True)
    path = folder / "a.jsonl"
    write_jsonl(path, [prose(0), prose(1), "Far too short to keep."])
    with path.open("a") as f:
        f.write("\n{not json\n" + json.dumps({"title": "no text"}) + "\n")
    return path


def test_peer_divides_the_same_document_count_as_ours(tmp_path: Path):
    """docs/s on both sides divides the input records (`DOCS_COUNTED`): every jsonl line,
    also those DataTrove's reader skips, which count as `rejected`, as ours rejects them."""
    from rayworks.pipelines.corpus import readers

    path = write_with_bad_lines(tmp_path / "in")
    cfg = DatatroveConfig(inputs=[str(path.parent)], cpus=1)
    summary = run(cfg, RunContext.create("corpus_datatrove", cfg, runs_dir=tmp_path / "runs"))

    ours = readers.jsonl_rows(str(path), path.read_bytes(), readers.ReaderConfig(collection="web"))
    assert summary["in"] == len(ours) == 6
    assert summary["rejected"] == sum(bool(r["reject_reason"]) for r in ours) == 3
    assert (summary["read"], summary["kept"], summary["dropped"]) == (3, 2, 1)
    assert summary["in"] == summary["kept"] + summary["dropped"] + summary["rejected"]
    assert summary["docs_per_s"] == pytest.approx(6 / summary["seconds"])
    assert summary["docs_counted"] == readers.DOCS_COUNTED


def test_ours_and_the_peer_count_the_same_documents(ray_session, tmp_path: Path):
    """Both pipelines on one file with bad lines: the same `in`, named alike, and each
    `docs_per_s` is that count over its own seconds."""
    from rayworks.core.config import build_config
    from rayworks.pipelines.corpus.config import CorpusConfig
    from rayworks.pipelines.corpus.runner import run_corpus

    path = write_with_bad_lines(tmp_path / "in")
    overrides = [f"inputs=[{path}]", "cpus=1", "batch_size=4"]
    cfg = build_config(CorpusConfig, "smoke", overrides=overrides)
    ours = run_corpus(cfg, RunContext.create("corpus", cfg, runs_dir=tmp_path / "runs"))
    peer_cfg = DatatroveConfig(inputs=[str(path)], cpus=1)
    peer = run(
        peer_cfg, RunContext.create("corpus_datatrove", peer_cfg, runs_dir=tmp_path / "runs")
    )

    assert ours["in"] == peer["in"] == 6 and ours["rejected"] == peer["rejected"] == 3
    assert ours["docs_counted"] == peer["docs_counted"]
    for side in (ours, peer):
        assert side["docs_per_s"] == pytest.approx(side["in"] / side["seconds"])


UNPICKLE = """
import sys, dill
from datatrove.data import Document
steps = dill.loads(sys.stdin.buffer.read())
doc = Document(text=sys.argv[1], id="0")
print([type(s).__name__ for s in steps], steps[0].filter(doc), doc.metadata["language"])
"""


def test_step_classes_unpickle_in_a_fresh_interpreter():
    import dill

    from rayworks.pipelines.corpus import datatrove_peer as peer

    steps = [step for _, step in peer.filter_steps(DatatroveConfig(), peer._tokenizer("split"))]
    out = subprocess.run(
        [sys.executable, "-c", UNPICKLE, prose(5)],
        input=dill.dumps(steps),
        capture_output=True,
        check=True,
        timeout=120,
    )
    names = "['PyLangIdFilter', 'GopherQualityFilter', 'GopherRepetitionFilter']"
    assert out.stdout.decode().split("\n")[0] == f"{names} True en"


def test_peer_refuses_non_jsonl_input(tmp_path: Path):
    from rayworks.core.errors import RayworksError

    src = tmp_path / "doc.txt"
    src.write_text(prose(3))
    cfg = DatatroveConfig(inputs=[str(src)], input_format="text", collection="web")
    ctx = RunContext.create("corpus_datatrove", cfg, runs_dir=tmp_path / "runs")
    with pytest.raises(RayworksError, match="jsonl"):
        run(cfg, ctx)
