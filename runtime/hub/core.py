"""The interaction hub: prompts for a person, with deadlines, cancellation and wake-ups.

``InteractionHub`` is a thread-safe registry of open requests keyed by request id. A tool in
a lane job calls ``ask`` and blocks (off the lane) until a person answers; the tick thread
calls ``open`` and learns of the settlement from the listener, which the world posts to its
inbox. Every request leaves the open set exactly once, by ``answer``, ``cancel`` (also
``cancel_for_agent`` and ``close``) or expiry, and the first of these to take the hub's lock
wins. Everything but an answer resolves to the same neutral response, which an approval
reads as deny.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from components.interaction import (
    InteractionRequest,
    InteractionResponse,
    PromptOpened,
    PromptSettled,
    Settlement,
)
from runtime.cancel import CancelToken
from runtime.clock import Clock, MonotonicClock
from runtime.errors import ConfigError, DuplicateRequestError
from runtime.hub.deadlines import DeadlineHeap
from runtime.lane.parking import off_lane
from runtime.wake import Wake

__all__ = ["HubEvent", "HubListener", "HubStats", "InteractionHub"]

HubEvent: TypeAlias = PromptOpened | PromptSettled
# `object`, not `None`: whatever a listener returns (an inbox sequence number, say) is ignored.
HubListener: TypeAlias = Callable[[HubEvent], object]

_log = logging.getLogger("runtime.hub")

# `try_settlement` remembers at least this many of the latest settlements (at most twice
# as many): two generations of this size, the older dropped whole when the newer fills.
# Dropping the oldest one by one from a dict (`del d[next(iter(d))]`) costs O(n) per call
# once deleted slots pile up at the front: ~10 µs a settlement at this size (measured).
_RECENT_SETTLEMENTS = 10_000


# The longest single timed wait: `threading.TIMEOUT_MAX` is the bound, and a day is plenty
# for one slice of a longer wait.
_LONGEST_WAIT = min(86_400.0, threading.TIMEOUT_MAX)


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


class InteractionHub:
    """A thread-safe registry of prompts waiting for a person.

    ``clock`` dates openings, settlements and deadlines (default: ``MonotonicClock()``).
    ``timeout_secs`` is the deadline given to each request at opening; 0 waits forever.
    ``listener`` hears of every opening and every settlement, in the order they happened.
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        timeout_secs: float = 3600.0,
        listener: HubListener | None = None,
    ) -> None:
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._now = self._clock.now
        self._timeout_secs = _checked_timeout(timeout_secs)
        self._listener = listener
        self._wake: Wake | None = None
        # Reentrant so that a listener calling back into the hub cannot deadlock it; its
        # nested events still come out in the order the changes happened.
        self._lock = threading.RLock()
        # Invariant: `_open` holds exactly the open requests, in opening order, each as the
        # event that opened it; `_by_agent[a]` holds exactly the ids in `_open` whose agent
        # is `a` (no empty sets); `_waiters` holds the open requests an `ask` waits on.
        self._open: dict[str, PromptOpened] = {}
        self._by_agent: dict[str, dict[str, None]] = {}
        self._waiters: dict[str, _Waiter] = {}
        self._deadlines = DeadlineHeap(self._open)
        # The latest settlements, newest generation first (see `_RECENT_SETTLEMENTS`).
        self._recent: dict[str, PromptSettled] = {}
        self._older: dict[str, PromptSettled] = {}
        self._minted = 0
        self._opened = 0
        # One counter per Settlement; plain ints, since a dict keyed by an Enum member
        # hashes it through a Python-level `__hash__` on every settlement.
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

    def open(self, agent_id: str, request: InteractionRequest) -> str:
        """Open ``request`` for ``agent_id`` without waiting and return its request id.

        An empty ``request.id`` gets a minted one, ``<agent>-<kind>-<n>``. The settlement is
        reported to the listener.

        Raises:
            DuplicateRequestError: a request with this id is already open.
        """
        opened = self._open_entry(agent_id, request, None)
        wake = self._wake
        if wake is not None:
            wake.notify()
        return opened.request.id

    def ask(
        self,
        agent_id: str,
        request: InteractionRequest,
        *,
        cancel: CancelToken | None = None,
    ) -> InteractionResponse:
        """Open ``request`` for ``agent_id`` and block until it settles; return the response.

        A timeout or a cancellation returns the neutral response. On a real clock the wait
        ends by itself at the deadline; on a virtual clock ``expire_due`` ends it. Inside a
        lane job the whole wait is spent off the lane. ``cancel`` (the asking job's token)
        withdraws the prompt when it fires, whenever that is: before the prompt opens (then
        it never opens), while it is open, or in between.

        Raises:
            DuplicateRequestError: a request with this id is already open.
            Cancelled: ``cancel`` fired before the prompt was opened.
        """
        if cancel is not None:
            cancel.raise_if_cancelled()
        waiter = _Waiter()
        opened = self._open_entry(agent_id, request, waiter)
        self._nudge()
        request_id = opened.request.id

        def withdraw(_token: CancelToken) -> None:
            self.cancel(request_id)

        if cancel is not None:
            # Added after the prompt is open: a token that fired in between runs `withdraw`
            # at once, so no cancel can fall into a window and leave an orphaned prompt.
            cancel.add_callback(withdraw)
        try:
            settled = self._wait(opened, waiter)
        except BaseException:
            # The asker is gone (interrupted), so nobody could receive an answer: leave no
            # orphaned prompt behind.
            self.cancel(request_id)
            raise
        finally:
            if cancel is not None:
                cancel.remove_callback(withdraw)
        return settled.response

    def answer(self, response: InteractionResponse) -> bool:
        """Settle the open request ``response.request_id`` with ``response``.

        Returns False, changing nothing, if that request is unknown or already settled.
        An answer wins whenever it takes the lock first, even at or past the deadline.
        """
        with self._lock:
            settled = self._settle(response.request_id, Settlement.ANSWERED, response)
        if settled is None:
            return False
        wake = self._wake
        if wake is not None:
            wake.notify()
        return True

    def cancel(self, request_id: str) -> bool:
        """Settle the open request ``request_id`` with the neutral response.

        Returns False, changing nothing, if that request is unknown or already settled.
        """
        return self._settle_and_nudge(request_id, Settlement.CANCELLED, None)

    def cancel_for_agent(self, agent_id: str) -> int:
        """Cancel every open request of ``agent_id`` and return how many were cancelled.

        Other agents' requests are untouched. A cancelled run must leave no orphaned prompt.
        """
        return self._cancel_all(lambda: list(self._by_agent.get(agent_id, ())))

    def close(self) -> int:
        """Cancel every open request and return how many were cancelled.

        The hub stays usable afterwards; closing only clears what was waiting.
        """
        return self._cancel_all(lambda: list(self._open))

    def expire_due(self, now: float) -> list[str]:
        """Expire every open request whose deadline is at or before ``now``; return their ids.

        Expired requests settle with the neutral response, earliest deadline first.
        """
        expired: list[str] = []
        with self._lock:
            deadlines = self._deadlines
            while (top := deadlines.top()) is not None and top.deadline <= now:  # type: ignore[operator]
                deadlines.pop()
                self._settle(top.request.id, Settlement.EXPIRED, None)
                expired.append(top.request.id)
        if expired:
            self._nudge()
        return expired

    def next_deadline(self) -> float | None:
        """Return the earliest deadline among open requests, or None if none has one."""
        with self._lock:
            top = self._deadlines.top()
        return None if top is None else top.deadline

    def reopen(
        self,
        agent_id: str,
        request: InteractionRequest,
        opened_at: float,
        deadline: float | None,
    ) -> None:
        """Put back a request that was open when the process died, as it was.

        For `runtime.resume`: the request keeps its id, its opening time and its deadline
        (already past, it expires at the next ``expire_due``), and no opening is reported,
        since the journal holds the first one. Its settlement is reported as usual.

        Raises:
            DuplicateRequestError: a request with this id is already open.
            ConfigError: ``request`` has no id.
        """
        if not request.id:
            raise ConfigError("`request.id` must name the request to reopen, got ''")
        with self._lock:
            if request.id in self._open:
                raise DuplicateRequestError(f"request id {request.id!r} is already open")
            self._opened += 1
            opened = PromptOpened(agent_id, request, opened_at, deadline)
            self._open[request.id] = opened
            self._by_agent.setdefault(agent_id, {})[request.id] = None
            if deadline is not None:
                self._deadlines.push(opened)
        self._nudge()

    def opened(self) -> list[PromptOpened]:
        """Every open request as the event that opened it (times included), in opening order."""
        with self._lock:
            return list(self._open.values())

    def pending(self) -> list[tuple[str, InteractionRequest]]:
        """Return ``(agent_id, request)`` for every open request, in opening order."""
        with self._lock:
            return [(e.agent_id, e.request) for e in self._open.values()]

    def try_request(self, request_id: str) -> tuple[str, InteractionRequest] | None:
        """Return ``(agent_id, request)`` for the open request ``request_id``, else None."""
        with self._lock:
            entry = self._open.get(request_id)
            return None if entry is None else (entry.agent_id, entry.request)

    def try_settlement(self, request_id: str) -> PromptSettled | None:
        """Return how ``request_id`` last settled, or None if unknown or long forgotten.

        Only the most recent settlements are remembered (10,000).
        """
        with self._lock:
            settled = self._recent.get(request_id)
            return settled if settled is not None else self._older.get(request_id)

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
        """Add a request to the open set and report it; the one way in."""
        with self._lock:
            # Everything that may raise comes before the first change of state.
            now = self._now()
            request_id = request.id
            open_ = self._open
            if request_id:
                if request_id in open_:
                    raise DuplicateRequestError(f"request id {request_id!r} is already open")
            else:
                request_id = self._mint(agent_id, request)
                request = request.with_id(request_id)
            secs = self._timeout_secs
            deadline = now + secs if secs > 0 else None
            # The event that reports the opening is also the open set's entry: one object
            # per prompt, handed to the listener as it is.
            opened = PromptOpened(agent_id, request, now, deadline)
            open_[request_id] = opened
            self._opened += 1
            ids = self._by_agent.get(agent_id)
            if ids is None:
                ids = self._by_agent[agent_id] = {}
            ids[request_id] = None
            if deadline is not None:
                self._deadlines.push(opened)
            if waiter is not None:
                self._waiters[request_id] = waiter
            if self._listener is not None:
                self._emit(opened)
            return opened

    def _mint(self, agent_id: str, request: InteractionRequest) -> str:
        """Mint the next free id; called under the lock."""
        while True:
            self._minted += 1
            minted = f"{agent_id}-{request.kind._value_}-{self._minted}"  # not .value: a property
            # Skip an id a caller chose by hand, rather than refuse a request without one.
            if minted not in self._open:
                return minted

    def _settle(
        self, request_id: str, how: Settlement, response: InteractionResponse | None
    ) -> PromptSettled | None:
        """Take ``request_id`` out of the open set and report it; the one way out.

        Called under the lock, which makes the first settlement win: a later one finds the
        request gone and returns None. ``response`` None means the neutral response.
        """
        opened = self._open.get(request_id)
        if opened is None:
            return None
        at = self._now()  # may raise: read it before the first change of state
        del self._open[request_id]
        agent_id = opened.agent_id
        agent_ids = self._by_agent[agent_id]
        del agent_ids[request_id]
        if not agent_ids:
            del self._by_agent[agent_id]
        if how is Settlement.ANSWERED:
            self._answered += 1
        elif how is Settlement.CANCELLED:
            self._cancelled += 1
        else:
            self._expired += 1
        if response is None:
            response = InteractionResponse.neutral(request_id)
        event = PromptSettled(
            agent_id, request_id, how, response, opened.at, at, opened.request.kind
        )
        recent = self._recent
        recent[request_id] = event
        if len(recent) >= _RECENT_SETTLEMENTS:
            self._older, self._recent = recent, {}
        if opened.deadline is not None:
            self._deadlines.forget(opened)
        if self._waiters:
            waiter = self._waiters.pop(request_id, None)
            if waiter is not None:
                waiter.settled = event
                waiter.event.set()
        if self._listener is not None:
            self._emit(event)
        return event

    def _settle_and_nudge(
        self, request_id: str, how: Settlement, response: InteractionResponse | None
    ) -> bool:
        """Settle one request under the lock, then nudge the wake if it was still open."""
        with self._lock:
            settled = self._settle(request_id, how, response) is not None
        if settled:
            self._nudge()
        return settled

    def _cancel_all(self, ids: Callable[[], list[str]]) -> int:
        """Cancel the requests ``ids()`` lists; listing and cancelling under one lock hold
        makes it one step, its settlements reported together with no other change between."""
        with self._lock:
            count = sum(self._settle(i, Settlement.CANCELLED, None) is not None for i in ids())
        if count:
            self._nudge()
        return count

    def _wait(self, opened: PromptOpened, waiter: _Waiter) -> PromptSettled:
        """Wait, off the lane, until ``opened`` settles, expiring it at its deadline on a
        real clock; the one place a thread waits for a person."""
        deadline = opened.deadline
        event = waiter.event
        with off_lane():
            if deadline is None or self._clock.virtual:
                event.wait()
            else:
                # In slices no longer than a lock can wait for: a deadline 1e300 s away
                # (`timeout_secs=1e300`) waits, it does not raise OverflowError.
                while not event.wait(min(_LONGEST_WAIT, max(0.0, deadline - self._now()))):
                    if self._now() >= deadline:
                        self._expire(opened)
                        break
        assert waiter.settled is not None
        return waiter.settled

    def _expire(self, opened: PromptOpened) -> None:
        """Expire ``opened`` if it is still the open request with its id (an answer may
        have won)."""
        with self._lock:
            if self._open.get(opened.request.id) is not opened:
                return
            self._settle(opened.request.id, Settlement.EXPIRED, None)
        self._nudge()

    def _emit(self, event: HubEvent) -> None:
        """Report ``event`` to the listener, under the lock; a failing listener is logged."""
        listener = self._listener
        if listener is None:
            return
        try:
            listener(event)
        except Exception:
            _log.exception("hub listener raised on %r; ignored", event)

    def _nudge(self) -> None:
        """Nudge the attached wake, if any (outside the lock: a wake never calls back)."""
        wake = self._wake
        if wake is not None:
            wake.notify()


def _checked_timeout(secs: float) -> float:
    """Return ``secs`` as a float, or raise ConfigError if it is negative or not finite."""
    if not math.isfinite(secs) or secs < 0:
        raise ConfigError(f"`timeout_secs` must be a finite number >= 0, got {secs}")
    return float(secs)
