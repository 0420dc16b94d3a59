"""Cancellation: tokens that fire once, trees of them, and the per-agent interrupt handle."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["CancelToken", "Cancelled", "InterruptHandle"]

log = logging.getLogger(__name__)

INTERRUPTED = "interrupted by user"


class Cancelled(BaseException):  # trio's name: a signal, not an error
    """Raised inside work whose token was cancelled; carries the token's reason.

    A ``BaseException`` (like trio's ``Cancelled``) so that a tool's broad
    ``except Exception`` does not swallow it.
    """

    def __init__(self, reason: str = "cancelled") -> None:
        super().__init__(reason)
        self.reason = reason


Callback = Callable[["CancelToken"], object]


class CancelToken:
    """A thread-safe flag that fires once, with a reason, and tells whoever listens.

    ``cancel`` is idempotent: the first reason is kept and callbacks run exactly once.
    A callback added after the cancel runs at once, on the adding thread. A callback that
    raises is logged and does not stop the other callbacks or the canceller. ``child()``
    gives a token that is cancelled with this one, never the reverse.
    """

    __slots__ = ("__weakref__", "_callbacks", "_event", "_lock", "_reason")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Invariant: `_reason` goes from None to a str exactly once, under `_lock`;
        # `_callbacks` is None from that moment on, so no callback can be added late and
        # missed, or run twice.
        self._reason: str | None = None
        self._callbacks: list[Callback] | None = []
        self._event: threading.Event | None = None  # made lazily: most tokens never wait

    @property
    def cancelled(self) -> bool:
        """Whether the token has fired."""
        return self._reason is not None

    @property
    def reason(self) -> str | None:
        """The first reason given to ``cancel``, or None while not cancelled."""
        return self._reason

    def cancel(self, reason: str = "cancelled") -> bool:
        """Fire the token; returns True for the call that fired it, False after."""
        with self._lock:
            if self._reason is not None:
                return False
            self._reason = reason
            callbacks, self._callbacks = self._callbacks, None
            event = self._event
        if event is not None:
            event.set()
        for callback in callbacks or ():
            self._run(callback)
        return True

    def add_callback(self, callback: Callback) -> None:
        """Call ``callback(token)`` when the token fires (at once if it already has)."""
        with self._lock:
            if self._callbacks is not None:
                self._callbacks.append(callback)
                return
        self._run(callback)

    def remove_callback(self, callback: Callback) -> bool:
        """Forget a callback that has not run yet; returns whether it was registered."""
        with self._lock:
            if self._callbacks is None:
                return False
            try:
                self._callbacks.remove(callback)
            except ValueError:
                return False
            return True

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the token fires or ``timeout`` passes; returns ``cancelled``.

        A timeout longer than a lock can wait (``threading.TIMEOUT_MAX``, ~292 years)
        waits for the token alone instead of raising ``OverflowError``.
        """
        if timeout is not None and timeout > threading.TIMEOUT_MAX:
            timeout = None
        with self._lock:
            if self._reason is not None:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def child(self) -> CancelToken:
        """A new token cancelled whenever this one is (with the same reason).

        The parent holds its child weakly: a child dropped before the parent fires takes
        its link out of the parent, so a long-lived token (a turn's) that hands out a
        child per call does not keep every one. A child keeps its own parent alive (a
        grandchild still follows the root when the child between them was dropped).
        """
        child = CancelToken()
        held = weakref.ref(child)

        def follow(parent: CancelToken) -> None:
            alive = held()
            if alive is not None:
                alive.cancel(parent.reason or "cancelled")

        self.add_callback(follow)
        if not self.cancelled:
            weakref.finalize(child, self._unlink, follow).atexit = False
        return child

    def _unlink(self, callback: Callback) -> None:
        # A dead child's finalizer: it may run inside a collection that an allocation made
        # while this thread holds `_lock` (the lock is not reentrant), so it never waits
        # for it. Missed, the link stays behind, inert: it holds its child weakly.
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._callbacks is not None and callback in self._callbacks:
                self._callbacks.remove(callback)
        finally:
            self._lock.release()

    def raise_if_cancelled(self) -> None:
        """Raise ``Cancelled`` with the token's reason if it has fired."""
        reason = self._reason
        if reason is not None:
            raise Cancelled(reason)

    def __reduce__(self) -> tuple[Any, ...]:
        # A token crossing a process boundary (a Dask worker) cannot stay linked to this
        # one; it arrives as a fresh token in the same state. Cancellation there is best
        # effort: the lane cancels the remote future and drops the outcome.
        return (_rebuild_token, (self._reason,))

    def __repr__(self) -> str:
        state = f"cancelled {self._reason!r}" if self._reason is not None else "live"
        return f"<CancelToken {state}>"

    def _run(self, callback: Callback) -> None:
        try:
            callback(self)
        except Exception:
            # Rule: a raising callback must not stop the others or the canceller.
            log.exception("cancel callback %r raised", callback)


def _rebuild_token(reason: str | None) -> CancelToken:
    token = CancelToken()
    if reason is not None:
        token.cancel(reason)
    return token


class InterruptHandle:
    """The interrupt switch of one agent: one token per turn, re-armed at each turn start.

    ``interrupt()`` cancels the current turn's token. ``rearm()`` (called by the world
    when a turn starts) swaps in a fresh token, so an interrupt that landed while the
    agent was idle does not eat the next turn; tokens handed out before stay cancelled.
    """

    __slots__ = ("_token",)

    def __init__(self) -> None:
        # No lock: `_token` is one reference, read and replaced whole (each atomic under
        # the GIL), so an interrupt racing a rearm cancels the old token or the new one,
        # as it did under a lock; that lock cost a round trip (~0.2-0.5 us here) at every
        # agent's end (AbortTerminalWork fires the handle) and every turn's start.
        self._token = CancelToken()

    def token(self) -> CancelToken:
        """The current turn's token (hand it, or a child of it, to the turn's work)."""
        return self._token

    def interrupt(self, reason: str = INTERRUPTED) -> bool:
        """Cancel the current turn's token; returns False if it was already cancelled."""
        return self._token.cancel(reason)

    def is_interrupted(self) -> bool:
        """Whether the current turn's token has been cancelled."""
        return self._token.cancelled

    def rearm(self) -> CancelToken:
        """Swap in a fresh token for a new turn and return it."""
        fresh = self._token = CancelToken()
        return fresh
