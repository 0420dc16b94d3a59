"""Turning a scenario's TOML data into a checked ``Scenario``, collecting every problem."""

from __future__ import annotations

import dataclasses
import re
import string
from collections.abc import Mapping
from pathlib import Path as FilePath
from typing import Any

from runtime.scenario.check import Checker, show, text
from runtime.scenario.host import parse_actions, parse_components, parse_systems
from runtime.scenario.spec import (
    AGENT_FIELDS,
    MAX_AGENTS,
    MODEL_FIELDS,
    OPERATOR_FIELDS,
    PROVIDER_KEYS,
    TOOL_FIELDS,
    TOOL_KINDS,
    WORLD_FIELDS,
    AgentGroup,
    ModelSpec,
    OperatorSpec,
    Scenario,
    ToolSpec,
    WorldSettings,
)
from runtime.scenario.steps import ScriptContext, agents_started, parse_steps, scripted
from runtime.scenario.toml_lines import Path, format_path
from runtime.world import Behavior

__all__ = ["check_scenario"]

_TOP_KEYS = (
    "name",
    "description",
    "world",
    "tools",
    "models",
    "agents",
    "operator",
    "systems",
    "actions",
)
_AGENT_ID = re.compile(r"^[A-Za-z0-9_-]+$")
_RESERVED_ID = re.compile(r"^a[0-9]+$")  # the ids a world gives agents without a name


def check_scenario(
    checker: Checker, data: dict[str, Any], source: str, *, import_tools: bool
) -> Scenario | None:
    """The scenario ``data`` describes, or None if ``checker`` found any problem."""
    return _Parser(checker, import_tools).scenario(data, checker.where, source)


