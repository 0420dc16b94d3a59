"""SystemContext: how a host system or action handler reads and changes the world.

Host code runs on the tick thread, so it may read esper directly; it changes the world
only through its context, which is how the digest, the journal and the fixed-point test
learn of a change. Field changes apply at once. Structural changes (a component of a new
type on an entity, a component removed, an entity created or deleted, a component object
replaced by another) are batched and applied once when the system returns: esper clears
its whole query cache on every structural change and rebuilds it at the next query
(~1M entity-iterations/s instead of ~20M), so a system that adds a hundred components
costs one rebuild, not a hundred. Until then ``get`` sees what was set, ``query`` sees the
world as the system found it.
"""

from __future__ import annotations

import random
from operator import itemgetter
from typing import Any, Final, Protocol, TypeVar, overload

import esper

from components import Agent
from components._members import AWAITING_ACTION
from runtime.errors import ConfigError, UnknownAgentError
from runtime.lane.values import shown
from runtime.world.host_data import check_components, is_builtin, mint_entity
from runtime.world.state import AgentRecord, WorldState

__all__ = ["PENDING", "SystemContext"]

C = TypeVar("C")
C2 = TypeVar("C2")
C3 = TypeVar("C3")
C4 = TypeVar("C4")

_by_entity = itemgetter(0)


class Host(Protocol):
    """What a context needs of the world's host bookkeeping (`runtime.world.host.HostECS`)."""

    state: WorldState
    entities: dict[int, dict[type, Any]]
    dirty: dict[int, None]
    sorted_queries: dict[tuple[type, ...], tuple[list[Any], list[Any]]]
    writable: dict[tuple[type, ...], bool]
    seen: dict[int, None]

    def system_rng(self) -> random.Random: ...
    def saw(self, found: list[Any]) -> None: ...
    def touch(self, entity: int) -> None: ...
    def attach(self, entity: int, comps: dict[type, Any], rec: AgentRecord | None) -> None: ...
    def add_created(self, entity: int, components: tuple[Any, ...]) -> None: ...
    def record_of(self, entity: int) -> AgentRecord | None: ...


class _Pending:
    __slots__ = ()

    def __repr__(self) -> str:
        return "PENDING"


PENDING: Final[Any] = _Pending()
"""What an action handler returns when the action completes later, by ``ctx.complete``."""

# Batched structural operations, applied in the order they were asked for.
_ADD, _REMOVE, _CREATE, _DELETE = range(4)


