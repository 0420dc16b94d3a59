"""A shared resource in world time: ``capacity`` slots that agents take in FIFO order.

A simulation's shared capacity (a counter, a machine, a dock) is a `Resource`: a behaviour
yields ``Acquire("dock")`` to take a slot (waiting, first come first served, while every
slot is held) and ``Release("dock")`` to give it back; what it does in between (``Sleep``
for a service time, a ``Think``, tools) is the hold::

    dock = Resource(world, "dock", capacity=2)

    def ship(turn):
        waited = yield Acquire("dock")  # world seconds spent in the queue (0.0: at once)
        yield Sleep(3)
        yield Release("dock")

When the hold is a fixed time, ``yield Use("dock", 3)`` is the same visit in one action
(and two ticks, where the three actions take four): it waits for a slot, holds it for 3
world seconds, gives it back and returns the time it waited.

No threads and no wall time: everything happens on the tick thread, in world time, so the
same run grants in the same order, ends at the same time and has the same digest every
time, live, in lockstep, or replayed from its journal (a replay creates the same resources
in its ``setup``). The step takes the actions where the behaviour yields them, a ``Use``'s
hold being a sleep (`runtime.world.resource_steps`: journal format 2); one host system
sweeps what interrupts and cancels left, and a host component, `ResourceStats`, on an
entity of each resource holds the counters (``world.query(ResourceStats)``; part of the
digest).

A world that replays or resumes a format-1 journal keeps the rules it was recorded by,
built here on the host ECS API as any host's action would be: ``World.add_action``
handlers for the actions (``PENDING`` for a wait, ``ctx.complete`` for the grant), the
system, and a host timer where a ``Use`` ends (so the world ticks then).

A hold lasts until ``Release`` or the end of the agent's turn, whichever comes first: a
turn that returns, fails, is interrupted or is cancelled while holding gives its slot back
(``reclaimed``), and one interrupted or cancelled while waiting leaves the queue
(``abandoned``). Either way the freed slot goes to the next waiter in the same tick.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from numbers import Real
from typing import TYPE_CHECKING

from components import Phase, TurnState
from runtime.errors import ConfigError
from runtime.lane.values import shown
from runtime.world.actions import RESERVED_ACTIONS
from runtime.world.context import PENDING, SystemContext
from runtime.world.inputs import CancelAgent, InterruptAgent
from runtime.world.resource_steps import _MAX, StepRules, hold_problem, plain_name
from runtime.world.state import AgentRecord, Hold, WorldState

if TYPE_CHECKING:
    from runtime.world.world import World

__all__ = ["Acquire", "Release", "Resource", "ResourceStats", "Use"]


@dataclass(frozen=True, slots=True, init=False)
class Acquire:
    """Take a slot of the resource called ``resource``, waiting in FIFO order while every
    slot is held; the result is the world time waited (0.0 when a slot was free).

    Raises:
        TypeError: ``resource`` is not a string.
    """

    resource: str

    def __init__(self, resource: str) -> None:
        given: object = resource  # typed callers are right; untyped ones are checked
        if given.__class__ is not str and not isinstance(given, str):
            raise TypeError(f"Acquire takes the resource's name as a string, got {given!r}")
        _set_acquired(self, resource)


@dataclass(frozen=True, slots=True, init=False)
class Release:
    """Give back the slot of ``resource`` this agent holds; the result is None.

    Raises:
        TypeError: ``resource`` is not a string.
    """

    resource: str

    def __init__(self, resource: str) -> None:
        given: object = resource  # typed callers are right; untyped ones are checked
        if given.__class__ is not str and not isinstance(given, str):
            raise TypeError(f"Release takes the resource's name as a string, got {given!r}")
        _set_released(self, resource)


@dataclass(frozen=True, slots=True, init=False)
class Use:
    """Hold a slot of ``resource`` for ``seconds`` of world time (waiting for it in FIFO
    order first), then give it back; the result is the world time waited for the slot.

    One action for the commonest hold (SimPy's ``with res.request(): yield timeout``):
    two ticks per visit, where ``Acquire``, ``Sleep``, ``Release`` take four.

    Raises:
        TypeError: ``resource`` is not a string, or ``seconds`` not an int or a float.
        ValueError: ``seconds`` is negative, infinite or NaN.
    """

    resource: str
    seconds: float

    def __init__(self, resource: str, seconds: float) -> None:
        name: object = resource  # typed callers are right; untyped ones are checked
        given: object = seconds
        if name.__class__ is not str and not isinstance(name, str):
            raise TypeError(f"Use takes the resource's name as a string, got {name!r}")
        kind = given.__class__
        if not ((kind is float or kind is int) and 0 <= seconds <= _MAX):  # else: look why
            if isinstance(given, bool) or not isinstance(given, Real):
                raise TypeError(f"Use takes the seconds as a number, got {shown(given)}")
            why = hold_problem(given)
            if why is not None:
                raise ValueError(f"Use: {why}")
            if kind is not float and kind is not int:
                seconds = float(seconds)  # numpy's, a Fraction: a float, as journals hold
        _set_used(self, resource)
        _set_seconds(self, seconds)


_set_acquired = Acquire.__dict__["resource"].__set__
_set_released = Release.__dict__["resource"].__set__
_set_used = Use.__dict__["resource"].__set__
_set_seconds = Use.__dict__["seconds"].__set__
RESERVED_ACTIONS.update(
    (cls, "a built-in action of `runtime.Resource`") for cls in (Acquire, Release, Use)
)


@dataclass(slots=True)
class ResourceStats:
    """A resource's counters, on its entity (``world.query(ResourceStats)``: copies).

    Gauges: ``busy`` (slots held), ``queued`` (agents waiting). Totals: ``acquired``
    (slots granted), ``waited`` (of those, grants that had to queue), ``wait_time`` (world
    seconds queued, summed over them), ``released`` (by ``Release``), ``reclaimed`` (from
    a holder whose turn ended without it), ``abandoned`` (waits ended by an interrupt or a
    cancel). Invariant: ``busy == acquired - released - reclaimed <= capacity``.
    """

    name: str
    capacity: int
    busy: int = 0
    queued: int = 0
    acquired: int = 0
    waited: int = 0
    wait_time: float = 0.0
    released: int = 0
    reclaimed: int = 0
    abandoned: int = 0
    peak_busy: int = 0
    peak_queued: int = 0


class _Claim(Hold):
    """One agent's place at a resource: waiting in its queue, or holding a slot.

    ``turn`` is the agent's live ``TurnState``: the claim belongs to turn ``generation``
    only, so a later turn (or none) shows at once that the claim is stale. Under the step
    rules (format 2) it is the turn's ``pending`` while it waits or holds by ``Use``, and
    ``rec``, ``resource`` and ``rules`` are set (`runtime.world.resource_steps`).
    """

    __slots__ = (
        "agent_id",
        "dead",
        "generation",
        "hold",
        "rec",
        "resource",
        "rules",
        "since",
        "turn",
        "waited",
    )

    def __init__(self, agent_id: str, turn: TurnState, since: float, hold: float | None) -> None:
        self.agent_id = agent_id
        self.turn = turn
        self.generation = turn.generation
        self.since = since
        self.hold = hold  # a `Use`'s seconds (None: an `Acquire`, held until `Release`)
        self.waited = 0.0  # world seconds it queued before its slot was granted
        self.dead = False  # a waiter that left the queue (the deque drops it lazily)

    rec: AgentRecord
    resource: Resource
    rules: StepRules

    def end(self, state: WorldState) -> float:
        return self.rules.end(self)

    def cut(self, state: WorldState) -> None:
        self.rules.cut_short(self)


class Resource:
    """``capacity`` slots in world time, granted in FIFO order (see the module docstring).

    Create resources before the world runs or between ticks, as host systems are; in a
    replay, create the same ones in its ``setup``. A journaled world takes them before its
    first tick only: a replay's ``setup`` makes them there, so one made later could never
    be replayed. ``stats()`` is safe from any thread.
    """

    def __init__(self, world: World, name: str, capacity: int) -> None:
        """Add a resource called ``name`` with ``capacity`` slots to ``world``.

        Raises:
            ConfigError: ``name`` is not a non-empty string or is taken in this world;
                ``capacity`` is not an integer >= 1; the world records a journal and has
                ticked already.
        """
        if world._journal is not None and world.tick_count > 0:
            raise ConfigError(
                f"resource {name!r} comes after tick {world.tick_count} of a journaled world:"
                " create resources before its first tick, where a replay's setup makes them"
            )
        if not isinstance(name, str) or not name:
            raise ConfigError(f"`name` must be a non-empty string, got {name!r}")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ConfigError(f"`capacity` must be an integer >= 1, got {capacity!r}")
        self.name: str = plain_name(name)  # type: ignore[assignment]  # (a str, checked)
        self.capacity = capacity
        self.counters = ResourceStats(self.name, capacity)  # the tick thread's own: live
        self.entity: int | None = None  # made by the resources' system at its first tick
        self.free = capacity
        self.queue: deque[_Claim] = deque()
        self.waiting: dict[str, _Claim] = {}
        self.holders: dict[str, _Claim] = {}
        self.ends: list[tuple[float, int, _Claim]] = []  # `Use` holds: (until, seq, claim)
        # Holders by `Acquire`, who step while they hold (and may end their turn without
        # `Release`): only they need looking at every tick. A `Use` holder is parked until
        # its hold ends, which only an interrupt or a cancel (an input) can cut short.
        self.open_holds = 0
        self._world = world
        self._registry = _Resources.of(world)
        self._registry.add(self)

    def stats(self) -> ResourceStats:
        """A copy of the counters as they were after the last tick."""
        for _entity, found in self._world.query(ResourceStats):
            stats: ResourceStats = found[0]
            if stats.name == self.name:
                return stats
        return ResourceStats(self.name, self.capacity)  # before the first tick

    def __repr__(self) -> str:
        return f"Resource({self.name!r}, capacity={self.capacity})"

    def take(self, ctx: SystemContext, claim: _Claim) -> None:
        """``claim`` holds a slot from now (a `Use` until its seconds have passed)."""
        hold = claim.hold
        if hold is not None:
            registry = self._registry
            until = registry.state.now + hold  # `ctx.now`, without the property
            seq = registry._seq = registry._seq + 1
            heapq.heappush(self.ends, (until, seq, claim))
            # The timer only makes the world tick at `until` (a replay ticks there from its
            # journal); the resources' system ends the hold in that tick. Pushed without
            # `call_at`'s checks and wake-up: `until` is finite, and this is the tick thread,
            # which looks at the timers before it parks.
            registry.timers.add(until, _tick_here)
        else:
            self.open_holds += 1
        self.free -= 1
        self.holders[claim.agent_id] = claim
        counters = self.counters
        busy = counters.busy = counters.busy + 1
        counters.acquired += 1
        if busy > counters.peak_busy:  # noqa: PLR1730 - `max` is a call, on every grant
            counters.peak_busy = busy
        if self.entity is not None:  # `changed`, inlined
            ctx.set(self.entity, counters)

    def enqueue(self, ctx: SystemContext, claim: _Claim) -> None:
        """``claim`` waits for a slot, behind every earlier waiter."""
        self.queue.append(claim)
        self.waiting[claim.agent_id] = claim
        counters = self.counters
        counters.queued += 1
        counters.peak_queued = max(counters.peak_queued, counters.queued)
        self.changed(ctx)

    def grant(self, ctx: SystemContext) -> None:
        """Hand free slots to the waiters at the head of the queue."""
        queue, counters = self.queue, self.counters
        while self.free and queue:
            claim = queue.popleft()
            if claim.dead:
                continue
            del self.waiting[claim.agent_id]
            counters.queued -= 1
            waited = ctx._state.now - claim.since
            turn = claim.turn
            live = turn.generation == claim.generation and turn.phase is Phase.AWAITING_ACTION
            claim.waited = waited
            if live and claim.hold is not None:
                pass  # a `Use` goes on waiting: for the end of its hold
            elif not live or not ctx.complete(claim.agent_id, waited):
                counters.abandoned += 1  # its wait ended some other way
                self.changed(ctx)
                continue
            counters.waited += 1
            counters.wait_time += waited
            self.take(ctx, claim)

    def sweep_queue(self, ctx: SystemContext) -> None:
        """Take the waiters whose wait has ended (interrupt, cancel) out of the queue."""
        waiting = self.waiting
        for agent_id, claim in list(waiting.items()):
            turn = claim.turn
            if turn.generation != claim.generation or turn.phase is not Phase.AWAITING_ACTION:
                del waiting[agent_id]
                claim.dead = True
                self.counters.queued -= 1
                self.counters.abandoned += 1
                self.changed(ctx)

    def give_back(self, ctx: SystemContext, agent_id: str, *, reclaimed: bool) -> None:
        """The agent's slot is free again; the next waiter gets it."""
        if self.holders.pop(agent_id).hold is None:
            self.open_holds -= 1
        self.free += 1
        counters = self.counters
        counters.busy -= 1
        if reclaimed:
            counters.reclaimed += 1
        else:
            counters.released += 1
        if self.entity is not None:  # `changed`, inlined
            ctx.set(self.entity, counters)
        if self.queue:
            self.grant(ctx)

    def end_holds(self, ctx: SystemContext) -> None:
        """End the `Use` holds whose seconds have passed, in the order they end."""
        ends, now, holders = self.ends, ctx._state.now, self.holders
        awaiting = Phase.AWAITING_ACTION
        while ends and ends[0][0] <= now:
            claim = heapq.heappop(ends)[2]
            agent_id = claim.agent_id
            if holders.get(agent_id) is not claim:
                continue  # reclaimed already (interrupt, cancel)
            turn = claim.turn
            live = turn.generation == claim.generation and turn.phase is awaiting
            self.give_back(ctx, agent_id, reclaimed=not live)
            if live:
                ctx.complete(agent_id, claim.waited)

    def sweep(self, ctx: SystemContext) -> None:
        """Take back the slots of holders whose turn has ended without ``Release``."""
        done = Phase.DONE
        stale = [
            agent_id
            for agent_id, claim in self.holders.items()
            if claim.turn.generation != claim.generation or claim.turn.phase is done
        ]
        for agent_id in stale:
            self.give_back(ctx, agent_id, reclaimed=True)

    def changed(self, ctx: SystemContext) -> None:
        """The counters changed: mark the entity (for the digest), once it exists."""
        if self.entity is not None:
            ctx.set(self.entity, self.counters)


class _Resources:
    """The resources of one world, and the handlers and system they share."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.state = world._state
        self.timers = world._timers
        self.by_name: dict[str, Resource] = {}
        self.resources: list[Resource] = []  # in the order created
        self.unplaced: list[Resource] = []
        self._seq = 0
        state = self.state
        self.rules: StepRules | None = None
        if state.journal_format >= 2:  # the step takes the actions (resource_steps)
            rules = self.rules = StepRules(self)
            state.step_actions.update(
                {Acquire: rules.acquire, Release: rules.release, Use: rules.use}
            )
            world.add_system(
                rules.system, after="handle_interrupts", name="resources", run_if=rules.has_work
            )
            return
        world._set_action(Acquire, self.acquire)
        world._set_action(Release, self.release)
        world._set_action(Use, self.use)
        world.add_system(
            self.system, after="handle_interrupts", name="resources", run_if=self.has_work
        )

    def new_claim(self, resource: Resource, rec: AgentRecord, hold: float | None) -> _Claim:
        """A step rules' claim of ``resource`` by ``rec``'s turn, from now."""
        claim = _Claim(rec.id, rec.turn, self.state.now, hold)
        claim.rec = rec
        claim.resource = resource
        assert self.rules is not None
        claim.rules = self.rules
        return claim

    @staticmethod
    def of(world: World) -> _Resources:
        found: _Resources | None = getattr(world, "_resources", None)
        if found is None:
            found = _Resources(world)
            world._resources = found  # type: ignore[attr-defined]
        return found

    def add(self, resource: Resource) -> None:
        if resource.name in self.by_name:
            raise ConfigError(f"`name` {resource.name!r} is taken by another resource")
        self.by_name[resource.name] = resource
        self.resources.append(resource)
        self.unplaced.append(resource)

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def find(self, action: Acquire | Release | Use) -> Resource:
        name = plain_name(action.resource)
        found = self.by_name.get(name) if isinstance(name, str) else None
        if found is None:
            known = ", ".join(sorted(map(repr, self.by_name)))
            raise ConfigError(f"unknown resource {action.resource!r} (known: {known})")
        return found

    def acquire(self, ctx: SystemContext, agent_id: str, action: Acquire) -> object:
        return self.claim(ctx, agent_id, action, None)

    def use(self, ctx: SystemContext, agent_id: str, action: Use) -> object:
        seconds = action.seconds
        cls = seconds.__class__
        if not ((cls is float or cls is int) and 0 <= seconds <= _MAX):  # else: checked
            why = hold_problem(seconds)
            if why is not None:
                raise ConfigError(why)
        return self.claim(ctx, agent_id, action, seconds)

    def claim(
        self, ctx: SystemContext, agent_id: str, action: Acquire | Use, hold: float | None
    ) -> object:
        name = action.resource
        resource = self.by_name.get(name) if name.__class__ is str else None  # else: `find`
        if resource is None:
            resource = self.find(action)  # raises, naming it
        # The agent acting: the one whose host action this is (`run_action` has blamed
        # its entity already), so its record is there.
        turn = self.state.records[agent_id].turn
        held = resource.holders.get(agent_id)
        if held is not None and held.generation != turn.generation:
            resource.give_back(ctx, agent_id, reclaimed=True)  # an earlier turn's, unswept
        elif held is not None or agent_id in resource.waiting:
            raise ConfigError(f"agent {agent_id} already holds {action.resource!r}")
        claim = _Claim(agent_id, turn, self.state.now, hold)
        if resource.free:  # then nobody waits: `grant` fills free slots at once
            resource.take(ctx, claim)
            return 0.0 if hold is None else PENDING
        resource.enqueue(ctx, claim)
        return PENDING

    def release(self, ctx: SystemContext, agent_id: str, action: Release) -> None:
        resource = self.find(action)
        if agent_id not in resource.holders:
            raise ConfigError(f"agent {agent_id} holds no slot of {action.resource!r}")
        resource.give_back(ctx, agent_id, reclaimed=False)

    def has_work(self, ctx: SystemContext) -> bool:
        """The system's ``run_if``: whether this tick has anything for it to do (an entity
        to create, a wait or a hold a cancel or interrupt may have ended, a turn that may
        have ended holding, a `Use` whose hold is over)."""
        if self.unplaced or (self.state.inputs and _ends_waits(ctx)):
            return True
        now = self.state.now
        for resource in self.resources:
            if resource.open_holds:
                return True
            ends = resource.ends
            if ends and ends[0][0] <= now:
                return True
        return False

    def system(self, ctx: SystemContext) -> None:
        # Runs after the tick's interrupts and cancels are applied (a cancelled parent's
        # children included), before any agent steps: every claim of a turn they ended
        # is stale by then, its slot goes to the next waiter, who steps in this same tick.
        if self.unplaced:
            for resource in self.unplaced:
                resource.entity = ctx.create(resource.counters)
            self.unplaced.clear()
        ended = bool(self.state.inputs) and _ends_waits(ctx)
        now = self.state.now
        for resource in self.resources:
            if ended and resource.waiting:
                resource.sweep_queue(ctx)
            if resource.open_holds or (ended and resource.holders):
                resource.sweep(ctx)
            ends = resource.ends
            if ends and ends[0][0] <= now:
                resource.end_holds(ctx)


def _ends_waits(ctx: SystemContext) -> bool:
    """Whether the tick applied a cancel or an interrupt, the only inputs that end a wait
    other than by a grant: the queues are looked at in such ticks, not in every tick. The
    one look past the host API: `SystemContext` does not show a tick's inputs."""
    inputs = ctx._state.inputs
    if inputs:
        for _seq, item in inputs:
            if item.__class__ in _ENDS_WAITS:
                return True
    return False


def _tick_here() -> None:
    """A host timer's body that does nothing: the timer exists to make the world tick."""


_ENDS_WAITS = (CancelAgent, InterruptAgent)
