"""The skip's plain run leaves every record as the whole pipeline leaves it, at any tick.

`test_tick.py` compares what a run ends with (ticks, times, statuses, results, digest).
The plain run of wake-ups (`SkipAhead._wake_run`: sleepers sleeping again or ending with
nothing to abort, tick after tick in one loop) also writes what no result shows: each
turn's fields, the sleep sequence, the abort queue, the index sets. Here the same
population runs twice, unwatched (the skip) and watched (every tick whole), stopped by
``max_ticks`` every few ticks, and every record and queue is compared at every stop, with
and without a digest kept (a kept digest marks each stepped agent).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import ManualClock, Sleep, TickLimitError, World
from tests.world.test_skip_paths import _snapshot
from tests.world.test_tick import _CTX, scripted

# Mostly sleeps at distinct times (the plain run's case), ties, ints and sleeps that round
# to no time at all, and now and then anything else a behaviour may do.
_STEP = st.one_of(
    st.tuples(st.just("sleep"), st.floats(0.001, 3.0)),
    st.tuples(st.just("sleep"), st.floats(0.001, 3.0)),
    st.tuples(st.just("sleep"), st.floats(0.001, 3.0)),
    st.tuples(st.just("sleep"), st.sampled_from([0.5, 1.0, 1e-300, 0.0])),
    st.tuples(st.just("sleep"), st.sampled_from([1, 2])),  # ints
    st.tuples(st.just("raise")),
    st.tuples(st.just("ask")),
    st.tuples(st.just("rng")),
    st.tuples(st.just("send")),
    st.just(("spawn", [("sleep", 0.75), ("sleep", 1.0)])),
    st.just(("join",)),
)


def interactive_sleeper(turn: Any) -> Generator[Any, Any, Any]:
    """Sleep the durations in ``turn.message``; an interactive agent goes IDLE after."""
    for seconds in turn.message:
        yield Sleep(seconds)
    return len(turn.message)


def _stops(
    programs: list[list[tuple[Any, ...]]],
    naps: list[float],
    *,
    watched: bool,
    digest: bool,
    every: int,
    commands: tuple[tuple[int, str, int], ...] = (),
) -> list[Any]:
    """Snapshots at every stop; ``commands``: (stop, op, agent number) given at that stop
    (pause, resume, interrupt, cancel), in the ticks that follow."""
    world = World(clock=ManualClock(), interaction_timeout_secs=1.5)
    world.behaviors.register("scripted", scripted)
    _CTX.clear()
    _CTX["world"] = world
    try:
        if watched:
            world.observe(lambda report, inputs: None)  # every tick whole: no skipping
        ids = [world.spawn("scripted", program) for program in programs]
        ids.append(world.spawn(interactive_sleeper, naps, interactive=True))
        world.tick()
        if digest:
            world.digest()  # a world that keeps its digest: each stepped agent is marked
        seen: list[Any] = []
        for _ in range(10_000):
            try:
                world.run_until_idle(max_ticks=every)
            except TickLimitError:
                seen.append((world.tick_count, world.now, _snapshot(world)))
                for at, op, number in commands:
                    if at == len(seen):
                        getattr(world, op)(ids[number % len(ids)])
                continue
            seen.append((world.tick_count, world.now, _snapshot(world)))
            break
        if digest:
            seen.append(world.digest())
        return seen
    finally:
        world.close()


_COMMAND = st.tuples(
    st.integers(1, 30),
    st.sampled_from(["pause", "pause", "resume", "resume", "interrupt", "cancel"]),
    st.integers(0, 12),
)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.lists(_STEP, max_size=8), min_size=1, max_size=12),
    st.lists(st.floats(0.001, 3.0), max_size=3),
    st.booleans(),
    st.sampled_from([1, 2, 3, 7, 50]),
    st.lists(_COMMAND, max_size=6).map(tuple),
)
def test_a_stopped_plain_run_leaves_every_record_as_the_pipeline_does(
    programs: list[list[tuple[Any, ...]]],
    naps: list[float],
    digest: bool,
    every: int,
    commands: tuple[tuple[int, str, int], ...],
) -> None:
    # Paused sleepers are held at their wake-up and step again once resumed; an
    # interrupt or a cancel abandons a sleep (its entry goes stale).
    fast = _stops(programs, naps, watched=False, digest=digest, every=every, commands=commands)
    whole = _stops(programs, naps, watched=True, digest=digest, every=every, commands=commands)
    assert fast == whole


def test_sleepers_ending_among_sleepers_leave_nothing_queued() -> None:
    # Distinct random-like times, every agent ending among the others' wake-ups: the
    # plain run's commonest ending, stopped every tick and at the end.
    programs = [[("sleep", 0.1 + 0.37 * i), ("sleep", 0.05 * (i + 1))] for i in range(6)]
    for every in (1, 2, 5, 1000):
        fast = _stops(programs, [0.3], watched=False, digest=False, every=every)
        assert fast == _stops(programs, [0.3], watched=True, digest=False, every=every)
        to_abort, finished = fast[-1][2][-2]
        assert to_abort == [] and finished == []


def test_a_paused_sleeper_woken_among_others_is_held_until_resumed() -> None:
    # a2 is paused while it sleeps; it wakes (and is held) between the other agents'
    # wake-ups in one skipped run, then steps once resumed.
    programs = [
        [("sleep", 0.25), ("sleep", 0.5), ("sleep", 0.5)],
        [("sleep", 0.61), ("sleep", 0.3)],
        [("sleep", 0.1), ("sleep", 0.2), ("sleep", 0.3), ("sleep", 0.4)],
    ]
    commands = ((1, "pause", 1), (2, "resume", 1))
    for every in (2, 3, 4, 40):
        runs = [
            _stops(programs, [], watched=w, digest=False, every=every, commands=commands)
            for w in (False, True)
        ]
        assert runs[0] == runs[1]


def test_a_tie_after_an_ending_finds_the_abort_queue_cleared() -> None:
    # a1 ends at 0.5 s among sleepers; a2 and a3 both wake at 1.0 s (a tie, stepped by
    # the general loop in a tick the plain run begins after the quiet tick's abort).
    programs = [
        [("sleep", 0.5)],
        [("sleep", 1.0), ("sleep", 1.0)],
        [("sleep", 1.0), ("sleep", 1.5)],
        [("sleep", 0.3), ("sleep", 2.0)],
    ]
    for every in (2, 3, 4, 5, 6, 1000):
        runs = [_stops(programs, [], watched=w, digest=False, every=every) for w in (False, True)]
        assert runs[0] == runs[1]


def _one_sleeper(turn: Any) -> Generator[Any, Any, None]:
    for i in range(1, 2_001):
        yield Sleep(0.5 + (i % 7) * 0.125)  # one sleeper: every wake-up an instant of its own


@pytest.mark.parametrize("slice_secs", [0.0, 60.0])
def test_a_plain_run_looks_at_its_time_slice_every_64_ticks(slice_secs: float) -> None:
    # The run holds the world's locks; every 64 ticks it looks whether its slice
    # (`WAKE_SLICE`) is over, and once it is, returns so that the locks are taken again
    # (other threads get in between). A run that stopped looking held them to its end.
    from runtime.world import skip

    world = World(clock=ManualClock())
    runs: list[int] = []
    wake_run = world._wake_run

    def counted(*args: Any) -> Any:
        more, now, begun = wake_run(*args)
        runs.append(more)
        return more, now, begun

    world._wake_run = counted  # type: ignore[method-assign]
    saved = skip.WAKE_SLICE
    skip.WAKE_SLICE = slice_secs
    try:
        world.spawn(_one_sleeper)
        world.run_until_idle(max_ticks=10**6)
    finally:
        skip.WAKE_SLICE = saved
        world.close()
    assert sum(runs) > 3_000  # ~2 ticks a wake-up, nearly all in runs
    if slice_secs == 0.0:  # over at once: each run returns at its first look
        assert max(runs) <= 66, max(runs)
    else:  # never over here: the runs end only at the tick budget of a slice
        assert max(runs) > 1_000, max(runs)
