"""The scenario room: TOML scenarios read (``load``), checked (``parse``, ``check``,
``spec``), scripted (``steps``), built into a world (``build``), and a simulated operator.
"""

from runtime.scenario.build import build_models, build_tools, build_world, spawn_agents
from runtime.scenario.check import MAX_AGENTS
from runtime.scenario.load import (
    load_scenario,
    parse_scenario,
    recorded_scenario,
    register_scenario_behaviors,
)
from runtime.scenario.operator import Operator
from runtime.scenario.spec import (
    AgentGroup,
    ModelSpec,
    OperatorSpec,
    Scenario,
    ToolSpec,
    WorldSettings,
)

__all__ = [
    "MAX_AGENTS",
    "AgentGroup",
    "ModelSpec",
    "Operator",
    "OperatorSpec",
    "Scenario",
    "ToolSpec",
    "WorldSettings",
    "build_models",
    "build_tools",
    "build_world",
    "load_scenario",
    "parse_scenario",
    "recorded_scenario",
    "register_scenario_behaviors",
    "spawn_agents",
]
