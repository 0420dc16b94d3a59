"""Host timers: functions a host schedules in world time, run on the tick thread.

A heap of ``(when, seq, fn)`` under its own lock (hosts add timers from any thread); the
sequence number keeps timers due at the same time in the order they were added.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable

from runtime.world import sigint

__all__ = ["HostTimers"]

log = logging.getLogger("tickwork.world")


class HostTimers:
    """The world's host timers: ``add`` from any thread, ``run_due`` on the tick thread."""

    __slots__ = ("_heap", "_lock", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], object]]] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._heap)

    def add(self, when: float, fn: Callable[[], object]) -> None:
        """Schedule ``fn`` for the first tick whose time is >= ``when``.

        It wakes no one: the tick thread looks at the timers before it parks, so code on
        it (a host action's handler, a host system) adds here directly; ``call_at`` wakes
        the loop for a timer added from another thread."""
        with self._lock:
            heapq.heappush(self._heap, (when, next(self._seq), fn))

    def next_due(self) -> float | None:
        """When the earliest timer is due, or None when there is none."""
        # No lock: other threads only push, and a push (C, under the GIL) leaves the heap
        # whole; the first item is read in one step, as the skip-ahead loop reads it.
        heap = self._heap
        return heap[0][0] if heap else None

    def run_due(self, now: float) -> None:
        """Run every timer due at ``now``, in order; one that raises is logged."""
        heap = self._heap
        if not heap or heap[0][0] > now:
            return  # looked at again under the lock by the next call: nothing is lost
        due = []
        with self._lock:
            while heap and heap[0][0] <= now:
                due.append(heapq.heappop(heap)[2])
        for fn in due:
            try:
                fn()
            except BaseException as exc:  # host code: never the end of the tick thread
                if isinstance(exc, KeyboardInterrupt):
                    sigint.note_keyboard_interrupt()
                log.exception("timer %r raised", fn)
