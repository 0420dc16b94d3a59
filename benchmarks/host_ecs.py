"""host_system and village_fps: the host ECS against bare esper, and the village example."""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import esper

from runtime import ManualClock, SystemContext, World

from .harness import BENCHMARKS, Context, Result, benchmark, interleave, paired_result

__all__ = ["host_system", "village_fps"]

ENTITIES = 10_000
_names = itertools.count(1)


@dataclass(slots=True)
class Pos:
    x: float
    y: float


@dataclass(slots=True)
class Vel:
    dx: float
    dy: float


def move(ctx: SystemContext) -> None:
    """The host system: query two components, update one in place (the digest sees
    in-place changes to what a query handed out; no per-entity call)."""
    for _entity, (pos, vel) in ctx.query(Pos, Vel):
        pos.x += vel.dx
        pos.y += vel.dy


def move_and_set(ctx: SystemContext) -> None:
    """The same, telling the loop of every change with ``ctx.set`` (details only)."""
    for entity, (pos, vel) in ctx.query(Pos, Vel):
        pos.x += vel.dx
        pos.y += vel.dy
        ctx.set(entity, pos)


class Move(esper.Processor):
    """The same update as a bare esper Processor."""

    def process(self) -> None:
        for _entity, (pos, vel) in esper.get_components(Pos, Vel):
            pos.x += vel.dx
            pos.y += vel.dy


def _tickwork_rate(ticks: int, system: Callable[[SystemContext], None] = move) -> float:
    with World(clock=ManualClock()) as world:
        for i in range(ENTITIES):
            world.add_entity(Pos(i, 0.0), Vel(1.0, 0.5))
        world.add_system(system)
        world.tick()  # applies the entities and fills esper's cache
        started = time.perf_counter()
        for _ in range(ticks):
            world.tick()
        return ENTITIES * ticks / (time.perf_counter() - started)


def _esper_rate(ticks: int) -> float:
    name = f"bench-host-{next(_names)}"
    previous = esper.current_world
    esper.switch_world(name)
    try:
        for i in range(ENTITIES):
            esper.create_entity(Pos(i, 0.0), Vel(1.0, 0.5))
        esper.add_processor(Move())
        esper.process()
        started = time.perf_counter()
        for _ in range(ticks):
            esper.process()
        return ENTITIES * ticks / (time.perf_counter() - started)
    finally:
        esper.switch_world(previous)
        esper.delete_world(name)


@benchmark(
    "host_system",
    unit="updates/s",
    target=">= 0.8",
    ours="a host system over 10k entities (query Pos+Vel, update Pos in place), per tick",
    baseline="the same update as a bare esper Processor in its own esper world",
)
def host_system(ctx: Context) -> Result:
    ticks = ctx.pick(20, 60)
    ours, base = interleave(
        ctx, lambda: _tickwork_rate(ticks), lambda: _esper_rate(ticks), reps=ctx.pick(3, 7)
    )
    with_set = _tickwork_rate(ticks, move_and_set)
    details = {"entities": ENTITIES, "ticks": ticks, "with_ctx_set_updates_per_s": with_set}
    return paired_result(BENCHMARKS["host_system"], ours, base, details=details)


def _village_fps(npcs: int, frames: int) -> float:
    folder = str(Path(__file__).resolve().parent.parent / "examples" / "village")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import village  # examples/village/village.py

    clock = ManualClock()
    with World(seed=1, clock=clock, models={"default": village.model()}) as world:
        village.setup(world)
        village.populate(world, npcs)
        started = time.perf_counter()
        for _ in range(frames):
            world.tick()
            village.render(world)  # the host's frame: the map, built from world.query
            clock.advance(1 / 30)
        return frames / (time.perf_counter() - started)


@benchmark(
    "village_fps",
    unit="frames/s",
    target=">= 1.0",
    ours="examples/village: 1,000 NPCs, virtual time, tick + map per frame",
    baseline="30 frames/s, the real-time budget",
)
def village_fps(ctx: Context) -> Result:
    frames = ctx.pick(60, 300)
    reps = ctx.pick(2, 5)
    ours = [_village_fps(1_000, frames) for _ in range(reps)]
    return paired_result(
        BENCHMARKS["village_fps"], ours, [30.0] * reps, details={"npcs": 1_000, "frames": frames}
    )
