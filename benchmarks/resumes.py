"""resume_speed: resuming a journal of many agents, against replaying the same journal."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

from runtime import Journal, ManualClock, Sleep, World, replay, resume

from .harness import BENCHMARKS, Context, Result, benchmark, interleave, paired_result

__all__ = ["resume_speed", "ticking_worker"]


def ticking_worker(turn: Any) -> Generator[Any, Any, int]:
    """Sleeps one second of virtual time, ``turn.message`` times: a step every tick.

    Module level, so a resume finds it by name (``benchmarks.resumes:ticking_worker``).
    """
    for _ in range(turn.message):
        yield Sleep(1.0)
    return turn.message


def record(path: Path, agents: int, ticks: int) -> int:
    """Record ``agents`` agents stepping for ``ticks`` ticks; returns the ticks recorded."""
    world = World(seed=3, clock=ManualClock(), journal=Journal.create(path))
    try:
        for _ in range(agents):
            world.spawn(ticking_worker, ticks + 10)  # still running at the journal's end
        for _ in range(ticks):
            world.tick()
            world.clock.advance(1.0)  # type: ignore[attr-defined]
        return world.tick_count
    finally:
        world.close()


@benchmark(
    "resume_speed",
    unit="s",
    target="<= 1.5",
    ours="resume(path): the prefix replayed, the world live (10k agents x 50 ticks)",
    baseline="replay(path) of the same journal",
)
def resume_speed(ctx: Context) -> Result:
    agents = ctx.pick(1_000, 10_000)
    ticks = 50
    # Each sample replays the whole journal (~4-5 s a side at 10k agents here). Three:
    # with two, one slow sample of either side moved the row from ~1.0 to 1.46x (the
    # same runtime read 0.81-1.15x pair by pair, eighteenth session).
    reps = 3
    with tempfile.TemporaryDirectory(prefix="tickwork-bench-") as tmp:
        path = Path(tmp) / "run.db"
        recorded = record(path, agents, ticks)

        def resumed() -> float:
            started = time.perf_counter()
            world = resume(path)
            elapsed = time.perf_counter() - started
            if world.tick_count != recorded:
                raise RuntimeError(f"resumed at tick {world.tick_count} of {recorded}")
            world.close()  # nothing ticked: the journal is as it was
            return elapsed

        def replayed() -> float:
            started = time.perf_counter()
            report = replay(path)
            elapsed = time.perf_counter() - started
            if report.ticks != recorded:
                raise RuntimeError(f"replayed {report.ticks} ticks of {recorded}")
            return elapsed

        # No warm-up round: one sample replays the whole journal, seconds of steady work.
        ours, base = interleave(ctx, resumed, replayed, reps=reps, warmup=0)
    return paired_result(
        BENCHMARKS["resume_speed"],
        ours,
        base,
        details={"agents": agents, "ticks": ticks},
    )
