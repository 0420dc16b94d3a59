"""tickwork's benchmark harness: ``python -m benchmarks [--quick] [--only NAME[,NAME]]
[--json FILE] [--plot FILE]``.

Each benchmark measures tickwork and its baseline in the same run, interleaved, and reports
the median of the paired ratios with its spread (see `benchmarks.harness`). The baselines
and peer implementations live in `benchmarks.peers`. Not collected by the test run.
"""

# The order of the table; importing a module registers its benchmarks.
from . import (  # noqa: F401
    host_ecs,
    hubs,
    lanes,
    lockstep,
    memory,
    replays,
    resumes,
    telemetry,
    ticks,
    wakeups,
    workloads,
)
from .harness import BENCHMARKS

ORDER = (
    "lane_overhead",
    "wake_latency",
    "hub_throughput",
    "idle_tick_scaling",
    "step_throughput",
    "vs_simpy",
    "vs_asyncio",
    "replay_speed",
    "resume_speed",
    "memory_per_agent",
    "telemetry_idle_tick",
    "telemetry_step_throughput",
    "host_system",
    "village_fps",
    "lockstep_cost",
    "memory_per_finished_agent",
)

assert set(ORDER) == set(BENCHMARKS), sorted(set(ORDER) ^ set(BENCHMARKS))

__all__ = ["BENCHMARKS", "ORDER"]
