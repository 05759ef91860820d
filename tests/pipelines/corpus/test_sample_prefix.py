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
