"""The world's API for host ECS code: entities, systems, actions, component types, queries.

`HostAPI` is mixed into `World` (as `RunLoop` is), so ``world.py`` stays the agent API and
this module the host's. The bookkeeping behind it is `runtime.world.host.HostECS`.
"""

from __future__ import annotations

import copy
import re
import threading
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any

import esper

from runtime.errors import ConfigError
from runtime.lane.values import shown
from runtime.world.context import SystemContext
from runtime.world.host import HostECS, HostSystem
from runtime.world.host_data import check_components, field_names, is_builtin, type_name
from runtime.world.inputs import AddEntity, Inbox
from runtime.world.state import WorldState
from runtime.world.values import NotJSON, json_value

__all__ = ["STAGE_NAMES", "HostAPI", "stage_name"]

STAGE_NAMES = {
    "ApplyInputs": "apply_inputs",
    "AbortTerminalWork": "abort_terminal",
    "HandleInterrupts": "handle_interrupts",
    "ExpirePrompts": "expire_prompts",
    "CollectOutcomes": "collect_outcomes",
    "StepBehaviors": "step_behaviors",
    "DispatchWork": "dispatch_work",
    "ReflectInteractionStatus": "reflect_status",
    "MirrorLaneStats": "mirror_lane_stats",
}
"""The names ``add_system(after=..., before=...)`` takes for the built-in systems."""


def stage_name(system: object) -> str:
    """The stage name of a built-in system (snake case of its class for one not listed)."""
    cls = type(system).__name__
    return STAGE_NAMES.get(cls) or re.sub(r"(?<!^)(?=[A-Z])", "_", cls).lower()


def builtin_priority(index: int, count: int) -> int:
    """The esper priority of built-in stage ``index`` of ``count``: even numbers, so each
    gap between two stages has an odd one for host systems (see ``gap_priority``)."""
    return 2 * (count - 1 - index)


def gap_priority(gap: int, count: int) -> int:
    """The esper priority of host systems at ``gap`` (0: before the first stage). esper
    sorts processors stably, so systems of one priority run in the order added."""
    return 2 * (count - gap) - 1


