"""Stepping off the lane: `off_lane()` gives a running job's permit back while it waits.

Rule: a job waiting on a person or on another agent must not hold lane capacity, or a full
lane deadlocks (a job waiting for an answer that only a queued job can give). The lane marks
the thread running a job with that job's slot (`current`); `off_lane` finds it there.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Protocol

__all__ = ["Slot", "current", "given_up", "held", "joined", "off_lane"]


class Slot(Protocol):
    """The permit a running lane job holds; `off_lane` gives it back for a while."""

    def park(self) -> None:
        """Give the permit back (the job keeps running, off the lane)."""

    def resume(self) -> None:
        """Take a permit again, waiting while the lane is full."""

    @property
    def let_go(self) -> bool:
        """Whether the lane gave the job up (it ran past its bound)."""


current = threading.local()


def held() -> Slot | None:
    """The slot of the lane job running on this thread; None outside a lane job."""
    slot: Slot | None = getattr(current, "slot", None)
    return slot


@contextlib.contextmanager
def joined(slot: Slot | None) -> Iterator[None]:
    """Run the block as one of the threads of the lane job holding ``slot``: an `off_lane`
    block in it gives back that job's permit, as on the job's own thread. For a thread
    the job started (a tool's helper asking through its `ToolContext`), or a worker of
    another lane the tool handed work to: that thread is the job's for the block, and
    what it was before after it. With None, or on the job's own thread, it just runs
    the block. A thread's blocks nest; coroutines sharing a thread must not interleave
    them (the mark is the thread's).
    """
    before = held()
    if slot is None or before is slot:
        yield
        return
    current.slot = slot
    try:
        yield
    finally:
        current.slot = before


def given_up() -> bool:
    """Whether the lane job running on this thread was given up (it ran past its
    ``ToolJob.bound``): what it does from now on is delivered nowhere, so a batch starts
    no further call. False outside a lane job."""
    slot = held()
    return slot is not None and slot.let_go


@contextlib.contextmanager
def off_lane() -> Iterator[None]:
    """Run the block without holding lane capacity; outside a lane job, just run it.

    Rule: a job waiting on a person or on another agent must not hold lane capacity, or a
    full lane deadlocks (a job waiting for an answer that only a queued job can give).
    """
    slot = held()
    if slot is None:
        yield
        return
    slot.park()
    try:
        yield
    finally:
        slot.resume()
