"""The executions' timeline of a corpus run (`fanout.Timeline`)."""

from __future__ import annotations

import itertools

import pytest

from rayworks.pipelines.corpus.fanout import Span, Timeline, WarmUp, fan_units


def test_phases_sum_tasks_per_execution_in_run_order():
    timeline = Timeline(
        [
            Span("score", 1, 100.0, 104.0),
            Span("score", 2, 100.5, 102.5),
            Span("score", 2, 102.5, 104.0),
            Span("final", 1, 105.0, 106.0),
        ]
    )
    score, final = timeline.phases(origin=99.0, cpus=2)
    assert score == {
        "phase": "score",
        "tasks": 3,
        "workers": 2,
        "start_s": 1.0,
        "end_s": 5.0,
        "busy_s": 7.5,
        "idle_share": pytest.approx(1 - 7.5 / 8),  # 2 CPUs x 4 s, 7.5 s busy
    }
    assert (final["tasks"], final["workers"], final["start_s"]) == (1, 1, 6.0)
    assert final["idle_share"] == pytest.approx(0.5)  # one task on two CPUs
    assert Timeline().phases(0.0, 2) == []


def test_fan_units_records_spans_only_while_recording():
    calls = [{"a": 1}, {"a": 2}, {"a": 3}]
    timeline = Timeline()
    assert [out for _, out in fan_units(dict, calls, cpus=1)] == calls
    assert timeline.spans == []
    with timeline.record():
        results = sorted(fan_units(dict, calls, cpus=1, shared={"b": 0}))
    assert [out for _, out in results] == [{**c, "b": 0} for c in calls]
    assert [s.phase for s in timeline.spans] == ["dict"] * 3
    assert all(0 <= s.end - s.start < 60 for s in timeline.spans)
    spans = timeline.spans
    assert all(a.end <= b.start for a, b in itertools.pairwise(spans))  # one at a time


def test_warm_ups_import_in_tasks_started_after_the_execution_and_recorded_when_waited(
    ray_session,
):
    timeline, warm = Timeline(), WarmUp(2, ["rayworks.pipelines.corpus.dedup"])
    with timeline.record():
        results = fan_units(dict, [{"a": 1}], cpus=1, after_submit=warm.start)
        assert warm.refs == []  # not before the execution's tasks are submitted
        assert [out for _, out in results] == [{"a": 1}]
        assert len(warm.refs) == 2
        warm.wait()
        none = WarmUp(0, ["json"])
        none.start()
        assert none.refs == []
        none.wait()
    assert sorted(s.phase for s in timeline.spans) == ["dict", "import_modules", "import_modules"]
    assert all(0 <= s.end - s.start < 120 for s in timeline.spans)
    broken = WarmUp(1, ["rayworks.no_such_module"])
    broken.start()
    with pytest.raises(ModuleNotFoundError):
        broken.wait()
