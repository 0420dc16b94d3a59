"""Scenarios: a world, its tools, models and agents, and a simulated operator, in one TOML file.

``load_scenario(path)`` reads and checks a scenario and returns a ``Scenario``; every problem
is reported at once in one ``ScenarioError`` (file, line and key of each), and nothing runs
until the file is valid. ``build_world(scenario)`` makes the ``World`` it describes, with the
scenario's behaviours registered under stable names (``scenario:agents[0]``), and
``spawn_agents`` starts its agents. A journal of a scenario run stores the scenario's text,
and ``register_scenario_behaviors`` rebuilds the same behaviours from it for a replay.

The format (see ``examples/*.toml``)::

    name = "quickstart"                 # optional: name and description
    [world]                             # all optional
    seed = 7
    clock = "real"                      # or "virtual": time skips ahead when nothing moves
    tool_capacity = 8
    inference_capacity = 8
    interaction_timeout_secs = 3600     # 0: prompts wait forever
    max_ticks = 1000000                 # `tickwork run` stops after this many ticks
    time_limit = 60                     # ... or after this many seconds of wall time

    [tools.grep]                        # exactly one of python / shell / sleep / ask_user
    shell = ["grep", "-c", "{pattern}", "{path}"]
    timeout = 10
    requires_approval = false

    [models.default]
    replies = ["a plan", "another plan"]
    delay = 0.2                         # real seconds per reply
    cycle = true

    [[agents]]
    count = 3
    name = "worker-{i}"                 # agent ids; {i} is the index within the entry
    message = "task {i}"
    interactive = false
    steps = [{ think = "plan {message}" }, { finish = "{last}" }]   # or behaviour = "mod:fn"

    [operator]                          # a simulated person who answers every prompt
    delay = 2                           # seconds of world time after it opens
    policy = "approve"                  # approve | deny | first-choice | text | none
    text = "yes"
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path as FilePath
from typing import TYPE_CHECKING, Any

from ._scenario_check import Checker
from ._scenario_parse import check_scenario
from ._scenario_spec import (
    AgentGroup,
    ModelSpec,
    OperatorSpec,
    Scenario,
    ToolSpec,
    WorldSettings,
)
from .behaviors import BehaviorRegistry
from .clock import ManualClock, MonotonicClock
from .cluster import tool_backend
from .errors import ScenarioError
from .models import Model, ScriptedModel
from .tools import AskUserTool, ShellTool, SleepTool, Tool, ToolRegistry
from .world import World

if TYPE_CHECKING:
    from .journal import Journal

__all__ = [
    "AgentGroup",
    "ModelSpec",
    "OperatorSpec",
    "Scenario",
    "ToolSpec",
    "WorldSettings",
    "build_tools",
    "build_world",
    "load_scenario",
    "parse_scenario",
    "register_scenario_behaviors",
    "spawn_agents",
]


def load_scenario(path: str | FilePath) -> Scenario:
    """Read and check the scenario file at ``path``.

    Raises:
        ScenarioError: the file cannot be read, is not TOML, or has problems (all listed).
    """
    where = str(path)
    try:
        source = FilePath(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError([f"{where}: no such scenario file"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError([f"{where}: cannot read the scenario: {exc}"]) from None
    return parse_scenario(source, where, base_dir=FilePath(path).resolve().parent)


def parse_scenario(
    source: str,
    where: str = "<scenario>",
    *,
    base_dir: FilePath | None = None,
    import_tools: bool = True,
) -> Scenario:
    """Check the scenario ``source`` (named ``where`` in messages) and return it.

    ``module:function`` names are imported from ``base_dir`` too; ``import_tools=False``
    skips importing python tools (a replay runs none).

    Raises:
        ScenarioError: the text is not TOML or has problems (every one is listed).
    """
    try:
        data = tomllib.loads(source)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError([f"{where}: not valid TOML: {exc}"]) from None
    checker = Checker(where, source, base_dir)
    scenario = check_scenario(checker, data, source, import_tools=import_tools)
    if checker.problems or scenario is None:
        raise ScenarioError(checker.problems)
    return scenario


def register_scenario_behaviors(
    registry: BehaviorRegistry, scenario: Scenario | Mapping[str, Any]
) -> None:
    """Register a scenario's behaviours under their stable names (``scenario:agents[0]``).

    ``scenario`` is a ``Scenario`` or the header a journal stored (``{"path", "text"}``),
    whose text is checked again (python tools are not imported: a replay runs none).

    Raises:
        ScenarioError: the stored scenario no longer checks (a module moved, say).
    """
    if not isinstance(scenario, Scenario):
        where = str(scenario.get("path") or "<journal scenario>")
        source, base = scenario.get("text"), scenario.get("base_dir")
        if not isinstance(source, str):
            raise ScenarioError([f"{where}: the journal stores no scenario text"])
        base_dir = FilePath(base) if isinstance(base, str) else None
        scenario = parse_scenario(source, where, base_dir=base_dir, import_tools=False)
    registry.update(scenario.behaviors)


def build_tools(scenario: Scenario, *, ship_by_value: bool = False) -> ToolRegistry:
    """The tool registry the scenario's ``[tools]`` describe.

    ``ship_by_value`` wraps python tools imported from beside the scenario so that they
    pickle with their code (for Dask workers, which cannot import them by name).
    """
    tools = ToolRegistry()
    base = None if scenario.base_dir is None else FilePath(scenario.base_dir).resolve()
    for spec in scenario.tools.values():
        tool: Tool
        if spec.kind == "python":
            fn = spec.fn
            if ship_by_value and base is not None and _defined_under(fn, base):
                fn = ShippedByValue(fn)
            tools.tool(spec.name, timeout=spec.timeout, requires_approval=spec.requires_approval)(
                fn
            )
            continue
        if spec.kind == "shell":
            tool = ShellTool(
                spec.name, spec.argv, timeout=spec.timeout, requires_approval=spec.requires_approval
            )
        elif spec.kind == "sleep":
            tool = SleepTool(spec.name, timeout=spec.timeout)
        else:
            tool = AskUserTool(spec.name, timeout=spec.timeout)
        tool.requires_approval = spec.requires_approval
        tools.add(tool)
    return tools


def build_world(scenario: Scenario, *, journal: Journal | None = None) -> World:
    """The ``World`` the scenario describes, its behaviours registered (no agents yet).

    Raises:
        ConfigError: a setting the world refuses (the scenario checks catch these first), or
            a Dask backend that cannot be started or reached.
    """
    settings = scenario.world
    clock = ManualClock() if settings.clock == "virtual" else MonotonicClock()
    models: dict[str, Model] = {
        name: ScriptedModel(list(spec.replies), delay=spec.delay, cycle=spec.cycle)
        for name, spec in scenario.models.items()
    }
    tools = build_tools(scenario, ship_by_value=settings.lane_backend != "threads")
    backend = tool_backend(
        settings.lane_backend,
        scheduler_address=settings.scheduler_address,
        workers=settings.workers,
        retries=settings.retries,
    )
    world = World(  # handed the backend: the world closes it, even if it refuses it
        seed=settings.seed,
        clock=clock,
        tool_capacity=settings.tool_capacity,
        inference_capacity=settings.inference_capacity,
        interaction_timeout_secs=settings.interaction_timeout_secs,
        tools=tools,
        models=models,
        journal=journal,
        tool_executor=backend,
    )
    register_scenario_behaviors(world.behaviors, scenario)
    return world


class ShippedByValue:
    """A scenario's tool function that pickles with its code, not by reference.

    The module was imported from the scenario's directory, which is on this process's path
    only while the scenario loads and on no Dask worker's. Dask pickles task data with the
    standard pickle first, which would name the function by module and fail on a worker;
    this wrapper hands pickle cloudpickle's by-value encoding instead.
    """

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, args: Any, ctx: Any) -> Any:
        return self.fn(args, ctx)

    def __reduce__(self) -> tuple[Any, ...]:
        import cloudpickle  # comes with distributed, which a dask backend needs anyway

        module = sys.modules.get(self.fn.__module__)
        if module is not None:
            cloudpickle.register_pickle_by_value(module)
        return (_unship, (cloudpickle.dumps(self.fn),))


def _unship(blob: bytes) -> ShippedByValue:
    import cloudpickle

    return ShippedByValue(cloudpickle.loads(blob))


def _defined_under(fn: Any, base: FilePath) -> bool:
    origin = getattr(sys.modules.get(getattr(fn, "__module__", "") or ""), "__file__", None)
    return isinstance(origin, str) and FilePath(origin).resolve().is_relative_to(base)


def spawn_agents(world: World, scenario: Scenario) -> list[str]:
    """Spawn every agent of the scenario, in file order; returns their ids."""
    spawned = []
    for group in scenario.agents:
        for agent_id, message in zip(group.ids, group.messages, strict=True):
            spawned.append(
                world.spawn(
                    group.behavior,
                    message,
                    interactive=group.interactive,
                    agent_id=agent_id or None,
                    name=agent_id,
                )
            )
    return spawned
