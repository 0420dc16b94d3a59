"""SimPy 4: N processes, each yielding ``env.timeout(1.0)`` a number of times.

The standard way to write "many agents sleeping in virtual time" with SimPy: one process
per agent, a generator yielding timeouts, ``env.run()`` to the end. Processes are created
and started (run to their first timeout) before the clock starts, as tickwork's agents are.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from ._timing import Stopwatch

__all__ = ["run_simpy"]


def _sleeper(env: simpy.Environment, sleeps: int, seconds: float) -> Generator[Any, Any, None]:
    for _ in range(sleeps):
        yield env.timeout(seconds)


def run_simpy(agents: int, sleeps: int, seconds: float = 1.0) -> Stopwatch:
    """Run ``agents`` processes of ``sleeps`` timeouts each; return the time the sleeping
    took (process creation and start excluded)."""
    env = simpy.Environment()
    for _ in range(agents):
        env.process(_sleeper(env, sleeps, seconds))
    env.run(until=seconds / 2)  # every process started and parked on its first timeout
    with Stopwatch() as sw:
        env.run()
    assert env.now == sleeps * seconds, env.now
    return sw
