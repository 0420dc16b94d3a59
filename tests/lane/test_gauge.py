"""`ToolLane.gauge`: the snapshot the tick mirrors every tick never waits for the lane's lock."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from components import ToolResult
from runtime import CancelToken, ToolJob, ToolLane


def _noop(cancel: CancelToken) -> Sequence[ToolResult]:
    return ()


def test_a_gauge_read_while_a_worker_holds_the_lock_does_not_wait() -> None:
    lane = ToolLane(2)
    try:
        held, release = threading.Event(), threading.Event()

        def hold_the_lock() -> None:
            with lane._lock:  # as a worker in `_release` preempted for the GIL would
                held.set()
                release.wait(10.0)

        holder = threading.Thread(target=hold_the_lock)
        holder.start()
        assert held.wait(10.0)
        got: list[int] = []
        reader = threading.Thread(target=lambda: got.append(lane.gauge().enqueued))
        reader.start()
        reader.join(5.0)
        waited = reader.is_alive()
        release.set()
        holder.join(10.0)
        reader.join(10.0)
        assert not waited, "gauge() waited for the lane's lock"
        assert got == [0]
    finally:
        lane.close()


def test_a_gauge_counts_what_this_thread_submitted_and_matches_stats_when_quiet() -> None:
    done = threading.Event()
    lane = ToolLane(2, on_outcome=lambda outcome: done.set())
    try:
        lane.submit(ToolJob("a", "b1", _noop))
        assert lane.gauge().enqueued == 1
        assert done.wait(10.0)
        lane.close()
        assert lane.gauge() == lane.stats()
    finally:
        lane.close()
