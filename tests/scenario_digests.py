"""Run a scenario as `tickwork run` does and print every tick's digest (for a subprocess).

``python -m tests.scenario_digests SCENARIO`` prints ``{"ticks": N, "digests": [...]}``: the
lockstep tests compare it with another process's journal of the same scenario.
"""

from __future__ import annotations

import json
import sys
import threading

from runtime.cli.run import run_to_end
from runtime.scenario import Operator, build_world, load_scenario, spawn_agents
from runtime.world import TickReport


def tick_digests(path: str) -> dict[str, object]:
    """Run the scenario at ``path`` to its end; its tick count and digest after every tick."""
    scenario = load_scenario(path)
    world = build_world(scenario)
    digests: list[str] = []

    def note(report: TickReport, inputs: list[tuple[int, object]]) -> None:
        digests.append(world.digest())  # on the tick thread, inside the tick: its state

    try:
        world.observe(note)
        if scenario.operator is not None:
            op = scenario.operator
            Operator(world, delay=op.delay, policy=op.policy, text=op.text)
        spawn_agents(world, scenario)
        ended = run_to_end(
            world, max_ticks=scenario.world.max_ticks, time_limit=None, stop=threading.Event()
        )
        return {"ended": ended, "ticks": world.tick_count, "digests": digests}
    finally:
        world.close()


if __name__ == "__main__":
    print(json.dumps(tick_digests(sys.argv[1])))
