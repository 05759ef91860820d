"""The tokenizer sample from per-unit prefixes (`dedup.sample_prefix`) is the sample taken
from every candidate: the first survivors by id up to the documents and character caps."""

from __future__ import annotations

import random

import numpy as np
import pytest

from rayworks.pipelines.corpus.dedup import sample_prefix
from rayworks.pipelines.corpus.tokenizer import _bounded


def _sample(
    rows: list[tuple[str, str, bool]], dropped: set[str], docs: int, max_chars: int | None
) -> list[str]:
    """What `runner.global_phase` trains on: survivors sorted by id, `docs` of them, then
    whole texts until `max_chars`."""
    texts = [text for i, text, _ in sorted(rows) if i not in dropped][:docs]
    return list(_bounded(iter(texts), max_chars))


@pytest.mark.parametrize("seed", range(40))
def test_prefixes_hold_the_whole_sample(seed: int) -> None:
    rng = random.Random(seed)
    units = []
    for u in range(rng.randrange(1, 6)):
        units.append(
            [
                (
                    format(rng.getrandbits(64), "016x"),
                    f"u{u}r{r}" + "x" * rng.randrange(0, 40),
                    rng.random() < 0.7,
                )
                for r in range(rng.randrange(0, 30))
            ]
        )
    everything = [row for unit in units for row in unit]
    # near dedup can drop only rows on an edge (not free); drop a random part of them
    dropped = {i for i, _, free in everything if not free and rng.random() < 0.5}
    docs = rng.choice([1, 3, 10, 1000])
    max_chars = rng.choice([None, 1, 50, 200, 10_000])
    kept = []
    for unit in units:
        if not unit:
            continue
        ids = np.asarray([i for i, _, _ in unit], dtype=object)
        chars = np.asarray([len(t) for _, t, _ in unit])
        free = np.asarray([f for _, _, f in unit])
        kept += [unit[p] for p in sample_prefix(ids, chars, free, docs, max_chars)]
    assert _sample(kept, dropped, docs, max_chars) == _sample(everything, dropped, docs, max_chars)
    if max_chars is None and docs == 1000:
        assert len(kept) == len(everything)  # no cap: every candidate goes


@pytest.mark.parametrize("seed", range(20))
def test_sample_order_is_the_sorted_survivors(seed: int) -> None:
    """`sample_order` + `sample_texts` over the fetched Arrow parts (rows without text, on a
    near edge only, among them) give what sorting the survivors' (id, text) pairs in
    Python gave: ids tie now and then (then the text decides), dropped rows and rows
    without text are skipped, the first `docs` are taken."""
    import pyarrow as pa

    from rayworks.pipelines.corpus.dedup import _SAMPLE, sample_order, sample_texts

    rng = random.Random(seed)
    parts, rows = [], []
    for u in range(rng.randrange(1, 5)):
        part = [
            (
                format(rng.getrandbits(6), "02x"),  # few distinct ids: ties
                (u << 32) + r,
                None if rng.random() < 0.2 else f"t{rng.randrange(50)}" + "é" * rng.randrange(3),
            )
            for r in range(rng.randrange(0, 25))
        ]
        rows += part
        parts.append(
            pa.Table.from_pylist([dict(zip(_SAMPLE.names, p, strict=True)) for p in part], _SAMPLE)
        )
    sample = pa.concat_tables(parts)
    dropped = sorted(row for _, row, _ in rows if rng.random() < 0.3)
    docs = rng.choice([1, 5, 1000])
    expected = sorted((i, t) for i, row, t in rows if t is not None and row not in dropped)
    order = sample_order(sample, dropped, docs)
    assert list(sample_texts(sample, order)) == [t for _, t in expected[:docs]]
