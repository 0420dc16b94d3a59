"""Clocks: where the world's idea of "now" comes from.

Systems read ``world.now``, taken once per tick from the world's clock, never
``time.time()``. ``MonotonicClock`` is real time; ``ManualClock`` is virtual time that moves
only when ``advance()`` is called, which makes every deadline testable without sleeping.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "ManualClock", "MonotonicClock"]

_INF = math.inf


@runtime_checkable
class Clock(Protocol):
    """A source of the current time in seconds.

    ``virtual`` tells blocking waiters whether waiting in real time makes this clock move:
    on a virtual clock a deadline is enforced by whoever advances the clock (the world's
    tick, or a test calling ``expire_due``), never by a timed wait.
    """

    @property
    def virtual(self) -> bool:
        """True when time moves only by ``advance()``, not by waiting."""
        ...

    def now(self) -> float:
        """The current time in seconds."""
        ...


class MonotonicClock:
    """Real time from ``time.monotonic()``, shifted to start at ``start`` seconds."""

    __slots__ = ("_offset",)

    def __init__(self, start: float = 0.0) -> None:
        self._offset = start - time.monotonic()

    @property
    def virtual(self) -> bool:
        return False

    def now(self) -> float:
        return time.monotonic() + self._offset

    @property
    def offset(self) -> float:
        """What ``now()`` adds to ``time.monotonic()`` (fixed at creation): a hot caller
        computes ``monotonic() + offset`` itself, the same float, without a Python call."""
        return self._offset


class ManualClock:
    """Virtual time: stands still until ``advance()`` or ``set()`` moves it forward."""

    __slots__ = ("_lock", "_now")

    def __init__(self, start: float = 0.0) -> None:
        if not math.isfinite(start):
            raise ValueError(f"`start` must be a finite number, got {start}")
        self._now = float(start)
        # Reentrant: a world skipping ahead (`runtime.world.skip`) holds it for a slice of
        # ticks and writes `_now` itself (a finite float, never earlier), so that code it
        # runs in between may still call `set` or `advance`.
        self._lock = threading.RLock()

    @property
    def virtual(self) -> bool:
        return True

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward by ``seconds`` and return the new time.

        Raises:
            ValueError: ``seconds`` is negative or not finite.
        """
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"`seconds` must be a finite number >= 0, got {seconds}")
        with self._lock:
            self._now += seconds
            return self._now

    def set(self, when: float) -> float:
        """Move time forward to ``when`` (an absolute time) and return it.

        Raises:
            ValueError: ``when`` is earlier than now, or not finite.
        """
        with self._lock:
            # The common case first, in two compares (a skipped run sets the clock at every
            # wake-up): a finite float not before now. NaN fails both and is refused below.
            if when.__class__ is float and self._now <= when < _INF:
                self._now = when
                return when
            if not math.isfinite(when) or when < self._now:
                raise ValueError(f"`when` must be a finite time >= {self._now}, got {when}")
            self._now = float(when)
            return self._now
