"""The SimPy rows' fast paths give exactly what the general code gives.

`test_tick.py` compares the skip-ahead path with the whole pipeline. Some of the paths here
are used by both (an agent's plain end is `end_turn`'s, whichever tick runs it), so they are
compared with the general code they replace instead: the same run with the fast path
patched out must leave every record, queue and count as the run with it.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import Acquire, ManualClock, Release, Resource, Sleep, Use, World
from systems.lifecycle import turns
from tests.world.test_tick import _programs, _run


def _snapshot(world: World) -> list[Any]:
    """Every record's state as the tick thread sees it, beyond what the digest covers."""
    state = world._state
    out: list[Any] = []
    for rec in state.records.values():
        turn = rec.turn
        out.append(
            (
                rec.id,
                rec.status.kind,
                rec.status.reason,
                rec.status.message,
                rec.result,
                rec.sleep_seq,
                rec.paused_from,
                turn.phase,
                turn.inflight,
                turn.deadline,
                turn.pending,
                turn.send_value,
                turn.behavior is None,
                rec.ordinal in state.ready,
                rec.ordinal in state.held,
            )
        )
    out.append(([r.id for r in state.to_abort], [r.id for r in state.finished]))
    out.append((state.tick, state.now, sorted(state.joiners)))
    return out


def _ends(keep_finished: int | None) -> list[Any]:
    """Agents ending every way `_end_plain` and `_end_whole` tell apart: plain, interactive
    (IDLE), with a message queued (a next turn), joined by a parent, having drawn from
    its rng; snapshots after every tick."""

    def sleeper(turn: Any) -> Generator[Any, Any, Any]:
        for seconds in turn.message:
            yield Sleep(seconds)
        return len(turn.message)

    def drawer(turn: Any) -> Generator[Any, Any, Any]:
        yield Sleep(0.5)
        return turn.rng.random()

    world = World(clock=ManualClock(), keep_finished=keep_finished)
    world.behaviors.register("sleeper", sleeper)
    seen: list[Any] = []
    try:
        world.spawn(sleeper, [0.5, 1.0])
        world.spawn(sleeper, [0.25], interactive=True)
        queued = world.spawn(sleeper, [1.5], interactive=True)
        world.spawn(drawer)
        for _ in range(8):
            world.tick()
            if world.tick_count == 2:
                world.send(queued, [0.5])
            world.clock.advance(0.25)  # type: ignore[attr-defined]
            seen.append(_snapshot(world))
        return seen
    finally:
        world.close()


def test_a_plain_end_is_the_whole_end() -> None:
    for keep in (None, 1):
        fast = _ends(keep)
        with mock.patch.object(turns, "_end_plain", turns._end_whole):
            whole = _ends(keep)
        assert fast == whole


@settings(max_examples=40, deadline=None)
@given(st.lists(_programs(2), min_size=1, max_size=8), st.sampled_from([None, 2]))
def test_runs_with_plain_ends_give_what_the_whole_ends_give(
    programs: list[list[tuple[Any, ...]]], keep_finished: int | None
) -> None:
    fast = _run(programs, watched=False, keep_finished=keep_finished)
    with mock.patch.object(turns, "_end_plain", turns._end_whole):
        whole = _run(programs, watched=True, keep_finished=keep_finished)
    assert fast == whole


# A visit program: ("think", s) | ("use", s) | ("hold", s) (Acquire, Sleep s, Release)
# | ("grab", s) (Acquire, Sleep s, and no Release: the turn may end holding it)
# | ("timer", s) (a host timer s from now that does nothing but make the world tick).
_VISIT = st.one_of(
    st.tuples(st.just("think"), st.sampled_from([0.0, 0.5, 1.0])),
    st.tuples(st.just("think"), st.floats(0.001, 3.0)),
    st.tuples(st.just("use"), st.sampled_from([0.0, 0.5, 1.0])),
    st.tuples(st.just("use"), st.floats(0.001, 3.0)),
    st.tuples(st.just("hold"), st.sampled_from([0.0, 1.0])),
    st.tuples(st.just("grab"), st.sampled_from([0.0, 0.5])),
    st.tuples(st.just("timer"), st.sampled_from([0.0, 0.5])),
    st.tuples(st.just("timer"), st.floats(0.001, 3.0)),
)


def visiting(turn: Any) -> Generator[Any, Any, Any]:
    """Run the visit program in ``turn.message``; the result is every wait it had."""
    waits: list[Any] = []
    holding = False
    for kind, seconds in turn.message:
        if kind == "think":
            yield Sleep(seconds)
        elif kind == "use" and not holding:
            waits.append((yield Use("desk", seconds)))
        elif kind == "hold" and not holding:
            waits.append((yield Acquire("desk")))
            yield Sleep(seconds)
            yield Release("desk")
        elif kind == "grab":
            if holding:  # a second Acquire of the same resource fails the agent
                yield Release("desk")
            waits.append((yield Acquire("desk")))
            holding = True
            yield Sleep(seconds)
        else:
            _WORLD[0].call_at(turn.now + seconds, lambda: None)
            yield Sleep(0.25)
    return waits


_WORLD: list[World] = []


def _visits(programs: list[list[tuple[str, float]]], capacity: int, watched: bool) -> Any:
    world = World(clock=ManualClock())
    _WORLD[:] = [world]
    try:
        if watched:
            world.observe(lambda report, inputs: None)  # every tick: no skipping
        desk = Resource(world, "desk", capacity=capacity)
        ids = [world.spawn(visiting, program) for program in programs]
        world.tick()
        ticks = world.run_until_idle(max_ticks=100_000)
        return (
            ticks,
            world.tick_count,
            world.now,
            world.digest(),
            desk.stats(),
            [(world.status(i).kind, world.result(i)) for i in ids],
        )
    finally:
        _WORLD.clear()
        world.close()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(_VISIT, max_size=6), min_size=1, max_size=10),
    st.sampled_from([1, 2, 8]),
)
def test_runs_of_resource_visits_give_what_the_pipeline_gives(
    programs: list[list[tuple[str, float]]], capacity: int
) -> None:
    fast = _visits(programs, capacity, watched=False)
    assert fast == _visits(programs, capacity, watched=True)
