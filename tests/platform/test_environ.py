"""`patched_environ`: values inside the block, each key as before after it."""

from __future__ import annotations

import os

import pytest

from rayworks.core.environ import patched_environ


def test_values_hold_inside_and_every_key_is_restored_even_on_error(monkeypatch):
    monkeypatch.setenv("RW_SET_BEFORE", "old")
    monkeypatch.delenv("RW_UNSET_BEFORE", raising=False)
    with (
        pytest.raises(RuntimeError),
        patched_environ({"RW_SET_BEFORE": "a", "RW_UNSET_BEFORE": "b"}),
    ):
        assert os.environ["RW_SET_BEFORE"] == "a" and os.environ["RW_UNSET_BEFORE"] == "b"
        raise RuntimeError("leave the block")
    assert os.environ["RW_SET_BEFORE"] == "old" and "RW_UNSET_BEFORE" not in os.environ
