"""fan_out: results in call order, in-process and as Ray tasks; a failing piece fails the call."""

from __future__ import annotations

import os

import pytest

from rayworks.platform.fanout import fan_out


def _make_piece():
    """A closure, so Ray ships it by value (a test module is not importable in workers)."""

    def piece(x: int, fail: bool = False) -> tuple[int, int, int]:
        import os

        import torch

        if fail:
            raise ValueError(f"piece {x} failed")
        return x * x, torch.get_num_threads(), os.getpid()

    return piece


_piece = _make_piece()


def test_in_process_without_ray_keeps_order_and_reports_each_piece(monkeypatch) -> None:
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    seen: list[int] = []
    out = fan_out(
        _piece, [{"x": 3}, {"x": 1}, {"x": 2}], threads=1, on_done=lambda i, r: seen.append(i)
    )
    assert [r[0] for r in out] == [9, 1, 4]
    assert seen == [0, 1, 2] and {r[2] for r in out} == {os.getpid()}


def test_as_ray_tasks_keeps_order_pins_threads_and_fails_loudly(ray_session) -> None:
    seen: list[int] = []
    out = fan_out(
        _piece, [{"x": i} for i in range(5)], threads=1, on_done=lambda i, r: seen.append(i)
    )
    assert [r[0] for r in out] == [0, 1, 4, 9, 16]
    assert {r[1] for r in out} == {1} and os.getpid() not in {r[2] for r in out}
    assert sorted(seen) == list(range(5))
    with pytest.raises(Exception, match="piece 2 failed"):
        fan_out(_piece, [{"x": 1}, {"x": 2, "fail": True}])


def test_inside_a_capturing_placement_group_runs_in_process(ray_session) -> None:
    """A Tune trial's placement group holds only the trial's CPU: pieces stay in-process."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    group = placement_group([{"CPU": 1}])
    ray.get(group.ready(), timeout=60)
    piece = _piece

    def trial() -> tuple[list[int], set[int], int]:
        import os

        out = fan_out(piece, [{"x": 2}, {"x": 3}])
        return [r[0] for r in out], {r[2] for r in out}, os.getpid()

    strategy = PlacementGroupSchedulingStrategy(group, placement_group_capture_child_tasks=True)
    try:
        ref = ray.remote(trial).options(num_cpus=1, scheduling_strategy=strategy).remote()
        squares, pids, trial_pid = ray.get(ref, timeout=120)
    finally:
        remove_placement_group(group)
    assert squares == [4, 9] and pids == {trial_pid}


def test_a_window_bounds_the_pieces_in_flight_and_shared_keywords_reach_each(
    ray_session, monkeypatch
) -> None:
    """`max_in_flight` = 2 of 6 pieces: never more than 2 submitted and unfinished (the
    count `ray.wait` sees); `shared` reaches every piece; `threads=None` leaves torch
    out of the workers (the pieces here are stdlib functions: `textwrap.fill`)."""
    import textwrap

    import ray

    from rayworks.platform import fanout

    seen: list[int] = []
    real_wait = ray.wait

    def counting_wait(refs, **kwargs):
        seen.append(len(refs))
        return real_wait(refs, **kwargs)

    monkeypatch.setattr(ray, "wait", counting_wait)
    calls = [{"text": f"a{i} b{i}"} for i in range(6)]
    got = dict(
        fanout.fan_out_iter(
            textwrap.fill, calls, threads=None, max_in_flight=2, shared={"width": 2}
        )
    )
    assert got == {i: f"a{i}\nb{i}" for i in range(6)}
    assert max(seen) == 2 and len(seen) == 6
    # after_submit runs once, when the first window is submitted, before any wait
    marks: list[int] = []
    seen.clear()
    got = dict(
        fanout.fan_out_iter(
            textwrap.fill,
            calls,
            threads=None,
            max_in_flight=2,
            shared={"width": 2},
            after_submit=lambda: marks.append(len(seen)),
        )
    )
    assert len(got) == 6 and marks == [0]
    with pytest.raises(ValueError, match="max_in_flight"):
        list(fanout.fan_out_iter(textwrap.fill, calls, max_in_flight=0))


def test_a_failing_piece_stops_the_window(ray_session) -> None:
    """One at a time: the piece after the failing one is never submitted."""
    import statistics

    from rayworks.platform.fanout import fan_out_iter

    done = []
    calls = [{"data": [1.0]}, {"data": []}, {"data": [2.0]}]  # fmean([]) raises
    with pytest.raises(statistics.StatisticsError):
        for i, _ in fan_out_iter(statistics.fmean, calls, threads=None, max_in_flight=1):
            done.append(i)
    assert done == [0]
