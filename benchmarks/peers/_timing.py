"""A stopwatch reading wall time and the process's CPU time together."""

from __future__ import annotations

import time
from types import TracebackType

__all__ = ["Stopwatch"]


class Stopwatch:
    """``with Stopwatch() as sw: ...`` leaves ``sw.wall`` and ``sw.cpu`` in seconds.

    ``cpu`` is ``time.process_time()``: every thread of the process, not the time slices
    other processes took. For one-thread CPU-bound work it is the figure that holds on a
    shared machine; for anything that waits or spreads over threads, use ``wall``.
    """

    __slots__ = ("_cpu0", "_wall0", "cpu", "wall")

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0
        self._wall0 = self._cpu0 = 0.0

    def __enter__(self) -> Stopwatch:
        self._cpu0 = time.process_time()
        self._wall0 = time.perf_counter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.wall = time.perf_counter() - self._wall0
        self.cpu = time.process_time() - self._cpu0
