"""lockstep_cost: the factory scenario delivered in lockstep, against the same scenario
delivered as soon as possible, wall time of whole runs."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from runtime.cli.run import run_to_end
from runtime.scenario import Operator, build_world, parse_scenario, spawn_agents

from .harness import BENCHMARKS, Context, Result, benchmark, interleave, paired_result

__all__ = ["lockstep_cost"]

FACTORY = Path(__file__).resolve().parent.parent / "examples" / "factory.toml"


def factory_source(workers: int, leads: int, *, lockstep: bool) -> str:
    """examples/factory.toml with its agent counts scaled and lockstep set."""
    text = FACTORY.read_text(encoding="utf-8")
    text = text.replace("count = 4900", f"count = {workers}").replace(
        "count = 100", f"count = {leads}"
    )
    setting = "true" if lockstep else "false"
    return text.replace('clock = "virtual"', f'clock = "virtual"\nlockstep = {setting}', 1)


def run_factory(source: str) -> tuple[float, int]:
    """Run the scenario to its end as `tickwork run` does; its wall time and ticks."""
    scenario = parse_scenario(source, str(FACTORY), base_dir=FACTORY.parent)
    started = time.perf_counter()
    world = build_world(scenario)
    try:
        op = scenario.operator
        assert op is not None
        Operator(world, delay=op.delay, policy=op.policy, text=op.text)
        spawn_agents(world, scenario)
        ended = run_to_end(world, max_ticks=10**7, time_limit=None, stop=threading.Event())
        if ended != "finished":
            raise RuntimeError(f"the factory run ended {ended!r}")
        ticks = world.tick_count
    finally:
        world.close()
    return time.perf_counter() - started, ticks


@benchmark(
    "lockstep_cost",
    unit="s",
    target="<= 1.5",
    ours="wall time of a factory run in lockstep (the default on a virtual clock)",
    baseline="the same scenario with `lockstep = false` (as soon as possible)",
)
def lockstep_cost(ctx: Context) -> Result:
    workers, leads = ctx.pick((490, 10), (4900, 100))
    reps = ctx.pick(2, 4)
    ticks: dict[str, list[int]] = {"lockstep": [], "asap": []}

    def arm(lockstep: bool) -> float:
        wall, n = run_factory(factory_source(workers, leads, lockstep=lockstep))
        ticks["lockstep" if lockstep else "asap"].append(n)
        return wall

    ours, base = interleave(ctx, lambda: arm(True), lambda: arm(False), reps=reps)
    return paired_result(
        BENCHMARKS["lockstep_cost"],
        ours,
        base,
        details={"agents": workers + leads, "ticks": ticks},
    )