class _Parser:
    """Turns checked TOML data into a ``Scenario``, collecting every problem on the way."""

    def __init__(self, checker: Checker, import_tools: bool) -> None:
        self.checker = checker
        self.import_tools = import_tools
        self.behaviors: dict[str, Behavior] = {}
        self.broken: set[tuple[str, str]] = set()  # ("tools", name) declared with a problem

    def scenario(self, data: dict[str, Any], where: str, source: str) -> Scenario | None:
        """The whole scenario, or None when a problem was found."""
        checker = self.checker
        checker.unknown_keys((), data, _TOP_KEYS, what="top-level key")
        meta = {key: data.get(key, "") for key in ("name", "description")}
        for key, value in meta.items():
            checker.check((key,), value, text)
        world = WorldSettings(
            **checker.fields(("world",), self._table(data, "world"), WORLD_FIELDS)
        )
        tools = self._named(data, "tools", self.tool)
        self.backend(self._table(data, "world"), world, tools)
        models = self._named(data, "models", self.model)
        agents = self.agents(data.get("agents"), tools, models)
        operator = self.operator(data, world)
        systems = parse_systems(checker, data.get("systems"))
        actions = parse_actions(checker, data.get("actions"))
        if checker.problems:
            return None
        return Scenario(
            where,
            source,
            str(meta["name"]) or FilePath(where).stem,
            str(meta["description"]),
            world,
            tools,
            models,
            agents,
            operator,
            dict(self.behaviors),
            None if checker.base_dir is None else str(checker.base_dir),
            systems,
            actions,
        )

    def _table(self, data: Mapping[str, Any], key: str) -> dict[str, Any]:
        if key not in data:
            return {}
        return self.checker.table((key,), data[key]) or {}

    def _named(self, data: Mapping[str, Any], key: str, build: Any) -> dict[str, Any]:
        found = {}
        for name, raw in self._table(data, key).items():
            table = self.checker.table((key, name), raw)
            if table is not None and (spec := build((key, name), name, table)) is not None:
                found[name] = spec
            else:
                # Declared but broken (already reported): a step naming it is not also told
                # the name is unknown, a second and wrong error.
                self.broken.add((key, name))
        return found

    def tool(self, path: Path, name: str, table: dict[str, Any]) -> ToolSpec | None:
        """One ``[tools.NAME]`` table, or None when it has a problem."""
        checker = self.checker
        values = checker.fields(path, table, TOOL_FIELDS)
        kinds = [kind for kind in TOOL_KINDS if kind in table]
        if len(kinds) != 1:
            said = " and ".join(kinds) if kinds else "none"
            checker.problem(
                path, f"a tool needs exactly one of {', '.join(TOOL_KINDS)}, got {said}"
            )
            return None
        kind = kinds[0]
        value = values[kind]
        if value is None:
            return None  # its check failed: already reported
        spec = ToolSpec(
            name,
            kind,
            values["timeout"],
            values["requires_approval"],
            values["idempotent"],
            virtual_duration=float(values["virtual_duration"]),
        )
        if kind in ("sleep", "ask_user"):
            if value is not True:
                checker.problem((*path, kind), f"must be true to declare a {kind} tool, got false")
                return None
            return spec
        if kind == "shell":
            good = [
                checker.template((*path, "shell", n), item, None) for n, item in enumerate(value)
            ]
            if not all(good):
                return None
            return dataclasses.replace(spec, argv=tuple(value))
        fn = checker.target((*path, "python"), value, "tool") if self.import_tools else None
        return dataclasses.replace(spec, fn=fn)

    def model(self, path: Path, name: str, table: dict[str, Any]) -> ModelSpec | None:
        """One ``[models.NAME]`` table, or None when it has a problem."""
        values = self.checker.fields(path, table, MODEL_FIELDS)
        provider = values["provider"]
        if table.get("provider", "scripted") != provider:
            # Its problem is reported; the name stays defined so steps using it add none.
            return ModelSpec(name, (), provider=str(table["provider"]))
        if provider != "scripted":
            return self._provider_model(path, name, table, values)
        for key in PROVIDER_KEYS:
            if key in table:
                self.checker.problem(
                    (*path, key),
                    "only for provider = 'openai' or 'anthropic' (this model is scripted)",
                )
        if values["replies"] is None:
            if "replies" not in table:
                self.checker.problem(path, "a model needs `replies`, an array of strings")
            return None
        return ModelSpec(
            name,
            tuple(values["replies"]),
            float(values["delay"]),
            values["cycle"],
            float(values["virtual_duration"]),
        )

    def _provider_model(
        self, path: Path, name: str, table: dict[str, Any], values: dict[str, Any]
    ) -> ModelSpec | None:
        provider = values["provider"]
        for key in ("replies", "delay", "cycle"):
            if key in table:
                self.checker.problem(
                    (*path, key), f"only for scripted models, not provider {provider!r}"
                )
        if values["model"] is None:
            if "model" not in table:
                self.checker.problem(
                    path,
                    f"provider {provider!r} needs `model`, the provider's model name",
                )
            return ModelSpec(name, (), provider=provider)  # reported; never built
        settings = {key: values[key] for key in PROVIDER_KEYS if values[key] is not None}
        return ModelSpec(name, (), provider=provider, settings=settings)

    def agents(
        self, raw: Any, tools: Mapping[str, ToolSpec], models: Mapping[str, ModelSpec]
    ) -> tuple[AgentGroup, ...]:
        """Every ``[[agents]]`` entry that checks."""
        checker = self.checker
        if raw is None or raw == []:
            checker.problem((), "no agents: add at least one [[agents]] table")
            return ()
        if not isinstance(raw, list):
            checker.problem(("agents",), "must be an array of tables: write [[agents]]")
            return ()
        arguments = {name: _tool_arguments(spec) for name, spec in tools.items()}
        for key, name in self.broken:
            if key == "tools":
                arguments.setdefault(name, None)  # any arguments: its table has the problem
        broken_models = {name for key, name in self.broken if key == "models"}
        ctx = ScriptContext(
            checker,
            arguments,
            set(models) | broken_models,
            self._register,
            lambda path, target: checker.target(path, target, "behaviour"),
        )
        groups: list[AgentGroup] = []
        owners: dict[str, int] = {}
        total = 0
        for index, item in enumerate(raw):
            count = item.get("count", 1) if isinstance(item, dict) else 0
            if isinstance(count, int) and not isinstance(count, bool) and count > 0:
                total += count
                if total > MAX_AGENTS:
                    checker.problem(
                        ("agents", index, "count"),
                        f"the scenario would start {total:,} agents or more, over the"
                        f" maximum of {MAX_AGENTS:,}",
                    )
                    return tuple(groups)
            table = checker.table(("agents", index), item)
            if table is not None:
                group = self.agent(ctx, index, table, owners)
                if group is not None:
                    groups.append(group)
                    total += group.count * agents_started(group.steps)  # what they spawn
                    if total > MAX_AGENTS:
                        checker.problem(
                            ("agents", index),
                            f"the scenario would start {total:,} agents or more with the ones"
                            f" its steps spawn, over the maximum of {MAX_AGENTS:,}",
                        )
                        return tuple(groups)
        return tuple(groups)

    def agent(
        self, ctx: ScriptContext, index: int, table: dict[str, Any], owners: dict[str, int]
    ) -> AgentGroup | None:
        """One ``[[agents]]`` entry, or None when it has a problem."""
        checker = self.checker
        path: Path = ("agents", index)
        if "behavior" in table:  # the American spelling, as the Python API writes it
            if "behaviour" in table:  # one of them was dropped without a word
                checker.problem(
                    path,
                    "an agent gives both `behavior` and `behaviour`"
                    f" ({table['behavior']!r} and {table['behaviour']!r}): give one",
                )
                return None
            table = dict(table)
            table["behaviour"] = table.pop("behavior")
        values = checker.fields(path, table, AGENT_FIELDS)
        behaviour_name = f"scenario:{format_path(path)}"
        given = [key for key in ("behaviour", "steps") if key in table]
        if len(given) != 1:
            checker.problem(path, "an agent needs exactly one of `behaviour` or `steps`")
            return None
        if values[given[0]] is None:
            return None  # its check failed: already reported
        steps = None
        if values["steps"] is not None:
            steps = parse_steps(ctx, (*path, "steps"), values["steps"])
            behavior = None if steps is None else scripted(steps)
        else:
            behavior = checker.target((*path, "behaviour"), values["behaviour"], "behaviour")
        ids = self._ids(path, values, owners)
        messages = self._messages(path, values)
        components: tuple[Any, ...] | None = ()
        if "components" in table:
            components = parse_components(checker, (*path, "components"), table["components"])
        if behavior is None or ids is None or messages is None or components is None:
            return None
        self._register(behaviour_name, behavior)
        return AgentGroup(
            index,
            values["count"],
            behaviour_name,
            ids,
            messages,
            values["interactive"],
            steps,
            components,
        )

    def _ids(
        self, path: Path, values: dict[str, Any], owners: dict[str, int]
    ) -> tuple[str, ...] | None:
        name: str | None = values["name"]
        count: int = values["count"]
        if name is None:
            return ("",) * count
        if not self.checker.template((*path, "name"), name, {"i"}):
            return None
        if count > 1 and "i" not in _placeholders(name):
            name += "-{i}"
        ids = tuple(name.format(i=i) for i in range(count))
        for agent_id in ids[:1] + ids[-1:]:  # a template's shape: first and last tell it all
            if not _AGENT_ID.match(agent_id):
                why = "may hold only letters, digits, '-' and '_'"
            elif _RESERVED_ID.match(agent_id):
                why = "is reserved for agents without a name"
            else:
                continue
            self.checker.problem((*path, "name"), f"agent id {agent_id!r} {why}")
            return None
        index = int(path[1])
        for agent_id in ids:
            other = owners.setdefault(agent_id, index)
            if other != index:
                self.checker.problem(
                    (*path, "name"), f"agent id {agent_id!r} is also used by agents[{other}]"
                )
                return None
        return ids

    def _messages(self, path: Path, values: dict[str, Any]) -> tuple[str | None, ...] | None:
        message: str | None = values["message"]
        count: int = values["count"]
        if message is None:
            return (None,) * count
        if not self.checker.template((*path, "message"), message, {"i"}):
            return None
        return tuple(message.format(i=i) for i in range(count))

    def backend(
        self, table: Mapping[str, Any], world: WorldSettings, tools: Mapping[str, ToolSpec]
    ) -> None:
        """Check that the tool backend's settings fit together and fit the tools."""
        checker, kind = self.checker, world.lane_backend
        if kind == "dask" and not world.scheduler_address:
            checker.problem(
                ("world", "lane_backend"), 'lane_backend = "dask" needs world.scheduler_address'
            )
        if "scheduler_address" in table and kind != "dask":
            checker.problem(
                ("world", "scheduler_address"),
                f'only used with lane_backend = "dask", not {kind!r}',
            )
        if "workers" in table and kind != "dask-local":
            where = ("world", "workers")
            checker.problem(where, f'only used with lane_backend = "dask-local", not {kind!r}')
        if kind == "threads":
            return
        for name, spec in tools.items():
            if spec.kind == "ask_user":
                checker.problem(
                    ("tools", name, "ask_user"),
                    f"tool {name!r} asks a person and must run on this host; it cannot be used"
                    f" with lane_backend = {kind!r} (use an ask step instead)",
                )

    def operator(self, data: Mapping[str, Any], world: WorldSettings) -> OperatorSpec | None:
        """The ``[operator]`` table, or None when there is none."""
        if "operator" not in data:
            return None
        values = self.checker.fields(("operator",), self._table(data, "operator"), OPERATOR_FIELDS)
        spec = OperatorSpec(float(values["delay"]), values["policy"], values["text"])
        timeout = world.interaction_timeout_secs
        if timeout and spec.policy != "none" and spec.delay >= timeout:
            self.checker.problem(
                ("operator", "delay"),
                f"{show(spec.delay)} is not before the prompt deadline"
                f" (world.interaction_timeout_secs = {show(timeout)}): every prompt would expire",
            )
        return spec

    def _register(self, name: str, behavior: Behavior) -> None:
        self.behaviors[name] = behavior


def _placeholders(template: str) -> set[str]:
    """The names a checked ``str.format`` template fills (``{a.b}`` and ``{a[0]}`` name a)."""
    found = set()
    for _, name, _, _ in string.Formatter().parse(template):
        if name:
            found.add(re.split(r"[.\[]", name, maxsplit=1)[0])
    return found


def _tool_arguments(spec: ToolSpec) -> frozenset[str] | None:
    """The argument names every call of the tool must carry (None: the tool says at run time)."""
    if spec.kind == "shell":
        return frozenset(name for item in spec.argv for name in _placeholders(item))
    return {"ask_user": frozenset({"prompt"}), "sleep": frozenset({"seconds"})}.get(spec.kind)
