"""The pass rule reads the sweep table as `docs/lestd.md` states it."""

from __future__ import annotations

from rayworks.pipelines.lestd.report import pass_rule


def table(bpc: dict[str, float], ratio: int = 16) -> list[dict]:
    return [
        {"method": m, "ratio": ratio, "reachable": float(v is not None), "val_bpc": v}
        if v is not None
        else {"method": m, "ratio": ratio, "reachable": 0.0}
        for m, v in bpc.items()
    ]


def test_pass_rule() -> None:
    win = {"lestd": 3.0, "lestd_norefit": 3.1, "tucker": 3.2, "svd": 3.3}
    assert pass_rule(table(win), "lestd") == {"pass_rule": 1.0}
    assert pass_rule(table({**win, "svd": 2.9}), "lestd") == {"pass_rule": 0.0}
    assert pass_rule(table({**win, "lestd_norefit": 3.0}), "lestd") == {"pass_rule": 0.0}
    assert pass_rule(table({**win, "tucker": None}), "lestd") == {"pass_rule": 1.0}
    assert pass_rule(table({**win, "lestd": None}), "lestd") == {"pass_rule": 0.0}
    assert pass_rule(table(win, ratio=8), "lestd") == {}  # only ratios >= 16 count
    assert pass_rule(table(win), "tucker") == {}
    assert pass_rule(table(win) + table({**win, "svd": 2.0}, ratio=32), "lestd") == {
        "pass_rule": 0.0
    }
