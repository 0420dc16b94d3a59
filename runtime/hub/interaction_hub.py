"""The interaction hub: prompts for a person, with deadlines, cancellation and wake-ups.

``InteractionHub`` is a thread-safe registry of open requests keyed by request id. A tool in
a lane job calls ``ask`` and blocks (off the lane) until a person answers; the tick thread
calls ``open`` and learns of the settlement from the listener, which the world posts to its
inbox. Every request leaves the open set exactly once, by ``answer``, ``cancel`` (also
``cancel_for_agent`` and ``close``) or expiry, and the first of these to take the hub's lock
wins. Everything but an answer resolves to the same neutral response, which an approval
reads as deny. The bookkeeping lives in `runtime.hub.core`.
"""

from __future__ import annotations

import math
import threading

from components.interaction import (
    InteractionRequest,
    InteractionResponse,
    PromptOpened,
    PromptSettled,
    Settlement,
)
from runtime.cancel import CancelToken
from runtime.errors import ConfigError, DuplicateRequestError
from runtime.hub.core import HubCore, _Waiter, check_response
from runtime.lane.parking import off_lane
from runtime.lane.values import shown

__all__ = ["InteractionHub"]


# The longest single timed wait: `threading.TIMEOUT_MAX` is the bound, and a day is plenty
# for one slice of a longer wait.
_LONGEST_WAIT = min(86_400.0, threading.TIMEOUT_MAX)
# Enum members as module names, as `tests/world/test_enum_reads.py` explains and counts.
_ANSWERED = Settlement.ANSWERED
_CANCELLED = Settlement.CANCELLED
_EXPIRED = Settlement.EXPIRED


