"""SimPy 4 on the workloads where agents wake at distinct times.

- `run_simpy_random`: one process per agent, each sleeping a list of exponential random
  times (``yield env.timeout(d)``), so almost every wake-up happens at its own instant;
- `run_simpy_resource`: each process alternates a random think time with a visit to a
  shared capacity-8 ``simpy.Resource`` (``with res.request() as req: yield req`` then a
  random service time), FIFO, as SimPy's documentation writes it.

Both sides are handed the same pre-drawn durations (`draw_durations`), so they do exactly
the same work and must end at the same virtual time (the benchmarks check it). Processes
are created and started before the clock starts, as tickwork's agents are spawned first.
"""

from __future__ import annotations

import random
from collections.abc import Generator, Sequence
from typing import Any

import simpy

from ._timing import Stopwatch

__all__ = ["draw_durations", "draw_visits", "run_simpy_random", "run_simpy_resource"]


def draw_durations(
    agents: int, sleeps: int, seed: int = 20, mean: float = 1.0
) -> list[list[float]]:
    """``sleeps`` exponential random durations (mean ``mean``) for each of ``agents``."""
    rng = random.Random(seed)
    rate = 1.0 / mean
    return [[rng.expovariate(rate) for _ in range(sleeps)] for _ in range(agents)]


def draw_visits(
    agents: int, visits: int, think_mean: float, service_mean: float, seed: int = 21
) -> list[list[tuple[float, float]]]:
    """``(think, service)`` pairs, exponential, for ``visits`` visits of each agent."""
    rng = random.Random(seed)
    return [
        [
            (rng.expovariate(1.0 / think_mean), rng.expovariate(1.0 / service_mean))
            for _ in range(visits)
        ]
        for _ in range(agents)
    ]


def _sleeper(env: simpy.Environment, durations: Sequence[float]) -> Generator[Any, Any, None]:
    for d in durations:
        yield env.timeout(d)


def run_simpy_random(durations: Sequence[Sequence[float]]) -> tuple[Stopwatch, float]:
    """Run one process per agent sleeping its durations; return the time it took and the
    virtual time at the end (process creation and start excluded from the timing)."""
    env = simpy.Environment()
    for ds in durations:
        env.process(_sleeper(env, ds))
    env.run(until=1e-12)  # every process started and parked on its first timeout
    with Stopwatch() as sw:
        env.run()
    return sw, env.now


def _customer(
    env: simpy.Environment, resource: simpy.Resource, visits: Sequence[tuple[float, float]]
) -> Generator[Any, Any, None]:
    for think, service in visits:
        yield env.timeout(think)
        with resource.request() as req:
            yield req
            yield env.timeout(service)


def run_simpy_resource(
    visits: Sequence[Sequence[tuple[float, float]]], capacity: int = 8
) -> tuple[Stopwatch, float]:
    """Run one customer process per agent against a shared ``Resource(capacity)``; return
    the time it took and the virtual time at the end."""
    env = simpy.Environment()
    resource = simpy.Resource(env, capacity=capacity)
    for vs in visits:
        env.process(_customer(env, resource, vs))
    env.run(until=1e-12)
    with Stopwatch() as sw:
        env.run()
    return sw, env.now
