"""A World dropped without ``close()`` is collected, and its esper world with it.

esper keeps every world's entities in a module-global map; the agents' components reach
the world's state, and nothing below the World may refer back to it, or every unclosed
World (a test that forgot ``close``) stayed for the life of the process.
"""

from __future__ import annotations

import gc
import threading
import weakref
from pathlib import Path

import esper
import pytest

from runtime import (
    Ask,
    CallTools,
    InteractionRequest,
    Journal,
    ManualClock,
    MonotonicClock,
    Sleep,
    ToolCall,
    ToolRegistry,
    World,
)
from runtime.world.tick import ESPER_LOCK


def busy(turn):
    yield CallTools(ToolCall("c1", "echo", {"x": 1}))
    yield Sleep(1)
    yield Ask(InteractionRequest.free_text("", "still there?"))


def _dropped(tmp_path: Path, kind: str) -> tuple[weakref.ref[World], str]:
    world = _ran(tmp_path, kind)
    return weakref.ref(world), world.name


def _ran(tmp_path: Path, kind: str) -> World:
    """A world that ran tools, sleeps and prompts (still open), never closed."""
    tools = ToolRegistry()
    tools.tool("echo")(lambda args: args)
    clock = ManualClock() if kind != "monotonic" else MonotonicClock()
    journal = Journal.create(tmp_path / "run.db") if kind == "journal" else None
    world = World(clock=clock, tools=tools, journal=journal, interaction_timeout_secs=0)
    for _ in range(5):
        world.spawn(busy)
    for _ in range(20):
        world.tick()
        if kind != "monotonic":
            world.clock.advance(0.5)  # type: ignore[attr-defined]
    assert world.hub.pending() or kind == "monotonic"
    if journal is not None:
        journal.close()
    return world


@pytest.mark.parametrize("kind", ["lockstep", "monotonic", "journal"])
def test_an_unclosed_world_is_collected_with_its_esper_world(tmp_path, kind):
    ref, name = _dropped(tmp_path, kind)
    gc.collect()
    assert ref() is None, "something still holds the World"
    assert name not in esper.list_worlds()


def test_an_esper_world_held_when_its_world_goes_is_dropped_by_the_next_world(tmp_path, make_world):
    # Another thread holds the esper lock (a tick of another world) when the collection
    # runs: the finalizer does not wait for it, and the next World made drops the orphan.
    kept = [_ran(tmp_path, "lockstep")]  # collected once the other thread holds the lock
    ref, name = weakref.ref(kept[0]), kept[0].name
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with ESPER_LOCK:
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(10)
        kept.clear()
        gc.collect()
        assert ref() is None
        assert name in esper.list_worlds()  # the finalizer left it: the lock was taken
    finally:
        release.set()
        holder.join(10)
    assert not holder.is_alive()
    make_world()
    assert name not in esper.list_worlds()


def test_a_closed_world_leaves_no_finalizer_behind(make_world):
    world = make_world()
    world.close()
    assert not world._forget_esper.alive
