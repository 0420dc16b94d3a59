"""The wake: how other threads tell a parked tick loop that something changed."""

from __future__ import annotations

import threading

__all__ = ["Wake"]


class Wake:
    """A single stored permit that any thread may give and the tick thread takes.

    ``notify()`` never blocks and may come from any thread. ``wait()`` returns at once if a
    permit is stored, else parks until one arrives or the timeout passes. Because the permit
    is stored, a nudge that lands while the loop is busy ticking is not lost: the next
    ``wait`` returns at once. Because there is only one permit, a burst of nudges merges
    into a single wake-up.
    """

    __slots__ = ("_notifies", "_permit", "_signal", "_wakeups")

    def __init__(self) -> None:
        # The permit is a plain lock: released = a permit is stored, held = none. Giving
        # and taking it are then one C call each (`release`, `acquire` with a timeout),
        # where a `Condition` built a lock per wait and ran its notify in Python: ~7 µs of
        # the wake-up path when the CPU is cold after the loop parked (wake_latency).
        self._signal = threading.Lock()
        self._signal.acquire()
        # Invariant: `_permit` is True from a notify's first step until the waiter that takes
        # the signal clears it, so a notify that sees it True may skip the lock: the next
        # `wait` returns at once, or the one returning now ticks after the caller's change.
        self._permit = False
        self._notifies = 0
        self._wakeups = 0

    def notify(self) -> None:
        """Store the permit and wake the waiter, if any. Safe from any thread."""
        # The count is a statistic; a lost increment between threads is harmless.
        self._notifies += 1
        if self._permit:
            # Fast path: a permit is stored (or about to be), so the next `wait` returns at
            # once and the tick after it sees whatever the caller changed before calling
            # us. Nothing here may block: a lock here once made every lane worker queue
            # behind a tick thread that held it while waiting for the GIL (a convoy measured
            # by the vs_asyncio benchmark: ~8 ms per notify).
            return
        self._permit = True
        try:  # noqa: SIM105 (contextlib.suppress would add a context manager to the wake-up)
            self._signal.release()
        except RuntimeError:
            pass  # two notifies raced past the check: the other stored the permit

    def wait(self, timeout: float | None = None) -> bool:
        """Take the permit, waiting up to ``timeout`` seconds (``None``: forever).

        Returns True if a permit was taken, False on timeout.

        Raises:
            ValueError: ``timeout`` is negative or NaN.
        """
        if timeout is not None and not timeout >= 0:
            raise ValueError(f"`timeout` must be >= 0 or None, got {timeout}")
        if timeout is None or timeout > threading.TIMEOUT_MAX:
            # Longer than a lock can wait (OverflowError): as good as forever.
            taken = self._signal.acquire()
        else:
            taken = self._signal.acquire(timeout=timeout)
        if taken:
            self._permit = False
            self._wakeups += 1
        return taken

    def pending(self) -> bool:
        """Whether a permit is stored (a wait would return at once)."""
        return self._permit

    @property
    def notifies(self) -> int:
        """How many times ``notify`` was called (for tests and benchmarks)."""
        return self._notifies

    @property
    def wakeups(self) -> int:
        """How many ``wait`` calls took a permit."""
        return self._wakeups
