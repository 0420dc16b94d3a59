"""The interaction hub's bookkeeping: the open set, settlements, the listener and the wake.

Every change of the open set happens under the hub's lock, and the only code it calls out
to while holding it is the listener (so that events come out in the order the changes
happened). What needs no shared state (the clock, a minted id, the request's copy, the
events) is made before the lock is taken, so the lock is held as briefly as it can be.
Every request leaves the open set exactly once, by `HubCore._take`, and the first
settlement to take the lock wins. `runtime.hub.interaction_hub.InteractionHub` adds the
public operations and the blocking ``ask``; `runtime.hub.deadlines` holds the deadlines.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from time import monotonic
from typing import TypeAlias

from components.interaction import (
    InteractionKind,
    InteractionRequest,
    InteractionResponse,
    PromptOpened,
    PromptSettled,
    Settlement,
    build_prompt_opened,
    build_prompt_settled,
    build_request,
    build_response,
)
from runtime.clock import Clock, MonotonicClock
from runtime.errors import ConfigError, DuplicateRequestError
from runtime.hub.deadlines import DeadlineHeap
from runtime.lane.values import shown
from runtime.wake import Wake

__all__ = ["HubCore", "HubEvent", "HubListener", "HubStats", "check_request"]

HubEvent: TypeAlias = PromptOpened | PromptSettled
# `object`, not `None`: whatever a listener returns (an inbox sequence number, say) is ignored.
HubListener: TypeAlias = Callable[[HubEvent], object]

_log = logging.getLogger("runtime.hub")

# `try_settlement` remembers at least this many of the latest settlements (at most twice
# as many): two generations of this size, the older dropped whole when the newer fills.
# Dropping the oldest one by one from a dict (`del d[next(iter(d))]`) costs O(n) per call
# once deleted slots pile up at the front: ~10 µs a settlement at this size (measured).
_RECENT_SETTLEMENTS = 10_000

# A remembered settlement, kept as plain values rather than as its event: `(agent_id, how,
# value, choice, approved, opened_at, at, kind)`, `how` and `kind` by their enum values.
# A tuple of strings, numbers and None is untracked by the collector after the first
# collection that sees it, where the `PromptSettled` and its response stayed tracked: two
# of the ~18 objects every finished agent left for each full collection to walk, for as
# long as the hub remembers it (asyncio_10k: 10,000-20,000 of them). `try_settlement`
# builds the event again, equal to the one reported. A response of a subclass is kept as
# its event, whole.
_Remembered: TypeAlias = tuple[str, str, str, int | None, bool | None, float, float, str]

# An emptied dict keeps the table it grew to (~38 B an entry it ever held): once the open
# set empties after this many opens, `_open` lets its table go (a world that once waited on
# 100k prompts kept ~77 B an agent after they all settled, with the per-agent index).
_SHRINK_AFTER_OPENS = 1_000

# Enum members as module names, as `tests/world/test_enum_reads.py` explains and counts.
_ANSWERED = Settlement.ANSWERED
_CANCELLED = Settlement.CANCELLED
_CHOICE = InteractionKind.CHOICE


@dataclass(frozen=True, slots=True)
class HubStats:
    """A snapshot of the hub's counters: how many prompts opened and how each ended."""

    opened: int
    answered: int
    cancelled: int
    expired: int
    open: int


class _Waiter:
    """The thread blocked in `ask` on one request: its event, and how the request settled."""

    __slots__ = ("event", "settled")

    def __init__(self) -> None:
        self.event = threading.Event()
        # Written once, under the hub lock, before `event` is set.
        self.settled: PromptSettled | None = None


