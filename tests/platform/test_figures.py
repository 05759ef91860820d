"""Figures drawn without pyplot (`platform/figures.py`)."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

from rayworks.platform.figures import subplots


def test_subplots_draws_and_saves_without_pyplot(tmp_path: Path) -> None:
    backend = matplotlib.get_backend()
    pyplot = sys.modules.get("matplotlib.pyplot")  # other tests' libraries may have loaded it
    before = pyplot.get_fignums() if pyplot else []
    fig, axes = subplots(1, 2, figsize=(4, 2), sharey=True)
    axes[0].plot([0, 1], [1, 2])
    fig.savefig(tmp_path / "two.png", dpi=50)
    assert (tmp_path / "two.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert tuple(fig.get_size_inches()) == (4, 2) and len(axes) == 2
    # nothing global moved: the backend is unchanged and no pyplot figure was registered
    assert matplotlib.get_backend() == backend
    if pyplot:
        assert pyplot.get_fignums() == before
