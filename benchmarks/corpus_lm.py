"""Does curation help? The same small LM trained on curated and on uncurated corpus text.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/corpus_lm.py [--corpus-run RUN_DIR]

Builds the corpus with `rayworks run corpus` (`CORPUS_OVERRIDES`, about 2,250 documents)
unless `--corpus-run` names a finished corpus run to reuse, then trains 2 arms x 3 seeds of
a 0.9M-parameter decoder (d_model 128, 4 layers, seq_len 128, batch 16, 100 steps: 204,800
training tokens per run) and writes `benchmarks/results/corpus_lm.md`.

Common Corpus claims its open, filtered data trains models comparable to others of their
size. At our scale the check is: build the local corpus once with `rayworks run corpus`,
then train the `lm` pipeline's tiny decoder twice with everything
equal except the training text (curated `output/` vs uncurated `input/`), and compare
held-out bits per byte.

What the paper does not say, reconstructed here:
- Held-out split by package. Every document carries `source` (the Python distribution or
  Debian package). Packages are hashed (blake2b of the lower-cased name with `python3-` /
  `python-` stripped, so a Debian and a PyPI copy of one project share a side) and a fixed
  share is held out of BOTH training sets. Training documents whose id equals a held-out
  document's id, or whose MinHash-LSH signature (the corpus' own `minhash.py`, 14 x 8
  bands, Jaccard ~0.72) collides with one, are removed from both arms too, so no document
  or near-copy leaks (Debian packages share changelogs, PyPI packages vendor each other).
- Two held-out sets, both from the held-out packages and fixed before training:
  "clean" = the documents curation kept (its `output/` text), and "uncurated" = all of
  those packages' input documents (copyleft, unknown-license, short, boilerplate,
  duplicated, PII included). Clean is the question asked here (does curated data
  model clean text better?) but it is drawn from the curated distribution, which favours
  the curated arm by construction; the uncurated set shows the other direction. Neither
  is an outside benchmark: no such text is available offline here.
- One tokenizer for both arms: byte-level BPE trained on an equal-byte sample of the two
  training pools, passed to `lm` with `tokenizer.init_from`. Byte-level BPE has no unknown
  token, so bits per UTF-8 byte (summed NLL over document tokens / ln 2 / document bytes,
  end-of-document tokens not counted) is exact; token perplexity is shown too.
- Same budget: model, seed, steps x batch x seq_len, schedule. Each arm's pool is a seeded
  random subsample of at most `--train-bytes` (cost only: `lm` already samples rows
  uniformly); an arm whose pool is smaller than the budget repeats it (epochs column).
- Scoring: `lm` has no external eval file, so the script loads each run's saved model and
  scores the held-out documents itself (EOS before each document, rows of seq_len that
  overlap by one token, so every document token is predicted exactly once).
- Intervals: per seed the paired difference curated - uncurated, mean with a t interval
  over seeds (training noise), and a percentile bootstrap over held-out packages of the
  seed-averaged difference (eval-set noise; packages, not documents, are the units).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import os
import platform
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rayworks.platform.stats import mean_ci

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # throwaway local Ray

ROOT = Path(__file__).resolve().parent
DEFAULT_OUT = ROOT / "results" / "corpus_lm.md"
CORPUS_OVERRIDES = (
    "cpus=1",
    "sources.max_packages=300",
    "sources.max_docs=1500",
    "sources.max_docs_per_package=20",
    "sources.max_bytes=100000",
)
"""About 2,250 documents. `cpus=1`: at the default `cpus=2` the runner's actor pool waited
forever on 2 CPUs on this 2-core machine when this was written."""
ARMS = ("curated", "uncurated")
EVAL_SETS = ("clean", "uncurated")


@dataclass
class Doc:
    id: str
    text: str
    source: str
    collection: str

    @property
    def n_bytes(self) -> int:
        return len(self.text.encode("utf-8"))


@dataclass
class Split:
    """Training pools per arm and held-out eval sets, plus what the leak guard removed."""

    train: dict[str, list[Doc]]
    heldout: dict[str, list[Doc]]
    heldout_packages: list[str]
    exact_copies: int
    near_dups: int


@dataclass
class ArmRun:
    arm: str
    seed: int
    run_dir: str
    summary: dict[str, Any]
    pool_docs: int
    pool_bytes: int
    n_params: int = 0
    bits: dict[str, np.ndarray] = field(default_factory=dict)
    tokens: dict[str, np.ndarray] = field(default_factory=dict)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs-dir", default="runs/corpus_lm")
    p.add_argument("--corpus-run", default=None, help="reuse this corpus run directory")
    p.add_argument("--corpus-set", action="append", default=[], help="extra corpus override")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--vocab-size", type=int, default=1024)
    p.add_argument("--heldout-share", type=float, default=0.15, help="packages held out")
    p.add_argument("--eval-bytes", type=int, default=400_000, help="cap per held-out set")
    p.add_argument("--train-bytes", type=int, default=2_000_000, help="cap per arm's pool")
    p.add_argument("--tokenizer-bytes", type=int, default=1_000_000, help="per arm")
    p.add_argument("--boot", type=int, default=2000, help="package bootstrap resamples")
    p.add_argument("--out", default=str(DEFAULT_OUT))
    return p.parse_args(argv)


# --- data -----------------------------------------------------------------------------------


def build_corpus(args: argparse.Namespace) -> Path:
    """The corpus run's directory: `--corpus-run`, or a fresh `rayworks run corpus`."""
    if args.corpus_run:
        return Path(args.corpus_run).resolve()
    from rayworks.platform import launch

    overrides = [*CORPUS_OVERRIDES, *args.corpus_set]
    result = launch.run("corpus", overrides=overrides, runs_dir=args.runs_dir, progress=False)
    return result.run_dir


