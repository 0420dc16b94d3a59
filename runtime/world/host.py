"""The host's side of the ECS: its components, entities, systems and actions in a world.

A host puts its own dataclasses on agents and on entities of its own, runs systems (plain
functions of a `SystemContext`) at named places in the pipeline, and resolves actions of
its own that behaviours yield. `HostECS` is the tick thread's bookkeeping for all of it:
which entities carry host components (for the digest and ``world.query``), the digests of
host entities, the registered action handlers and component types, and the errors host code
raised this tick.

Host components are state: an agent's are part of its digest fields (``Position.x``), a host
entity's make a digest of their own, reported as ``entity <id>``. Host code is code: a
replay registers it again through ``replay(path, setup=fn)``.

Two id spaces keep entity ids deterministic. Ids made on the tick thread (agents, and
``ctx.create``) come from esper's own counter, in tick order; ``add_entity`` mints its id at
the call, on the host's thread, from a counter of its own that starts at `HOST_IDS_START`,
in call order. Each is reproducible on its own, and they never meet.
"""

from __future__ import annotations

import copy
import inspect
import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import is_dataclass
from typing import Any

import esper

from components import Agent, Phase, StatusKind
from runtime.errors import ConfigError
from runtime.world import sigint
from runtime.world.behaviors import import_by_name
from runtime.world.context import PENDING, SystemContext
from runtime.world.digest import agent_digest, canonical, combine, text_digest
from runtime.world.host_data import (
    build_component,
    copy_component,
    create_entity_as,
    entity_table,
    flatten,
    is_builtin,
    type_name,
)
from runtime.world.inputs import ComponentData
from runtime.world.state import AgentRecord, WorldState

__all__ = ["HOST_IDS_START", "HostECS", "HostSystem"]

log = logging.getLogger("tickwork.host")

MAX_SEEN = 256
"""Query results remembered between digests before every host entity counts as seen."""

HOST_IDS_START = 1 << 32
"""The first id ``World.add_entity`` mints (ids made on the tick thread stay below it)."""

ActionHandler = Callable[[SystemContext, str, Any], object]


class HostSystem(esper.Processor):
    """One host system in the pipeline: calls ``fn(ctx)``, then applies its batched
    structural changes, and contains whatever ``fn`` raises (see `HostECS.system_failed`).

    With ``run_if``, ``fn`` runs only in the ticks where ``run_if(ctx)`` is true (Bevy's
    run conditions). The condition is asked at most once a tick: `idle` (the skip-ahead
    path's question, asked where the system's turn would come) keeps its answer for the
    tick's `process`. A condition that raises counts as the system failing.
    """

    def __init__(
        self,
        host: HostECS,
        fn: Callable[[SystemContext], object],
        name: str,
        run_if: Callable[[SystemContext], object] | None = None,
    ) -> None:
        self.fn = fn
        self.name = name
        self.host = host
        self.run_if = run_if
        self.ctx = SystemContext(host, name)
        self.failures = 0
        self._asked = -1  # the tick whose answer `_answer` is
        self._answer: bool | BaseException = True

    def process(self, state: WorldState) -> None:
        ctx = self.ctx
        ctx._active = True  # `_begin`, inlined: every tick the system is in
        ctx._last = None
        try:
            if self.run_if is not None:
                answer = self._answer if self._asked == state.tick else self._ask(state)
                if answer is not True:
                    if answer is not False:  # the condition raised
                        self.host.system_failed(self, answer)
                    return
            self.fn(ctx)
        except BaseException as exc:  # rule: host code never kills the tick thread
            # A KeyboardInterrupt too, as a behaviour's or a timer's: raised again once the
            # tick is over (`runtime.world.sigint`), not in its middle, which left the
            # inputs applied and the tick never journaled (a gap no replay gets past).
            if isinstance(exc, KeyboardInterrupt):
                sigint.note_keyboard_interrupt()
            self.host.system_failed(self, exc)
        finally:
            ctx._flush()

    def idle(self, state: WorldState) -> bool:
        """Whether ``fn`` will not run in this tick (``run_if`` says so); a system without
        a condition runs every tick. Ask it only at the point of the tick where the system
        would run: the answer holds for the rest of the tick."""
        run_if = self.run_if
        if run_if is None:
            return False
        ctx = self.ctx
        ctx._active = True  # `_begin`, inlined; and `_ask`, below: asked on quiet ticks
        ctx._last = None
        try:
            answer: bool | BaseException = bool(run_if(ctx))
        except BaseException as exc:  # a failure of the system, reported by `process`
            if isinstance(exc, KeyboardInterrupt):
                sigint.note_keyboard_interrupt()
            answer = exc
        finally:
            if ctx._ops:
                ctx._flush()  # a condition that changed something: applied, as after `fn`
            else:
                ctx._active = False
        self._asked, self._answer = state.tick, answer
        return answer is False

    def _ask(self, state: WorldState) -> bool | BaseException:
        assert self.run_if is not None
        try:
            answer: bool | BaseException = bool(self.run_if(self.ctx))
        except BaseException as exc:  # a failure of the system, reported by `process`
            if isinstance(exc, KeyboardInterrupt):
                sigint.note_keyboard_interrupt()
            answer = exc
        self._asked, self._answer = state.tick, answer
        return answer


