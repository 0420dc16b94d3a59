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
    sims,
    telemetry,
    ticks,
    turns,
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
    "memory_per_agent",
    "resume_speed",
    "telemetry_idle_tick",
    "telemetry_step_throughput",
    "host_system",
    "village_fps",
    "lockstep_cost",
    "memory_per_finished_agent",
    # Issue 20: the workloads users run, against the peers they would pick instead.
    "simpy_random_1k",
    "simpy_random_10k",
    "simpy_random_100k",
    "simpy_resource",
    "mesa_agentset",
    "asyncio_100",
    "asyncio_100_p99",
    "asyncio_1k",
    "asyncio_1k_p99",
    "asyncio_10k",
    "asyncio_10k_p99",
    "langgraph_graph",
)

assert set(ORDER) == set(BENCHMARKS), sorted(set(ORDER) ^ set(BENCHMARKS))

__all__ = ["BENCHMARKS", "ORDER"]
