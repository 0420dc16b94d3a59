"""One timer thread for every tool deadline in the process: a heap of real-time deadlines.

A tool call with a timeout schedules its token's cancel here instead of starting a thread of
its own, so a thousand calls in flight cost one thread, not a thousand. Cancelled deadlines
stay in the heap until they surface (or until they outnumber the live ones, when the heap is
rebuilt), which keeps `cancel` O(1).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from typing import Protocol

__all__ = ["Deadline", "Target", "schedule"]

log = logging.getLogger(__name__)


class Target(Protocol):
    """What a deadline fires: a `CancelToken`, or anything cancelled the same way."""

    def cancel(self, reason: str) -> object:
        """Fire, with ``reason``; called once, on the timer's thread."""


# Rebuild the heap when cancelled entries outnumber live ones and exceed this many.
_COMPACT_AT = 256


class Deadline:
    """A scheduled cancel of ``token`` (a `Target`) with ``reason``; `cancel` it when the
    work ends."""

    __slots__ = ("_state", "_timer", "reason", "token")

    def __init__(self, timer: _Timer, token: Target, reason: str) -> None:
        self._timer = timer
        self.token = token
        self.reason = reason
        self._state = 0  # 0 pending, 1 fired, 2 cancelled; changed under the timer's lock

    def cancel(self) -> bool:
        """Stop the deadline; returns True if it had already fired (the work overran)."""
        return self._timer.cancel(self)


class _Timer:
    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Deadline]] = []
        self._seq = itertools.count()
        self._cancelled = 0
        self._thread: threading.Thread | None = None

    def schedule(self, delay: float, token: Target, reason: str) -> Deadline:
        deadline = Deadline(self, token, reason)
        when = time.monotonic() + delay
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._seq), deadline))
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="tickwork-deadlines", daemon=True)
                try:
                    thread.start()
                except RuntimeError:  # no thread to be had: this one is refused, and
                    deadline._state = 2  # the next schedule tries again (a thread kept
                    self._cancelled += 1  # unstarted stopped every later deadline)
                    raise
                finally:  # kept once started (a Ctrl-C in `start()` may land after)
                    if thread.ident is not None:
                        self._thread = thread
            elif self._heap[0][2] is deadline:  # earlier than what the thread waits for
                self._cond.notify()
        return deadline

    def cancel(self, deadline: Deadline) -> bool:
        with self._cond:
            if deadline._state == 0:
                deadline._state = 2
                self._cancelled += 1
                if self._cancelled > _COMPACT_AT and self._cancelled * 2 > len(self._heap):
                    self._heap = [item for item in self._heap if item[2]._state == 0]
                    heapq.heapify(self._heap)
                    self._cancelled = 0
            return deadline._state == 1

    def _run(self) -> None:
        while True:
            due = self._next_due()
            try:
                due.token.cancel(due.reason)  # outside the lock: callbacks may do anything
            except Exception:  # the one timer thread of every deadline: never its end
                log.exception("a deadline's target raised: %r", due.token)

    def _next_due(self) -> Deadline:
        with self._cond:
            while True:
                while self._heap and self._heap[0][2]._state != 0:
                    heapq.heappop(self._heap)
                    self._cancelled -= 1
                if not self._heap:
                    self._cond.wait()
                    continue
                left = self._heap[0][0] - time.monotonic()
                if left <= 0:
                    deadline = heapq.heappop(self._heap)[2]
                    deadline._state = 1
                    return deadline
                # In slices: a deadline past `TIMEOUT_MAX` (a tool timeout of 1e300 s)
                # would raise OverflowError here and kill every tool timeout in the process.
                self._cond.wait(min(left, 86_400.0))


_timer = _Timer()


def schedule(delay: float, token: Target, reason: str) -> Deadline:
    """Cancel ``token`` with ``reason`` after ``delay`` seconds of real time, unless stopped."""
    return _timer.schedule(delay, token, reason)


def _reset_after_fork() -> None:
    # A forked child has the heap but not the thread; start over with a fresh timer.
    global _timer
    _timer = _Timer()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
