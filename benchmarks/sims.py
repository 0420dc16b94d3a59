"""Simulation workloads against SimPy and Mesa, where agents wake at distinct times.

- ``simpy_random_1k|10k|100k``: every agent sleeps exponential random times, so almost
  every wake-up is an instant of its own (``vs_simpy`` has all 10k agents wake together);
- ``simpy_resource``: random think times plus a shared capacity-8 resource: SimPy's
  ``Resource`` against tickwork's (`runtime.Resource`, a ``Use`` per visit), both FIFO,
  so both sides grant in the same order and end at the same time;
- ``mesa_agentset``: 10k agents taking one trivial step per tick, against Mesa 3's
  ``AgentSet.do("step")``; tickwork's agents yield a fresh ``Sleep(0)`` per step, as real
  behaviours build their actions.

All run on one thread, CPU-bound on both sides, so they are timed in process CPU seconds
(wall-clock figures in ``details``), as the other tick-loop rows are.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Generator, Sequence
from typing import Any

from runtime import ManualClock, Resource, Sleep, StatusKind, Use, World

from .harness import BENCHMARKS, Context, Result, benchmark, interleave, paired_result
from .peers import mesa_agents
from .peers._timing import Stopwatch
from .peers.simpy_random import (
    draw_durations,
    draw_visits,
    run_simpy_random,
    run_simpy_resource,
)

__all__ = ["mesa_agentset", "simpy_resource"]


def random_sleeper(turn: Any) -> Generator[Any, Any, None]:
    """Sleep each of the pre-drawn durations in ``turn.message``, a fresh action each."""
    for seconds in turn.message:
        yield Sleep(seconds)


def _tickwork_random(durations: Sequence[Sequence[float]]) -> tuple[Stopwatch, float]:
    world = World(clock=ManualClock())
    try:
        for ds in durations:
            world.spawn(random_sleeper, ds)
        world.tick()  # created, and parked on their first sleep
        with Stopwatch() as sw:
            world.run_until_idle(max_ticks=10**9)
        counts = world.counts()
        assert counts[StatusKind.COMPLETE] == len(durations), counts
        return sw, world.now
    finally:
        world.close()


def _cpu_arms(
    ours: Callable[[], tuple[Stopwatch, float]],
    base: Callable[[], tuple[Stopwatch, float]],
    steps: int,
    walls: dict[str, list[float]],
) -> tuple[Callable[[], float], Callable[[], float]]:
    """Two arms returning steps per CPU second; both must end at the same virtual time."""
    ends: dict[str, float] = {}

    def arm(run: Callable[[], tuple[Stopwatch, float]], key: str) -> Callable[[], float]:
        def one() -> float:
            sw, end = run()
            ends[key] = end
            other = ends.get("baseline" if key == "ours" else "ours")
            if other is not None and not math.isclose(end, other, rel_tol=1e-9):
                raise RuntimeError(f"the two sides ended at different times: {end} vs {other}")
            walls[key].append(steps / sw.wall)
            return steps / sw.cpu

        return one

    return arm(ours, "ours"), arm(base, "baseline")


def _random_sleeps(ctx: Context, name: str, agents: int, sleeps: int, reps: int) -> Result:
    durations = draw_durations(agents, sleeps)
    steps = agents * sleeps
    walls: dict[str, list[float]] = {"ours": [], "baseline": []}
    ours_arm, base_arm = _cpu_arms(
        lambda: _tickwork_random(durations), lambda: run_simpy_random(durations), steps, walls
    )
    # A sample takes seconds at these sizes: no warm-up round in a quick run or at 100k
    # (every arm builds its world or environment afresh, so there is little to warm).
    warmup = 0 if ctx.quick or agents >= 100_000 else 1
    ours, base = interleave(ctx, ours_arm, base_arm, reps=reps, warmup=warmup)
    return paired_result(
        BENCHMARKS[name],
        ours,
        base,
        ours_label=f"wake-ups/s, {agents:,} agents x {sleeps} exponential random sleeps",
        baseline_label=f"SimPy 4: {agents:,} processes, the same env.timeout durations",
        details={
            "agents": agents,
            "sleeps_per_agent": sleeps,
            "mean_sleep": 1.0,
            "clock": "process_time",
            "ours_wall_steps_per_s": statistics.median(walls["ours"]),
            "baseline_wall_steps_per_s": statistics.median(walls["baseline"]),
        },
    )


def _register_random(
    name: str, agents: int, quick: tuple[int, int, int], full: tuple[int, int, int]
) -> None:
    @benchmark(
        name,
        unit="steps/s",
        target=">= 1.0",
        ours=f"wake-ups/s, {agents:,} agents sleeping exponential random times",
        baseline=f"SimPy 4: {agents:,} processes, env.timeout of the same durations",
    )
    def run(ctx: Context) -> Result:
        n, sleeps, reps = ctx.pick(quick, full)
        return _random_sleeps(ctx, name, n, sleeps, reps)


# (agents, sleeps per agent, repetitions): quick, full. tickwork moves ~10k sparse wake-ups
# per second here today, so the quick sizes are small (3k and 5k agents): a
# quick run is a smoke test, its figures are not the table.
_register_random("simpy_random_1k", 1_000, (1_000, 1, 2), (1_000, 10, 5))
_register_random("simpy_random_10k", 10_000, (3_000, 1, 1), (10_000, 2, 3))
_register_random("simpy_random_100k", 100_000, (5_000, 1, 1), (100_000, 1, 2))


CAPACITY = 8
SERVICE_MEAN = 1.0
UTILISATION = 0.9


def customer(turn: Any) -> Generator[Any, Any, None]:
    """Think, then hold a slot of the counter for a service time; ``turn.message`` visits.

    ``Use`` is the visit SimPy's side writes as ``with res.request() as req: yield req;
    yield env.timeout(service)``: wait for a slot in FIFO order, hold it, give it back.
    """
    for think, service in turn.message:
        yield Sleep(think)
        yield Use("counter", service)


def _tickwork_resource(visits: Sequence[Sequence[tuple[float, float]]]) -> tuple[Stopwatch, float]:
    world = World(clock=ManualClock())
    try:
        counter = Resource(world, "counter", capacity=CAPACITY)
        for vs in visits:
            world.spawn(customer, vs)
        world.tick()
        with Stopwatch() as sw:
            world.run_until_idle(max_ticks=10**9)
        counts = world.counts()
        assert counts[StatusKind.COMPLETE] == len(visits), counts
        stats = counter.stats()
        steps = sum(len(vs) for vs in visits)
        assert stats.acquired == stats.released == steps and stats.busy == 0, stats
        return sw, world.now
    finally:
        world.close()


@benchmark(
    "simpy_resource",
    unit="visits/s",
    target=">= 1.0",
    ours="visits/s: random think + Use of a capacity-8 Resource (FIFO, world time)",
    baseline="SimPy 4: the same with simpy.Resource(capacity=8)",
)
def simpy_resource(ctx: Context) -> Result:
    agents, visits_each, reps = ctx.pick((300, 2, 1), (2_000, 5, 5))
    # Think times long enough that the resource runs ~90% busy: queues form, but stay short.
    think_mean = agents * SERVICE_MEAN / (CAPACITY * UTILISATION)
    visits = draw_visits(agents, visits_each, think_mean, SERVICE_MEAN)
    steps = agents * visits_each
    walls: dict[str, list[float]] = {"ours": [], "baseline": []}
    ours_arm, base_arm = _cpu_arms(
        lambda: _tickwork_resource(visits),
        lambda: run_simpy_resource(visits, CAPACITY),
        steps,
        walls,
    )
    ours, base = interleave(ctx, ours_arm, base_arm, reps=reps, warmup=0 if ctx.quick else 1)
    return paired_result(
        BENCHMARKS["simpy_resource"],
        ours,
        base,
        ours_label=f"visits/s: {agents:,} agents x {visits_each} (think + capacity-8 Resource)",
        baseline_label=f"SimPy 4: {agents:,} processes, simpy.Resource(capacity={CAPACITY})",
        details={
            "agents": agents,
            "visits_per_agent": visits_each,
            "capacity": CAPACITY,
            "service_mean": SERVICE_MEAN,
            "think_mean": think_mean,
            "clock": "process_time",
            "ours_wall_steps_per_s": statistics.median(walls["ours"]),
            "baseline_wall_steps_per_s": statistics.median(walls["baseline"]),
        },
    )


def fresh_stepper(turn: Any) -> Generator[Any, Any, None]:
    """One trivial step per tick, yielding a new ``Sleep(0)`` each time."""
    while True:
        yield Sleep(0)


MESA_AGENTS = 10_000


@benchmark(
    "mesa_agentset",
    unit="steps/s",
    target=">= 1.0",
    ours="agent-steps/s, 10k agents yielding a fresh Sleep(0) each tick (ManualClock)",
    baseline="Mesa 3: 10k agents, model.step() = self.agents.do('step')",
)
def mesa_agentset(ctx: Context) -> Result:
    bench = BENCHMARKS["mesa_agentset"]
    why = mesa_agents.available()
    if why is not None:
        ctx.progress.note(f"skipped: {why}")
        return skipped(bench, why)
    agents, rounds, reps = ctx.pick((2_000, 5, 2), (MESA_AGENTS, 20, 9))
    world = World(clock=ManualClock())
    for _ in range(agents):
        world.spawn(fresh_stepper)
    world.tick()
    world.tick()
    rig = mesa_agents.MesaRig(agents)
    walls: dict[str, list[float]] = {"ours": [], "baseline": []}

    def ours() -> float:
        stepped = 0
        tick = world.tick
        with Stopwatch() as sw:
            for _ in range(rounds):
                stepped += tick().stepped
        assert stepped == agents * rounds, stepped
        walls["ours"].append(stepped / sw.wall)
        return stepped / sw.cpu

    def base() -> float:
        sw = rig.run(rounds)
        walls["baseline"].append(agents * rounds / sw.wall)
        return agents * rounds / sw.cpu

    try:
        ours_s, base_s = interleave(ctx, ours, base, reps=reps)
    finally:
        world.close()
    import mesa

    return paired_result(
        bench,
        ours_s,
        base_s,
        ours_label=f"agent-steps/s, {agents:,} agents yielding a fresh Sleep(0) each tick",
        baseline_label=f"Mesa 3: {agents:,} agents, model.step() = self.agents.do('step')",
        details={
            "agents": agents,
            "ticks_per_sample": rounds,
            "mesa": mesa.__version__,
            "clock": "process_time",
            "ours_wall_steps_per_s": statistics.median(walls["ours"]),
            "baseline_wall_steps_per_s": statistics.median(walls["baseline"]),
        },
    )


def skipped(bench: Any, why: str) -> Result:
    """A row that could not run: NaN figures (never met) and the reason in ``details``."""
    return Result(
        name=bench.name,
        ours=math.nan,
        baseline=math.nan,
        unit=bench.unit,
        ratio=math.nan,
        target=bench.target,
        ours_label=bench.ours,
        baseline_label=bench.baseline,
        details={"skipped": why},
    )
