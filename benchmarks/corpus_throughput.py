"""Docs/s and MB/s of `rayworks run corpus` against DataTrove on the same files, in one run.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/corpus_throughput.py [--max-docs 2000]
        [--rows-per-shard 250] [--max-packages N] [--max-docs-per-package N] [--repeats 1]
        [--spacy-cpus 2] [--runs-dir DIR] [--pin]

Builds the local corpus once (installed Python packages and Debian docs, `--max-docs` per
source, `--rows-per-shard` documents per jsonl.gz shard: DataTrove parallelises by whole
files, so one big shard would leave its second CPU idle), then runs on those files, through
`launch.run` as `rayworks run` does:

- `corpus` (ours, every step: license, language, Gopher, repetition, C4, code quality, OCR,
  toxicity, PII, exact + MinHash dedup, tokenizer) with cpus=1 and cpus=2;
- `corpus_datatrove` (DataTrove 0.10.1: py3langid, Gopher quality and repetition, MinHash,
  see its module docstring) with cpus=1 and 2 and the `str.split` word tokenizer (as ours),
  and with spaCy, DataTrove's own English tokenizer, on `--spacy-cpus`.

Each run's `seconds` is its own wall clock from resolved inputs to counts (Ray start-up,
the corpus build and the language classifier's tables, which each side builds into the
runs' build cache before its clock starts if they are missing, then maps, are outside
it; DataTrove's worker-pool start-ups are inside). docs/s = input records (every jsonl
line, the summaries' `in` and `docs_counted`) / seconds; MB/s = input file MiB (gzip as
stored) / seconds, both sides alike.
`--pin` runs every arm in a fresh process of its own whose CPU affinity is the arm's CPUs
(cores 0..cpus-1), inherited by everything the arm starts (Ray's daemons and workers,
DataTrove's worker processes): "1 CPU" is then one core for the whole arm, driver
included, and each arm starts its own Ray, as `rayworks run` does. Without it the arms
share this process's Ray and a 1-CPU arm's driver and Ray daemons use the other core.
`--repeats` runs the arms round-robin and reports the median. The DataTrove peer does fewer
steps than ours, so ratios favour it. The 1-minute load average before each arm is shown:
other processes on the machine slow every arm. Timings are ratios on this machine, never
asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rayworks.platform.cluster import SMALL_PAGES_ENV

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# both sides run with the page settings rayworks gives its Ray workers (read when numpy and
# pyarrow load: this process, the pinned arms and DataTrove's workers inherit them)
for key, value in SMALL_PAGES_ENV.items():
    os.environ.setdefault(key, value)

ROOT = Path(__file__).resolve().parent
DEFAULT_OUT = ROOT / "results" / "corpus_throughput.md"


@dataclass(frozen=True)
class Arm:
    """One measured configuration: a pipeline, its CPUs and (DataTrove) word tokenizer."""

    label: str
    pipeline: str
    cpus: int
    tokenizer: str = ""

    @property
    def overrides(self) -> list[str]:
        extra = [f"datatrove_tokenizer={self.tokenizer}"] if self.tokenizer else []
        return [f"cpus={self.cpus}", *extra]


def plan(spacy_cpus: list[int], only: list[str]) -> list[Arm]:
    arms = [Arm(f"rayworks cpus={c}", "corpus", c) for c in (1, 2)]
    arms += [Arm(f"datatrove split cpus={c}", "corpus_datatrove", c, "split") for c in (1, 2)]
    arms += [Arm(f"datatrove spacy cpus={c}", "corpus_datatrove", c, "spacy") for c in spacy_cpus]
    return [a for a in arms if not only or a.pipeline in only]


def build_input(
    folder: Path,
    max_docs: int,
    rows_per_shard: int,
    max_packages: int | None = None,
    max_docs_per_package: int | None = None,
) -> dict[str, Any]:
    """The local corpus as jsonl.gz shards in `folder`; its manifest counts."""
    import sysconfig

    from rayworks.pipelines.corpus.config import LocalCorpusConfig
    from rayworks.pipelines.corpus.sources import SourceConfig, build_corpus

    s = LocalCorpusConfig()
    manifest = build_corpus(
        SourceConfig(
            out_dir=str(folder),
            site_packages=(sysconfig.get_paths()["purelib"],),
            debian_doc=s.debian_doc,
            max_packages=max_packages or s.max_packages,
            max_docs=max_docs,
            max_docs_per_package=max_docs_per_package or s.max_docs_per_package,
            max_bytes=s.max_bytes,
            rows_per_shard=rows_per_shard,
        )
    )
    return {
        "documents": manifest.documents,
        "shards": len(manifest.shards),
        "mib": sum(f.stat().st_size for f in folder.glob("*.jsonl.gz")) / 2**20,
    }


def run_arm(arm: Arm, inputs: Path, runs_dir: Path) -> dict[str, Any]:
    """One launch of the arm's pipeline on `inputs`: its summary plus the load before it,
    or `{"error": ...}` when it failed (the other arms still run and are reported)."""
    from rayworks.platform import launch

    load = os.getloadavg()[0]
    overrides = [f"inputs=[{inputs}/*.jsonl.gz]", *arm.overrides]
    try:
        result = launch.run(arm.pipeline, overrides=overrides, runs_dir=runs_dir, progress=False)
    except Exception as exc:  # reported under the table, not hidden
        return {"error": f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"}
    return {**result.summary, "load1": load, "run_dir": str(result.run_dir)}


def run_pinned(arm: Arm, inputs: Path, runs_dir: Path) -> dict[str, Any]:
    """`run_arm` in a fresh process pinned to cores 0..cpus-1 (`--pin`)."""
    import subprocess

    result = runs_dir / f"arm-{arm.pipeline}-{arm.cpus}-{arm.tokenizer or 'ours'}.json"
    args = [sys.executable, __file__, "--arm-only", arm.label, "--arm-result", str(result)]
    args += ["--arm-inputs", str(inputs), "--runs-dir", str(runs_dir)]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"}
    return json.loads(result.read_text())


def arm_only(label: str, inputs: Path, runs_dir: Path, result: Path) -> int:
    """The child of `run_pinned`: pin this process (before Ray starts), run one arm."""
    arm = next(a for a in plan([1, 2], []) if a.label == label)
    os.sched_setaffinity(0, set(range(arm.cpus)))
    import rayworks.pipelines.corpus.datatrove_peer  # noqa: F401  (registers corpus_datatrove)

    result.write_text(json.dumps(run_arm(arm, inputs, runs_dir)))
    return 0


def median_of(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(float(r[key]) for r in runs)


def completed(runs: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Per arm, its runs that finished (arms without any are left out)."""
    done = {label: [r for r in rs if "error" not in r] for label, rs in runs.items()}
    return {label: rs for label, rs in done.items() if rs}


