"""Telemetry overhead: the idle tick and step throughput, instrumented against plain.

Both arms run in one process, interleaved (ABBA), with no OpenTelemetry SDK configured: the
instrumented world records its metrics and calls the no-op tracer, as a host that installed
the ``telemetry`` extra but set up no provider would. Timed in CPU seconds, like the tick
benchmarks they mirror (`benchmarks.ticks`).
"""

from __future__ import annotations

from runtime import World

from .harness import BENCHMARKS, Context, Result, benchmark, interleave, paired_result
from .ticks import stepping_world, time_ticks, waiting_world

__all__ = ["telemetry_idle_tick", "telemetry_step_throughput"]


def _instrumented(world: World) -> World:
    from runtime.telemetry import instrument

    instrument(world)  # metrics recorded; spans to the global no-op tracer (no SDK here)
    return world


def _tracing_is_live() -> bool:
    from runtime.telemetry import tracing_available

    return tracing_available()


@benchmark(
    "telemetry_idle_tick",
    unit="µs/tick",
    target="<= 1.1",
    ours="tick time, 10k agents waiting on prompts, telemetry on (no SDK)",
    baseline="the same world without telemetry",
)
def telemetry_idle_tick(ctx: Context) -> Result:
    agents = ctx.pick(3_000, 10_000)
    ticks = ctx.pick(300, 1_000)
    reps = ctx.pick(5, 11)
    plain = waiting_world(agents)
    watched = _instrumented(waiting_world(agents))
    try:
        ours, base = interleave(
            ctx,
            lambda: time_ticks(watched, ticks),
            lambda: time_ticks(plain, ticks),
            reps=reps,
        )
    finally:
        plain.close()
        watched.close()
    details = {"agents": agents, "ticks_per_sample": ticks, "tracing": _tracing_is_live()}
    return paired_result(BENCHMARKS["telemetry_idle_tick"], ours, base, details=details)


def _steps(world: World, agents: int, rounds: int) -> float:
    # CPU µs per round of `agents` steps, turned into steps/s by the caller.
    return agents / (time_ticks(world, rounds) / 1e6)


@benchmark(
    "telemetry_step_throughput",
    unit="steps/s",
    target=">= 0.9",
    ours="agent-steps/s, 10k agents yielding Sleep(0), telemetry on (no SDK)",
    baseline="the same world without telemetry",
)
def telemetry_step_throughput(ctx: Context) -> Result:
    agents = 10_000
    rounds = ctx.pick(10, 20)
    reps = ctx.pick(5, 11)
    plain = stepping_world(agents)
    watched = _instrumented(stepping_world(agents))
    try:
        ours, base = interleave(
            ctx,
            lambda: _steps(watched, agents, rounds),
            lambda: _steps(plain, agents, rounds),
            reps=reps,
        )
    finally:
        plain.close()
        watched.close()
    details = {"agents": agents, "ticks_per_sample": rounds, "tracing": _tracing_is_live()}
    return paired_result(BENCHMARKS["telemetry_step_throughput"], ours, base, details=details)
