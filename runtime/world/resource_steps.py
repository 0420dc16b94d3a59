"""A resource's actions taken in the step (journal format 2): a ``Use``'s hold is a sleep.

`runtime.world.resource` first took ``Acquire``, ``Release`` and ``Use`` as host actions:
each went through dispatch (a handler, ``PENDING``, a minted id), and a ``Use`` ended at a
host timer, in a tick where every stage ran, with ``ctx.complete``. A visit cost two
whole ticks of machinery where SimPy pays two events. Here the step takes them where the
behaviour yields them, in step order:

- ``Use`` with a slot free takes it and parks the turn as a sleep until the hold's end
  (``SLEEPING``, the end as its ``deadline``, the claim as its ``pending``: a `Hold`). At
  that wake-up the step gives the slot back (the next waiter is granted it) before any
  agent of the tick steps, and sends the behaviour the time it waited, as any sleeper's
  wake-up would send None: so a run of visits stays in the skip's run of wake-ups.
- With every slot held, ``Use`` and ``Acquire`` queue (``AWAITING_ACTION``, with an id
  minted as a host action's, the claim as ``pending``); the grant turns a ``Use`` waiter's
  turn into the same sleep, and resumes an ``Acquire`` waiter with the time waited.
- ``Acquire`` with a slot free and ``Release`` resume the behaviour at its next step.
- A turn that ends holding or waiting (interrupt, cancel, failure) gives its place up
  through `Hold.cut`, called by the lifecycle as it clears the turn; the resources'
  system sweeps such claims in its next run, after the tick's interrupts and cancels (as
  format 1 did), and looks at ``Acquire`` holders, who may end a turn without ``Release``.

FIFO, in world time, on the tick thread: the same run grants in the same order and has the
same digest every time. Worlds replaying or resuming a format-1 journal keep the host
actions (``WorldState.journal_format``), so those journals replay as recorded.
"""

from __future__ import annotations

import sys
from numbers import Real
from typing import TYPE_CHECKING, Any

from components import StatusKind
from components._members import AWAITING_ACTION, DONE, SLEEPING
from runtime.errors import ConfigError
from runtime.lane.values import shown
from runtime.world.state import AgentRecord, WorldState

if TYPE_CHECKING:
    from runtime.world.context import SystemContext

# `runtime.world.resource`'s classes, which import this module: named, not imported.
Resource = Any
_Claim = Any
_Resources = Any

__all__ = ["StepRules"]

_MAX = sys.float_info.max  # the longest hold: past it `now + seconds` overflows


def hold_problem(seconds: object) -> str | None:
    """Why ``seconds`` is no hold of a `Use`, or None: it must be a real number (not a
    bool), at least 0 and at most the largest float. A huge int passed `< inf` and then
    overflowed `now + seconds` in whichever agent freed the slot it waited for."""
    if isinstance(seconds, bool) or not isinstance(seconds, Real):
        return f"`seconds` must be a number, got {shown(seconds)}"
    finite = f"`seconds` must be finite and >= 0, got {shown(seconds)}"
    given: Any = seconds  # a Real, which mypy's numbers stubs do not compare or convert
    try:  # numpy's reals compare with a warning past their range: as a float
        value = given if given.__class__ is int else float(given)
    except OverflowError:  # an int subclass no float holds
        return finite
    if not 0 <= value <= _MAX:
        return finite
    return None


def plain_name(name: object) -> object:
    """A resource's name as the registry keys it: a `str` subclass (a string enum) as
    its plain text; anything else as it is (refused as unknown)."""
    if name.__class__ is not str and isinstance(name, str):
        return str.__str__(name)
    return name


