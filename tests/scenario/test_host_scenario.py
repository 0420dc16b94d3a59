"""Scenarios name host systems, host actions and agents' components, checked like any key."""

from __future__ import annotations

import textwrap

import pytest

from runtime import Journal, ScenarioError, replay
from runtime.scenario import load_scenario
from runtime.scenario.build import build_world, spawn_agents

MODULE = """
from dataclasses import dataclass
from runtime import PENDING

@dataclass(slots=True)
class Spot:
    x: int
    y: int = 0

@dataclass(frozen=True, slots=True)
class Step:
    dx: int

def walker(turn):
    start = turn.get(Spot).x
    yield Step(2)
    return [start, turn.get(Spot).x]

def step(ctx, agent_id, action):
    ctx.entity(agent_id)
    return PENDING

def walk(ctx):
    for entity, (spot,) in ctx.query(Spot):
        agent = ctx.agent_id(entity)
        if agent is not None and spot.x < 5:
            spot.x += 1
            ctx.set(entity, spot)
            if spot.x == 5:
                ctx.complete(agent, None)
"""

SCENARIO = """\
[world]
clock = "virtual"
[[systems]]
fn = "hostmod:walk"
after = "step_behaviors"
[actions]
Step = "hostmod:step"
[[agents]]
count = 2
name = "w-{i}"
behaviour = "hostmod:walker"
components = [{ type = "hostmod:Spot", x = 3 }]
"""


def _write(tmp_path, body: str) -> str:
    (tmp_path / "hostmod.py").write_text(MODULE)
    path = tmp_path / "village.toml"
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_a_scenario_runs_its_host_systems_and_actions_on_its_agents_components(tmp_path):
    scenario = load_scenario(_write(tmp_path, SCENARIO))
    journal = tmp_path / "run.db"
    world = build_world(scenario, journal=Journal.create(journal, scenario=scenario.header()))
    try:
        ids = spawn_agents(world, scenario)
        world.run_until_idle(max_ticks=50)
        assert [world.result(a) for a in ids] == [[3, 5], [3, 5]]
    finally:
        world.close()
    assert replay(journal).ticks == world.tick_count  # the header's scenario re-installs them


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            '[[systems]]\nfn = "hostmod:walk"\nafter = "step_behaviours"\n',
            "systems[0].after: must be one of",
        ),
        ('[[systems]]\nafter = "apply_inputs"\n', "systems[0]: a system needs `fn`"),
        ('[actions]\nLeap = "hostmod:step"\n', "actions.Leap: cannot import 'hostmod:Leap'"),
        (
            '[[agents]]\nbehaviour = "hostmod:walker"\ncomponents = [{ type = "hostmod:Spot", z = 1 }]\n',
            "agents[0].components[0].z: Spot has no field 'z'",
        ),
        (
            '[[agents]]\nbehaviour = "hostmod:walker"\ncomponents = [{ type = "hostmod:walk" }]\n',
            "agents[0].components[0].type: 'hostmod:walk' is not a dataclass of your own",
        ),
        (
            '[[agents]]\nbehaviour = "hostmod:walker"\ncomponents = [{ x = 1 }]\n',
            "agents[0].components[0]: a component needs `type`",
        ),
    ],
)
def test_bad_host_keys_are_reported_with_file_line_and_key(tmp_path, body, expected):
    agents = "" if "[[agents]]" in body else '[[agents]]\nbehaviour = "hostmod:walker"\n'
    with pytest.raises(ScenarioError) as caught:
        load_scenario(_write(tmp_path, agents + body))
    assert any(expected in p for p in caught.value.problems), caught.value.problems
    assert all(p.startswith(str(tmp_path / "village.toml") + ":") for p in caught.value.problems)


@pytest.mark.parametrize("where", ["build_tools", "install_host"])
def test_a_build_that_fails_closes_the_journal_handed_to_it(tmp_path, monkeypatch, where):
    # Before the world was made, or after (its host systems refused): the journal, kept
    # open, held its writer's lock and the path could not be recorded to again.
    from runtime.scenario import build

    scenario = load_scenario(_write(tmp_path, SCENARIO))
    path = tmp_path / "run.db"
    journal = Journal.create(path, scenario=scenario.header())  # kept referenced

    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError(f"{where} failed")

    with monkeypatch.context() as patched:
        patched.setattr(build, where, fail)
        with pytest.raises(RuntimeError, match=f"{where} failed"):
            build_world(scenario, journal=journal)
    Journal.create(path, overwrite=True).close()
