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

from runtime import ManualClock, Sleep, World
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
