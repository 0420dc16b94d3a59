"""A scenario run driven tick by tick with lockstep delivery, to be killed and resumed.

``python -m tests.journal.crash_run SCENARIO JOURNAL`` records the run until it ends (or
is killed). ``drive`` makes delivery deterministic by hand: after each tick it waits until
both lanes are empty, so every job dispatched at tick t lands at tick t+1, which is what
``World(lockstep=True)`` does by itself once issue 15 lands. The scenario's tool appends
to a file, so a test can count the side effects that really happened.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from runtime import Journal, World
from runtime.scenario import Operator, Scenario, build_world, load_scenario, spawn_agents

TOOLS_MODULE = '''
import time
from pathlib import Path


def append(args, ctx):
    """Append the call's key to a log: a side effect that a test can count."""
    log = Path(args["log"])
    with open(f"{log}.started", "a") as started:
        started.write(args["key"] + "\\n")
    time.sleep(0.003)
    with open(log, "a") as done:
        done.write(args["key"] + "\\n")
    return "appended " + args["key"]
'''

SCENARIO = """
name = "crash"

[world]
seed = 5
clock = "virtual"
tool_capacity = 4
inference_capacity = 4
interaction_timeout_secs = 600

[tools.append]
python = "crash_tools:append"
idempotent = {idempotent}

[models.default]
replies = ["alpha", "beta", "gamma"]
delay = 0.004
cycle = true

[[agents]]
count = 5
name = "w-{{i}}"
message = "job {{i}}"
steps = [
    {{ think = "plan {{message}}" }},
    {{ tools = [{{ name = "append", args = {{ key = "{{agent}}-a", log = "{log}" }} }}] }},
    {{ sleep = 2 }},
    {{ ask = "Ship {{message}}?", confirm = true }},
    {{ think = "report {{message}}" }},
    {{ tools = [
        {{ name = "append", args = {{ key = "{{agent}}-b", log = "{log}" }} }},
        {{ name = "append", args = {{ key = "{{agent}}-c", log = "{log}" }} }},
    ] }},
    {{ finish = "{{message}}: {{last}}" }},
]

[operator]
delay = 1
policy = "approve"
"""


def write_scenario(where: Path, *, idempotent: bool) -> Path:
    """Write the scenario and its tools module into ``where``; returns the scenario file."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "crash_tools.py").write_text(TOOLS_MODULE)
    text = SCENARIO.format(idempotent=str(idempotent).lower(), log=where / "effects.log")
    path = where / "crash.toml"
    path.write_text(text)
    return path


def settle(world: World, timeout: float = 30.0) -> None:
    """Wait until no job is queued, running or parked on either lane."""
    deadline = time.monotonic() + timeout
    while world.lane.stats().in_flight or world.inference_lane.stats().in_flight:
        if time.monotonic() > deadline:
            raise TimeoutError("lane work did not finish")
        time.sleep(0.0005)


def drive(world: World, max_ticks: int = 5000) -> None:
    """Tick with lockstep delivery until nothing is left that can move."""
    while world.tick_count < max_ticks:
        report = world.tick()
        settle(world)
        if report.changed or world._can_move():
            continue
        if world._idle_wait(skip_time=True, stop_on_prompts=True) is None:
            return
    raise RuntimeError(f"still busy after {max_ticks} ticks")


def operate(world: World, scenario: Scenario) -> None:
    op = scenario.operator
    assert op is not None
    Operator(world, delay=op.delay, policy=op.policy, text=op.text)


def outcome(world: World) -> dict[str, Any]:
    """What a run ended with: every agent's result, and the world's digest."""
    return {
        "results": {agent: world.result(agent) for agent in world.agents()},
        "digest": world.digest(),
    }


def record(scenario_path: Path, journal: Path | None) -> World:
    """Run the scenario from the start (recording it if ``journal``) to its end."""
    scenario = load_scenario(scenario_path)
    recorder = None if journal is None else Journal.create(journal, scenario=scenario.header())
    world = build_world(scenario, journal=recorder)
    operate(world, scenario)
    spawn_agents(world, scenario)
    drive(world)
    return world


if __name__ == "__main__":
    record(Path(sys.argv[1]), Path(sys.argv[2])).close()
