"""Every input that arrived before a tick is applied at its start, however many there are
(DESIGN: applied at the start of the next tick, in sequence order)."""

from __future__ import annotations

from typing import Any

import pytest

from runtime import ManualClock, MonotonicClock, World


def _done(turn: Any) -> str:
    return str(turn.message)


@pytest.mark.parametrize("clock", [MonotonicClock, ManualClock])
def test_a_flood_of_spawns_is_applied_by_the_next_tick_in_order(clock: type) -> None:
    with World(clock=clock()) as world:
        agents = [world.spawn(_done, i) for i in range(2_000)]
        assert world.tick().inputs == len(agents)
        assert [world.result(a) for a in agents] == [str(i) for i in range(len(agents))]
