"""The vs_asyncio workload written idiomatically with asyncio.

Each agent is a task. Its turn runs a batch of tool calls on a 64-wide lane of threads,
then asks a person and waits for the answer. As a competent asyncio user writes it:

- the lane is an ``asyncio.Semaphore(64)`` around ``asyncio.to_thread``, and the loop's
  default executor is a 64-thread pool (the stock one has ``min(32, cpus + 4)`` threads,
  which would silently cap the lane at 6 here);
- a batch holds one permit and runs its calls one after another in a single thread hop,
  exactly what a tickwork ``CallTools`` batch does on its lane (one job, calls in order);
- a prompt is an ``asyncio.Future`` put on a queue; an operator task answers each one the
  moment it arrives (``fut.set_result``), so prompts cost one queue hop each way.

`run_asyncio` times from the first task's creation to the last turn's end; the event loop
and the thread pool are made (and the pool's threads started) before the clock starts.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["run_asyncio"]

Tool = Callable[[dict[str, Any]], Any]


def _run_batch(tool: Tool, calls: Sequence[dict[str, Any]]) -> list[Any]:
    return [tool(args) for args in calls]


async def _agent(
    sem: asyncio.Semaphore,
    prompts: asyncio.Queue[tuple[str, asyncio.Future[str]]],
    tool: Tool,
    calls: Sequence[dict[str, Any]],
    index: int,
) -> str:
    batch = [dict(args) for args in calls]  # this turn's calls (a model would make them)
    async with sem:
        results = await asyncio.to_thread(_run_batch, tool, batch)
    answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    await prompts.put((f"agent {index}: {len(results)} results, go on?", answer))
    return await answer


async def _operator(prompts: asyncio.Queue[tuple[str, asyncio.Future[str]]]) -> None:
    while True:
        _prompt, answer = await prompts.get()
        if not answer.done():
            answer.set_result("yes")


async def _main(agents: int, tool: Tool, calls: Sequence[dict[str, Any]], width: int) -> float:
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(width, thread_name_prefix="asyncio-lane")
    loop.set_default_executor(pool)
    # Start every worker thread before timing, as the tickwork lane's threads are warm.
    # Every warm-up call waits for all the others, so each holds a thread of its own (naps
    # could end before the last submit on a loaded machine, leaving threads unstarted).
    everyone = threading.Barrier(width)
    await asyncio.gather(*(asyncio.to_thread(everyone.wait, 10.0) for _ in range(width)))
    sem = asyncio.Semaphore(width)
    prompts: asyncio.Queue[tuple[str, asyncio.Future[str]]] = asyncio.Queue()
    operator = asyncio.create_task(_operator(prompts))
    started = time.perf_counter()
    answers = await asyncio.gather(*(_agent(sem, prompts, tool, calls, i) for i in range(agents)))
    elapsed = time.perf_counter() - started
    operator.cancel()
    assert answers == ["yes"] * agents
    return elapsed


def run_asyncio(agents: int, tool: Tool, calls: Sequence[dict[str, Any]], width: int = 64) -> float:
    """Run one turn of ``agents`` agents; return the seconds the turns took."""
    return asyncio.run(_main(agents, tool, calls, width))
