"""vs_asyncio: 2,000 agents x (3 tool calls of 1 ms on a 64-wide lane + 1 prompt answered
at once), turns/s, against the same workload written idiomatically with asyncio."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator, Mapping
from typing import Any

from components import PromptOpened
from runtime import (
    Ask,
    CallTools,
    CancelToken,
    InteractionRequest,
    InteractionResponse,
    StatusKind,
    TickReport,
    ToolCall,
    ToolJob,
    ToolRegistry,
    World,
)

from .harness import BENCHMARKS, Context, Result, benchmark, interleave, paired_result
from .peers.asyncio_agents import run_asyncio

__all__ = ["io_tool", "vs_asyncio"]

WIDTH = 64
CALLS = 3
TOOL_SECONDS = 0.001


def io_tool(args: Mapping[str, Any], ctx: Any = None) -> int:
    """The tool both sides call: 1 ms of blocking I/O (a sleep), then a small result."""
    time.sleep(TOOL_SECONDS)
    return 1


def _io_tool_peer(args: dict[str, Any]) -> int:
    return io_tool(args)


def agent(turn: Any) -> Generator[Any, Any, str]:
    """One turn: a batch of 3 tool calls, then a prompt; returns the answer."""
    results = yield CallTools(*(ToolCall(f"c{i}", "io", {"i": i}) for i in range(CALLS)))
    if not all(r.ok for r in results):
        raise RuntimeError(f"a tool call failed: {results}")
    answer = yield Ask(InteractionRequest.free_text("", f"{len(results)} results, go on?"))
    return str(answer.value)


def _warm_lane(world: World) -> None:
    """Start all the lane's threads before timing, as the asyncio peer's pool threads are.

    Every warm-up job waits for all the others (a barrier), so each holds a thread of its
    own: jobs that merely napped could end before the last was submitted on a loaded
    machine (a thread's start waits ~1 ms there), and the lane would start the run with
    fewer threads than its width, paying for the rest inside the timed run.
    """
    everyone = threading.Barrier(WIDTH)

    def meet(cancel: CancelToken) -> tuple[()]:
        everyone.wait(10.0)
        return ()

    failed = world.lane.stats().failed
    for i in range(WIDTH):
        world.lane.submit(ToolJob("warm-up", f"warm{i}", meet))
    deadline = time.monotonic() + 20
    while world.lane.stats().in_flight and time.monotonic() < deadline:
        time.sleep(0.005)
    if world.lane.stats().failed != failed:
        raise RuntimeError(f"the {world.lane.name!r} lane did not start {WIDTH} threads")
    world.inbox.drain()  # the warm-up outcomes are for no agent


def _tickwork(agents: int) -> float:
    tools = ToolRegistry()
    tools.tool("io")(io_tool)
    world = World(tool_capacity=WIDTH, tools=tools, interaction_timeout_secs=0)

    def operator(report: TickReport, inputs: list[tuple[int, object]]) -> None:
        # Answer every prompt the moment the tick that saw it open ends.
        for _seq, item in inputs:
            if item.__class__ is PromptOpened:
                assert isinstance(item, PromptOpened)
                world.hub.answer(InteractionResponse.text(item.request.id, "yes"))

    world.observe(operator)
    try:
        _warm_lane(world)
        started = time.perf_counter()
        ids = [world.spawn(agent) for _ in range(agents)]
        world.run_until_idle(timeout=120)
        elapsed = time.perf_counter() - started
        counts = world.counts()
        if counts[StatusKind.COMPLETE] != agents:
            raise RuntimeError(f"not every turn completed: {counts}")
        assert world.result(ids[-1]) == "yes"
    finally:
        world.close()
    return elapsed


@benchmark(
    "vs_asyncio",
    unit="turns/s",
    target=">= 1.0",
    ours="turns/s: 2,000 agents x (3 tool calls of 1 ms on a 64-wide lane + 1 prompt)",
    baseline="the same in idiomatic asyncio (Semaphore(64), to_thread, futures for prompts)",
)
def vs_asyncio(ctx: Context) -> Result:
    agents = ctx.pick(500, 2_000)
    reps = ctx.pick(3, 9)
    calls = [{"i": i} for i in range(CALLS)]
    ours, base = interleave(
        ctx,
        lambda: agents / _tickwork(agents),
        lambda: agents / run_asyncio(agents, _io_tool_peer, calls, WIDTH),
        reps=reps,
    )
    return paired_result(
        BENCHMARKS["vs_asyncio"],
        ours,
        base,
        ours_label=f"turns/s: {agents:,} agents x (3 tool calls of 1 ms on a 64-wide lane"
        " + 1 prompt)",
        details={
            "agents": agents,
            "calls_per_turn": CALLS,
            "tool_seconds": TOOL_SECONDS,
            "width": WIDTH,
            "floor_turns_per_s": WIDTH / (CALLS * TOOL_SECONDS),
        },
    )
