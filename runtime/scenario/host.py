"""The host ECS parts of a scenario: ``[[systems]]``, ``[actions]`` and agents' components.

    [[systems]]
    fn = "village:walk"                 # a function of a SystemContext
    after = "step_behaviors"            # or before = "..."; a built-in stage's name
    name = "walk"                       # optional

    [actions]
    MoveTo = "village:move_to"          # the type is found in the handler's module,
    "village:Gather" = "village:gather" # or named in full

    [[agents]]
    behaviour = "village:villager"
    components = [{ type = "village:Position", x = 0, y = 0 }, { type = "village:Goal" }]

Each is checked like every other key: a problem names the file, the line and the key, and
nothing runs until the scenario is valid.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from runtime.scenario.check import Checker, Field, one_of, suggest, text
from runtime.scenario.toml_lines import Path
from runtime.world import World
from runtime.world.host_api import STAGE_NAMES
from runtime.world.host_data import field_names, is_builtin
from runtime.world.values import is_json

__all__ = [
    "ActionSpec",
    "SystemSpec",
    "install_host",
    "parse_actions",
    "parse_components",
    "parse_systems",
]

STAGES = tuple(STAGE_NAMES.values())
SYSTEM_FIELDS: dict[str, Field] = {
    "fn": Field(text, None),
    "after": Field(one_of(*STAGES), None),
    "before": Field(one_of(*STAGES), None),
    "name": Field(text, None),
}
_TYPE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class SystemSpec:
    """One ``[[systems]]`` entry, imported."""

    fn: Callable[..., Any]
    after: str | None = None
    before: str | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """One ``[actions]`` entry: the action type and its handler, imported."""

    action_type: type
    handler: Callable[..., Any]


def parse_systems(checker: Checker, raw: Any) -> tuple[SystemSpec, ...]:
    """Every ``[[systems]]`` entry that checks."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        checker.problem(("systems",), "must be an array of tables: write [[systems]]")
        return ()
    found = []
    for index, item in enumerate(raw):
        path: Path = ("systems", index)
        table = checker.table(path, item)
        if table is None:
            continue
        values = checker.fields(path, table, SYSTEM_FIELDS)
        if "fn" not in table:
            checker.problem(path, "a system needs `fn`, a 'module:function'")
            continue
        after, before = values["after"], values["before"]
        if after is not None and before is not None:
            gap_after, gap_before = STAGES.index(after) + 1, STAGES.index(before)
            if gap_after != gap_before:
                checker.problem(
                    (*path, "before"), f"after = {after!r} and before = {before!r} differ"
                )
                continue
        fn = None if values["fn"] is None else checker.target((*path, "fn"), values["fn"], "system")
        if fn is not None:
            found.append(SystemSpec(fn, after, before, values["name"]))
    return tuple(found)


def parse_actions(checker: Checker, raw: Any) -> tuple[ActionSpec, ...]:
    """Every ``[actions]`` entry that checks."""
    if raw is None:
        return ()
    table = checker.table(("actions",), raw)
    if table is None:
        return ()
    found = []
    for key, value in table.items():
        path: Path = ("actions", key)
        if not checker.check(path, value, text):
            continue
        handler = checker.target(path, value, "handler")
        if handler is None:
            continue
        type_name = key if ":" in key else f"{value.partition(':')[0]}:{key}"
        cls = _import_class(checker, path, type_name, "action type")
        if cls is not None:
            found.append(ActionSpec(cls, handler))
    return tuple(found)


def parse_components(checker: Checker, path: Path, raw: Any) -> tuple[Any, ...] | None:
    """An agent's ``components``: made once here, copied for every agent spawned."""
    if not isinstance(raw, list):
        checker.problem(path, f"must be an array of tables, got {type(raw).__name__}")
        return None
    made: list[Any] = []
    seen: set[type] = set()
    for index, item in enumerate(raw):
        where: Path = (*path, index)
        table = checker.table(where, item)
        if table is None:
            return None
        name = table.get("type")
        if not isinstance(name, str):
            checker.problem(where, "a component needs `type`, a 'module:Class'")
            return None
        cls = _import_class(checker, (*where, "type"), name, "component type")
        if cls is None:
            return None
        if cls in seen:
            checker.problem((*where, "type"), f"a second {cls.__name__} component")
            return None
        seen.add(cls)
        values = {k: v for k, v in table.items() if k != "type"}
        comp = _make(checker, where, cls, values)
        if comp is None:
            return None
        made.append(comp)
    return tuple(made)


def _make(checker: Checker, where: Path, cls: type, values: Mapping[str, Any]) -> Any:
    known = field_names(cls)
    for key in values:
        if key not in known:
            checker.problem(
                (*where, key),
                f"{cls.__name__} has no field {key!r}{suggest(key, known)}"
                f" (fields: {', '.join(known) or 'none'})",
            )
            return None
    if not is_json(dict(values)):
        checker.problem(where, "component fields must be strings, numbers, booleans or arrays")
        return None
    try:
        return cls(**values)
    except Exception as exc:  # the class's own check of its fields
        checker.problem(where, f"cannot make {cls.__name__}: {type(exc).__name__}: {exc}")
        return None


def _import_class(checker: Checker, path: Path, name: str, what: str) -> type | None:
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not all(_TYPE_NAME.match(p) for p in attr.split(".")):
        checker.problem(path, f"must name a {what} as 'module:Class', got {name!r}")
        return None
    found = checker.target(path, name, what)
    if found is None:
        return None
    if not inspect.isclass(found) or not dataclasses.is_dataclass(found) or is_builtin(found):
        checker.problem(path, f"{name!r} is not a dataclass of your own, got {found!r}")
        return None
    return found


def install_host(
    world: World, systems: tuple[SystemSpec, ...], actions: tuple[ActionSpec, ...]
) -> None:
    """Add a scenario's host systems and actions to ``world`` (a live run or its replay).

    Raises:
        ConfigError: the world refuses one (the scenario checks catch these first).
    """
    for spec in actions:
        world.add_action(spec.action_type, spec.handler)
    for system in systems:
        world.add_system(system.fn, after=system.after, before=system.before, name=system.name)