class SystemContext:
    """What a host system (``fn(ctx)``) or action handler (``fn(ctx, agent_id, action)``)
    is given: the tick's time, a seeded stream, queries, and tracked changes.

    ``query`` results are ordered by entity id and hand out the live components: change a
    field in place and ``set`` the same object to have it tracked, or ``set`` a new object.
    Never mutate the lists ``query`` returns.
    """

    __slots__ = ("_active", "_host", "_last", "_ops", "_pending", "_state", "name")

    def __init__(self, host: Host, name: str) -> None:
        self._host = host
        self._state: WorldState = host.state
        self.name = name
        self._last: int | None = None  # the entity last touched (to blame on a raise)
        self._ops: list[tuple[int, int, Any]] = []
        self._pending: dict[int, dict[type, Any]] = {}  # set but not yet applied
        self._active = False

    @property
    def now(self) -> float:
        """The world's time at this tick."""
        return self._state.now

    @property
    def tick(self) -> int:
        """The number of this tick."""
        return self._state.tick

    @property
    def rng(self) -> random.Random:
        """The world's random stream for systems (seeded: same seed, same draws)."""
        return self._host.system_rng()

    @overload
    def query(self, c1: type[C], /) -> list[tuple[int, tuple[C]]]: ...
    @overload
    def query(self, c1: type[C], c2: type[C2], /) -> list[tuple[int, tuple[C, C2]]]: ...
    @overload
    def query(
        self, c1: type[C], c2: type[C2], c3: type[C3], /
    ) -> list[tuple[int, tuple[C, C2, C3]]]: ...
    @overload
    def query(
        self, c1: type[C], c2: type[C2], c3: type[C3], c4: type[C4], /
    ) -> list[tuple[int, tuple[C, C2, C3, C4]]]: ...
    @overload
    def query(self, *types: type[Any]) -> list[tuple[int, tuple[Any, ...]]]: ...
    def query(self, *types: type[Any]) -> list[tuple[int, tuple[Any, ...]]]:
        """Every entity having all of ``types``, as ``(entity, (components...))``, by id."""
        found = esper.get_components(*types)
        host = self._host
        cache = host.sorted_queries
        hit = cache.get(types)
        if hit is not None and hit[0] is found:
            ordered = hit[1]  # esper's cached list is unchanged, so is its order
        else:  # a query first seen, or the world changed shape since
            if not types or not all(isinstance(t, type) for t in types):
                raise ConfigError(f"`types` must be one or more classes, got {shown(types)}")
            ordered = sorted(found, key=_by_entity)
            cache[types] = (found, ordered)
            host.writable[types] = not all(is_builtin(t) for t in types)
        if host.writable[types]:
            host.saw(ordered)  # live host components: the digest looks at them again
        return ordered

    def get(self, entity: int, component_type: type[C]) -> C:
        """The component of ``entity`` of that type (what was ``set``, if not yet applied).

        Raises:
            KeyError: the entity does not exist or has no such component.
        """
        found = self.try_get(entity, component_type)
        if found is None:
            if not isinstance(component_type, type):
                raise ConfigError(f"`component_type` must be a class, got {component_type!r}")
            raise KeyError(f"entity {entity} has no {component_type.__name__} component")
        return found

    def try_get(self, entity: int, component_type: type[C]) -> C | None:
        """The component of ``entity`` of that type, or None."""
        self._last = entity
        if self._pending:
            pending = self._pending.get(entity)
            if pending is not None and component_type in pending:
                return pending[component_type]  # type: ignore[no-any-return]
        comps = esper._entities.get(entity)
        if comps is None:
            return None
        found = comps.get(component_type)
        if found is not None and comps is self._host.entities.get(entity):
            self._host.seen[entity] = None  # a live host component: may change in place
        return found

    def set(self, entity: int, *components: Any) -> None:
        """Put ``components`` on ``entity``: tracked, for the digest and the journal.

        Setting the object the entity already holds (changed in place) marks it changed;
        any other object is applied when the system returns.

        Raises:
            KeyError: the entity does not exist.
            ConfigError: a component is not a dataclass instance or is a built-in one.
        """
        self._last = entity
        comps = esper._entities.get(entity)
        if comps is None:
            if entity not in self._pending:
                raise KeyError(f"entity {entity} does not exist")
        elif len(components) == 1 and comps.get(components[0].__class__) is components[0]:
            # The common case, one component changed in place: only the marks below.
            self._host.touch(entity)
            self._state.changed_this_tick += 1
            return
        if len({comp.__class__ for comp in components}) != len(components):
            raise ConfigError(f"`components`: two of one type for entity {entity}")
        for comp in components:
            if comps is not None and comps.get(comp.__class__) is comp:
                continue  # changed in place: only the mark below
            check_components("components", (comp,))
            self._ops.append((_ADD, entity, comp))
            self._pending.setdefault(entity, {})[comp.__class__] = comp
        if comps is not None:
            self._host.touch(entity)
        self._state.changed_this_tick += 1

    def remove(self, entity: int, component_type: type[Any]) -> None:
        """Take the component of that type off ``entity`` (when the system returns).

        Raises:
            KeyError: the entity has no such component.
            ConfigError: ``component_type`` is a built-in component.
        """
        self._last = entity
        if not isinstance(component_type, type):
            raise ConfigError(f"`component_type` must be a class, got {component_type!r}")
        if is_builtin(component_type):
            raise_builtin(component_type)
        if self.try_get(entity, component_type) is None:
            raise KeyError(f"entity {entity} has no {component_type.__name__} component")
        self._ops.append((_REMOVE, entity, component_type))
        pending = self._pending.get(entity)
        if pending is not None:
            pending.pop(component_type, None)

    def create(self, *components: Any) -> int:
        """A new entity with ``components``; its id now, the entity when the system returns."""
        comps = check_components("components", components)
        entity = mint_entity()
        self._ops.append((_CREATE, entity, comps))
        self._pending[entity] = {type(c): c for c in comps}
        self._last = entity
        self._state.changed_this_tick += 1
        return entity

    def delete(self, entity: int) -> None:
        """Delete a host entity (when the system returns).

        Raises:
            KeyError: the entity does not exist.
            ConfigError: it is an agent's entity (cancel the agent instead).
        """
        from runtime.errors import ConfigError

        self._last = entity
        comps = esper._entities.get(entity)
        if comps is None and entity not in self._pending:
            raise KeyError(f"entity {entity} does not exist")
        if comps is not None and Agent in comps:
            raise ConfigError(f"entity {entity} is agent {comps[Agent].id!r}: cancel it instead")
        self._ops.append((_DELETE, entity, None))
        self._state.changed_this_tick += 1

    def entity(self, agent_id: str) -> int:
        """The entity of agent ``agent_id``.

        Raises:
            UnknownAgentError: no agent has that id (yet).
        """
        rec = self._state.records.get(agent_id)
        if rec is None:
            raise UnknownAgentError(f"unknown agent {agent_id!r}")
        self._last = rec.entity
        return rec.entity

    def agent_id(self, entity: int) -> str | None:
        """The id of the agent whose entity ``entity`` is, or None."""
        comps = esper._entities.get(entity)
        agent = None if comps is None else comps.get(Agent)
        return None if agent is None else agent.id

    def send(self, agent_id: str, message: Any) -> None:
        """Give an agent its next message now (a turn starts, or it queues behind one).

        Applied on the tick thread at once, not through the inbox: a replay runs the
        system again, so the message is not a journaled input.

        Raises:
            UnknownAgentError: no agent has that id.
        """
        from systems.lifecycle import queue_message

        rec = self._state.records.get(agent_id)
        if rec is None:
            raise UnknownAgentError(f"unknown agent {agent_id!r}")
        self._last = rec.entity
        if not rec.status.kind.is_terminal:
            queue_message(self._state, rec, message)

    def complete(self, agent_id: str, value: Any) -> bool:
        """Finish the agent's PENDING host action with ``value`` (sent in at its next step).

        Returns False, changing nothing, if the agent awaits no host action (it never did,
        it was completed already, or an interrupt or cancel abandoned it).
        """
        rec = self._state.records.get(agent_id)
        if rec is None or rec.turn.phase is not AWAITING_ACTION:
            return False
        self._last = rec.entity
        resume = _resume_with or _load_resume_with()
        resume(self._state, rec, value)
        return True

    def _begin(self) -> None:
        self._active = True
        self._last = None

    def _flush(self) -> None:
        """Apply the batched structural changes, in order (one cache rebuild follows)."""
        self._active = False
        ops = self._ops
        if not ops:
            return
        self._ops, self._pending = [], {}
        host = self._host
        store = esper._entities
        replaced = False
        for op, entity, arg in ops:
            comps = store.get(entity)
            if op == _CREATE:
                host.add_created(entity, arg)
                continue
            if comps is None:
                continue  # deleted earlier in this batch
            if op == _ADD:
                cls = arg.__class__
                if cls in comps:
                    comps[cls] = arg  # same shape: no esper structural change
                    replaced = True
                else:
                    esper.add_component(entity, arg)
                if entity not in host.entities:
                    host.attach(entity, comps, host.record_of(entity))
                host.touch(entity)
            elif op == _REMOVE:
                esper.try_remove_component(entity, arg)
                host.touch(entity)
            else:
                esper.delete_entity(entity, immediate=True)
                host.entities.pop(entity, None)
                host.dirty[entity] = None
        if replaced:
            esper.clear_cache()  # cached query tuples hold the replaced objects


_resume_with: Any = None  # systems.lifecycle.resume_with, at first use (it imports this room)


def _load_resume_with() -> Any:
    global _resume_with  # a lazy import, bound once
    from systems.lifecycle import resume_with

    _resume_with = resume_with
    return resume_with


def raise_builtin(component_type: type[Any]) -> None:
    """Refuse a change to one of tickwork's own components."""
    from runtime.errors import ConfigError

    raise ConfigError(f"{component_type.__name__} is a built-in component; the world owns it")