class InteractionHub(HubCore):
    """A thread-safe registry of prompts waiting for a person.

    ``clock`` dates openings, settlements and deadlines (default: ``MonotonicClock()``).
    ``timeout_secs`` is the deadline given to each request at opening; 0 waits forever.
    ``listener`` hears of every opening and every settlement, in the order they happened.
    """

    def open(self, agent_id: str, request: InteractionRequest) -> str:
        """Open ``request`` for ``agent_id`` without waiting and return its request id.

        An empty ``request.id`` gets a minted one, ``<agent>-<kind>-<n>``. The settlement is
        reported to the listener.

        Raises:
            DuplicateRequestError: a request with this id is already open.
            TypeError: ``request`` is not an `InteractionRequest`.
            ConfigError: the request is malformed (see `check_request`: a field of the
                wrong kind, a choice without choices).
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
            TypeError: ``request`` is not an `InteractionRequest`.
            ConfigError: the request's ``kind`` or ``choices`` are malformed.
            Cancelled: ``cancel`` fired before the prompt was opened.
        """
        if cancel is not None:
            cancel.raise_if_cancelled()
        waiter = _Waiter()
        opened = self._open_entry(agent_id, request, waiter)
        self._nudge()

        def withdraw(_token: CancelToken) -> None:
            self._settle_opened(opened, _CANCELLED)

        if cancel is not None:
            # Added after the prompt is open: a token that fired in between runs `withdraw`
            # at once, so no cancel can fall into a window and leave an orphaned prompt.
            cancel.add_callback(withdraw)
        try:
            settled = self._wait(opened, waiter)
        except BaseException:
            # The asker is gone (interrupted), so nobody could receive an answer: leave no
            # orphaned prompt behind.
            self._settle_opened(opened, _CANCELLED)
            raise
        finally:
            if cancel is not None:
                cancel.remove_callback(withdraw)
        return settled.response

    def answer(self, response: InteractionResponse) -> bool:
        """Settle the open request ``response.request_id`` with ``response``.

        Returns False, changing nothing, if that request is unknown or already settled.
        An answer wins whenever it takes the lock first, even at or past the deadline.

        Raises:
            TypeError: ``response`` is not an `InteractionResponse`.
            ConfigError: the request is a choice and ``response.choice`` is not one of its
                indices, ``response.value`` is not a string or ``response.approved``
                neither a bool nor None (nothing changes: the request stays open).
        """
        if response.__class__ is not InteractionResponse and not isinstance(
            response, InteractionResponse
        ):
            raise TypeError(f"`response` must be an InteractionResponse, got {shown(response, 80)}")
        if response.value.__class__ is not str or response.approved is not None:
            check_response(response)  # the plain text answer needs no more
        return self._settle_and_nudge(response.request_id, _ANSWERED, response)

    def cancel(self, request_id: str) -> bool:
        """Settle the open request ``request_id`` with the neutral response.

        Returns False, changing nothing, if that request is unknown or already settled.
        """
        return self._settle_and_nudge(request_id, _CANCELLED, None)

    def cancel_for_agent(self, agent_id: str) -> int:
        """Cancel every open request of ``agent_id`` and return how many were cancelled.

        Other agents' requests are untouched. A cancelled run must leave no orphaned prompt.
        """
        return self._cancel_all(lambda: self._ids_of(agent_id))

    def close(self) -> int:
        """Cancel every open request and return how many were cancelled.

        The hub stays usable afterwards; closing only clears what was waiting.
        """
        return self._cancel_all(lambda: list(self._open))

    def expire_due(self, now: float) -> list[str]:
        """Expire every open request whose deadline is at or before ``now``; return their ids.

        Expired requests settle with the neutral response, earliest deadline first.
        """
        deadlines = self._deadlines
        if now < deadlines.floor:
            # Nothing is due (the floor is at most the earliest deadline): the tick's
            # expiry stage, every tick, takes no lock. See `DeadlineHeap.floor`.
            return []
        expired: list[str] = []
        with self._lock:
            while (top := deadlines.top()) is not None and top.deadline <= now:  # type: ignore[operator]
                # `_settle` drops the item (at the front: `forget`'s first case) after the
                # clock's read, its one step that may raise: a clock that raises leaves the
                # prompt open with its deadline still queued, due at the next look.
                self._settle(top.request.id, _EXPIRED, None)
                expired.append(top.request.id)
        if expired:
            self._nudge()
        return expired

    def next_deadline(self) -> float | None:
        """Return the earliest deadline among open requests, or None if none has one."""
        if self._deadlines.floor == math.inf:
            return None  # no deadline is live (see `DeadlineHeap.floor`): no lock needed
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
            ConfigError: ``request`` has no id, or ``deadline`` is not a finite number
                (None is no deadline; an infinite one would hide every deadline from
                ``next_deadline``, a NaN one would misorder them).
        """
        if not request.id:
            raise ConfigError("`request.id` must name the request to reopen, got ''")
        if deadline is not None and not (
            isinstance(deadline, (int, float)) and math.isfinite(deadline)
        ):
            raise ConfigError(
                f"`deadline` of {request.id!r} must be a finite time or None, got {deadline!r}"
            )
        with self._lock:
            if request.id in self._open:
                raise DuplicateRequestError(f"request id {request.id!r} is already open")
            self._opened += 1
            opened = PromptOpened(agent_id, request, opened_at, deadline)
            self._open[request.id] = opened
            self._index(agent_id, request.id)
            if deadline is not None:
                self._deadlines.push(opened)
        self._nudge()

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
                        self._settle_opened(opened, _EXPIRED)
                        break
        assert waiter.settled is not None
        return waiter.settled

    def _settle_opened(self, opened: PromptOpened, how: Settlement) -> None:
        """Settle ``opened`` (``how``: expired, or cancelled by its asker) if it is still
        the open request with its id: an answer may have won, and a newer request may
        have reused the id since, which is not the asker's to settle (an ask's cancel
        token firing between its wait's end and its callback's removal withdrew it)."""
        with self._lock:
            if self._open.get(opened.request.id) is not opened:
                return
            self._settle(opened.request.id, how, None)
        self._nudge()
