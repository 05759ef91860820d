"""A corpus run on a Ray cluster simulated on this machine: the entry of the multi-node test.

    python -m rayworks.pipelines.corpus.cluster_check --head-cpus 0 --workers 2 \\
        --runs-dir DIR --temp-dir DIR --result FILE -- inputs=[...] cpus=2 ...

starts a `ray.cluster_utils.Cluster` (a head with `--head-cpus` CPUs and `--workers`
nodes of one CPU each, every node its own raylet and object store), runs
`rayworks run corpus --preset smoke --set OVERRIDE...` against it through `launch.run`
(as `--address` does), shuts the cluster down (also when the run fails) and writes
`--result`: the run's folder and summary, the node ids, and the node each unit was scored
on (every unit's marker, `work/units/<unit>.json`, holds it: `score_unit.NODE_ID`). The
test (`tests/pipelines/corpus/test_corpus_two_nodes.py`) runs it in a subprocess, as the
pytest process may already be connected to the session's Ray. Nothing of the run differs
from a plain one: with `cpus` = 2 and two one-CPU nodes, the first two units go out
together (`fanout.fan_units`), so each node scores at least one.

Ray's settings come from the environment (the caller sets `RAY_AUTH_MODE`,
`RAY_AUTH_TOKEN_PATH` and `RAY_TMPDIR` before Ray is imported).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import ray

from rayworks.pipelines.corpus.score_unit import NODE_ID


def unit_nodes(run_dir: Path) -> dict[str, str | None]:
    """unit name -> the node that scored it, from the run's unit markers."""
    markers = sorted((run_dir / "artifacts" / "work" / "units").glob("*.json"))
    return {p.stem: json.loads(p.read_text()).get(NODE_ID) for p in markers}


def run_on_cluster(
    head_cpus: int, workers: int, overrides: list[str], runs_dir: Path, temp_dir: Path
) -> dict[str, Any]:
    """Start the cluster, run the smoke preset with `overrides` on it, shut it down."""
    from ray.cluster_utils import Cluster

    from rayworks.platform import launch

    head_args = {"num_cpus": head_cpus, "temp_dir": str(temp_dir), "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=head_args)
    head = cluster.head_node.node_id
    try:
        workers_up = [cluster.add_node(num_cpus=1) for _ in range(workers)]
        cluster.wait_for_nodes(timeout=60)
        result = launch.run(
            "corpus",
            preset="smoke",
            overrides=overrides,
            runs_dir=runs_dir,
            address=cluster.address,
            progress=False,
        )
        alive = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
    finally:
        ray.shutdown()
        cluster.shutdown()
    return {
        "run_dir": str(result.run_dir),
        "summary": result.summary,
        "head_node": head,
        "worker_nodes": sorted(n.node_id for n in workers_up),
        "alive_nodes": alive,
        "unit_nodes": unit_nodes(result.run_dir),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--head-cpus", type=int, default=0)
    p.add_argument("--workers", type=int, default=2, help="nodes of one CPU each")
    p.add_argument("--runs-dir", type=Path, required=True)
    p.add_argument("--temp-dir", type=Path, required=True, help="Ray's temp dir (keep short)")
    p.add_argument("--result", type=Path, required=True, help="JSON written here")
    p.add_argument("overrides", nargs="*", help="KEY=VALUE settings of the corpus config")
    args = p.parse_args(argv)
    result = run_on_cluster(
        args.head_cpus, args.workers, args.overrides, args.runs_dir, args.temp_dir
    )
    args.result.write_text(json.dumps(result, indent=1, sort_keys=True, default=str))
    return 0


if __name__ == "__main__":
    # what the tasks unpickle must come from the module, not from `__main__`
    from rayworks.pipelines.corpus.cluster_check import main as module_main

    sys.exit(module_main())
