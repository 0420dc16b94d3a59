"""replay_speed: replaying a recorded run whose tools slept 5 ms, against the recording's
own wall time."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

from runtime import (
    CallTools,
    Journal,
    MonotonicClock,
    SleepTool,
    StatusKind,
    ToolCall,
    ToolRegistry,
    World,
    replay,
)

from .harness import BENCHMARKS, Context, Result, benchmark, paired_result

__all__ = ["recorded_worker", "replay_speed"]

TOOL_SECONDS = 0.005


def recorded_worker(turn: Any) -> Generator[Any, Any, int]:
    """A few batches of 5 ms tool calls; returns how many calls succeeded.

    Module level, so a replay finds it by name (``benchmarks.replays:recorded_worker``).
    """
    batches, calls = turn.message
    ok = 0
    for b in range(batches):
        results = yield CallTools(
            *(ToolCall(f"b{b}c{c}", "sleep", {"seconds": TOOL_SECONDS}) for c in range(calls))
        )
        ok += sum(1 for r in results if r.ok)
    return ok


def record(path: Path, agents: int, batches: int, calls: int) -> tuple[float, int]:
    """Record a run to ``path``; return its wall time (world made to world closed) and ticks."""
    started = time.perf_counter()
    tools = ToolRegistry()
    tools.add(SleepTool("sleep"))
    world = World(seed=11, clock=MonotonicClock(), tools=tools, journal=Journal.create(path))
    try:
        ids = [world.spawn(recorded_worker, [batches, calls]) for _ in range(agents)]
        world.run_until_idle(timeout=120)
        for agent_id in ids:
            if world.status(agent_id).kind is not StatusKind.COMPLETE:
                raise RuntimeError(f"agent {agent_id} ended {world.status(agent_id)}")
        ticks = world.tick_count
    finally:
        world.close()
    return time.perf_counter() - started, ticks


@benchmark(
    "replay_speed",
    unit="s",
    target="<= 0.1",
    ours="replay(path) wall time of the recorded run",
    baseline="the recording's wall time (tools sleep 5 ms each)",
)
def replay_speed(ctx: Context) -> Result:
    agents = ctx.pick(16, 48)
    batches, calls = 4, 2
    reps = ctx.pick(3, 9)
    recorded: list[float] = []
    replayed: list[float] = []
    ticks: list[int] = []
    with tempfile.TemporaryDirectory(prefix="tickwork-bench-") as tmp:
        for rep in range(reps + 1):  # the first pair warms up and is dropped
            if rep:
                ctx.progress.rep(rep, reps)
            path = Path(tmp) / f"run{rep}.db"
            wall, n_ticks = record(path, agents, batches, calls)
            started = time.perf_counter()
            report = replay(path)
            elapsed = time.perf_counter() - started
            if report.ticks != n_ticks:
                raise RuntimeError(f"replayed {report.ticks} ticks of {n_ticks}")
            if rep:
                recorded.append(wall)
                replayed.append(elapsed)
                ticks.append(n_ticks)
    return paired_result(
        BENCHMARKS["replay_speed"],
        replayed,
        recorded,
        details={
            "agents": agents,
            "batches": batches,
            "calls_per_batch": calls,
            "tool_seconds": TOOL_SECONDS,
            "ticks": ticks,
            "tool_seconds_total": agents * batches * calls * TOOL_SECONDS,
        },
    )
