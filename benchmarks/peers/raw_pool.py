"""A raw ``ThreadPoolExecutor``: submit no-op jobs, then wait for every result.

What a user who needs "run these on 8 threads" writes without tickwork. The pool is made
once and reused (its threads stay warm, as the lane's do), every job is submitted before
any result is awaited (so the pool is never starved by the consumer), and results are read
with ``Future.result()``, the standard way. Nothing is bounded or counted beyond what the
pool itself does; that is the point: it is the floor the lane is measured against.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

__all__ = ["noop", "run_jobs"]


def noop() -> None:
    """The job: nothing, so only the machinery is timed."""


def run_jobs(pool: ThreadPoolExecutor, n: int) -> float:
    """Submit ``n`` no-op jobs to ``pool`` and wait for all; return the seconds taken."""
    submit = pool.submit
    started = time.perf_counter()
    futures = [submit(noop) for _ in range(n)]
    for future in futures:
        future.result()
    return time.perf_counter() - started
