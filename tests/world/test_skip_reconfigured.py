"""Host code that changes, during a virtual-time skip, what the skip took as given.

`run_until_idle` on a `ManualClock` runs the ticks that only sleepers move without the
whole pipeline (`runtime.world.skip`), taking for the run that nobody watches tick by tick,
which host systems there are, that nobody closes the world and that the clock moves only
by its hand. Host code on the tick thread may change each of these from inside a tick (a
behaviour, a timer, a system): the run must then give exactly what the whole pipeline
gives, which every test here runs beside it (an every-tick observer forces it).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import pytest

from runtime import ManualClock, Sleep, SystemContext, TickReport, World


def _both(scenario: Callable[[World, bool], dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """``scenario`` run through the whole pipeline, then skipped; what each saw."""
    seen = []
    for watched in (True, False):
        world = World(clock=ManualClock())
        try:
            if watched:
                world.observe(lambda report, inputs: None)
            seen.append(scenario(world, watched))
        finally:
            world.close()
    return seen[0], seen[1]


def _run(world: World) -> dict[str, Any]:
    world.tick()
    ticks = world.run_until_idle(max_ticks=1_000, timeout=10.0)
    return {"ticks": ticks, "tick_count": world.tick_count, "now": world.now}


def _changing(change: Callable[[], object]) -> Callable[[Any], Generator[Any, Any, None]]:
    """A behaviour that sleeps a second, calls ``change`` (host code in the tick), then
    sleeps four more seconds."""

    def sleeper(turn: Any) -> Generator[Any, Any, None]:
        yield Sleep(1.0)
        change()
        for _ in range(4):
            yield Sleep(1.0)

    return sleeper


@pytest.mark.parametrize("mover", ["behaviour", "timer"])
def test_a_clock_moved_by_host_code_mid_run_is_not_moved_back(mover: str) -> None:
    def scenario(world: World, watched: bool) -> dict[str, Any]:
        clock = world.clock
        assert isinstance(clock, ManualClock)
        log: list[tuple[str, int, float, float]] = []

        def moving(turn: Any) -> Generator[Any, Any, float]:
            yield Sleep(1.0)
            log.append(("moving", world.tick_count, turn.now, clock.now()))
            if mover == "behaviour":
                clock.advance(5.0)
            yield Sleep(1.0)
            log.append(("moving", world.tick_count, turn.now, clock.now()))
            return float(turn.now)

        def other(turn: Any) -> Generator[Any, Any, None]:
            for seconds in (0.5, 2.0, 1.0):
                yield Sleep(seconds)
                log.append(("other", world.tick_count, turn.now, clock.now()))

        if mover == "timer":
            world.call_at(1.2, lambda: clock.advance(5.0))
        agent = world.spawn(moving)
        world.spawn(other)
        return {**_run(world), "result": world.result(agent), "log": log, "clock": clock.now()}

    whole, skipped = _both(scenario)
    assert skipped == whole
    assert whole["clock"] == whole["now"] >= 6.0  # (the skip set it back to 3.5)


def test_an_observer_added_by_a_behaviour_sees_every_tick_after() -> None:
    def scenario(world: World, watched: bool) -> dict[str, Any]:
        seen: list[tuple[int, float]] = []

        def late(report: TickReport, inputs: list[tuple[int, object]]) -> None:
            seen.append((report.tick, report.now))

        world.spawn(_changing(lambda: world.observe(late)))
        return {**_run(world), "seen": seen}

    whole, skipped = _both(scenario)
    assert skipped == whole
    assert len(whole["seen"]) == 10  # from the tick that added it (the skip showed one)


def test_a_system_added_by_a_behaviour_runs_from_the_next_tick() -> None:
    def scenario(world: World, watched: bool) -> dict[str, Any]:
        calls: list[tuple[int, float]] = []

        world.spawn(
            _changing(lambda: world.add_system(lambda ctx: calls.append((ctx.tick, ctx.now))))
        )
        return {**_run(world), "calls": calls}

    whole, skipped = _both(scenario)
    assert skipped == whole
    assert len(whole["calls"]) == 9  # (the skip ran it in none)


def test_a_close_asked_by_a_behaviour_ends_the_run_after_that_tick() -> None:
    def scenario(world: World, watched: bool) -> dict[str, Any]:
        log: list[tuple[str, int, float]] = []

        def closer(turn: Any) -> Generator[Any, Any, None]:
            yield Sleep(1.0)
            log.append(("close", world.tick_count, turn.now))
            world.close()
            yield Sleep(1.0)
            log.append(("stepped after the close", world.tick_count, turn.now))

        def other(turn: Any) -> Generator[Any, Any, None]:
            for seconds in (0.5, 1.0, 0.75, 1.0):
                yield Sleep(seconds)
                log.append(("other", world.tick_count, turn.now))

        world.spawn(closer)
        world.spawn(other)
        return {**_run(world), "closed": world.closed, "log": log}

    whole, skipped = _both(scenario)
    assert skipped == whole
    assert whole["closed"] and whole["now"] == 1.0


@dataclass
class Flag:
    value: int = 0


@pytest.mark.parametrize("place", [{}, {"before": "step_behaviors"}])
def test_run_conditions_are_asked_in_pipeline_order_not_the_order_added(
    place: dict[str, str],
) -> None:
    # B, added first but placed after A, runs when A has raised a flag it has not seen;
    # the whole pipeline asks B at its turn, after A ran in the same tick.
    def scenario(world: World, watched: bool) -> dict[str, Any]:
        calls: list[tuple[str, int, float]] = []
        handled = [0]

        def raised(ctx: SystemContext) -> bool:
            return any(flag.value > handled[0] for _e, (flag,) in ctx.query(Flag))

        def b(ctx: SystemContext) -> None:
            calls.append(("B", ctx.tick, ctx.now))
            for _e, (flag,) in ctx.query(Flag):
                handled[0] = flag.value

        def a(ctx: SystemContext) -> None:
            calls.append(("A", ctx.tick, ctx.now))
            for entity, (flag,) in ctx.query(Flag):
                if flag.value < 3:
                    flag.value += 1
                    ctx.set(entity, flag)

        world.add_system(b, run_if=raised, **place)  # type: ignore[arg-type]
        world.add_system(a, after="apply_inputs", run_if=lambda ctx: ctx.tick % 4 == 0)
        world.add_entity(Flag())

        def sleeper(turn: Any) -> Generator[Any, Any, None]:
            for seconds in (0.5, 0.75, 1.0, 0.5, 2.0, 0.25, 1.0):
                yield Sleep(seconds)

        world.spawn(sleeper)
        return {**_run(world), "calls": calls, "digest": world.digest()}

    whole, skipped = _both(scenario)
    assert skipped == whole
    assert [c[:2] for c in whole["calls"][:2]] == [("A", 4), ("B", 4)]
