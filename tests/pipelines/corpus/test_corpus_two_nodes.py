"""The corpus pipeline on a two-node Ray cluster writes what it writes on one node.

Both runs go through `rayworks.pipelines.corpus.cluster_check` in a subprocess (the pytest
process may already be connected to the session's Ray, and a driver joins one cluster):
one on a single node with 2 CPUs, one on a `ray.cluster_utils.Cluster` whose head has no
CPU and whose two worker nodes have one CPU each, so the two scoring actors run on two
raylets with two object stores, and the global phase's tasks on worker nodes, never on
the driver's. Same files, same config (`cpus=2`, `unit_bytes=1`: one unit per file); the
outputs must be identical, and the units must have been scored on both worker nodes.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
from _corpus_prose import EMAIL, near_copy, prose

RUN_TIMEOUT_S = 240  # one cluster's start, run and shutdown (~30 s on an idle machine)


def line(text: str, license: str = "MIT") -> str:
    return json.dumps({"text": text, "collection": "web", "license": license})


# file -> its lines; the duplicates sit in other files (other units) than their originals
FILES = {
    "a.jsonl": [
        line(prose(0)),
        line(prose(1) + f"\nPlease write to {EMAIL} today."),
        "{not json",
    ],  # a:3 rejected json:invalid
    "b.jsonl": [
        line(prose(2)),
        line(prose(0)),  # b:2 = a:1, dedup:exact
        line(prose(3), license="GPL-3.0-only"),
    ],  # b:3 license:copyleft
    "c.jsonl": [
        line(near_copy(prose(2))),  # c:1 ~ b:1, dedup:near
        line("Far too short to keep."),
        line(prose(4)),
    ],  # c:2 gopher:min_words
    "d.jsonl": [line(prose(5)), line(prose(6))],
}
QUARANTINE = {
    ("b.jsonl", 2, "dedup:exact"),
    ("b.jsonl", 3, "license:copyleft"),
    ("c.jsonl", 1, "dedup:near"),
    ("c.jsonl", 2, "gopher:min_words"),
}
KEPT = {
    ("a.jsonl", 1),
    ("a.jsonl", 2),
    ("b.jsonl", 1),
    ("c.jsonl", 3),
    ("d.jsonl", 1),
    ("d.jsonl", 2),
}
COUNTS = (
    "in",
    "kept",
    "dropped",
    "rejected",
    "duplicate_ids",
    "near_dup_clusters",
    "kept_tokens",
    "units",
    "resumed_units",
    "child_restarts",
)


def run_on_cluster(head_cpus: int, workers: int, inputs: list[Path], base: Path) -> dict:
    """`cluster_check` in a subprocess of its own process group, with its own Ray temp
    dir and auth token; killed by group if it outlives `RUN_TIMEOUT_S`."""
    temp = Path(f"/tmp/rwc-{secrets.token_hex(3)}")  # short: Ray's socket paths are capped
    temp.mkdir()
    token = temp / "auth_token"
    token.write_text(secrets.token_hex(32))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    env.update(
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN_PATH=str(token),
        RAY_TMPDIR=str(temp),
        RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0",
        RAY_USAGE_STATS_ENABLED="0",
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    env.pop("RAY_API_SERVER_ADDRESS", None)
    result = base / "result.json"
    overrides = [f"inputs=[{','.join(map(str, inputs))}]", "cpus=2", "unit_bytes=1", "batch_size=4"]
    cmd = [
        sys.executable,
        "-m",
        "rayworks.pipelines.corpus.cluster_check",
        f"--head-cpus={head_cpus}",
        f"--workers={workers}",
        f"--runs-dir={base / 'runs'}",
        f"--temp-dir={temp / 'ray'}",
        f"--result={result}",
        "--",
        *overrides,
    ]
    log = base / "cluster_check.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        code = proc.wait(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        _kill_group(proc.pid)  # the driver and whatever Ray process outlived it
    if code != 0:
        tail = "\n".join(log.read_text().splitlines()[-60:])
        raise AssertionError(
            f"cluster_check ({head_cpus} head CPUs, {workers} workers) "
            f"{'timed out' if code is None else f'exited {code}'}; Ray logs kept in {temp}\n"
            f"{tail}"
        )
    shutil.rmtree(temp, ignore_errors=True)
    return json.loads(result.read_text())


def _kill_group(pgid: int, grace: float = 10) -> None:
    """SIGTERM the group (Ray's nodes shut down on it), then SIGKILL what is left."""
    try:
        os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            os.killpg(pgid, 0)
            time.sleep(0.2)
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def frame(folder: Path) -> pd.DataFrame:
    """Every parquet row under `folder` (hive partitions as columns), in a stable order."""
    if not any(folder.rglob("*.parquet")):
        return pd.DataFrame()
    df = pq.read_table(folder).to_pandas()
    for col in df.columns:  # partition columns come back as categoricals
        if isinstance(df[col].dtype, pd.CategoricalDtype):
            df[col] = df[col].astype(str)
    keys = [c for c in ("source_path", "line") if c in df.columns]
    return df.sort_values(keys).reset_index(drop=True)


def places(df: pd.DataFrame, *columns: str) -> list[tuple]:
    """(file name, line, *columns) of every row."""
    names = [Path(p).name for p in df["source_path"]]
    return list(zip(names, df["line"], *(df[c] for c in columns), strict=True))


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_two_node_cluster_writes_what_one_node_writes(tmp_path: Path):
    src = tmp_path / "in"
    src.mkdir()
    inputs = []
    for name, lines in FILES.items():
        (src / name).write_text("\n".join(lines) + "\n")
        inputs.append(src / name)
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one = run_on_cluster(2, 0, inputs, tmp_path / "one")
    two = run_on_cluster(0, 2, inputs, tmp_path / "two")

    # the two-node run: three raylets up to the end, every unit scored on a worker node,
    # both worker nodes scoring
    assert len(set(two["worker_nodes"]) | {two["head_node"]}) == 3
    assert sorted(two["alive_nodes"]) == sorted([two["head_node"], *two["worker_nodes"]])
    units = two["unit_nodes"]
    assert sorted(units) == [f"unit-{i:05d}" for i in range(len(FILES))]
    assert set(units.values()) == set(two["worker_nodes"]), units
    assert set(one["unit_nodes"].values()) == {one["head_node"]}

    # the crafted rows land where they should (so "identical" compares real outcomes)
    art1, art2 = (Path(r["run_dir"]) / "artifacts" for r in (one, two))
    kept1, kept2 = frame(art1 / "output"), frame(art2 / "output")
    quarantine1, quarantine2 = frame(art1 / "quarantine"), frame(art2 / "quarantine")
    rejects1, rejects2 = frame(art1 / "rejects"), frame(art2 / "rejects")
    assert set(places(kept1)) == KEPT and set(kept1["drop_reason"]) == {""}
    assert set(places(quarantine1, "drop_reason")) == QUARANTINE
    assert places(rejects1, "reason") == [("a.jsonl", 3, "json:invalid")]

    # identical outputs: every column of every row (ids, provenance, scores, reasons,
    # token counts), the same files, the same tokenizer, attrition and counts
    pd.testing.assert_frame_equal(kept1, kept2)
    pd.testing.assert_frame_equal(quarantine1, quarantine2)
    pd.testing.assert_frame_equal(rejects1, rejects2)
    for folder in ("output", "quarantine", "rejects"):
        assert files_under(art1 / folder) == files_under(art2 / folder)
    assert (art1 / "tokenizer.json").read_bytes() == (art2 / "tokenizer.json").read_bytes()
    assert json.loads((art1 / "attrition.json").read_text()) == json.loads(
        (art2 / "attrition.json").read_text()
    )
    s1, s2 = one["summary"], two["summary"]
    assert (s1["in"], s1["kept"], s1["dropped"], s1["rejected"]) == (11, 6, 4, 1)
    counted = [k for k in s1 if k.startswith(("dropped_", "rejected_"))] + list(COUNTS)
    assert {k: s1[k] for k in counted} == {k: s2.get(k) for k in counted}
    assert s1["driver_bytes"] == s2["driver_bytes"] > 0
    print(
        f"two nodes: {s2['seconds']:.1f} s, driver_bytes {s2['driver_bytes']} "
        f"({s2['driver_bytes_per_row']:.1f} per row read); one node: {s1['seconds']:.1f} s"
    )
