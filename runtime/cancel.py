"""Cancellation: tokens that fire once, trees of them, and the per-agent interrupt handle."""

from __future__ import annotations

import itertools
import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["CancelToken", "Cancelled", "InterruptHandle"]

log = logging.getLogger(__name__)

INTERRUPTED = "interrupted by user"


# The locks tokens share, one picked in turn for each new token (`next` of a count is one
# step under the GIL); a power of two of them, wider than the threads that use tokens at
# once. Re-entrant: a thread that holds one (for a few lines, never two at once) may run
# a finalizer or a signal handler that uses another token with the same lock, which a
# plain lock would deadlock.
_LOCKS = tuple(threading.RLock() for _ in range(64))
_LOCK_MASK = len(_LOCKS) - 1
_lock_turns = itertools.count()


def _reinit_locks() -> None:
    # A fork copies a lock another thread held into a child where that thread does not
    # exist: every token using it would wait for ever there (one in 64, not just the
    # token that was busy).
    for lock in _LOCKS:
        lock._at_fork_reinit()  # type: ignore[attr-defined]


os.register_at_fork(after_in_child=_reinit_locks)


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
        # One of the locks tokens share (`_LOCKS`): a lock of its own and a list for its
        # callbacks were two of the ~18 objects the collector walks for every agent in a
        # turn, and two allocations for every turn and every lane job.
        self._lock = _LOCKS[next(_lock_turns) & _LOCK_MASK]
        # Invariant: `_reason` goes from None to a str exactly once, under `_lock`;
        # `_callbacks` is None from that moment on, so no callback can be added late and
        # missed, or run twice. Before that: None (no callback), the one callback, or a
        # list (made at the second, kept as callbacks are removed; a list is no callback:
        # it cannot be called).
        self._reason: str | None = None
        self._callbacks: Callback | list[Callback] | None = None
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
        if callbacks.__class__ is list:
            for callback in callbacks:
                self._run(callback)
        elif callbacks is not None:
            self._run(callbacks)  # type: ignore[arg-type]
        return True

    def add_callback(self, callback: Callback) -> None:
        """Call ``callback(token)`` when the token fires (at once if it already has)."""
        with self._lock:
            if self._reason is None:
                callbacks = self._callbacks
                if callbacks is None:
                    self._callbacks = callback
                    return
                if callbacks.__class__ is list:
                    callbacks.append(callback)
                    return
                both = [callbacks, callback]
                # The list's allocation may set off a collection whose finalizers, run on
                # this thread (the lock is re-entrant), fire this very token.
                if self._reason is None:
                    self._callbacks = both  # type: ignore[assignment]
                    return
        self._run(callback)

    def remove_callback(self, callback: Callback) -> bool:
        """Forget a callback that has not run yet; returns whether it was registered."""
        with self._lock:
            removed = self._forget(callback)
        return removed is not None  # (its last reference, if it is, goes out of the lock)

    def _forget(self, callback: Callback) -> Callback | None:
        """`remove_callback` with ``_lock`` held: the callback taken out (found by
        equality, as a list finds it: a bound method made again is equal to the one
        added, not the same object), or None. The caller drops it once out of the lock:
        a last reference dropped under it could run a finalizer that waits for a lock."""
        callbacks = self._callbacks
        if callbacks.__class__ is list:
            try:
                index = callbacks.index(callback)
            except ValueError:
                return None
            return callbacks.pop(index)
        if callbacks is not None and (callbacks is callback or callbacks == callback):
            self._callbacks = None
            return callbacks
        return None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the token fires or ``timeout`` passes; returns ``cancelled``.

        A timeout longer than a lock can wait (``threading.TIMEOUT_MAX``, ~292 years)
        waits for the token alone instead of raising ``OverflowError``.
        """
        if timeout is not None and timeout > threading.TIMEOUT_MAX:
            timeout = None
        event = self._event
        if event is None:
            # Made before the lock is taken: its allocation may set off a collection whose
            # finalizers use tokens, this one among them.
            fresh = threading.Event()
            with self._lock:
                if self._reason is not None:
                    return True
                event = self._event
                if event is None:
                    event = self._event = fresh
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
        # A dead child's finalizer: it runs inside a collection, on whichever thread made
        # the allocation that set it off. That thread may be inside this very lock's
        # lines (re-entrant), changing the callbacks: then the link stays behind, inert
        # (it holds its child weakly). Another thread holds a shared lock for a few lines
        # and waits for nothing meanwhile, so waiting for it is safe; skipping instead
        # left a link behind whenever any token of the same lock was in use.
        lock = self._lock
        if lock._is_owned():  # type: ignore[attr-defined]
            return
        with lock:
            removed = self._forget(callback)
        del removed  # out of the lock

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
