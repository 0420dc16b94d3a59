"""A whole agent turn in idiomatic asyncio: a model call, a batch of tools, a prompt.

Each agent is a task whose turn is: a model call of 5 ms (blocking, on a thread), then a
batch of three tool calls in one thread hop, then a question to a person answered at once
by an operator task; the task stamps the time its turn ended. As a competent asyncio user
writes it, and as tickwork's two lanes are sized:

- the inference lane and the tool lane are each an ``asyncio.Semaphore(width)`` around
  ``asyncio.to_thread``; the loop's default executor has ``2 * width`` threads (both lanes
  full at once), all started before the clock starts, as tickwork's lane threads are;
- a prompt is an ``asyncio.Future`` on a queue that the operator task settles at once.

`run_turns` returns the seconds from the first task's creation to the last turn's end and
every turn's latency from that start (for the p99).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["run_turns"]

Tool = Callable[[dict[str, Any]], Any]
ModelCall = Callable[[str], Any]


def _run_batch(tool: Tool, calls: Sequence[dict[str, Any]]) -> list[Any]:
    return [tool(args) for args in calls]


async def _agent(
    models: asyncio.Semaphore,
    tools: asyncio.Semaphore,
    prompts: asyncio.Queue[asyncio.Future[str]],
    model: ModelCall,
    tool: Tool,
    calls: Sequence[dict[str, Any]],
    index: int,
) -> float:
    async with models:
        reply = await asyncio.to_thread(model, f"task {index}")
    batch = [dict(args) for args in calls]
    async with tools:
        results = await asyncio.to_thread(_run_batch, tool, batch)
    answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    await prompts.put(answer)
    value = await answer
    assert value == "yes" and reply is not None and len(results) == len(calls)
    return time.perf_counter()


async def _operator(prompts: asyncio.Queue[asyncio.Future[str]]) -> None:
    while True:
        answer = await prompts.get()
        if not answer.done():
            answer.set_result("yes")


async def _main(
    agents: int, model: ModelCall, tool: Tool, calls: Sequence[dict[str, Any]], width: int
) -> tuple[float, list[float]]:
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(2 * width, thread_name_prefix="asyncio-lane")
    loop.set_default_executor(pool)
    # Every warm-up call waits for all the others, so each holds a thread of its own (naps
    # could end before the last submit on a loaded machine, leaving threads unstarted).
    everyone = threading.Barrier(2 * width)
    await asyncio.gather(*(asyncio.to_thread(everyone.wait, 10.0) for _ in range(2 * width)))
    models, tools = asyncio.Semaphore(width), asyncio.Semaphore(width)
    prompts: asyncio.Queue[asyncio.Future[str]] = asyncio.Queue()
    operator = asyncio.create_task(_operator(prompts))
    started = time.perf_counter()
    ends = await asyncio.gather(
        *(_agent(models, tools, prompts, model, tool, calls, i) for i in range(agents))
    )
    elapsed = time.perf_counter() - started
    operator.cancel()
    return elapsed, [end - started for end in ends]


def run_turns(
    agents: int, model: ModelCall, tool: Tool, calls: Sequence[dict[str, Any]], width: int = 64
) -> tuple[float, list[float]]:
    """Run one turn of ``agents`` agents; return the seconds it took and each latency."""
    return asyncio.run(_main(agents, model, tool, calls, width))
