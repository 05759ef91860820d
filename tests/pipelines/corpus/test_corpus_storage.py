"""Inputs in a bucket (`storage.py`): listed, sized, cut and read through pyarrow's S3
filesystem against a local S3 server (moto, bound to 127.0.0.1), the same rows as from the
local copies; and a whole run over `file://` URIs, the same output as over paths."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _corpus_prose import prose

from rayworks.core.config import build_config
from rayworks.core.errors import RayworksError
from rayworks.pipelines.corpus import readers, storage
from rayworks.pipelines.corpus.config import CorpusConfig
from rayworks.pipelines.corpus.runner import SUFFIXES, run_corpus
from rayworks.pipelines.corpus.score_unit import reader_config
from rayworks.pipelines.corpus.units import plan_units
from rayworks.platform.context import RunContext

BUCKET = "corpus-test"


def _records(n: int, first: int) -> list[dict]:
    return [{"text": prose(first + i), "collection": "web", "license": "MIT"} for i in range(n)]


def _write_local(folder: Path) -> Path:
    folder.mkdir(parents=True)
    lines = "".join(json.dumps(r) + "\n" for r in _records(40, 0))
    (folder / "a.jsonl.gz").write_bytes(gzip.compress(lines.encode()))
    lines = "".join(json.dumps(r) + "\n" for r in _records(7, 100)) + "{not json\n"
    (folder / "sub").mkdir()
    (folder / "sub" / "b.jsonl").write_text(lines)
    (folder / "notes.txt").write_text("not an input")
    pq.write_table(pa.Table.from_pylist(_records(30, 200)), folder / "c.parquet", row_group_size=8)
    return folder


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int]]:
    """A local S3 server holding a copy of `_write_local`'s folder under s3://BUCKET/in/."""
    from moto.server import ThreadedMotoServer
    from pyarrow import fs

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    port = server._server.server_address[1]
    local = _write_local(tmp_path_factory.mktemp("s3src") / "in")
    admin = fs.S3FileSystem(
        access_key="test",
        secret_key="test",
        region="us-east-1",
        endpoint_override=f"127.0.0.1:{port}",
        scheme="http",
        allow_bucket_creation=True,
    )
    admin.create_dir(BUCKET)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        key = f"{BUCKET}/in/{path.relative_to(local)}"
        with admin.open_output_stream(key, compression=None) as out:  # bytes as they are
            out.write(path.read_bytes())
    yield local, port
    server.stop()


@pytest.fixture
def s3_env(s3: tuple[Path, int], monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    local, port = s3
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    storage._filesystem.cache_clear()  # filesystems read the environment when built
    yield local
    storage._filesystem.cache_clear()


def test_a_bucket_prefix_and_a_glob_list_what_local_paths_list(s3_env: Path):
    jsonl = SUFFIXES["jsonl"]
    found = readers.resolve_inputs([f"s3://{BUCKET}/in/"], jsonl)
    assert found == [f"s3://{BUCKET}/in/a.jsonl.gz", f"s3://{BUCKET}/in/sub/b.jsonl"]
    local = readers.resolve_inputs([str(s3_env)], jsonl)
    assert [f.rsplit("/in/", 1)[1] for f in found] == [f.rsplit("/in/", 1)[1] for f in local]
    assert readers.resolve_inputs([f"s3://{BUCKET}/in/*.parquet"], ["parquet"]) == [
        f"s3://{BUCKET}/in/c.parquet"
    ]
    assert readers.resolve_inputs([f"s3://{BUCKET}/in/c.parquet"], None) == [
        f"s3://{BUCKET}/in/c.parquet"
    ]
    with pytest.raises(RayworksError, match="matches no file"):
        readers.resolve_inputs([f"s3://{BUCKET}/nothing-here/"], jsonl)
    with pytest.raises(RayworksError, match="environment"):
        storage.locate(f"s3://{BUCKET}/in/a.jsonl.gz?endpoint_override=x")
    with pytest.raises(RayworksError, match="bucket's name"):
        readers.resolve_inputs(["s3://corpus-*/in/a.jsonl.gz"], jsonl)


@pytest.mark.parametrize(("fmt", "unit_bytes"), [("jsonl", 10**6), ("parquet", 1)])
def test_objects_are_cut_and_read_as_their_local_copies(s3_env: Path, fmt: str, unit_bytes: int):
    """Sizes (a gzip trailer read by a seek), the cut into units (parquet by row groups,
    `unit_bytes=1` forces pieces) and every row read equal the local files', but the path
    (`source_path`, and `license_source`, which quotes where the license was read)."""
    remote = readers.resolve_inputs([f"s3://{BUCKET}/in/"], SUFFIXES[fmt])
    local = readers.resolve_inputs([str(s3_env)], SUFFIXES[fmt])
    cfg = reader_config(CorpusConfig(inputs=local))
    plans = [plan_units(paths, unit_bytes, fmt) for paths in (remote, local)]
    shape = [[(u.name, u.bytes, u.start, u.stop, len(u.files)) for u in p] for p in plans]
    assert shape[0] == shape[1]
    for ours, theirs in zip(*plans, strict=True):
        a = readers.unit_table(ours.files, fmt, cfg, ours.start, ours.stop)
        b = readers.unit_table(theirs.files, fmt, cfg, theirs.start, theirs.stop)
        for name in ("source_path", "license_source"):  # both name the file read
            here = [v and v.replace(f"s3://{BUCKET}/in", str(s3_env)) for v in a[name].to_pylist()]
            assert here == b[name].to_pylist()
        paths = ["source_path", "license_source"]
        assert a.drop_columns(paths).equals(b.drop_columns(paths))
        assert all(p.startswith(f"s3://{BUCKET}/in/") for p in a["source_path"].to_pylist())
    rows = sum(readers.unit_table(u.files, fmt, cfg, u.start, u.stop).num_rows for u in plans[0])
    assert rows == {"jsonl": 48, "parquet": 30}[fmt]  # 40 + 7 + the bad line; 30 rows


def test_a_run_over_file_uris_writes_what_a_run_over_paths_writes(ray_session, tmp_path: Path):
    local = _write_local(tmp_path / "in")
    summaries, kept = [], []
    for name, inputs in (("paths", str(local)), ("uris", f"file://{local}/")):
        cfg = build_config(CorpusConfig, "smoke", overrides=[f"inputs=[{inputs}]", "cpus=2"])
        ctx = RunContext.create("corpus", cfg, runs_dir=tmp_path / name)
        summaries.append(run_corpus(cfg, ctx))
        table = pq.read_table(ctx.artifacts_dir / "output")
        kept.append(sorted(zip(table["id"].to_pylist(), table["line"].to_pylist(), strict=True)))
        paths = set(table["source_path"].to_pylist())
        assert all(p.startswith("file://") == (name == "uris") for p in paths)
    counts = [(s["in"], s["kept"], s["dropped"], s["rejected"]) for s in summaries]
    assert counts[0] == counts[1] and counts[0][0] == 48 and counts[0][3] == 1
    assert kept[0] == kept[1] and len(kept[0]) == counts[0][1] > 40