class HubCore:
    """The open set of a hub and how requests enter and leave it, under one lock."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        timeout_secs: float = 3600.0,
        listener: HubListener | None = None,
    ) -> None:
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._now = self._clock.now
        # A `MonotonicClock` is read inline (`monotonic() + offset`, the float its `now()`
        # returns) on every opening and settlement: a Python call fewer each.
        self._offset = self._clock.offset if type(self._clock) is MonotonicClock else None
        self._timeout_secs = _checked_timeout(timeout_secs)
        self._listener = listener
        self._wake: Wake | None = None
        # Reentrant so that a listener calling back into the hub cannot deadlock it; its
        # nested events still come out in the order the changes happened.
        self._lock = threading.RLock()
        # Invariant: `_open` holds exactly the open requests, in opening order, each as the
        # event that opened it; `_waiters` holds the open requests an `ask` waits on.
        # `_by_agent`, the per-agent index, is None until `cancel_for_agent` first needs it
        # and again once the open set empties (a world waiting on 100k prompts that nobody
        # cancels by agent paid ~38 B an agent for it); while it is a dict, `_by_agent[a]`
        # holds exactly the ids in `_open` whose agent is `a`: the id itself while there is
        # one, a dict of them (in opening order) while there are two or more, no entry at
        # all while there is none (a dict per agent cost ~180 B of a waiting agent).
        self._open: dict[str, PromptOpened] = {}
        self._by_agent: dict[str, str | dict[str, None]] | None = None
        self._waiters: dict[str, _Waiter] = {}
        self._deadlines = DeadlineHeap(self._open)
        # The latest settlements, newest generation first (see `_RECENT_SETTLEMENTS`).
        self._recent: dict[str, _Remembered | PromptSettled] = {}
        self._older: dict[str, _Remembered | PromptSettled] = {}
        self._minted = 0
        self._opened = 0
        # The latest opening's time and deadline, shared by the next one if it is the same.
        self._last_opened_at = math.nan  # equal to no time: the first opening computes
        self._last_secs = self._last_deadline = math.nan
        self._opened_when_emptied = 0  # `_opened` when the open set last let its table go
        # One counter per Settlement, plain ints: an attribute add is cheaper than a dict's
        # read and store on every settlement.
        self._answered = self._cancelled = self._expired = 0

    def set_listener(self, listener: HubListener | None) -> None:
        """Replace the change listener (``None`` removes it).

        The listener is called while the hub's lock is held, so events of one hub arrive in
        the exact order the changes happened; it must be quick. If it raises, the error is
        logged and ignored.
        """
        with self._lock:
            self._listener = listener

    def attach_wake(self, wake: Wake) -> bool:
        """Attach the wake to nudge on every change; return False if one is attached already."""
        with self._lock:
            if self._wake is not None:
                return False
            self._wake = wake
            return True

    @property
    def timeout_secs(self) -> float:
        """The deadline given to requests opened from now on, in seconds (0: none)."""
        return self._timeout_secs

    def set_timeout_secs(self, secs: float) -> None:
        """Set the deadline for requests opened from now on; 0 waits forever.

        Requests already open keep the deadline they were opened with.

        Raises:
            ConfigError: ``secs`` is negative or not finite (a ``ValueError``).
        """
        self._timeout_secs = _checked_timeout(secs)

    def opened(self) -> list[PromptOpened]:
        """Every open request as the event that opened it (times included), in opening order."""
        with self._lock:
            return list(self._open.values())

    def pending(self, limit: int | None = None) -> list[tuple[str, InteractionRequest]]:
        """Return ``(agent_id, request)`` for every open request, in opening order, or for
        the first ``limit`` of them (a view that shows a few of 100k open prompts need not
        copy them all under the hub's lock: ~12 ms at 100k; ``stats().open`` counts them).

        Raises:
            ConfigError: ``limit`` is not an integer >= 0.
        """
        if limit is not None and (limit.__class__ is not int or limit < 0):
            raise ConfigError(f"`limit` must be an integer >= 0 or None, got {shown(limit)}")
        with self._lock:
            opened = self._open.values()
            if limit is not None:
                return [(e.agent_id, e.request) for e in islice(opened, limit)]
            return [(e.agent_id, e.request) for e in opened]

    def try_request(self, request_id: str) -> tuple[str, InteractionRequest] | None:
        """Return ``(agent_id, request)`` for the open request ``request_id``, else None."""
        with self._lock:
            entry = self._open.get(request_id)
            return None if entry is None else (entry.agent_id, entry.request)

    def try_settlement(self, request_id: str) -> PromptSettled | None:
        """Return how ``request_id`` last settled, or None if unknown or long forgotten.

        Only the most recent settlements are remembered (10,000). The event returned is
        equal to the one the listener was given (built again: see `_Remembered`).
        """
        with self._lock:
            kept = self._recent.get(request_id)
            if kept is None:
                kept = self._older.get(request_id)
        if kept is None or isinstance(kept, PromptSettled):
            return kept
        agent_id, how, value, choice, approved, opened_at, at, kind = kept
        return PromptSettled(
            agent_id,
            request_id,
            Settlement(how),
            InteractionResponse(request_id, value, choice, approved),
            opened_at,
            at,
            InteractionKind(kind),
        )

    def stats(self) -> HubStats:
        """Return a snapshot of the counters: opened, answered, cancelled, expired, open."""
        with self._lock:
            return HubStats(
                opened=self._opened,
                answered=self._answered,
                cancelled=self._cancelled,
                expired=self._expired,
                open=len(self._open),
            )

    def _open_entry(
        self, agent_id: str, request: InteractionRequest, waiter: _Waiter | None
    ) -> PromptOpened:
        """Add a request to the open set and report it; the one way in.

        Raises:
            TypeError: ``request`` is not an `InteractionRequest`.
            ConfigError: what `check_request` refuses.
        """
        screen_request(request)
        with self._lock:
            # Everything that may raise comes before the first change of state.
            offset = self._offset
            now = monotonic() + offset if offset is not None else self._now()
            request_id = request.id
            open_ = self._open
            if request_id:
                if request_id in open_:
                    raise DuplicateRequestError(f"request id {request_id!r} is already open")
            else:
                # `_mint` and `with_id` spelled out for the common case (a call each saved).
                self._minted = minted = self._minted + 1
                kind = request.kind
                request_id = f"{agent_id}-{kind._value_}-{minted}"  # not .value: a property
                if request_id in open_:
                    request_id = self._mint(agent_id, request)
                request = build_request(
                    request_id,
                    kind,
                    request.prompt,
                    request.choices,
                    request.stage,
                    request.required,
                    request.payload,
                )
            secs = self._timeout_secs
            # The event that reports the opening is also the open set's entry: one object
            # per prompt, handed to the listener as it is.
            if secs > 0:
                # Prompts opened at one instant with one timeout share one deadline float
                # (24 B each: a virtual-time world opens a tick's prompts at one `now`).
                deadline = self._last_deadline
                if now != self._last_opened_at or secs != self._last_secs:
                    deadline = self._last_deadline = now + secs
                    self._last_opened_at, self._last_secs = now, secs
                opened = build_prompt_opened(agent_id, request, now, deadline)
                # `DeadlineHeap.push`'s common case spelled out (a call saved): a deadline
                # no earlier than any queued goes on the FIFO.
                deadlines = self._deadlines
                fifo = deadlines._fifo
                if deadline > deadlines._heap_max and (not fifo or deadline >= fifo[-1].deadline):  # type: ignore[operator]
                    fifo.append(opened)
                    if deadline < deadlines.floor:  # noqa: PLR1730 (min() is a call)
                        deadlines.floor = deadline
                else:
                    deadlines.push(opened)
            else:
                opened = build_prompt_opened(agent_id, request, now, None)
            open_[request_id] = opened
            self._opened += 1
            by_agent = self._by_agent
            if by_agent is not None:
                if agent_id in by_agent:
                    self._index(agent_id, request_id)
                else:  # the common case, spelled out: the agent's only open request
                    by_agent[agent_id] = request_id
            if waiter is not None:
                self._waiters[request_id] = waiter
            listener = self._listener
            if listener is not None:
                try:
                    listener(opened)
                except Exception:
                    _log.exception("hub listener raised on %r; ignored", opened)
            return opened

    def _index(self, agent_id: str, request_id: str) -> None:
        """Add ``request_id`` to ``agent_id``'s open ids (see the invariant), if the index is
        kept; under the lock."""
        by_agent = self._by_agent
        if by_agent is None:
            return
        ids = by_agent.get(agent_id)
        if ids is None:
            by_agent[agent_id] = request_id
        elif isinstance(ids, str):
            by_agent[agent_id] = {ids: None, request_id: None}
        else:
            ids[request_id] = None

    def _ids_of(self, agent_id: str) -> list[str]:
        """The open ids of ``agent_id``, in opening order (the index is built if it is not
        kept: O(open requests) once, then kept current); under the lock."""
        by_agent = self._by_agent
        if by_agent is None:
            if not self._open:
                return []
            by_agent = self._by_agent = {}
            for opened in self._open.values():  # opening order, as the invariant wants
                self._index(opened.agent_id, opened.request.id)
        ids = by_agent.get(agent_id)
        if ids is None:
            return []
        if isinstance(ids, str):
            return [ids]
        return list(ids)

    def _mint(self, agent_id: str, request: InteractionRequest) -> str:
        """Mint the next free id; called under the lock."""
        while True:
            self._minted += 1
            minted = f"{agent_id}-{request.kind._value_}-{self._minted}"  # not .value: a property
            # Skip an id a caller chose by hand, rather than refuse a request without one.
            if minted not in self._open:
                return minted

    def _settle(  # noqa: PLR0915 - hot: every settlement, its common cases inlined
        self, request_id: str, how: Settlement, response: InteractionResponse | None
    ) -> PromptSettled | None:
        """Take ``request_id`` out of the open set and report it; the one way out.

        Called under the lock, which makes the first settlement win: a later one finds the
        request gone and returns None. ``response`` None means the neutral response.
        """
        open_ = self._open
        opened = open_.get(request_id)
        if opened is None:
            return None
        if response is not None and response.choice is not None:
            _check_choice(opened.request, response.choice)
        offset = self._offset
        # The clock may raise: read it before the first change of state.
        at = monotonic() + offset if offset is not None else self._now()
        del open_[request_id]
        agent_id = opened.agent_id
        by_agent = self._by_agent
        if by_agent is not None:
            ids = by_agent[agent_id]
            if isinstance(ids, str):
                del by_agent[agent_id]
            else:
                del ids[request_id]
                if len(ids) == 1:
                    by_agent[agent_id] = next(iter(ids))
        if not open_:
            if by_agent is not None:
                self._by_agent = None  # empty too (the invariant): rebuilt when next needed
            if self._opened - self._opened_when_emptied > _SHRINK_AFTER_OPENS:
                open_.clear()  # empty already: only its table goes
                self._opened_when_emptied = self._opened
        if how is _ANSWERED:
            self._answered += 1
        elif how is _CANCELLED:
            self._cancelled += 1
        else:
            self._expired += 1
        if response is None:
            response = build_response(request_id, "", None, None)  # the neutral response
        opened_at = opened.at
        kind = opened.request.kind
        event = build_prompt_settled(agent_id, request_id, how, response, opened_at, at, kind)
        recent = self._recent
        if response.__class__ is InteractionResponse:  # see `_Remembered`
            recent[request_id] = (
                agent_id,
                how._value_,
                response.value,
                response.choice,
                response.approved,
                opened_at,
                at,
                kind._value_,
            )
        else:
            recent[request_id] = event
        if len(recent) >= _RECENT_SETTLEMENTS:
            self._older, self._recent = recent, {}
        if opened.deadline is not None:
            # `DeadlineHeap.forget`'s common case spelled out (a call saved): the prompt
            # settling first in line.
            deadlines = self._deadlines
            fifo = deadlines._fifo
            if fifo and fifo[0] is opened:
                fifo.popleft()
                if not fifo and not deadlines._items:
                    deadlines.floor = math.inf  # nothing left: the next tick need not look
            else:
                deadlines.forget(opened)
        if self._waiters:
            waiter = self._waiters.pop(request_id, None)
            if waiter is not None:
                waiter.settled = event
                waiter.event.set()
        listener = self._listener
        if listener is not None:
            try:
                listener(event)
            except Exception:
                _log.exception("hub listener raised on %r; ignored", event)
        return event

    def _settle_and_nudge(
        self, request_id: str, how: Settlement, response: InteractionResponse | None
    ) -> bool:
        """Settle one request under the lock, nudging the wake if it was still open.

        A person's answer or cancel wakes the tick thread first, then settles: the thread's
        wake-up (a futex, a thread scheduled on another core: tens of microseconds when
        the loop has been parked) overlaps the settlement's bookkeeping, which this thread
        finishes holding the GIL, before the woken one can run Python (wake_latency: ~117
        -> ~105 us). Should the woken thread run first anyway (a GIL switch between), it
        finds nothing, ticks to its fixed point and parks; the settlement's post to the
        inbox (the listener) and the nudge after it wake it again. An id that is not open
        wakes nobody (read without the lock: one dict lookup; a race only costs a wake-up),
        nor does a choice the request does not offer: it is refused here, before the nudge,
        as `_settle` would refuse it (and still does, under the lock).
        """
        wake = self._wake
        if wake is not None:
            opened = self._open.get(request_id)
            if opened is not None:
                if response is not None and response.choice is not None:
                    _check_choice(opened.request, response.choice)
                wake.notify()
        with self._lock:
            settled = self._settle(request_id, how, response) is not None
        if settled and wake is not None:
            wake.notify()
        return settled

    def _cancel_all(self, ids: Callable[[], list[str]]) -> int:
        """Cancel the requests ``ids()`` lists; listing and cancelling under one lock hold
        makes it one step, its settlements reported together with no other change between."""
        with self._lock:
            count = sum(self._settle(i, _CANCELLED, None) is not None for i in ids())
        if count:
            self._nudge()
        return count

    def _nudge(self) -> None:
        """Nudge the attached wake, if any (outside the lock: a wake never calls back)."""
        wake = self._wake
        if wake is not None:
            wake.notify()


def check_request(request: object) -> None:
    """Refuse what cannot be opened as a prompt: not an `InteractionRequest`, or one built by
    hand with a bad ``kind`` or ``choices`` (the class methods build good ones), which would
    otherwise fail later, at its settlement or expiry. Also for code that opens prompts on
    another's behalf at a fixed point (the world's dispatch), so that a replay, which opens
    none, refuses the same request at the same step.

    Raises:
        TypeError: ``request`` is not an `InteractionRequest`.
        ConfigError: its ``id``, ``prompt`` or ``stage`` is not a string, its ``kind`` not
            an `InteractionKind`, ``required`` not a bool, or it is a choice without a
            non-empty tuple of string choices (naming the request and the field).
    """
    if not isinstance(request, InteractionRequest):
        raise TypeError(f"`request` must be an InteractionRequest, got {shown(request, 80)}")
    kind, choices = request.kind, request.choices
    texts: tuple[tuple[str, object], ...] = (
        ("id", request.id),
        ("prompt", request.prompt),
        ("stage", request.stage),
    )
    wrong = [(name, value) for name, value in texts if not isinstance(value, str)]
    required: object = request.required  # typed callers are right; untyped ones are checked
    if wrong:
        name, value = wrong[0]
        why = f"`{name}` must be a string, got {shown(value)}"
    elif required is not True and required is not False:
        why = f"`required` must be True or False, got {shown(required)}"
    elif kind.__class__ is not InteractionKind:
        why = f"`kind` must be an InteractionKind, got {shown(kind)}"
    elif kind is _CHOICE and not (
        type(choices) is tuple and len(choices) > 0 and all(type(c) is str for c in choices)
    ):
        why = f"a choice needs a non-empty tuple of strings, got {shown(choices)}"
    else:
        return
    raise ConfigError(f"request {shown(request.id)}: {why}")


def screen_request(request: object) -> None:
    """`check_request`, paid for only by a request that could fail it: a plain request of
    a kind other than choice passes on a few class checks. The hub's opening and the
    world's dispatch both screen with it, so that a replay (which opens no prompt) refuses
    exactly the requests a live run's hub refuses, at the same step.

    Raises:
        TypeError, ConfigError: as `check_request`.
    """
    if (
        request.__class__ is not InteractionRequest
        or request.kind.__class__ is not InteractionKind
        or request.kind is _CHOICE
        or request.id.__class__ is not str
        or request.prompt.__class__ is not str
        or request.stage.__class__ is not str
        or request.required.__class__ is not bool
    ):
        check_request(request)


def check_response(response: InteractionResponse) -> None:
    """Refuse an answer whose ``value`` is not a string or whose ``approved`` is neither a
    bool nor None (a behaviour would get the int, or read ``"no"`` as a denial by luck).

    Raises:
        ConfigError: naming the request and the field.
    """
    value: object = response.value  # typed callers are right; untyped ones are checked
    approved: object = response.approved
    if not isinstance(value, str):
        why = f"`value` must be a string, got {shown(value)}"
    elif approved is not None and approved.__class__ is not bool:
        why = f"`approved` must be True, False or None, got {shown(approved)}"
    else:
        return
    raise ConfigError(f"answer to {shown(response.request_id)}: {why}")


def _check_choice(request: InteractionRequest, choice: object) -> None:
    """Refuse an answer's ``choice`` that names no choice of ``request`` (a behaviour would
    index its choices with it); before any change of state.

    Raises:
        ConfigError: ``request`` is a choice and ``choice`` is not one of its indices.
    """
    if request.kind is _CHOICE and not (type(choice) is int and 0 <= choice < len(request.choices)):
        raise ConfigError(
            f"prompt {request.id!r} offers choices 0..{len(request.choices) - 1},"
            f" got choice {shown(choice)}"
        )


def _checked_timeout(secs: float) -> float:
    """Return ``secs`` as a float, or raise ConfigError if it is negative or not finite."""
    if not math.isfinite(secs) or secs < 0:
        raise ConfigError(f"`timeout_secs` must be a finite number >= 0, got {secs}")
    return float(secs)
