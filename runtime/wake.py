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

    __slots__ = ("_cond", "_notifies", "_permit", "_wakeups")

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        # Invariant: the permit is taken (set False) only by `wait`, under `_cond`, so a
        # notify can never fall between "checked the permit" and "cleared the permit".
        self._permit = False
        self._notifies = 0
        self._wakeups = 0

    def notify(self) -> None:
        """Store the permit and wake the waiter, if any. Safe from any thread."""
        if self._permit:
            # Fast path, no lock: a permit is stored, so the next `wait` returns at once and
            # the tick after it sees whatever the caller changed before calling us (the
            # permit can only be taken after this read). Taking the lock here made every
            # lane worker queue behind a tick thread that held it while waiting for the GIL
            # (a lock convoy measured by the vs_asyncio benchmark: ~8 ms per notify).
            # The count is a statistic; a lost increment between threads is harmless.
            self._notifies += 1
            return
        with self._cond:
            self._notifies += 1
            if not self._permit:
                self._permit = True
                self._cond.notify()

    def wait(self, timeout: float | None = None) -> bool:
        """Take the permit, waiting up to ``timeout`` seconds (``None``: forever).

        Returns True if a permit was taken, False on timeout.

        Raises:
            ValueError: ``timeout`` is negative or NaN.
        """
        if timeout is not None and not timeout >= 0:
            raise ValueError(f"`timeout` must be >= 0 or None, got {timeout}")
        if timeout is not None and timeout > threading.TIMEOUT_MAX:
            timeout = None  # longer than a lock can wait (OverflowError): as good as forever
        with self._cond:
            if not self._permit:
                self._cond.wait(timeout)
            taken = self._permit
            self._permit = False
            if taken:
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
