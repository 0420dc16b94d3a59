"""The run behind ``tests/journal/fixtures/*-twins-*.db``: host component types that share
a ``__qualname__``, recorded by an older tickwork, before journal format 4 named them apart.

``python -m tests.journal.fixture_twins OUT.db`` records it (deterministic: virtual time).
Like `tests.journal.fixture_lifecycle`, a fixture is recorded once, by the tickwork of the
commit its name gives, and replayed by ``test_fixtures.py`` with today's code. Keep this
module's types and systems as they are.

One entity holds this module's `Position` and `tests.journal.twin_position.Position`, which
`drift` moves apart tick by tick. Format 3 named the fields of both ``Position.x`` and
``Position.y`` in the entity's digest, the second type's overwriting the first's; format 4
names each of the pair in full (``tests.journal.fixture_twins:Position.x``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

from runtime import Journal, ManualClock, SystemContext, World
from tests.journal import twin_position


@dataclass(slots=True)
class Position:
    x: int
    y: int


def drift_by(dx: int) -> Callable[[SystemContext], None]:
    """A system moving this module's `Position` ``dx`` right and the twin one step up, each
    tick (the run's moves by 1)."""

    def drift(ctx: SystemContext) -> None:
        for entity, (here, there) in ctx.query(Position, twin_position.Position):
            here.x += dx
            there.y += 1
            ctx.set(entity, here)
            ctx.set(entity, there)

    return drift


def setup(world: World) -> None:
    """The run's host system (a replay or resume needs it again)."""
    world.add_system(drift_by(1))


def record(path: str) -> tuple[int, str]:
    """Record the fixture run to ``path``; returns its tick count and last digest."""
    world = World(seed=2028, clock=ManualClock(), journal=Journal.create(path))
    try:
        setup(world)
        world.add_entity(Position(0, 0), twin_position.Position(10, 10))
        world.add_entity(Position(5, 5))  # alone: its fields are named as ever
        for _ in range(5):
            world.tick()
        return world.tick_count, world.digest()
    finally:
        world.close()


if __name__ == "__main__":
    # Through the module's import name: run as `__main__`, the types would be journaled
    # as `__main__:Position`, which no replay can import.
    import importlib

    print(importlib.import_module("tests.journal.fixture_twins").record(sys.argv[1]))
