"""lane_overhead: no-op jobs/s through ``ToolLane(8)``, outcomes delivered, vs a raw pool."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from components import ToolResult
from runtime import CancelToken, ToolJob, ToolLane, Wake
from runtime.world.inputs import Inbox

from .harness import BENCHMARKS, Context, Result, benchmark, interleave, paired_result
from .peers.raw_pool import run_jobs

__all__ = ["lane_overhead"]

_NO_RESULTS: tuple[ToolResult, ...] = ()


def _noop(cancel: CancelToken) -> Sequence[ToolResult]:
    return _NO_RESULTS


class LaneRig:
    """A warm lane whose outcomes go where a world's go: an inbox that nudges a wake."""

    def __init__(self, capacity: int = 8) -> None:
        self.wake = Wake()
        self.inbox = Inbox(self.wake)
        # idle_timeout: keep the threads warm between repetitions, as the raw pool's are.
        self.lane = ToolLane(capacity, on_outcome=self.inbox.put, idle_timeout=600.0)

    def run(self, n: int, batch_ids: Sequence[str]) -> float:
        """Submit ``n`` no-op jobs, wait until every outcome is drained; return seconds."""
        lane, inbox, wake = self.lane, self.inbox, self.wake
        started = time.perf_counter()
        for i in range(n):
            lane.submit(ToolJob("agent", batch_ids[i], _noop))
        got = 0
        while got < n:
            wake.wait(1.0)
            got += len(inbox.drain())
        return time.perf_counter() - started

    def close(self) -> None:
        self.lane.close()


@benchmark(
    "lane_overhead",
    unit="jobs/s",
    target=">= 0.7",
    ours="no-op jobs/s through ToolLane(8), outcomes drained from the inbox",
    baseline="raw ThreadPoolExecutor(8) submit + result",
)
def lane_overhead(ctx: Context) -> Result:
    n = ctx.pick(5_000, 20_000)
    reps = ctx.pick(3, 11)
    batch_ids = [f"b{i}" for i in range(n)]
    rig = LaneRig(8)
    pool = ThreadPoolExecutor(8)
    try:
        ours, base = interleave(
            ctx,
            lambda: n / rig.run(n, batch_ids),
            lambda: n / run_jobs(pool, n),
            reps=reps,
        )
        stats = rig.lane.stats()
    finally:
        rig.close()
        pool.shutdown()
    return paired_result(
        BENCHMARKS["lane_overhead"],
        ours,
        base,
        details={"jobs_per_rep": n, "lane_threads": stats.threads, "peak_busy": stats.peak_busy},
    )
