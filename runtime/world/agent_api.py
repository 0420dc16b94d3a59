"""The agent API of a `World`: the thread-safe commands on agents, and the reads.

`AgentAPI` is mixed into `World` (as `HostAPI` and `RunLoop` are), so ``world.py`` reads as
what a world is made of and this module as what a host does with its agents. Commands
(``spawn``, ``send``, ``pause``, ``resume``, ``cancel``, ``interrupt``, ``forget``, the
timers and ``post``) only enqueue an input and nudge the wake; reads (``status``,
``result``, ``history``, ``agents``, ``counts``, ``digest``) take the world's lock, so they
see the state between two ticks, never half a tick.
"""

from __future__ import annotations

import math
import numbers
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from components import Entry, Status, StatusKind
from runtime.clock import Clock
from runtime.errors import ConfigError, UnknownAgentError
from runtime.lane.values import shown
from runtime.models.streaming import StreamHub
from runtime.wake import Wake
from runtime.world.actions import Behavior
from runtime.world.behaviors import BehaviorRegistry
from runtime.world.digest import hexdigest
from runtime.world.inputs import (
    CancelAgent,
    ForgetAgent,
    Inbox,
    InterruptAgent,
    PauseAgent,
    ResumeAgent,
    SendMessage,
    build_spawn,
)
from runtime.world.lockstep import Lockstep
from runtime.world.recorder import Recorder
from runtime.world.state import AgentRecord, WorldState
from runtime.world.steering import COMMAND_OPS, no_effect
from runtime.world.tick import ESPER_LOCK
from runtime.world.timers import HostTimers
from runtime.world.values import NotJSON, json_value

__all__ = ["AgentAPI"]


