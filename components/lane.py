"""Lane data: a frozen snapshot of a lane's counters."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LaneStats"]


@dataclass(frozen=True, slots=True)
class LaneStats:
    """A lane's counters at one moment.

    Gauges: ``queued`` (waiting for a permit), ``busy`` (running, holding a permit),
    ``parked`` (running off the lane, holding none). Totals: ``enqueued``, ``started``,
    ``finished``, ``abandoned`` (cancelled before they ran), ``failed`` (raised),
    ``dropped`` (cancelled while running: outcome not delivered), ``parks``, ``resumes``.
    ``saturated`` is ``busy >= capacity and queued > 0``; parked jobs never count.
    """

    name: str = "tools"
    capacity: int = 1
    queued: int = 0
    busy: int = 0
    parked: int = 0
    enqueued: int = 0
    started: int = 0
    finished: int = 0
    abandoned: int = 0
    failed: int = 0
    dropped: int = 0
    parks: int = 0
    resumes: int = 0
    peak_busy: int = 0
    threads: int = 0

    @property
    def saturated(self) -> bool:
        """True when every permit is held and jobs are waiting (parked jobs do not count)."""
        return self.busy >= self.capacity and self.queued > 0

    @property
    def in_flight(self) -> int:
        """Jobs that have been submitted and not yet ended: queued, busy or parked."""
        return self.queued + self.busy + self.parked