class StepRules:
    """The format-2 handlers and system of one world's resources (see the module)."""

    def __init__(self, registry: _Resources) -> None:
        from systems.lifecycle import describe, finish, mint, resume_with

        self.registry = registry
        self.state: WorldState = registry.state
        self.dirty: dict[int, None] = registry.world._host.dirty
        self.cut = False  # a claim's turn ended: the system sweeps in its next run
        self.open_holds = 0  # `Resource.open_holds`, summed: asked on every quiet tick
        self._describe, self._finish, self._mint, self._resume = describe, finish, mint, resume_with

    # The step's handlers: fn(state, rec, action), where the behaviour yielded it.

    def use(self, state: WorldState, rec: AgentRecord, action: Any) -> None:
        seconds = action.seconds
        cls = seconds.__class__
        if not ((cls is float or cls is int) and 0 <= seconds <= _MAX):
            why = hold_problem(seconds)
            if why is not None:
                return self._refuse(rec, action, why)
        self._claim(rec, action, seconds)
        return None

    def acquire(self, state: WorldState, rec: AgentRecord, action: Any) -> None:
        self._claim(rec, action, None)

    def release(self, state: WorldState, rec: AgentRecord, action: Any) -> None:
        resource = self._find(rec, action)
        if resource is None:
            return
        if rec.id not in resource.holders:
            self._refuse(rec, action, f"agent {rec.id} holds no slot of {action.resource!r}")
            return
        self.give_back(resource, rec.id, reclaimed=False)
        self._resume(state, rec, None)

    def _refuse(self, rec: AgentRecord, action: Any, message: str) -> None:
        # What a raising host action handler did: the agent fails, naming the action.
        error = ConfigError(message)
        what = f"{type(action).__name__}: {self._describe(error)}"
        self._finish(self.state, rec, StatusKind.ERROR, what)

    def _find(self, rec: AgentRecord, action: Any) -> Resource | None:
        name = action.resource
        registry = self.registry
        if name.__class__ is not str:
            name = plain_name(name)
        resource = registry.by_name.get(name) if name.__class__ is str else None
        if resource is None:
            known = ", ".join(sorted(map(repr, registry.by_name)))
            self._refuse(rec, action, f"unknown resource {name!r} (known: {known})")
        return resource

    def _claim(self, rec: AgentRecord, action: Any, hold: float | None) -> None:
        resource = self._find(rec, action)
        if resource is None:
            return
        agent_id = rec.id
        turn = rec.turn
        held = resource.holders.get(agent_id)
        if held is not None and held.generation != turn.generation:
            self.give_back(resource, agent_id, reclaimed=True)  # an earlier turn's, unswept
        elif held is not None or agent_id in resource.waiting:
            self._refuse(rec, action, f"agent {agent_id} already holds {action.resource!r}")
            return
        claim = self.registry.new_claim(resource, rec, hold)
        state = self.state
        if resource.free:  # then nobody waits: grants fill free slots at once
            self.take(resource, claim)
            if hold is None:
                self._resume(state, rec, 0.0)
            return
        resource.queue.append(claim)
        resource.waiting[agent_id] = claim
        counters = resource.counters
        counters.queued += 1
        if counters.queued > counters.peak_queued:  # noqa: PLR1730 - `max` is a call
            counters.peak_queued = counters.queued
        self._mark(resource)
        # Parked as a host action's wait was: the phase, an id, and the claim.
        turn.phase = AWAITING_ACTION
        turn.inflight = self._mint(rec, "h")
        turn.pending = claim
        state.dirty[rec.ordinal] = rec  # `touch`, inlined
        state.changed_this_tick += 1

    # The resource's moves.

    def take(self, resource: Resource, claim: _Claim) -> None:
        """``claim`` holds a slot from now: a ``Use`` sleeps until its hold's end."""
        hold = claim.hold
        if hold is not None:
            state = self.state
            rec = claim.rec
            turn = claim.turn
            turn.phase = SLEEPING
            turn.inflight = None
            turn.pending = claim
            deadline = turn.deadline = state.now + hold
            state.add_sleeper(rec, deadline)
            state.holds += 1
        else:
            resource.open_holds += 1
            self.open_holds += 1
        resource.free -= 1
        resource.holders[claim.agent_id] = claim
        counters = resource.counters
        busy = counters.busy = counters.busy + 1
        counters.acquired += 1
        if busy > counters.peak_busy:  # noqa: PLR1730 - `max` is a call, on every grant
            counters.peak_busy = busy
        self._mark(resource)

    def give_back(self, resource: Resource, agent_id: str, *, reclaimed: bool) -> None:
        """The agent's slot is free again; the next waiter gets it."""
        if resource.holders.pop(agent_id).hold is None:
            resource.open_holds -= 1
            self.open_holds -= 1
        resource.free += 1
        counters = resource.counters
        counters.busy -= 1
        if reclaimed:
            counters.reclaimed += 1
        else:
            counters.released += 1
        self._mark(resource)
        if resource.queue:
            self._grant(resource)

    def _grant(self, resource: Resource) -> None:
        queue, counters, state = resource.queue, resource.counters, self.state
        while resource.free and queue:
            claim = queue.popleft()
            if claim.dead:
                continue
            del resource.waiting[claim.agent_id]
            counters.queued -= 1
            turn = claim.turn
            rec = claim.rec
            if turn.generation != claim.generation or turn.phase is not AWAITING_ACTION:
                counters.abandoned += 1  # its wait ended some other way (a host's complete)
                self._mark(resource)
                continue
            waited = claim.waited = state.now - claim.since
            counters.waited += 1
            counters.wait_time += waited
            if claim.hold is None:
                self._resume(state, rec, waited)
            else:
                state.dirty[rec.ordinal] = rec  # its turn sleeps now: `touch`, inlined
                state.changed_this_tick += 1
            self.take(resource, claim)

    def end(self, claim: _Claim) -> float:
        """A ``Use``'s hold is over (its sleep's wake-up): the slot goes back."""
        self.state.holds -= 1
        self.give_back(claim.resource, claim.agent_id, reclaimed=False)
        waited: float = claim.waited
        return waited

    def cut_short(self, claim: _Claim) -> None:
        """The claim's turn ended holding or waiting: swept at the system's next run."""
        if claim.hold is not None and claim.resource.holders.get(claim.agent_id) is claim:
            self.state.holds -= 1  # a sleep no wake-up ends now
        self.cut = True

    def _mark(self, resource: Resource) -> None:
        """The counters changed (`SystemContext.set` of them, in place)."""
        if resource.entity is not None:
            self.dirty[resource.entity] = None
            self.state.changed_this_tick += 1

    # The system.

    def has_work(self, ctx: SystemContext) -> bool:
        """The system's ``run_if``: an entity to create, a claim whose turn ended, or an
        ``Acquire`` holder whose turn may have ended without ``Release``."""
        return bool(self.cut or self.open_holds or self.registry.unplaced)

    def system(self, ctx: SystemContext) -> None:
        registry = self.registry
        if registry.unplaced:
            for resource in registry.unplaced:
                resource.entity = ctx.create(resource.counters)
            registry.unplaced.clear()
        cut, self.cut = self.cut, False
        done = DONE
        for resource in registry.resources:
            if cut and resource.waiting:
                for agent_id, claim in list(resource.waiting.items()):
                    turn = claim.turn
                    if turn.generation != claim.generation or turn.phase is not AWAITING_ACTION:
                        del resource.waiting[agent_id]
                        claim.dead = True
                        resource.counters.queued -= 1
                        resource.counters.abandoned += 1
                        self._mark(resource)
            if resource.open_holds or (cut and resource.holders):
                stale = [
                    agent_id
                    for agent_id, claim in resource.holders.items()
                    if claim.turn.generation != claim.generation or claim.turn.phase is done
                ]
                for agent_id in stale:
                    self.give_back(resource, agent_id, reclaimed=True)