class HostECS:
    """The host ECS bookkeeping of one world (tick thread, or under the world's lock)."""

    def __init__(self, state: WorldState) -> None:
        self.state = state
        # Every entity that carries host components (agents too) -> its esper dict.
        self.entities: dict[int, dict[type, Any]] = {}
        self.agent_of: dict[int, AgentRecord] = {}  # agent entities among `entities`
        self.dirty: dict[int, None] = {}  # host entities changed since the last digest
        self.digests: dict[int, int] = {}
        self.types: dict[str, type] = {}  # component types known by name (for decoding)
        self.actions: dict[type, ActionHandler] = state.host_actions
        self.systems: list[tuple[int, HostSystem]] = []  # (gap, system), in order added
        # While `esper.process` walks the pipeline (`TickMachine._tick_body`): systems
        # added then wait in `deferred` (gap, system, priority) for the walk to end, for
        # esper's add re-sorts the very list it walks (a system adding one ran for ever).
        self.processing = False
        self.deferred: list[tuple[int, HostSystem, int]] = []
        self.errors: list[str] = []  # what host code raised this tick
        self.sorted_queries: dict[tuple[type, ...], tuple[list[Any], list[Any]]] = {}
        # What host code was handed live host components of since the last digest: it may
        # have changed them in place, so the digest looks at them again (and reports only
        # those whose fields did change). Query results by identity (one store per query,
        # not per entity), entities read with `get`; past `MAX_SEEN` lists, everything.
        self.writable: dict[tuple[type, ...], bool] = {}  # query types -> any host type
        self.seen_lists: dict[int, list[Any]] = {}
        self.seen: dict[int, None] = {}
        self.seen_all = False
        self.rng: random.Random | None = None
        self._action_ctx: SystemContext | None = None
        # The lifecycle's steps an action takes, looked up once (that room imports this
        # one, so not at import time).
        from systems.lifecycle import mint, resume_with

        self._mint: Callable[[AgentRecord, str], str] = mint
        self._resume_with: Callable[[WorldState, AgentRecord, Any], None] = resume_with

    def system_rng(self) -> random.Random:
        """The world's stream for systems, made on first use from the seed."""
        if self.rng is None:
            self.rng = random.Random(f"{self.state.seed}/systems")
        return self.rng

    def register_type(self, cls: type) -> type:
        """Know ``cls`` by name, so a journal's components of that type decode; returns the
        class known by that name (another, when one came first: a journal could not tell
        the two apart)."""
        return self.types.setdefault(type_name(cls), cls)

    def resolve(self, comp: Any) -> Any:
        """The component an input's ``comp`` stands for (a journal's `ComponentData`, or a
        copy of a live one).

        Raises:
            ConfigError: the type is neither registered nor importable as a dataclass.
        """
        if type(comp) is not ComponentData:
            # A copy: the input keeps the value it was given, which the journal encodes
            # after the tick (when systems may have changed the entity's own).
            return copy.deepcopy(comp)
        return build_component(self.find_type(comp.type_name), comp.fields)

    def find_type(self, name: str) -> type:
        """The component type called ``name`` (``module:qualname``).

        Raises:
            ConfigError: it is neither registered here nor importable as a dataclass type.
        """
        cls = self.types.get(name)
        if cls is None:
            cls = _import_type(name)
            if cls is None:
                raise ConfigError(
                    f"component type {name!r} cannot be found: import it by name or register"
                    " it in the replay's setup (world.register_component)"
                )
            self.types[name] = cls
        return cls

    def attach(self, entity: int, comps: dict[type, Any], rec: AgentRecord | None) -> None:
        """Note that ``entity`` carries host components (``rec``: its agent, if any)."""
        self.entities[entity] = comps
        if rec is not None:
            rec.components = comps
            self.agent_of[entity] = rec
            self.state.touch(rec)
        else:
            self.dirty[entity] = None

    def add_entity(self, entity: int, components: Iterable[Any]) -> None:
        """Create a host entity under ``entity`` (an ``AddEntity`` input)."""
        comps = create_entity_as(entity, [self.resolve(c) for c in components])
        self.attach(entity, comps, None)
        self.state.changed_this_tick += 1

    def add_created(self, entity: int, components: tuple[Any, ...]) -> None:
        """Create an entity a host system made with ``ctx.create`` (minted already)."""
        comps = create_entity_as(entity, components)
        if components:
            self.attach(entity, comps, None)

    def release_agent(self, entity: int) -> None:
        """Forget a released agent's entity (its components went with its record)."""
        self.entities.pop(entity, None)
        self.agent_of.pop(entity, None)
        self.seen.pop(entity, None)

    def touch(self, entity: int) -> None:
        """Note a change of ``entity``'s host components (for the digest)."""
        rec = self.agent_of.get(entity)
        if rec is not None:
            self.state.touch(rec)
        else:
            self.dirty[entity] = None

    def record_of(self, entity: int) -> AgentRecord | None:
        """The agent whose entity ``entity`` is, or None."""
        comps = entity_table().get(entity)
        agent = None if comps is None else comps.get(Agent)
        return None if agent is None else self.state.records.get(agent.id)

    def saw(self, found: list[Any]) -> None:
        """Host code was handed the components of a query result (live objects)."""
        if len(self.seen_lists) >= MAX_SEEN:
            self.seen_all = True
            self.seen_lists.clear()
        elif not self.seen_all:
            self.seen_lists[id(found)] = found

    def mark_seen(self) -> None:
        """Before a digest: everything host code may have changed in place is dirty."""
        if self.seen_all:
            candidates: Iterable[int] = list(self.entities)
        elif self.seen_lists or self.seen:
            candidates = [e for found in self.seen_lists.values() for e, _ in found]
            candidates.extend(self.seen)
        else:
            return
        self.seen_lists.clear()
        self.seen.clear()
        self.seen_all = False
        agent_of, entities, dirty = self.agent_of, self.entities, self.dirty
        state_dirty = self.state.dirty
        for entity in candidates:
            rec = agent_of.get(entity)
            if rec is not None:
                state_dirty[rec.ordinal] = rec
            elif entity in entities:
                dirty[entity] = None

    def fold(self, total: int, changed: list[tuple[str, str]] | None) -> int:
        """Fold the changed host entities into the world digest ``total``; each changed
        one's canonical fields go to ``changed`` (as the world's changed agents do)."""
        for entity in sorted(self.dirty):
            old = self.digests.pop(entity, 0)
            comps = self.entities.get(entity)
            if comps is None:
                new, text = 0, canonical({"entity": entity, "deleted": True})
            else:
                text = canonical({"entity": entity, **flatten(comps, self.state.journal_format)})
                new = self.digests[entity] = text_digest(text)
            if new == old:
                continue  # looked at again (seen by host code), but unchanged
            total = combine(total, old, new)
            if changed is not None:
                changed.append((f"entity {entity}", text))
        self.dirty.clear()
        return total

    def preview(self, total: int) -> int:
        """`fold` without keeping anything: ``total`` with the changed host entities folded
        in, their digests and the dirty set left for the tick's own fold."""
        for entity in sorted(self.dirty):
            old = self.digests.get(entity, 0)
            comps = self.entities.get(entity)
            new = (
                0
                if comps is None
                else agent_digest({"entity": entity, **flatten(comps, self.state.journal_format)})
            )
            total = combine(total, old, new)
        return total

    def entity_fields(self, entity: int) -> dict[str, Any] | None:
        """A host entity's digest fields now (None if it does not exist)."""
        comps = self.entities.get(entity)
        return (
            None
            if comps is None
            else {"entity": entity, **flatten(comps, self.state.journal_format)}
        )

    def query_copies(self, types: tuple[type, ...]) -> list[tuple[int, tuple[Any, ...]]]:
        """Entities with host components having every type of ``types``, by id, as copies."""
        out = []
        entities = self.entities
        first, rest = types[0], types[1:]
        for entity in sorted(entities):
            comps = entities[entity]
            if first not in comps:
                continue
            if not rest:
                out.append((entity, (copy_component(comps[first]),)))
            elif all(t in comps for t in rest):
                out.append((entity, tuple([copy_component(comps[t]) for t in types])))
        return out

    def take_errors(self) -> tuple[str, ...]:
        """This tick's host errors (and forget them)."""
        if not self.errors:
            return ()
        errors, self.errors = tuple(self.errors), []
        return errors

    def system_failed(self, system: HostSystem, exc: BaseException) -> None:
        """A host system raised: fail the agent it was handling, if it can tell; report it."""
        from systems.lifecycle import describe, finish

        what = f"host system {system.name!r} raised {describe(exc)}"
        entity = system.ctx._last
        rec = None if entity is None else self.record_of(entity)
        if rec is not None and not rec.status.kind.is_terminal:
            finish(self.state, rec, StatusKind.ERROR, what)
            what += f" (agent {rec.id} failed)"
        elif entity is not None:
            what += f" (handling entity {entity})"
        self.errors.append(what)
        system.failures += 1
        if system.failures == 1:  # once with the traceback; a system may raise every tick
            log.error("%s", what, exc_info=exc)

    def run_action(self, rec: AgentRecord, action: Any) -> None:
        """Resolve a host action of ``rec``'s behaviour with its handler."""
        ctx = self._action_ctx
        if ctx is None:
            ctx = self._action_ctx = SystemContext(self, "actions")
        if not ctx._active:
            ctx._active = True  # `_begin`, inlined (`_last` is set just below)
        handler = self.actions[action.__class__]
        ctx._last = rec.ordinal  # its entity (`rec.entity`, without the property)
        try:
            value = handler(ctx, rec.id, action)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # rule: a raising handler fails only its agent
            from systems.lifecycle import describe, finish

            what = f"{type(action).__name__}: {describe(exc)}"
            finish(self.state, rec, StatusKind.ERROR, what)
            return
        if value is PENDING:
            turn = rec.turn
            turn.phase = Phase.AWAITING_ACTION
            turn.inflight = self._mint(rec, "h")
            state = self.state
            state.dirty[rec.ordinal] = rec  # `touch`, inlined
            state.changed_this_tick += 1
        elif not rec.status.kind.is_terminal:
            self._resume_with(self.state, rec, value)

    def end_actions(self) -> None:
        """Apply the structural changes the tick's action handlers made (once)."""
        ctx = self._action_ctx
        if ctx is not None and ctx._active:
            ctx._flush()

    def gap(self, stages: list[str], after: str | None, before: str | None) -> int:
        """The position (0 = before the first stage) that ``after``/``before`` name.

        Raises:
            ConfigError: an unknown stage name, or ``after`` and ``before`` that disagree.
        """
        positions = []
        for arg, value, offset in (("after", after, 1), ("before", before, 0)):
            if value is None:
                continue
            if value not in stages:
                raise ConfigError(f"`{arg}` must be one of {', '.join(stages)}; got {value!r}")
            positions.append(stages.index(value) + offset)
        if not positions:
            return stages.index("step_behaviors") + 1
        if len(positions) == 2 and positions[0] != positions[1]:
            raise ConfigError(
                f"`after`={after!r} and `before`={before!r} name two different places"
            )
        return positions[0]


def _import_type(name: str) -> type | None:
    obj = import_by_name(name)
    return obj if inspect.isclass(obj) and is_dataclass(obj) and not is_builtin(obj) else None