class HostAPI:
    """Host ECS methods of a `World` (mixed into it); see the module docstring."""

    _state: WorldState
    _host: HostECS
    _inbox: Inbox
    _ids_lock: threading.Lock
    _lock: threading.RLock
    _journal: Any
    _stages: list[str]
    _next_host_id: int  # the id `add_entity` mints next (under `_ids_lock`)
    _reconfigured: int  # see `TickMachine._reconfigured`

    # Provided by `World`.
    def _check_open(self) -> None:
        raise NotImplementedError

    def _ticking(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    def _host_components(self, arg: str, components: Iterable[object]) -> tuple[Any, ...]:
        if components.__class__ is tuple and not components:
            return ()  # `spawn`'s default: nothing to check or copy (~1.2 us a spawn)
        comps = check_components(arg, components)
        host = self._host
        # The class each type name stands for (`module:qualname`), this call's included.
        named: dict[str, type] = {}
        for index, comp in enumerate(comps):
            cls = type(comp)
            type_key = type_name(cls)
            known = named.setdefault(type_key, host.types.get(type_key, cls))
            if self._journal is not None:
                if known is not cls:
                    raise ConfigError(_same_name(f"`{arg}[{index}]`", cls))
                values = {field: getattr(comp, field) for field in field_names(cls)}
                try:
                    json_value(values)
                    why = _changed_by_json(values, "value")
                except NotJSON as exc:
                    why = str(exc)
                if why is not None:
                    # The reason names the field and the value (shortened), never the whole
                    # repr: the repr of a 5,000-digit int raises.
                    raise ConfigError(
                        f"`{arg}[{index}]` ({type(comp).__name__}) must have JSON fields when"
                        f" the world records a journal: {why}"
                    )
        # Copies: the host keeps its objects, the world its own (no sharing across threads).
        copies = []
        for index, comp in enumerate(comps):
            try:
                copies.append(copy.deepcopy(comp))
            except Exception as exc:  # a lock, a socket, a generator in a field
                raise ConfigError(
                    f"`{arg}[{index}]` ({type(comp).__name__}) cannot be copied into the"
                    f" world: {type(exc).__name__}: {exc}"
                ) from None
        types = host.types
        for type_key, cls in named.items():  # known once every check passed: a refused
            types.setdefault(type_key, cls)  # call leaves nothing (`HostECS.register_type`)
        return tuple(copies)

    def add_entity(self, *components: Any) -> int:
        """Add a host entity with ``components`` (dataclass instances); returns its id.

        Thread-safe: the id is minted now, the entity exists from the next tick.

        Raises:
            ConfigError: a component is not a dataclass instance, is built-in, repeats a
                type, or, while a journal records the world, has non-JSON fields or is of a
                class named as another the world knows (``module:qualname``).
            WorldClosedError: the world is closed.
        """
        self._check_open()
        comps = self._host_components("components", components)
        with self._ids_lock:  # so that input order follows id order
            entity = self._next_host_id
            self._next_host_id = entity + 1
            self._inbox.put(AddEntity(entity, comps))
        return entity

    def _host_id_taken(self, entity: int) -> None:
        """A replay applies ``AddEntity(entity)``: ``add_entity`` mints past it from now on.

        Host code outside the ticks (which a replay does not run again) minted that id in
        the recorded run; a resumed world must not mint it a second time.
        """
        with self._ids_lock:
            if entity >= self._next_host_id:
                self._next_host_id = entity + 1

    def add_system(
        self,
        fn: Callable[[SystemContext], object],
        *,
        after: str | None = None,
        before: str | None = None,
        name: str | None = None,
        run_if: Callable[[SystemContext], object] | None = None,
    ) -> None:
        """Run ``fn(ctx)`` on the tick thread every tick, next to a built-in stage.

        ``after``/``before`` name a stage (``apply_inputs``, ..., ``step_behaviors``, ...,
        ``mirror_lane_stats``); with neither it runs right after ``step_behaviors``.
        Systems at one place run in the order added. Add systems before the world runs, or
        between ticks: a replay must add the same ones (``replay(path, setup=fn)``). One
        added by host code during a tick's pipeline (a system, an action handler) runs
        from the next tick on.

        ``run_if(ctx)``, when given, is asked in each tick where the system's turn comes,
        and ``fn`` runs only if it is true: a system with nothing to do then costs nothing,
        and a virtual-time run skips the ticks where every system has nothing to do as
        it does without host systems. It must be a pure function of what ``ctx`` shows
        (the world's state, time and tick) and the host's own state; it is asked at most
        once a tick, and one that raises counts as the system failing.

        Raises:
            ConfigError: ``fn`` or ``run_if`` is not callable, a stage name is unknown, or
                ``after`` and ``before`` name different places.
        """
        if not callable(fn):
            raise ConfigError(f"`fn` must be callable, got {fn!r}")
        if run_if is not None and not callable(run_if):
            raise ConfigError(f"`run_if` must be callable or None, got {run_if!r}")
        host = self._host
        gap = host.gap(self._stages, after, before)
        name = name or str(getattr(fn, "__name__", repr(fn)))
        system = HostSystem(host, fn, name, run_if)
        priority = gap_priority(gap, len(self._stages))
        with self._ticking():
            if host.processing:  # from host code inside the pipeline: from the next tick
                host.deferred.append((gap, system, priority))
                return
            host.systems.append((gap, system))
            esper.add_processor(system, priority)
            self._reconfigured += 1  # a skip under way stops: it runs from the next tick

    def add_action(
        self, action_type: type, handler: Callable[[SystemContext, str, Any], object]
    ) -> None:
        """Let behaviours yield ``action_type`` objects, resolved by ``handler``.

        ``handler(ctx, agent_id, action)`` runs on the tick thread after the tick's steps;
        what it returns is sent into the behaviour at its next step, unless it returns
        ``PENDING``: then the behaviour waits until a system calls
        ``ctx.complete(agent_id, value)`` (an interrupt or cancel abandons the wait). A
        handler that raises fails only that agent.

        Raises:
            ConfigError: ``action_type`` is not a class, is a built-in action (the
                resources' ``Acquire``, ``Release`` and ``Use`` too), or already has a
                handler; ``handler`` is not callable.
        """
        from runtime.world.actions import RESERVED_ACTIONS

        if not isinstance(action_type, type):
            raise ConfigError(f"`action_type` must be a class, got {action_type!r}")
        reserved = RESERVED_ACTIONS.get(action_type)
        if reserved is not None:
            raise ConfigError(f"`action_type` {action_type.__name__} is {reserved}")
        self._set_action(action_type, handler)

    def _set_action(
        self, action_type: type, handler: Callable[[SystemContext, str, Any], object]
    ) -> None:
        """`add_action` without its checks of the type (a format-1 world's resources)."""
        if not callable(handler):
            raise ConfigError(f"`handler` must be callable, got {handler!r}")
        with self._ticking():
            actions = self._state.host_actions
            if action_type in actions and actions[action_type] is not handler:
                raise ConfigError(f"action {action_type.__name__} already has a handler")
            actions[action_type] = handler

    def register_component(self, *types: type) -> None:
        """Know these component types by name, so a journal's components of them decode
        (types that import by ``module:qualname`` need no registering).

        Raises:
            ConfigError: one is not a class, or another class of its name is known here.
        """
        for cls in types:
            if not isinstance(cls, type):
                raise ConfigError(f"`types` must be classes, got {cls!r}")
            if self._host.register_type(cls) is not cls:
                raise ConfigError(_same_name("`types`", cls))

    def query(self, *types: type) -> list[tuple[int, tuple[Any, ...]]]:
        """Entities with host components having every one of ``types``, ordered by id, as
        ``(entity, (components...))`` copies: the world as it was after the last tick.

        Raises:
            ConfigError: no types, or one is not a class or is one of the world's own
                components (``Status``, ``Agent``...: read agents with ``world.status``,
                ``world.agents``; a query of them found only agents with host components).
        """
        if not types:
            raise ConfigError("`types` must name at least one component type")
        for cls in types:
            if not isinstance(cls, type):
                raise ConfigError(f"`types` must be classes, got {shown(cls)}")
            if is_builtin(cls):
                raise ConfigError(
                    f"`types`: {cls.__name__} is one of the world's own components, which"
                    " `query` does not read: use world.status(agent) or world.agents()"
                )
        with self._lock:
            return self._host.query_copies(types)


def _same_name(where: str, cls: type) -> str:
    """Why ``cls`` cannot be recorded: another class of this world has its name."""
    return (
        f"{where} is a class named {type_name(cls)!r}, and so is another this world"
        " knows: a journal names a component type by `module:qualname`, so it could not"
        " tell them apart (a class made by a factory, or a module reloaded?)"
    )


def _changed_by_json(value: Any, where: str) -> str | None:
    """Where ``value`` (JSON already) would not come back from a journal as it is, or None.

    A replay rebuilds a host component from the journal's JSON: a tuple came back a list
    (a system's ``items + ("x",)`` then raised in the replay only) and a string or int
    enum its plain value (``mood is Mood.CALM`` false in the replay only).
    """
    kind = value.__class__
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return None
    if kind is list:
        for index, item in enumerate(value):
            why = _changed_by_json(item, f"{where}[{index}]")
            if why is not None:
                return why
        return None
    if kind is dict:
        for key, item in value.items():
            if key.__class__ is not str:
                kind_name = type(key).__name__
                return f"{where}: the key {shown(key)} is a {kind_name}, which comes back a str"
            why = _changed_by_json(item, f"{where}[{key!r}]")
            if why is not None:
                return why
        return None
    if kind is tuple:
        return f"{where} is a tuple, which a journal gives back as a list: use a list"
    plain = next(t for t in (bool, int, float, str) if isinstance(value, t))
    return (
        f"{where} is a {kind.__name__} ({shown(value)}), which a journal gives back as a"
        f" plain {plain.__name__}: store its value"
    )
