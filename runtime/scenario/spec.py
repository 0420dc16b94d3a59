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
    show,
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
    "PROVIDERS",
    "PROVIDER_KEYS",
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


def _url(value: Any) -> str | None:
    if isinstance(value, str) and value.startswith(("http://", "https://")) and "\n" not in value:
        return None
    return f"must be an http:// or https:// URL, got {show(value)}"


def _env_name(value: Any) -> str | None:
    if isinstance(value, str) and value.isidentifier() and value.isascii():
        return None
    return f"must be the name of an environment variable, got {show(value)}"


def _temperature(value: Any) -> str | None:
    problem = number(0.0)(value)
    if problem is None and value <= 2:
        return None
    return f"must be a number from 0 to 2, got {show(value)}"


PROVIDERS = ("scripted", "openai", "anthropic")
# Keys of a provider model (provider = "openai" | "anthropic"); the rest are scripted's.
PROVIDER_KEYS = (
    "model",
    "base_url",
    "api_key_env",
    "temperature",
    "max_tokens",
    "requests_per_minute",
    "tokens_per_minute",
)
SCRIPTED_KEYS = ("replies", "delay", "cycle")
MODEL_FIELDS: dict[str, Field] = {
    "provider": Field(one_of(*PROVIDERS), "scripted"),
    "replies": Field(string_list, None),
    "delay": Field(number(0.0), 0.0),
    "cycle": Field(boolean, True),
    "virtual_duration": Field(number(0.0), 0.0),  # world seconds a reply takes in lockstep
    "model": Field(text, None),
    "base_url": Field(_url, None),
    # The key is read from this environment variable only, never from the scenario file.
    "api_key_env": Field(_env_name, None),
    "temperature": Field(_temperature, None),
    "max_tokens": Field(integer(1), None),
    "requests_per_minute": Field(number(0.0, above=True), None),
    "tokens_per_minute": Field(number(0.0, above=True), None),
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
    """One ``[models.NAME]`` table: a scripted model, or a provider's (``provider``)."""

    name: str
    replies: tuple[str, ...]
    delay: float = 0.0
    cycle: bool = True
    virtual_duration: float = 0.0
    provider: str = "scripted"
    settings: Mapping[str, Any] = field(default_factory=dict)  # PROVIDER_KEYS that were set


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
