"""A raw ``threading.Event`` handoff: one thread sets it, a parked thread wakes and runs.

The physical floor of "another thread tells a parked loop that something changed" in
CPython: ``Event.set`` on one side, ``Event.wait`` returning on the other. The waiter
timestamps the moment it runs again; nothing else happens in between.
"""

from __future__ import annotations

import threading
import time

__all__ = ["EventHandoff"]


class EventHandoff:
    """A waiter thread parked on an ``Event``; `fire` wakes it and returns the latency."""

    def __init__(self) -> None:
        self._go = threading.Event()
        self._back = threading.Event()
        self._woke_at = 0.0
        self._stop = False
        self._thread = threading.Thread(target=self._wait_loop, name="event-waiter", daemon=True)
        self._thread.start()

    def _wait_loop(self) -> None:
        go, back = self._go, self._back
        while True:
            go.wait()
            self._woke_at = time.perf_counter()  # the waiter is running again
            go.clear()
            if self._stop:
                back.set()
                return
            back.set()

    def fire(self, settle: float = 0.002) -> float:
        """Let the waiter park for ``settle`` seconds, set the event, return the latency."""
        time.sleep(settle)  # the waiter is parked in `go.wait()` by now
        self._back.clear()
        started = time.perf_counter()
        self._go.set()
        if not self._back.wait(5.0):
            raise TimeoutError("the event waiter did not wake within 5 s")
        return self._woke_at - started

    def close(self) -> None:
        """Stop the waiter thread."""
        self._stop = True
        self._go.set()
        self._thread.join(5.0)
