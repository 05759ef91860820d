"""`fanout.fan_out`: every item once, at most `cpus` tasks in flight, an error stops the rest.

The tasks are stdlib functions (`statistics.fmean`, `textwrap.fill`): a function shipped to
Ray workers must come from an importable module, not from this test module."""

from __future__ import annotations

import statistics
import textwrap

import pytest

from rayworks.pipelines.corpus import fanout


def test_every_item_comes_back_once_with_its_index(ray_session, monkeypatch):
    in_flight: list[int] = []
    real_wait = fanout.ray.wait

    def counting_wait(refs, **kwargs):
        in_flight.append(len(refs))
        return real_wait(refs, **kwargs)

    monkeypatch.setattr(fanout.ray, "wait", counting_wait)
    items = [[i, i + 1.0] for i in range(7)]
    got = dict(fanout.fan_out(statistics.fmean, items, 3))
    assert got == {i: i + 0.5 for i in range(7)}
    assert max(in_flight) == 3  # the window fills to `cpus` and never beyond
    assert len(in_flight) == 7


def test_shared_arguments_reach_every_task(ray_session):
    got = dict(fanout.fan_out(textwrap.fill, ["aaa bbb", "ccc ddd"], 2, width=3))
    assert got == {0: "aaa\nbbb", 1: "ccc\nddd"}


def test_a_task_that_raises_stops_the_execution(ray_session):
    items = [[1.0], [], [2.0], [3.0], [4.0]]  # fmean([]) raises StatisticsError
    seen = []
    with pytest.raises(statistics.StatisticsError):
        for index, _ in fanout.fan_out(statistics.fmean, items, 1):
            seen.append(index)
    assert seen == [0]  # one at a time: nothing after the failing item was handed out


def test_no_items_no_tasks_and_cpus_checked(ray_session):
    assert list(fanout.fan_out(statistics.fmean, [], 2)) == []
    with pytest.raises(ValueError, match="cpus"):
        list(fanout.fan_out(statistics.fmean, [[1.0]], 0))
