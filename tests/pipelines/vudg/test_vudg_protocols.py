"""Avg_m / Avg_s on a hand-made table; the protocol plans; configs."""

from __future__ import annotations

import pytest

from rayworks.core.config import build_config
from rayworks.core.errors import ConfigError
from rayworks.pipelines.vudg.config import VUDGConfig
from rayworks.pipelines.vudg.protocols import avg_m, avg_s, plan


def test_avg_m_and_avg_s_on_a_hand_made_table() -> None:
    assert avg_m({"a": 0.5, "b": 0.7, "c": 0.3}) == pytest.approx(0.5)
    # P_j^i: train on i (row), test on j (column); the diagonal must not count.
    matrix = {
        "a": {"a": 0.99, "b": 0.4, "c": 0.6},
        "b": {"a": 0.2, "b": 0.99, "c": 0.3},
        "c": {"a": 0.1, "b": 0.5, "c": 0.99},
    }
    # (1/3) [ (0.4+0.6)/2 + (0.2+0.3)/2 + (0.1+0.5)/2 ] = (0.5 + 0.25 + 0.3) / 3 = 0.35
    assert avg_s(matrix) == pytest.approx(0.35)
    assert avg_s({"a": {"b": 0.4, "c": 0.6}}) == pytest.approx(0.5)


def test_plans_hold_out_and_train_the_right_domains() -> None:
    doms = ["a", "b", "c", "d"]
    lodo = plan("lodo", doms, ["b", "d"], ["a"])
    assert [(p["train_domains"], p["test_domains"]) for p in lodo] == [
        (["a", "c", "d"], ["b"]),
        (["a", "b", "c"], ["d"]),
    ]
    assert plan("all", doms, ["b", "d"], ["a"]) == [
        {"label": "all", "train_domains": doms, "test_domains": ["b", "d"]}
    ]
    assert plan("single", doms, ["b"], ["a", "c"])[1] == {
        "label": "single-c",
        "train_domains": ["c"],
        "test_domains": ["a", "b", "d"],
    }


def test_presets_load_and_bad_values_name_the_key() -> None:
    assert build_config(VUDGConfig, "smoke", (), []).data.n_train == 30
    with pytest.raises(ConfigError, match="held_out"):
        build_config(VUDGConfig, "smoke", (), ["held_out=[snow]"])
    with pytest.raises(ConfigError, match=r"data\.frames"):
        build_config(VUDGConfig, None, (), ["data.frames=7"])
    with pytest.raises(ConfigError, match=r"annotation\.generator_error"):
        build_config(VUDGConfig, None, (), ["annotation.generator_error=1.5"])
    with pytest.raises(ConfigError, match="compare"):
        build_config(VUDGConfig, None, (), ["compare=[lodo]"])


def test_seed_rows_give_paired_intervals_and_the_chance_flag() -> None:
    """Per-type intervals over seeds against chance 1/6, and protocol differences paired
    over seeds: the seeds move both protocols together here, so only pairing separates them."""
    from rayworks.pipelines.vudg.report import seed_rows
    from rayworks.platform.stats import mean_ci

    types = ("action", "attribute", "object", "temporal")
    summaries = []
    for shift in (0.0, 0.1, 0.2):  # a seed effect shared by every protocol
        s = {f"{p}_accuracy": 0.3 + shift + d for p, d in (("lodo", 0.02), ("all", 0.05))}
        s["single_accuracy"] = 0.2 + shift
        for t in types:
            s[f"acc_{t}"], s[f"all_acc_{t}"] = 0.17 + shift / 10, 0.4 + shift
            s[f"single_acc_{t}"] = 0.16 + shift
        summaries.append(s)
    rows = {(r["metric"], r["what"]): r for r in seed_rows(summaries)}
    lodo = rows["accuracy", "lodo"]
    assert (lodo["mean"], lodo["lo"], lodo["hi"]) == mean_ci([0.32, 0.42, 0.52])
    diff = rows["accuracy", "lodo - all"]
    assert abs(diff["mean"] + 0.03) < 1e-12 and diff["excludes_0"]  # unpaired: overlapping
    assert rows["accuracy", "lodo - single"]["excludes_0"]  # a constant 0.12 gap
    assert rows["acc_attribute", "all"]["above_chance"]
    assert not rows["acc_action", "lodo"]["above_chance"]  # 0.17-0.19: interval reaches 1/6
    assert len(rows) == 5 * 6
