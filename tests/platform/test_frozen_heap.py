"""`core.frozen_heap`: the objects alive at entry are frozen for the block only."""

from __future__ import annotations

import gc
import weakref

import pytest

from rayworks.core.frozen_heap import frozen_heap


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


def test_objects_alive_at_entry_are_frozen_inside_and_collectable_after():
    node = _Node()
    gone = weakref.ref(node)
    with frozen_heap():
        assert gc.get_freeze_count() > 0
        del node
        gc.collect()
        assert gone() is not None  # frozen: a full pass leaves it alone
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert gone() is None


def test_an_error_in_the_block_still_unfreezes():
    with pytest.raises(RuntimeError), frozen_heap():
        raise RuntimeError("boom")
    assert gc.get_freeze_count() == 0