class AgentAPI:
    """The commands and reads of a `World` (mixed into it, after the mixins that provide
    the private methods stubbed here); the world provides the attributes declared here."""

    clock: Clock
    wake: Wake
    behaviors: BehaviorRegistry
    streams: StreamHub
    _state: WorldState
    _inbox: Inbox
    _lockstep: Lockstep | None
    _lock: threading.RLock
    _ids_lock: threading.Lock
    _pending_ids: dict[str, None]
    _spawned: int
    _timers: HostTimers
    _journal: Recorder | None
    _digest_total: int

    # Provided by `World` and its other mixins (earlier in its bases).
    def _check_open(self) -> None:
        raise NotImplementedError

    def _host_components(self, arg: str, components: Iterable[object]) -> tuple[Any, ...]:
        raise NotImplementedError

    def _in_esper(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    def _release(self, rec: AgentRecord) -> None:
        raise NotImplementedError

    def _fold_dirty(self, changed: list[tuple[str, str]] | None) -> None:
        raise NotImplementedError

    def _preview_digest(self) -> int:
        raise NotImplementedError

    def spawn(
        self,
        behavior: Behavior | str,
        message: Any = None,
        *,
        name: str = "",
        interactive: bool = False,
        agent_id: str | None = None,
        components: Iterable[Any] = (),
    ) -> str:
        """Add an agent running ``behavior`` and return its id; it starts next tick.

        ``behavior`` is a generator function or a behaviour name. A non-interactive agent
        starts its turn at once (on ``message``, which may be None); an interactive one
        waits for ``send`` unless given a message. ``components`` are host components
        (dataclass instances) put on the agent's entity.

        Raises:
            BehaviorNotFound: ``behavior`` is a name that does not resolve.
            ConfigError: ``agent_id`` is taken, malformed or of the form kept for children
                (``<id>.<n>``), ``message`` is not a JSON value while a journal records the
                world (a tuple is taken as a list), a component is not one (or is refused
                as by ``add_entity``), ``name`` is not a string or ``interactive`` not a
                bool.
            WorldClosedError: the world is closed.
        """
        self._check_open()
        if name.__class__ is not str and not isinstance(name, str):
            raise ConfigError(f"`name` must be a string, got {shown(name)}")
        if interactive is not False and interactive is not True:
            raise ConfigError(f"`interactive` must be True or False, got {shown(interactive)}")
        behavior_name = behavior if isinstance(behavior, str) else self.behaviors.name_of(behavior)
        self.behaviors.resolve(behavior_name)  # fail at the call, not on the tick thread
        message = self._recordable("message", message)
        comps = self._host_components("components", components)
        with self._ids_lock:
            pending, records = self._pending_ids, self._state.records
            if agent_id is None:
                while True:
                    self._spawned += 1
                    agent_id = f"a{self._spawned}"
                    if agent_id not in pending and agent_id not in records:
                        break
            else:
                _check_agent_id(agent_id)
                if agent_id in pending or agent_id in records:
                    raise ConfigError(f"agent id {agent_id!r} is already taken")
            pending[agent_id] = None
            # Under the ids lock: sequence numbers follow the order ids were handed out.
            self._inbox.put(build_spawn(agent_id, behavior_name, message, name, interactive, comps))
        return agent_id

    def send(self, agent_id: str, message: Any) -> int:
        """Give an agent its next message (a new turn now, or after the current one);
        returns the command's sequence number (the next tick applies it, as any input).

        Raises:
            UnknownAgentError: no agent has that id.
        """
        message = self._recordable("message", message)
        return self._command(SendMessage(self._checked(agent_id), message))

    def pause(self, agent_id: str) -> int:
        """Stop stepping an agent and its subtree (from ACTIVE, WAITING or IDLE); returns
        the command's sequence number.

        What lands meanwhile (model replies, tool results, prompt answers) is held whole,
        history included, until ``resume``.
        """
        return self._command(PauseAgent(self._checked(agent_id)))

    def resume(self, agent_id: str) -> int:
        """Undo ``pause`` for the agent and its subtree; what landed meanwhile is applied.
        Returns the command's sequence number."""
        return self._command(ResumeAgent(self._checked(agent_id)))

    def cancel(self, agent_id: str, reason: str = "cancelled by user") -> int:
        """End an agent for good: work cancelled, prompts settled, children cancelled;
        returns the command's sequence number.

        Every tool call of a batch in progress gets a result in history, and no prompt of
        the agent is left open, however the cancel and the prompt's opening interleave.

        Raises:
            UnknownAgentError: no agent has that id.
            ConfigError: ``reason`` is not a string (it becomes the agent's status message
                and an input a journal records).
        """
        if reason.__class__ is not str and not isinstance(reason, str):
            raise ConfigError(f"`reason` must be a string, got {shown(reason)}")
        seq = self._command(CancelAgent(self._checked(agent_id), reason))
        if self._lockstep is not None:
            self._lockstep.abandon(agent_id)  # its work is stale at whatever tick this lands
        return seq

    def interrupt(self, agent_id: str) -> int:
        """Abandon the agent's current turn, keeping its history; it waits for input.
        Returns the command's sequence number.

        A model reply streaming in is stopped here and now (its HTTP stream closed), and
        the text it had is kept in the history, marked ``[interrupted by user]``.
        """
        self._check_open()
        stopped = self.streams.stop(self._checked(agent_id))
        if stopped is None:
            seq = self._command(InterruptAgent(agent_id))
        else:
            seq = self._command(InterruptAgent(agent_id, stopped[0], stopped[1]))
        if self._lockstep is not None:
            self._lockstep.abandon(agent_id)  # its work is stale at whatever tick this lands
        return seq

    def forget(self, agent_id: str) -> None:
        """Release a finished agent now: its entity, record, history and id.

        Afterwards the id is unknown (``status`` raises `UnknownAgentError`). The release is
        also an input, so a replay of the journal releases it at the same point. Called on
        the tick thread during a tick (a host timer, system, action handler or observer),
        the agent is released at the start of the next tick instead, where a replay
        releases it: a release in the middle of a tick would change that tick's digest in
        the live run only.

        Raises:
            UnknownAgentError: no agent has that id (or it was released already).
            ConfigError: the agent has not finished (cancel it first).
        """
        self._check_open()
        during_tick = self._lock._is_owned()  # type: ignore[attr-defined]  # (C RLock's)
        with self._lock, ESPER_LOCK, self._in_esper():
            rec = self._state.records.get(self._checked(agent_id))
            if rec is None or not rec.status.kind.is_terminal:
                state = "has not started" if rec is None else f"is {rec.status.kind.value}"
                raise ConfigError(f"agent {agent_id!r} {state}: only a finished one is forgotten")
            if not during_tick:
                self._release(rec)
            # Applied at the start of the next tick: a no-op when released here (the record
            # is gone), else the release, as in a replay, before any digest is compared.
            self._inbox.put(ForgetAgent(agent_id, not during_tick))

    def call_at(self, when: float, fn: Callable[[], object]) -> None:
        """Run ``fn()`` on the tick thread at the first tick whose time is >= ``when``.

        A host timer in world time (virtual or real): ``run_until_idle`` and ``run`` wake
        for it, and with a ``ManualClock`` skip time to it. ``fn`` talks to the world like
        any host code (hub, commands); what it causes lands at the next tick. An ``fn``
        that raises is logged. Timers are host code: a replay does not run them (their
        effects are in the journal).

        Raises:
            ConfigError: ``when`` is not a finite number, or ``fn`` is not callable.
        """
        if not _is_finite(when):
            raise ConfigError(f"`when` must be a finite time, got {shown(when)}")
        if not callable(fn):
            raise ConfigError(f"`fn` must be callable, got {shown(fn)}")
        self._timers.add(when, fn)
        self.wake.notify()

    def call_later(self, delay: float, fn: Callable[[], object]) -> None:
        """Run ``fn()`` on the tick thread ``delay`` seconds of world time from now.

        Raises:
            ConfigError: ``delay`` is not a finite number >= 0, or ``fn`` is not callable.
        """
        if not _is_finite(delay) or not delay >= 0:
            raise ConfigError(f"`delay` must be a finite number >= 0, got {shown(delay)}")
        self.call_at(self.clock.now() + delay, fn)

    def post(self, item: object) -> int:
        """Put a raw input into the inbox (an outcome, a prompt event); returns its seq.

        In lockstep, an input posted by a lane job is held with the job's outcome and lands
        at a tick fixed by the run; its seq is then 0 (it gets its number when it lands).
        """
        self._check_open()
        lockstep = self._lockstep
        if lockstep is not None and lockstep.caused(item):
            return 0
        return self._inbox.put(item)

    # -- reads: whole ticks only ---------------------------------------------------------

    def status(self, agent_id: str) -> Status:
        """A copy of the agent's status (IDLE with a note while its spawn is pending).

        Raises:
            UnknownAgentError: no agent has that id.
        """
        with self._lock:
            rec = self._state.records.get(agent_id)
            if rec is not None:
                s = rec.status
                return Status(s.kind, s.reason, s.message)
        self._checked(agent_id)
        return Status(StatusKind.IDLE, None, "spawn pending")

    def result(self, agent_id: str) -> Any:
        """The value the agent's last turn returned (None before that)."""
        with self._lock:
            rec = self._state.records.get(agent_id)
            if rec is not None:
                return rec.result
        self._checked(agent_id)
        return None

    def children(self, agent_id: str) -> list[str]:
        """The agents ``agent_id`` spawned (``Spawn``), in spawn order, that the world
        still holds (a released one is gone: ``keep_finished``, ``forget``).

        Raises:
            UnknownAgentError: no agent has that id.
        """
        with self._lock:
            records = self._state.records
            rec = records.get(agent_id)
            if rec is not None:
                return [child for child in rec.children or () if child in records]
        self._checked(agent_id)
        return []

    def no_effect(self, agent_id: str, op: str) -> str | None:
        """Why ``op`` (``"send"``, ``"pause"``, ``"resume"``, ``"cancel"`` or
        ``"interrupt"``) of the agent would surely change nothing, or None when it may.

        Judged by the world as it is and by the pauses, resumes and cancels posted before
        it (by anyone) that no tick has applied yet, followed as the tick will apply them
        (`runtime.world.steering`): until then ``status`` shows the agent as it was. The
        control channel refuses such a command (``no_effect``).

        Raises:
            UnknownAgentError: no agent has that id.
            ConfigError: ``op`` is not one of those.
            RuntimeError: called during a tick, on its thread.
        """
        if op not in COMMAND_OPS:
            raise ConfigError(f"`op` must be one of {', '.join(COMMAND_OPS)}, got {shown(op)}")
        if self._lock._is_owned():  # type: ignore[attr-defined]  # (C RLock's own check)
            raise RuntimeError(
                "no_effect() called during a tick (from a host timer, system, action handler"
                " or observer), whose own inputs are neither queued nor all applied: ask"
                " between ticks"
            )
        with self._lock:  # no tick is taking inputs out of the inbox meanwhile
            self._checked(agent_id)
            return no_effect(self._state, self._inbox.queued(), agent_id, op)

    def history(self, agent_id: str) -> list[Entry]:
        """A copy of the agent's history."""
        with self._lock:
            rec = self._state.records.get(agent_id)
            if rec is not None:
                return list(rec.history.entries)
        self._checked(agent_id)
        return []

    def agents(self) -> Iterator[str]:
        """Every agent id, in the order they were spawned (children included)."""
        # Under the ids lock, not the tick's: records are added and dropped under it. The
        # agents made so far in the order they were made, then those spawned but not made.
        with self._ids_lock:
            records = self._state.records
            ids = list(records)
            pending = self._pending_ids
            if pending:
                ids.extend(agent_id for agent_id in pending if agent_id not in records)
        return iter(ids)

    def counts(self) -> dict[StatusKind, int]:
        """How many agents are in each status (O(agents))."""
        with self._lock:
            kinds = [rec.status.kind for rec in self._state.records.values()]
        tally = Counter(kinds)  # C-level counting, outside the lock
        return {kind: tally[kind] for kind in StatusKind}

    def digest(self) -> str:
        """The digest of every agent's state now (incremental: O(changed agents)).

        Asked during a tick (from a host system, a timer, an action handler), it is the
        digest of the state at that moment, and the tick still records every change it
        makes (its digest and its journal rows are those of a tick that never asked).
        """
        if self._lock._is_owned():  # type: ignore[attr-defined]  # (C RLock's own check)
            with self._lock:  # (ours already: a tick, or a read holding it, on this thread)
                return hexdigest(self._preview_digest())
        with self._lock:
            self._fold_dirty(None)
            return hexdigest(self._digest_total)

    # -- helpers -------------------------------------------------------------------------

    def _checked(self, agent_id: str) -> str:
        # Without the ids lock, so pending first: an id leaves it only once its record is
        # made, so one that is not pending yet known is found among the records after.
        if agent_id.__class__ is not str and not isinstance(agent_id, str):
            raise UnknownAgentError(f"unknown agent {shown(agent_id)}: an agent id is a string")
        if agent_id not in self._pending_ids and agent_id not in self._state.records:
            raise UnknownAgentError(f"unknown agent {agent_id!r}")
        return agent_id

    def _recordable(self, name: str, value: Any) -> Any:
        # A journal stores inputs as JSON: settle the value here, at the call, so that the
        # live run sees what its replay will (a tuple becomes a list), and refuse what JSON
        # cannot hold rather than fail on the tick thread when the tick is written.
        if self._journal is None:
            return value
        try:
            return json_value(value)
        except NotJSON as exc:
            raise ConfigError(
                f"`{name}` must be a JSON value when the world records a journal: {exc}"
            ) from None

    def _command(self, item: object) -> int:
        self._check_open()
        return self._inbox.put(item)


def _check_agent_id(agent_id: object) -> None:
    if not isinstance(agent_id, str) or not agent_id or "/" in agent_id:
        raise ConfigError(f"`agent_id` must be a non-empty string without '/', got {agent_id!r}")
    # Children are named `<parent>.<n>` on the tick thread: a host's `p.1` would be taken
    # by (or take the place of) agent p's first child, so that form is the runtime's.
    stem, dot, number = agent_id.rpartition(".")
    if dot and stem and number.isdecimal():
        raise ConfigError(
            f"`agent_id` must not end in '.<number>' (kept for child agents), got {agent_id!r}"
        )


def _is_finite(value: object) -> bool:
    """Whether ``value`` is a finite real number and not a bool (numpy's numbers count)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False
