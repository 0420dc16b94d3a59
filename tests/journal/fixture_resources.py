"""The run behind ``tests/journal/fixtures/*-resources-*.db``: resource visits recorded by
an older tickwork.

``python -m tests.journal.fixture_resources OUT.db`` records it (deterministic: virtual
time, lockstep). Like `tests.journal.fixture_run`, a fixture is recorded once, by the
tickwork of the commit its name gives, and replayed by ``test_fixtures.py`` with today's
code and `desks` as its setup. Keep this module's behaviours as they are.

The run visits two resources every way a visit goes: ``Use`` with a slot free and with a
queue, ``Acquire``/``Sleep``/``Release`` free and queued, ties at one instant, a holder
interrupted mid-hold, a waiter cancelled in the queue, a holder paused past the end of its
hold and resumed, and a turn that ends holding without ``Release``.
"""

from __future__ import annotations

import sys
from typing import Any

from runtime import Acquire, Journal, ManualClock, Release, Resource, Sleep, Use, World


def desks(world: World) -> None:
    """The resources of the run (the replay's ``setup``)."""
    Resource(world, "desk", capacity=2)
    Resource(world, "dock", capacity=1)


def _desk(world: World) -> Resource:
    found: Resource = world._resources.by_name["desk"]  # type: ignore[attr-defined]
    return found


def user(turn: Any) -> Any:
    """``turn.message``: a list of (think, hold) visits of the desk by ``Use``."""
    waits = []
    for think, hold in turn.message:
        yield Sleep(think)
        waits.append((yield Use("desk", hold)))
    return waits


def docker(turn: Any) -> Any:
    """``turn.message``: a list of (think, hold) visits of the dock by Acquire/Release;
    a negative hold ends the turn holding (no Release)."""
    waits = []
    for think, hold in turn.message:
        yield Sleep(think)
        waits.append((yield Acquire("dock")))
        yield Sleep(abs(hold))
        if hold < 0:
            return waits
        yield Release("dock")
    return waits


def record(path: str) -> tuple[int, str]:
    """Record the fixture run to ``path``; returns its tick count and last digest."""
    world = World(seed=2026, clock=ManualClock(), journal=Journal.create(path), lockstep=True)
    try:
        desks(world)
        users = [
            world.spawn(user, [(0.5, 2.0), (1.0, 1.5)], name="u0"),
            world.spawn(user, [(0.5, 3.0), (0.25, 0.5)], name="u1"),  # a tie at 0.5
            world.spawn(user, [(0.75, 1.0), (2.0, 0.125)], name="u2"),  # queues at 0.75
            world.spawn(user, [(1.0, 4.0)], name="u3"),  # queues; interrupted as it holds
            world.spawn(user, [(1.25, 1.0)], name="u4"),  # queues; cancelled waiting
            world.spawn(user, [(0.125, 0.375), (3.0, 0.5)], name="u5"),  # paused holding
        ]
        dockers = [
            world.spawn(docker, [(0.25, 1.0), (0.5, -0.75)], name="d0"),  # ends holding
            world.spawn(docker, [(0.5, 0.5), (0.125, 0.25)], name="d1"),  # queues
        ]
        clock = world.clock
        assert isinstance(clock, ManualClock)
        world.tick()
        world.pause(users[5])  # it holds the desk from 0.125 to 0.5, paused
        interrupted = False
        for step in range(40):
            world.tick()
            if step == 6:
                world.resume(users[5])
                world.cancel(users[4])  # in the queue by now
            if not interrupted and users[3] in _desk(world).holders:
                world.interrupt(users[3])  # mid-hold
                interrupted = True
            clock.advance(0.25)
        assert interrupted
        world.send(users[3], [(0.5, 0.25)])  # its next turn: one more visit
        world.run_until_idle(timeout=60)
        assert all(world.status(a).kind.is_terminal for a in dockers)
        return world.tick_count, world.digest()
    finally:
        world.close()


if __name__ == "__main__":
    print(record(sys.argv[1]))
