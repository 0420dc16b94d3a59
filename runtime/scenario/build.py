"""From a checked scenario to a running world: its tools, its ``World``, its agents."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path as FilePath
from typing import Any

from runtime.clock import ManualClock, MonotonicClock
from runtime.cluster import tool_backend
from runtime.models import AnthropicMessages, Model, OpenAIChat, RateLimit, ScriptedModel
from runtime.scenario.host import install_host
from runtime.scenario.load import register_scenario_behaviors
from runtime.scenario.spec import ModelSpec, Scenario
from runtime.tools import AskUserTool, ShellTool, SleepTool, Tool, ToolRegistry
from runtime.world import Recorder, World
from runtime.world.world import close_handed

__all__ = ["ShippedByValue", "build_models", "build_tools", "build_world", "spawn_agents"]


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
            register = tools.tool(
                spec.name,
                timeout=spec.timeout,
                requires_approval=spec.requires_approval,
                idempotent=spec.idempotent,
                virtual_duration=spec.virtual_duration,
            )
            register(fn)
            continue
        if spec.kind == "shell":
            tool = ShellTool(
                spec.name,
                spec.argv,
                timeout=spec.timeout,
                requires_approval=spec.requires_approval,
                idempotent=spec.idempotent,
            )
        elif spec.kind == "sleep":
            tool = SleepTool(spec.name, timeout=spec.timeout, idempotent=spec.idempotent)
        else:
            tool = AskUserTool(spec.name, timeout=spec.timeout, idempotent=spec.idempotent)
        tool.requires_approval = spec.requires_approval
        tool.virtual_duration = spec.virtual_duration
        tools.add(tool)
    return tools


def build_world(scenario: Scenario, *, journal: Recorder | None = None) -> World:
    """The ``World`` the scenario describes, its behaviours registered (no agents yet).

    ``journal`` is handed over, as to ``World``: closed with the world, or here when the
    build fails (a journal left open keeps its path locked).

    Raises:
        ConfigError: a setting the world refuses (the scenario checks catch these first), or
            a Dask backend that cannot be started or reached.
    """
    settings = scenario.world
    clock = ManualClock() if settings.clock == "virtual" else MonotonicClock()
    try:
        models = build_models(scenario)
        tools = build_tools(scenario, ship_by_value=settings.lane_backend != "threads")
        backend = tool_backend(
            settings.lane_backend,
            scheduler_address=settings.scheduler_address,
            workers=settings.workers,
            retries=settings.retries,
        )
    except BaseException:
        close_handed(journal, None)  # as `World` would have, had it been made
        raise
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
        lockstep=settings.lockstep,  # None: on exactly when the clock is virtual
    )
    try:
        register_scenario_behaviors(world.behaviors, scenario)
        install_host(world, scenario.systems, scenario.actions)
    except BaseException:
        world.close()  # and with it the journal and the backend
        raise
    return world


def build_models(scenario: Scenario) -> dict[str, Model]:
    """The models the scenario's ``[models]`` describe, by name."""
    return {name: build_model(spec) for name, spec in scenario.models.items()}


def build_model(spec: ModelSpec) -> Model:
    """The model a ``[models.NAME]`` table describes (a provider's key comes from its
    ``api_key_env`` variable at each call, never from the scenario)."""
    if spec.provider == "scripted":
        return ScriptedModel(
            list(spec.replies),
            delay=spec.delay,
            cycle=spec.cycle,
            virtual_duration=spec.virtual_duration,
        )
    settings = dict(spec.settings)
    rpm = settings.pop("requests_per_minute", None)
    tpm = settings.pop("tokens_per_minute", None)
    rate_limit = RateLimit(rpm, tpm) if rpm is not None or tpm is not None else None
    cls = OpenAIChat if spec.provider == "openai" else AnthropicMessages
    return cls(settings.pop("model"), rate_limit=rate_limit, **settings)


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


def spawn_agents(
    world: World,
    scenario: Scenario,
    *,
    stop: threading.Event | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[str]:
    """Spawn every agent of the scenario, in file order; returns their ids.

    ``stop`` set ends the spawning early (Ctrl-C while 200,000 agents are spawned);
    ``progress(n)`` is told every 1,024 agents how many are spawned so far.
    """
    spawned: list[str] = []
    for group in scenario.agents:
        for agent_id, message in zip(group.ids, group.messages, strict=True):
            if len(spawned) % 1024 == 0:
                if stop is not None and stop.is_set():
                    return spawned
                if progress is not None:
                    progress(len(spawned))
            spawned.append(
                world.spawn(
                    group.behavior,
                    message,
                    interactive=group.interactive,
                    agent_id=agent_id or None,
                    name=agent_id,
                    components=group.components,
                )
            )
    if progress is not None:
        progress(len(spawned))
    return spawned
