"""The parts of a checked scenario, and the fields each of its tables may have."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime.cluster import BACKENDS
from runtime.scenario.check import (
    MAX_AGENTS,
    Field,
    boolean,
    integer,
    number,
    one_of,
    string_list,
    text,
)
from runtime.scenario.steps import Step
from runtime.world import Behavior

MAX_CAPACITY = 100_000
"""The most slots a lane may have (``tool_capacity``, ``inference_capacity``)."""

__all__ = [
    "AGENT_FIELDS",
    "MAX_AGENTS",
    "MAX_CAPACITY",
    "MODEL_FIELDS",
    "OPERATOR_FIELDS",
    "POLICIES",
    "TOOL_FIELDS",
    "TOOL_KINDS",
    "WORLD_FIELDS",
    "AgentGroup",
    "ModelSpec",
    "OperatorSpec",
    "Scenario",
    "ToolSpec",
    "WorldSettings",
]

WORLD_FIELDS: dict[str, Field] = {
    "seed": Field(integer(), 0),
    "clock": Field(one_of("real", "virtual"), "real"),
    "tool_capacity": Field(integer(1, MAX_CAPACITY), 8),
    "inference_capacity": Field(integer(1, MAX_CAPACITY), 8),
    "interaction_timeout_secs": Field(number(0.0), 3600.0),
    "max_ticks": Field(integer(1), 1_000_000),
    "time_limit": Field(number(0.0, above=True), None),
    # What runs the tool jobs (runtime.cluster): the lane's threads, or a Dask cluster.
    "lane_backend": Field(one_of(*BACKENDS), "threads"),
    "scheduler_address": Field(text, None),  # lane_backend = "dask" only
    "workers": Field(integer(1, 1024), 2),  # lane_backend = "dask-local" only
    "retries": Field(integer(0, 1000), 0),  # Dask's re-runs of a raising job; off by default
    # Lockstep delivery (World's `lockstep`); unset: on exactly when the clock is virtual.
    "lockstep": Field(boolean, None),
}
TOOL_KINDS = ("python", "shell", "sleep", "ask_user")
TOOL_FIELDS: dict[str, Field] = {
    "python": Field(text, None),
    "shell": Field(string_list, None),
    "sleep": Field(boolean, None),
    "ask_user": Field(boolean, None),
    "timeout": Field(number(0.0, above=True), None),
    "requires_approval": Field(boolean, False),
    "idempotent": Field(boolean, False),  # run again on resume if a crash cut a call short
    "virtual_duration": Field(number(0.0), 0.0),  # world seconds a call takes in lockstep
}
MODEL_FIELDS: dict[str, Field] = {
    "replies": Field(string_list, None),
    "delay": Field(number(0.0), 0.0),
    "cycle": Field(boolean, True),
    "virtual_duration": Field(number(0.0), 0.0),  # world seconds a reply takes in lockstep
}
AGENT_FIELDS: dict[str, Field] = {
    "count": Field(integer(0, MAX_AGENTS), 1),
    "name": Field(text, None),
    "message": Field(text, None),
    "interactive": Field(boolean, False),
    "behaviour": Field(text, None),
    "steps": Field(lambda value: None, None),  # checked step by step
    "components": Field(lambda value: None, None),  # checked one by one (scenario.host)
}
POLICIES = ("approve", "deny", "first-choice", "text", "none")
OPERATOR_FIELDS: dict[str, Field] = {
    "delay": Field(number(0.0), 1.0),
    "policy": Field(one_of(*POLICIES), "approve"),
    "text": Field(text, None),
}


@dataclass(frozen=True, slots=True)
class WorldSettings:
    """The ``[world]`` table."""

    seed: int = 0
    clock: str = "real"
    tool_capacity: int = 8
    inference_capacity: int = 8
    interaction_timeout_secs: float = 3600.0
    max_ticks: int = 1_000_000
    time_limit: float | None = None
    lane_backend: str = "threads"
    scheduler_address: str | None = None
    workers: int = 2
    retries: int = 0
    lockstep: bool | None = None


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One ``[tools.NAME]`` table, ready to build (``fn`` for a python tool)."""

    name: str
    kind: str
    timeout: float | None = None
    requires_approval: bool = False
    idempotent: bool = False
    argv: tuple[str, ...] = ()
    fn: Any = None
    virtual_duration: float = 0.0


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One ``[models.NAME]`` table: a scripted model."""

    name: str
    replies: tuple[str, ...]
    delay: float = 0.0
    cycle: bool = True
    virtual_duration: float = 0.0


@dataclass(frozen=True, slots=True)
class AgentGroup:
    """One ``[[agents]]`` entry: ``count`` agents running the behaviour named ``behavior``.

    ``ids`` are the agent ids it asks for (empty strings: the world picks ``a<n>``).
    """

    index: int
    count: int
    behavior: str
    ids: tuple[str, ...]
    messages: tuple[str | None, ...]
    interactive: bool = False
    steps: tuple[Step, ...] | None = None
    components: tuple[Any, ...] = ()  # host components, copied onto every agent


@dataclass(frozen=True, slots=True)
class OperatorSpec:
    """The ``[operator]`` table: a simulated person answering prompts."""

    delay: float = 1.0
    policy: str = "approve"
    text: str | None = None


@dataclass(frozen=True, slots=True)
class Scenario:
    """A checked scenario. ``behaviors`` maps each stable name to its behaviour."""

    path: str
    text: str
    name: str
    description: str
    world: WorldSettings
    tools: Mapping[str, ToolSpec]
    models: Mapping[str, ModelSpec]
    agents: tuple[AgentGroup, ...]
    operator: OperatorSpec | None
    behaviors: Mapping[str, Behavior] = field(default_factory=dict)
    base_dir: str | None = None
    systems: tuple[Any, ...] = ()  # runtime.scenario.host.SystemSpec, in file order
    actions: tuple[Any, ...] = ()  # runtime.scenario.host.ActionSpec

    @property
    def agent_count(self) -> int:
        """How many agents the scenario starts (children not counted)."""
        return sum(group.count for group in self.agents)

    def header(self) -> dict[str, Any]:
        """What a journal stores to rebuild this scenario's behaviours in a replay."""
        return {"path": self.path, "base_dir": self.base_dir, "text": self.text}
