"""memory_per_agent: bytes per agent at 100k agents (tracemalloc), mid-turn on an open prompt
(the row's figure) and finished (in details), against a bare esper entity carrying the same
component data as an idle agent."""

from __future__ import annotations

import gc
import math
import statistics
import tracemalloc
from collections.abc import Callable, Generator
from typing import Any

from runtime import Ask, InteractionRequest, InteractionResponse, ManualClock, StatusKind, World

from .harness import BENCHMARKS, Context, Result, benchmark, paired_result
from .peers.bare_esper import BareEsperWorld

__all__ = ["memory_per_agent"]


def chatter(turn: Any) -> Generator[Any, Any, None]:
    """An interactive agent's behaviour; idle agents never start a turn of it."""
    yield from ()


def asker(turn: Any) -> Generator[Any, Any, None]:
    """Mid-turn: ask a person and wait (default deadlines, as users run)."""
    yield Ask(InteractionRequest.free_text("", "go on?"))


# What the agents are doing when measured: (behaviour, interactive, the status they reach).
STATES: dict[str, tuple[Any, bool, StatusKind]] = {
    "mid_turn": (asker, False, StatusKind.WAITING),
    # The same turn once its prompt was answered: the agent ended, COMPLETE.
    "finished": (asker, False, StatusKind.COMPLETE),
    "idle": (chatter, True, StatusKind.IDLE),
}


def _measure(build: Callable[[], Any], n: int) -> tuple[float, Any]:
    """Bytes per agent that ``build()`` leaves allocated (tracemalloc), and what it built."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        built = build()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return (after - before) / n, built


def _ours(n: int, state: str = "mid_turn") -> float:
    behavior, interactive, reached = STATES[state]

    def build() -> World:
        world = World(clock=ManualClock())
        for _ in range(n):
            world.spawn(behavior, interactive=interactive)
        # No time skipping: it would jump to the prompts' deadline and expire them.
        world.run_until_idle(skip_time=False)
        if state == "finished":
            for _agent, request in world.hub.pending():
                world.hub.answer(InteractionResponse.text(request.id, "yes"))
            world.run_until_idle(skip_time=False)
        return world

    # The world's fixed cost (lanes, esper world, hub) is included: at 100k agents it is
    # noise, and a user pays it anyway.
    per_agent, world = _measure(build, n)
    try:
        counts = world.counts()
        assert counts[reached] == n, counts
    finally:
        world.close()
    return per_agent


def _baseline(n: int, behavior: str) -> float:
    bare = BareEsperWorld()

    def build() -> BareEsperWorld:
        # The same ids a world hands out, made inside the measurement as a world's are;
        # the list holding them is dropped, the strings live on in the components.
        bare.fill([f"a{i + 1}" for i in range(n)], behavior, True)
        return bare

    try:
        per_agent, _ = _measure(build, n)
    finally:
        bare.close()
    return per_agent


@benchmark(
    "memory_per_agent",
    unit="bytes/agent",
    target="<= 1.5",
    ours="bytes per agent mid-turn on a prompt, 100k agents (tracemalloc)",
    baseline="a bare esper entity with an idle agent's component data",
)
def memory_per_agent(ctx: Context) -> Result:
    n = ctx.pick(1_000, 100_000)
    reps = 1  # allocation is deterministic: the spread is ~0 (2 reps showed 0.0%)
    behavior = "benchmarks.memory:chatter"
    ours_s: list[float] = []
    base_s: list[float] = []
    for rep in range(reps):
        ctx.progress.rep(rep + 1, reps)
        if rep % 2 == 0:
            ours_s.append(_ours(n))
            base_s.append(_baseline(n, behavior))
        else:
            base_s.append(_baseline(n, behavior))
            ours_s.append(_ours(n))
    # Allocation is deterministic: one sample each of the other states is enough.
    ctx.progress.note("finished and idle agents")
    finished = _ours(n, "finished")
    idle = math.nan if ctx.quick else _ours(n, "idle")
    base = statistics.median(base_s)
    return paired_result(
        BENCHMARKS["memory_per_agent"],
        ours_s,
        base_s,
        ours_label=f"bytes per agent mid-turn on a prompt, {n:,} agents (tracemalloc)",
        details={
            "agents": n,
            "mid_turn": "each agent WAITING on an open prompt (Ask, default deadline)",
            "finished_bytes_per_agent": finished,
            "finished_ratio": finished / base,
            # The row's figure before issue 20: interactive agents that never started a turn.
            "idle_bytes_per_agent": idle,
            "idle_ratio": idle / base,
        },
    )