def input_dir(corpus_dir: Path, summary: dict[str, Any]) -> Path:
    """Where the run's local corpus lies: the shared input cache named in the summary
    (`input_dir`), or `artifacts/input/` (runs before the cache existed)."""
    cached = summary.get("input_dir")
    return Path(cached) if cached else corpus_dir / "artifacts" / "input"


def read_input(folder: Path) -> list[Doc]:
    """Every document the pipeline read: the local corpus' jsonl shards."""
    docs = []
    for shard in sorted(folder.glob("*.jsonl*")):
        opener = gzip.open if shard.suffix == ".gz" else open
        with opener(shard, "rt", encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                docs.append(Doc(row["id"], row["text"], row["source"], row["collection"]))
    if not docs:
        raise SystemExit(f"no input shards under {folder}")
    return docs


def read_output(artifacts: Path) -> list[Doc]:
    """The kept documents: `output/` parquet, hive-partitioned by collection and lang."""
    import pyarrow.dataset as pads

    table = pads.dataset(artifacts / "output", format="parquet", partitioning="hive").to_table(
        columns=["id", "text", "source", "collection"]
    )
    cols = [table[c].to_pylist() for c in ("id", "text", "source", "collection")]
    return [Doc(*row) for row in zip(*cols, strict=True)]


def package_key(source: str) -> str:
    """One key per project across PyPI and Debian names (`python3-six` and `six`)."""
    name = re.sub(r"[-_.]+", "-", source.lower())
    return re.sub(r"^python3?-", "", name)


def unit_hash(text: str, salt: str = "") -> float:
    """A stable number in [0, 1) for `text` (blake2b, never Python's salted hash)."""
    digest = hashlib.blake2b(f"{salt}{text}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def near_duplicates(docs: list[Doc], heldout: set[int]) -> set[int]:
    """Indices of documents outside `heldout` that share an LSH band with one inside."""
    from rayworks.pipelines.corpus.minhash import MinHashConfig, candidate_pairs, signatures

    cfg = MinHashConfig()
    sigs = signatures([d.text for d in docs], cfg)
    hits = set()
    for i, j in candidate_pairs(sigs, cfg.bands, cfg.rows):
        if (i in heldout) != (j in heldout):
            hits.add(j if i in heldout else i)
    return hits


def capped(docs: list[Doc], limit: int, salt: str) -> list[Doc]:
    """A seeded random subset of `docs` (by id hash) of at most `limit` bytes."""
    out, total = [], 0
    for doc in sorted(docs, key=lambda d: unit_hash(d.id, salt)):
        if total + doc.n_bytes > limit and out:
            continue
        out.append(doc)
        total += doc.n_bytes
    return out


def split(inputs: list[Doc], outputs: list[Doc], args: argparse.Namespace) -> Split:
    """Held-out packages, the leak guard, training pools and held-out eval sets."""
    held = {s for s in {d.source for d in inputs} if unit_hash(package_key(s)) < args.heldout_share}
    held_idx = {i for i, d in enumerate(inputs) if d.source in held}
    held_ids = {inputs[i].id for i in held_idx}
    near = near_duplicates(inputs, held_idx)
    outside = [(i, d) for i, d in enumerate(inputs) if i not in held_idx]
    exact = sum(d.id in held_ids for _, d in outside)
    near_only = sum(i in near and d.id not in held_ids for i, d in outside)
    banned = held_ids | {d.id for i, d in outside if i in near}
    train_in = [d for d in inputs if d.source not in held and d.id not in banned]
    train_out = [d for d in outputs if d.source not in held and d.id not in banned]
    clean = [d for d in outputs if d.source in held]
    raw = [inputs[i] for i in sorted(held_idx)]
    return Split(
        train={"curated": train_out, "uncurated": train_in},
        heldout={
            "clean": capped(clean, args.eval_bytes, "eval"),
            "uncurated": capped(raw, args.eval_bytes, "eval"),
        },
        heldout_packages=sorted(held),
        exact_copies=exact,
        near_dups=near_only,
    )


def write_jsonl(path: Path, docs: list[Doc]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps({"text": doc.text}, ensure_ascii=False) + "\n")


# --- tokenizer, training, scoring -------------------------------------------------------------


def shared_tokenizer(pools: dict[str, list[Doc]], args: argparse.Namespace, folder: Path) -> Any:
    """Byte-level BPE on an equal-byte sample of every arm's pool, saved to `folder`."""
    from rayworks.models import TokenizerSpec, train_tokenizer

    texts = [d.text for docs in pools.values() for d in capped(docs, args.tokenizer_bytes, "tok")]
    tok = train_tokenizer(TokenizerSpec(kind="bpe", vocab_size=args.vocab_size), texts)
    tok.save_pretrained(folder)
    return tok


def lm_overrides(args: argparse.Namespace, seed: int, files: Path, tok_dir: Path) -> list[str]:
    s = args.steps
    return [
        f"seed={seed}",
        "data.source=files",
        f"data.files={json.dumps([str(files)])}",
        "data.val_fraction=0.01",
        f"data.seq_len={args.seq_len}",
        f"tokenizer.init_from={tok_dir}",
        f"model.d_model={args.d_model}",
        f"model.n_layer={args.n_layer}",
        f"model.n_head={args.n_head}",
        f"model.max_seq_len={max(256, args.seq_len)}",
        "train.num_workers=1",
        "train.threads_per_worker=1",
        f"train.batch_size={args.batch_size}",
        f"train.max_steps={s}",
        f"train.lr={args.lr}",
        f"train.warmup_steps={max(1, s // 10)}",
        "train.log_every=50",
        f"train.eval_every={s}",
        f"train.checkpoint_every={s}",
        "train.keep_checkpoints=1",
        "eval.exact_match=false",
        "eval.val_batches=2",
    ]


def stream(tokenizer: Any, docs: list[Doc]) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, owning document per position; -1 on the EOS before each document)."""
    encoded = tokenizer([d.text for d in docs], add_special_tokens=False)["input_ids"]
    ids, owner = [], []
    for i, toks in enumerate(encoded):
        ids += [tokenizer.eos_token_id, *toks]
        owner += [-1] + [i] * len(toks)
    return np.asarray(ids, dtype=np.int64), np.asarray(owner, dtype=np.int64)


def score(model: Any, tokenizer: Any, docs: list[Doc], seq_len: int) -> tuple[np.ndarray, ...]:
    """(bits, tokens) per document: rows of seq_len overlapping by one token, so every
    position after the first is predicted once, from at most seq_len - 1 tokens."""
    import torch

    ids, owner = stream(tokenizer, docs)
    starts = list(range(0, len(ids) - 1, seq_len - 1))
    bits, count = np.zeros(len(docs)), np.zeros(len(docs), dtype=np.int64)
    model.eval()
    with torch.no_grad():
        for b in range(0, len(starts), 32):
            rows = [ids[s : s + seq_len] for s in starts[b : b + 32]]
            owners = [owner[s + 1 : s + seq_len] for s in starts[b : b + 32]]
            width = max(len(r) for r in rows)
            x = torch.full((len(rows), width), tokenizer.eos_token_id, dtype=torch.long)
            for k, r in enumerate(rows):
                x[k, : len(r)] = torch.from_numpy(r)
            logp = torch.log_softmax(model(input_ids=x).logits[:, :-1].float(), dim=-1)
            nll = -logp.gather(-1, x[:, 1:, None])[..., 0].numpy() / math.log(2)
            for k, own in enumerate(owners):
                keep = own >= 0
                np.add.at(bits, own[keep], nll[k, : len(own)][keep])
                np.add.at(count, own[keep], 1)
    return bits, count


def train_arm(
    arm: str, seed: int, pool: list[Doc], args: argparse.Namespace, tok_dir: Path, data_dir: Path
) -> ArmRun:
    """One `lm` run on a seeded subsample of the arm's pool."""
    from rayworks.platform import launch

    docs = capped(pool, args.train_bytes, f"train{seed}")
    files = data_dir / f"train_{arm}_s{seed}.jsonl"
    write_jsonl(files, docs)
    overrides = lm_overrides(args, seed, files, tok_dir)
    result = launch.run("lm", overrides=overrides, runs_dir=args.runs_dir, progress=False)
    return ArmRun(
        arm, seed, str(result.run_dir), result.summary, len(docs), sum(d.n_bytes for d in docs)
    )


def evaluate(run: ArmRun, heldout: dict[str, list[Doc]], args: argparse.Namespace) -> None:
    from rayworks.models import load_causal_lm, load_tokenizer, resolve_model_dir

    model_dir = resolve_model_dir(run.run_dir)
    model, tok = load_causal_lm(model_dir), load_tokenizer(model_dir)
    run.n_params = sum(p.numel() for p in model.parameters())
    for name, docs in heldout.items():
        run.bits[name], run.tokens[name] = score(model, tok, docs, args.seq_len)


# --- statistics and report ------------------------------------------------------------------

LABELS = {"clean": "clean held-out", "uncurated": "uncurated held-out"}


def sizes(docs: list[Doc]) -> np.ndarray:
    return np.asarray([d.n_bytes for d in docs], dtype=np.float64)


def bpb(bits: np.ndarray, docs: list[Doc], mask: np.ndarray | None = None) -> float:
    """Bits per byte of `docs` (or of the masked ones): summed bits / summed UTF-8 bytes."""
    mask = np.ones(len(docs), bool) if mask is None else mask
    return float(bits[mask].sum() / max(1.0, sizes(docs)[mask].sum()))


def token_ppl(run: ArmRun, name: str) -> float:
    return float(2 ** (run.bits[name].sum() / max(1, run.tokens[name].sum())))


def per_seed(runs: list[ArmRun], arm: str, name: str, docs: list[Doc]) -> list[float]:
    return [bpb(r.bits[name], docs) for r in sorted(runs, key=lambda r: r.seed) if r.arm == arm]


def t_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95% t interval (nan bounds with one value)."""
    mean = float(np.mean(values))
    if len(values) < 2:
        return mean, float("nan"), float("nan")
    return mean_ci(values)


def package_bootstrap(runs: list[ArmRun], docs: list[Doc], name: str, n_boot: int) -> list[float]:
    """95% percentile interval of the seed-averaged bpb difference (curated - uncurated),
    resampling held-out packages with replacement."""
    bits = {a: np.mean([r.bits[name] for r in runs if r.arm == a], axis=0) for a in ARMS}
    size = sizes(docs)
    packages = sorted({d.source for d in docs})
    members = [np.flatnonzero([d.source == p for d in docs]) for p in packages]
    rng = np.random.default_rng(0)
    deltas = []
    for _ in range(n_boot):
        idx = np.concatenate([members[k] for k in rng.integers(0, len(members), len(members))])
        deltas.append((bits["curated"][idx].sum() - bits["uncurated"][idx].sum()) / size[idx].sum())
    return [float(x) for x in np.percentile(deltas, [2.5, 97.5])]


def signed(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:+.4f}"


def mean_sd(values: list[float], digits: int = 3) -> str:
    sd = f" ± {np.std(values, ddof=1):.{digits}f}" if len(values) > 1 else ""
    return f"{np.mean(values):.{digits}f}{sd}"


def measure(runs: list[ArmRun], sp: Split, args: argparse.Namespace) -> dict[str, Any]:
    """Every number the report shows: bpb and token ppl per arm, seed and held-out set, the
    paired differences with both intervals, and bpb per collection (seed means)."""
    out: dict[str, Any] = {"bpb": {}, "token_ppl": {}, "delta": {}, "by_collection": {}}
    for name, docs in sp.heldout.items():
        for arm in ARMS:
            out["bpb"][f"{arm}/{name}"] = per_seed(runs, arm, name, docs)
            out["token_ppl"][f"{arm}/{name}"] = [
                token_ppl(r, name) for r in sorted(runs, key=lambda r: r.seed) if r.arm == arm
            ]
        diffs = [c - u for c, u in zip(*(out["bpb"][f"{a}/{name}"] for a in ARMS), strict=True)]
        out["delta"][name] = {
            "per_seed": diffs,
            "t95": t_interval(diffs),
            "boot95": package_bootstrap(runs, docs, name, args.boot),
        }
        for coll in sorted({d.collection for d in docs}):
            mask = np.asarray([d.collection == coll for d in docs])
            out["by_collection"][f"{name}/{coll}"] = {"docs": int(mask.sum())} | {
                a: float(np.mean([bpb(r.bits[name], docs, mask) for r in runs if r.arm == a]))
                for a in ARMS
            }
    return out


def bpb_table(m: dict[str, Any]) -> list[str]:
    head = " | ".join(f"{LABELS[n]} bpb | {LABELS[n]} token ppl" for n in EVAL_SETS)
    rows = [f"| arm | {head} |", "|---|" + "---:|" * 2 * len(EVAL_SETS)]
    for arm in ARMS:
        cells = [
            f"{mean_sd(m['bpb'][f'{arm}/{n}'])} | {mean_sd(m['token_ppl'][f'{arm}/{n}'], 2)}"
            for n in EVAL_SETS
        ]
        rows.append(f"| {arm} arm | " + " | ".join(cells) + " |")
    return rows


def delta_table(m: dict[str, Any]) -> list[str]:
    rows = [
        "| held-out set | Δ bpb, curated - uncurated | 95% CI over seeds (t) | "
        "95% CI over held-out packages (bootstrap) | per seed |",
        "|---|---:|---:|---:|---|",
    ]
    for name in EVAL_SETS:
        d = m["delta"][name]
        (mean, lo, hi), (blo, bhi) = d["t95"], d["boot95"]
        seeds = ", ".join(f"{x:+.4f}" for x in d["per_seed"])
        rows.append(
            f"| {LABELS[name]} | {mean:+.4f} | [{signed(lo)}, {signed(hi)}] | "
            f"[{blo:+.4f}, {bhi:+.4f}] | {seeds} |"
        )
    return rows


def verdict(m: dict[str, Any]) -> list[str]:
    """One plain sentence per held-out set: direction, size, and which intervals hold 0."""
    lines = []
    for name in EVAL_SETS:
        d = m["delta"][name]
        (mean, lo, hi), (blo, bhi) = d["t95"], d["boot95"]
        base = float(np.mean(m["bpb"][f"uncurated/{name}"]))
        side = "better" if mean < 0 else "worse"
        holds = [
            f"the {what} interval {'includes' if a <= 0 <= b else 'excludes'} 0"
            for what, a, b in (("seed", lo, hi), ("package", blo, bhi))
            if not math.isnan(a)
        ]
        lines.append(
            f"- {LABELS[name]}: the curated arm is {side} by {abs(mean):.3f} bpb "
            f"({abs(mean) / base:.1%}); {' and '.join(holds)}."
        )
    return lines


def collection_table(m: dict[str, Any]) -> list[str]:
    rows = [
        "| held-out set | collection | docs | curated arm bpb | uncurated arm bpb | Δ |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for key, v in m["by_collection"].items():
        name, coll = key.split("/")
        rows.append(
            f"| {LABELS[name]} | {coll} | {v['docs']} | {v['curated']:.3f} | "
            f"{v['uncurated']:.3f} | {v['curated'] - v['uncurated']:+.3f} |"
        )
    return rows


def set_table(sp: Split) -> list[str]:
    rows = [
        "| set | docs | MB | packages | code docs (MB) | web docs (MB) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    sets = {f"training pool, {a} arm": d for a, d in sp.train.items()}
    sets.update({LABELS[n]: d for n, d in sp.heldout.items()})
    for label, docs in sets.items():
        parts = [[d for d in docs if d.collection == c] for c in ("code", "web")]
        by = [f"{len(p)} ({sizes(p).sum() / 1e6:.2f})" for p in parts]
        rows.append(
            f"| {label} | {len(docs)} | {sizes(docs).sum() / 1e6:.2f} | "
            f"{len({d.source for d in docs})} | {by[0]} | {by[1]} |"
        )
    return rows


def training_table(runs: list[ArmRun], args: argparse.Namespace) -> list[str]:
    budget = args.steps * args.batch_size * args.seq_len
    rows = [
        "| arm | seed | docs sampled | MB sampled | tokens sampled | training tokens | "
        "epochs | final train loss | lm wall s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        tokens = int(r.summary.get("train_rows", 0)) * args.seq_len
        rows.append(
            f"| {r.arm} | {r.seed} | {r.pool_docs} | {r.pool_bytes / 1e6:.2f} | "
            f"{tokens} | {budget} | {budget / max(1, tokens):.2f} | "
            f"{r.summary.get('train_loss', float('nan')):.3f} | "
            f"{r.summary.get('wall_s', float('nan')):.0f} |"
        )
    return rows


def corpus_line(artifacts: Path) -> str:
    """Documents read, kept and removed by reason, from the run's `attrition.json`."""
    att = json.loads((artifacts / "attrition.json").read_text())
    removed = Counter(att.get("dropped", {})) + Counter(att.get("rejected", {}))
    top = ", ".join(f"{k} {v}" for k, v in removed.most_common())
    return (
        f"Corpus run: {att['in']} documents read, {att['kept']} kept "
        f"({att['kept'] / max(1, att['in']):.0%}); removed by reason: {top}."
    )


def code_share(docs: list[Doc]) -> float:
    return float(sizes([d for d in docs if d.collection == "code"]).sum() / sizes(docs).sum())


def header(
    args: argparse.Namespace, sp: Split, runs: list[ArmRun], timings: dict[str, float], command: str
) -> list[str]:
    budget = args.steps * args.batch_size * args.seq_len
    n_packages = len(
        {d.source for docs in sp.train.values() for d in docs} | set(sp.heldout_packages)
    )
    seeds = ", ".join(str(s) for s in sorted({r.seed for r in runs}))
    return [
        f"# Does curation help? The same tiny LM on curated vs uncurated text (seeds {seeds})",
        "",
        f"`{command}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores shared with other jobs. The "
        f"corpus run took {timings['corpus_run']:.0f} s wall. This script: {timings['total']:.0f}"
        f" s: corpus {timings['corpus']:.0f} (0 = reused), split and leak guard "
        f"{timings['split']:.0f}, tokenizer {timings['tokenizer']:.0f}, {len(runs)} `lm` runs "
        f"with scoring {timings['arms']:.0f}.",
        "",
        f"Model: the `lm` pipeline's Llama decoder, d_model {args.d_model}, {args.n_layer} layers, "
        f"{args.n_head} heads, {runs[0].n_params} parameters; byte-level BPE (vocab "
        f"{args.vocab_size}) shared by both arms; seq_len {args.seq_len}, batch "
        f"{args.batch_size}, {args.steps} steps, AdamW lr {args.lr}, cosine: {budget} training "
        "tokens per arm and seed; 1 Ray Train worker, 1 thread.",
        "",
        f"Held out: {len(sp.heldout_packages)} of {n_packages} packages (share "
        f"{args.heldout_share}). Leak guard: {sp.exact_copies} input documents outside them are "
        f"exact copies of held-out ones and {sp.near_dups} more are MinHash near-duplicates; "
        "their ids are removed from both training pools. Held-out sets are capped at "
        f"{args.eval_bytes / 1e6:.1f} MB each.",
        "",
    ]


READING = (
    "bpb = bits per UTF-8 byte of document text (EOS not counted); Δ < 0 means the curated "
    "arm models the set better. The clean held-out set is curated text (normalized, "
    "PII-redacted, license/quality/language filtered) from held-out packages, so it shares "
    "the curated arm's distribution: a win there partly measures distribution match, and it "
    "is not an outside benchmark. The uncurated held-out set is the same packages before "
    "curation. Token perplexity uses the one shared tokenizer, so it is comparable between "
    "the arms here, not with other tokenizers. The seed interval covers training noise (init, "
    "batch order, document sample), the package bootstrap covers which packages were held "
    "out; neither covers a different corpus or model size. At this budget (a fraction of an "
    "epoch, final train loss in the runs table) the models are early in training, so this "
    "checks the direction of the effect at our scale, not the paper's claim at its scale."
)


def mixture_note(sp: Split) -> str:
    shares = {a: code_share(docs) for a, docs in sp.train.items()}
    return (
        f"Confound: by bytes the curated pool is {shares['curated']:.0%} code and the "
        f"uncurated pool {shares['uncurated']:.0%} (see the sets table), so the arms "
        "differ in collection mix as well as in document quality; the per-collection rows "
        "separate the two only in part. A mix-matched uncurated arm would isolate the "
        "filters (not run here)."
    )


def report(
    args: argparse.Namespace,
    sp: Split,
    runs: list[ArmRun],
    artifacts: Path,
    timings: dict[str, float],
    command: str,
) -> tuple[str, dict[str, Any]]:
    m = measure(runs, sp, args)
    lines = [
        *header(args, sp, runs, timings, command),
        corpus_line(artifacts),
        "",
        *set_table(sp),
        "",
        "## Held-out bits per byte (lower is better; mean ± sd over seeds)",
        "",
        *bpb_table(m),
        "",
        *delta_table(m),
        "",
        *verdict(m),
        "",
        *collection_table(m),
        "",
        "## Training runs",
        "",
        *training_table(runs, args),
        "",
        "## Reading",
        "",
        READING,
        "",
        mixture_note(sp),
        "",
    ]
    return "\n".join(lines), m


# --- main -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    import torch

    torch.set_num_threads(1)
    args = parse_args(argv)
    args.runs_dir = str(Path(args.runs_dir).resolve())  # Ray workers run in other folders
    seeds = [int(s) for s in args.seeds.split(",")]
    work = Path(args.runs_dir) / "bench"
    timings: dict[str, float] = {}
    started = time.perf_counter()

    corpus_dir = build_corpus(args)
    corpus = json.loads((corpus_dir / "summary.json").read_text())
    timings["corpus"] = time.perf_counter() - started
    timings["corpus_run"] = float(corpus.get("wall_s", float("nan")))
    print(f"[corpus] {corpus_dir} ({timings['corpus']:.0f}s)", flush=True)

    t0 = time.perf_counter()
    inputs = read_input(input_dir(corpus_dir, corpus))
    sp = split(inputs, read_output(corpus_dir / "artifacts"), args)
    timings["split"] = time.perf_counter() - t0
    print("\n".join(set_table(sp)), flush=True)

    t0 = time.perf_counter()
    tok_dir = work / "tokenizer"
    shared_tokenizer(sp.train, args, tok_dir)
    timings["tokenizer"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    runs = []
    for seed in seeds:
        for arm in ARMS:
            run = train_arm(arm, seed, sp.train[arm], args, tok_dir, work / "data")
            evaluate(run, sp.heldout, args)
            runs.append(run)
            bits = {n: round(bpb(run.bits[n], sp.heldout[n]), 4) for n in EVAL_SETS}
            print(f"[{arm} seed {seed}] bpb {bits} ({time.perf_counter() - t0:.0f}s)", flush=True)
    timings["arms"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - started

    command = " ".join([".venv/bin/python", "benchmarks/corpus_lm.py", *sys.argv[1:]])
    text, numbers = report(args, sp, runs, corpus_dir / "artifacts", timings, command)
    print("\n" + text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    raw = {
        "args": vars(args),
        "corpus_run": str(corpus_dir),
        "timings": timings,
        "numbers": numbers,
        "runs": [{"arm": r.arm, "seed": r.seed, "run_dir": r.run_dir} for r in runs],
    }
    (work / "corpus_lm.json").write_text(json.dumps(raw, indent=2, default=str))
    print(f"wrote {args.out} and {work / 'corpus_lm.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