def _ratio(a: float, b: float | None) -> str:
    return f"{a / b:.2f}x" if b else "-"


def table(arms: list[Arm], runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The markdown rows: per arm medians, ratios to DataTrove at the same CPUs, scaling."""
    arms = [a for a in arms if a.label in runs]
    rate = {a.label: median_of(runs[a.label], "docs_per_s") for a in arms}

    def peer(tokenizer: str, cpus: int) -> float | None:
        return rate.get(f"datatrove {tokenizer} cpus={cpus}")

    lines = [
        "| arm | word tokenizer | CPUs | docs in | kept | seconds | docs/s | MB/s "
        "| vs DataTrove split | vs DataTrove spaCy | 1 -> 2 CPUs | load1 |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for a in arms:
        r = runs[a.label]
        ours = a.pipeline == "corpus"
        one = rate.get(a.label.replace(f"cpus={a.cpus}", "cpus=1"))
        scaling = _ratio(rate[a.label], one) if a.cpus == 2 else "-"
        tokenizer = "str.split / \\w+ (ours)" if ours else r[0].get("word_tokenizer", "")
        lines.append(
            f"| {a.label} | {tokenizer} | {a.cpus} | {r[0]['in']} | {r[0]['kept']} "
            f"| {median_of(r, 'seconds'):.1f} | {rate[a.label]:.1f} "
            f"| {median_of(r, 'mb_per_s'):.3f} "
            f"| {_ratio(rate[a.label], peer('split', a.cpus)) if ours else '-'} "
            f"| {_ratio(rate[a.label], peer('spacy', a.cpus)) if ours else '-'} "
            f"| {scaling} | {statistics.median(x['load1'] for x in r):.1f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-docs", type=int, default=2000, help="documents per source")
    p.add_argument("--rows-per-shard", type=int, default=250)
    p.add_argument("--max-packages", type=int, help="packages per source (default: the config's)")
    p.add_argument("--max-docs-per-package", type=int, help="default: the config's")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument(
        "--spacy-cpus",
        type=int,
        nargs="*",
        default=[2],
        help="CPU counts of the DataTrove arms with spaCy (none: skip them)",
    )
    p.add_argument(
        "--only",
        nargs="*",
        default=[],
        choices=["corpus", "corpus_datatrove"],
        help="run only these pipelines' arms",
    )
    p.add_argument("--runs-dir", help="where inputs and runs go (default: a temp folder)")
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument("--pin", action="store_true", help="each arm alone on its cores (see above)")
    p.add_argument("--arm-only", help=argparse.SUPPRESS)
    p.add_argument("--arm-inputs", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--arm-result", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.arm_only:
        return arm_only(args.arm_only, args.arm_inputs, Path(args.runs_dir), args.arm_result)

    import rayworks.pipelines.corpus.datatrove_peer  # noqa: F401  (registers corpus_datatrove)

    root = Path(args.runs_dir or tempfile.mkdtemp(prefix="bench-corpus-")).absolute()
    inputs = root / "input"
    built = build_input(
        inputs, args.max_docs, args.rows_per_shard, args.max_packages, args.max_docs_per_package
    )
    arms = plan(args.spacy_cpus, args.only)
    runs: dict[str, list[dict[str, Any]]] = {a.label: [] for a in arms}
    for _ in range(args.repeats):
        for arm in arms:
            measure = run_pinned if args.pin else run_arm
            runs[arm.label].append(run := measure(arm, inputs, root / "runs"))
            print(f"{arm.label}: {run.get('docs_per_s', run.get('error'))}", flush=True)

    command = "HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/corpus_throughput.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    lines = [
        f"# Corpus curation throughput: rayworks vs DataTrove ({built['documents']} documents, "
        f"{built['shards']} jsonl.gz shards, {built['mib']:.1f} MiB; median of {args.repeats}"
        f"{'; every arm pinned to its cores' if args.pin else ''})",
        "",
        f"`{command.strip()}`",
        "",
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}.",
        "",
        *table(arms, completed(runs)),
        *(
            f"\nfailed: {label}: {r['error']}"
            for label, rs in runs.items()
            for r in rs
            if "error" in r
        ),
        "",
        "Ratios are docs/s over DataTrove's docs/s at the same CPUs. DataTrove runs fewer steps "
        "(no license gate, C4, code quality, OCR, toxicity, PII, exact dedup, tokenizer), so "
        "they favour it; its `docs in` counts documents with text, ours every line read.",
    ]
    markdown = "\n".join(lines) + "\n"
    print(markdown)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(markdown)
    out.with_suffix(".json").write_text(json.dumps({"built": built, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
