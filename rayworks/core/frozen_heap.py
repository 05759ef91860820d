"""Keep a long-lived process's existing objects out of the cyclic collector's full passes.

A driver that has imported Ray, pyarrow, pandas and a pipeline holds ~10^6 objects; every
full (generation-2) collection walks all of them. Measured in the corpus driver with
`gc.callbacks`: one such pass took 0.14 s of the driver's own CPU right after the scoring
execution, while the workers waited for the dedup tasks it was about to submit, and
another 0.17 s while it wrote the datasheet (docs/results.md, corpus). `gc.freeze()` moves
the objects alive at entry to a permanent generation, so passes during the block walk
only what the block made; `gc.unfreeze()` at exit hands them back, so nothing stays
uncollectable after the block. `gc.unfreeze()` thaws every frozen object, also those
frozen before the block by someone else (nothing in rayworks freezes otherwise).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Objects alive at entry are skipped by the collector until exit (then unfrozen)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
