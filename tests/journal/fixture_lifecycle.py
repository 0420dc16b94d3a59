"""The run behind ``tests/journal/fixtures/*-lifecycle-*.db``: agent trees recorded by an
older tickwork, before journal format 3 changed three rules.

``python -m tests.journal.fixture_lifecycle OUT.db`` records it (deterministic: virtual
time). Like `tests.journal.fixture_run`, a fixture is recorded once, by the tickwork of the
commit its name gives, and replayed by ``test_fixtures.py`` with today's code. Keep this
module's behaviours as they are.

The run meets each rule format 3 changed (`runtime.world.state.JOURNAL_FORMAT`):

- ``root`` spawns ``mid``, which spawns ``leaf`` and completes without joining it; the
  host cancels ``root``. Format 2 cancelled only live children: ``leaf``, under a finished
  ``mid``, slept on and completed.
- ``boss`` spawns ``worker`` and completes; the host pauses ``boss`` (which pauses
  ``worker``) and resumes it. Format 2 resumed only a paused agent's subtree: ``worker``
  stayed paused until the host resumed it by name.
- ``setter`` spawns ``echo`` on a set of integers. Format 2 wrote the set in the child's
  history as Python prints it (in hash order).
"""

from __future__ import annotations

import sys
from typing import Any

from runtime import Join, Journal, ManualClock, Sleep, Spawn, World


def leaf(turn: Any) -> Any:
    for _ in range(4):
        yield Sleep(1.0)
    return "leaf done"


def mid(turn: Any) -> Any:
    yield Spawn(leaf, "grow")
    return "mid done"  # without joining its child


def root(turn: Any) -> Any:
    child = yield Spawn(mid, "branch")
    yield Join(child)
    yield Sleep(10.0)  # cancelled here
    return "root done"


def worker(turn: Any) -> Any:
    for _ in range(3):
        yield Sleep(1.0)
    return "worked"


def boss(turn: Any) -> Any:
    yield Spawn(worker, "go")
    return "boss done"


def echo(turn: Any) -> Any:
    yield Sleep(0.5)
    return "echoed"


def setter(turn: Any) -> Any:
    child = yield Spawn(echo, {3, 10, 200, 4097})
    yield Join(child)
    return "set"


def record(path: str) -> tuple[int, str]:
    """Record the fixture run to ``path``; returns its tick count and last digest."""
    world = World(seed=2027, clock=ManualClock(), journal=Journal.create(path))
    try:
        top = world.spawn(root, "start", name="root")
        chief = world.spawn(boss, "start", name="boss")
        world.spawn(setter, "start", name="setter")
        clock = world.clock
        assert isinstance(clock, ManualClock)
        for _ in range(4):  # root joins mid, which spawned leaf and ended; boss ended
            world.tick()
        world.cancel(top)
        world.pause(chief)
        world.tick()
        clock.advance(0.5)
        world.tick()
        world.resume(chief)
        world.tick()
        clock.advance(1.0)
        world.tick()
        world.resume(f"{chief}.1")  # the worker, by name: format 2 left it paused
        world.run_until_idle(timeout=60)
        return world.tick_count, world.digest()
    finally:
        world.close()


if __name__ == "__main__":
    print(record(sys.argv[1]))
