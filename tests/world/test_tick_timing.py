"""What a live tick times for telemetry: ``tick_seconds`` and the probes' ``ticked``.

The tick reads ``perf_counter`` at its start and end only when the metrics or a probe want
its duration; these tests put a scripted clock there, so every duration is known exactly.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import runtime.world.tick as tick_module
from runtime import Sleep, World
from runtime.world.metrics import QUICK_TICK, TICK_BUCKETS, _Buckets
from runtime.world.probe import ignore_ticks


class _ScriptedTimer:
    """``perf_counter`` for the tick: 0.0 at a tick's start, the next duration at its end."""

    def __init__(self, durations: list[float]) -> None:
        self._reads: Iterator[float] = iter([value for d in durations for value in (0.0, d)])
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return next(self._reads)


class _Watcher:
    """A probe that wants every event, ``ticked`` included."""

    def __init__(self) -> None:
        self.ticks: list[tuple[int, float]] = []
        self.turns = 0

    def applied(self, inputs: list[tuple[int, object]]) -> None:
        pass

    def turn_started(self, rec: object) -> None:
        self.turns += 1

    def turn_ended(self, rec: object, outcome: str, message: str) -> None:
        pass

    def dispatched(self, rec: object, action: object) -> None:
        pass

    def ticked(self, report: object, seconds: float) -> None:
        self.ticks.append((report.tick, seconds))  # type: ignore[attr-defined]


class _Deaf(_Watcher):
    """A probe that has no use for tick durations."""

    ticked = ignore_ticks


def napper(turn):
    while True:
        yield Sleep(0)


# The first bucket's bound itself, just past it, the others' bounds and past the last.
DURATIONS = [
    3e-6,
    QUICK_TICK,
    QUICK_TICK * (1 + 1e-9),
    7e-6,
    *TICK_BUCKETS[1:],
    2.0,
    0.0,
    4e-5,
    9.9e-6,
]


def _expected(durations: list[float]) -> _Buckets:
    hist = _Buckets(TICK_BUCKETS)
    for d in durations:
        hist.observe(d)  # a bucket search per tick, as before ticks were counted quickly
    return hist


def test_tick_seconds_holds_every_tick_in_its_bucket_across_snapshots(make_world, monkeypatch):
    world: World = make_world()
    world.record_metrics()
    world.spawn(napper)
    timer = _ScriptedTimer(DURATIONS)
    monkeypatch.setattr(tick_module, "perf_counter", timer)
    half = len(DURATIONS) // 2
    for _ in range(half):
        world.tick()
    first = world.metrics().tick_seconds
    want = _expected(DURATIONS[:half])
    assert first.counts == tuple(want.counts) and first.sum == pytest.approx(want.sum)
    for _ in range(len(DURATIONS) - half):
        world.tick()
    again = world.metrics().tick_seconds
    assert again == world.metrics().tick_seconds  # a snapshot counts nothing twice
    want = _expected(DURATIONS)
    assert again.counts == tuple(want.counts)
    assert again.sum == pytest.approx(want.sum, rel=1e-12)
    assert again.count == len(DURATIONS) == world.tick_count
    assert timer.reads == 2 * len(DURATIONS)


def test_a_probe_that_ignores_ticks_costs_no_clock_read_and_others_still_get_them(
    make_world, monkeypatch
):
    world: World = make_world()
    deaf = _Deaf()
    world.add_probe(deaf)
    world.spawn(napper)
    timer = _ScriptedTimer([1e-6, 2e-6, 3e-6])
    monkeypatch.setattr(tick_module, "perf_counter", timer)
    world.tick()
    world.tick()
    assert timer.reads == 0  # nobody wants the tick's duration: no clock is read
    assert deaf.turns == 1  # the probe's other events still come
    watcher = _Watcher()
    world.add_probe(watcher)
    world.tick()
    assert timer.reads == 2
    assert watcher.ticks == [(3, 1e-6)]
    world.remove_probe(watcher)
    world.tick()
    assert timer.reads == 2 and watcher.ticks == [(3, 1e-6)]
