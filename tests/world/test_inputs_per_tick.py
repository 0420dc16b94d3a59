"""A live tick applies at most `INPUTS_PER_TICK` inputs; a lockstep tick applies all that are due."""

from __future__ import annotations

from typing import Any

from runtime import ManualClock, MonotonicClock, World
from runtime.world.tick import INPUTS_PER_TICK


def _done(turn: Any) -> str:
    return str(turn.message)


def test_a_flood_of_spawns_goes_out_in_slices_in_order() -> None:
    with World(clock=MonotonicClock()) as world:
        agents = [world.spawn(_done, i) for i in range(INPUTS_PER_TICK * 2 + 3)]
        first = world.tick()
        assert first.inputs == INPUTS_PER_TICK
        created = [a for a in agents if world.result(a) is not None]
        assert created == agents[:INPUTS_PER_TICK]  # the first in line, not any others
        assert world.tick().inputs == INPUTS_PER_TICK
        assert world.tick().inputs == 3
        world.run_until_idle(timeout=30)
        assert [world.result(a) for a in agents] == [str(i) for i in range(len(agents))]


def test_a_lockstep_tick_applies_every_input_that_is_due() -> None:
    with World(clock=ManualClock()) as world:
        for i in range(INPUTS_PER_TICK + 10):
            world.spawn(_done, i)
        assert world.tick().inputs == INPUTS_PER_TICK + 10
