"""The tool lane's bookkeeping: permits, the queue, the counters, and cancellation.

Everything here runs under one lock and never calls out while holding it (no job code, no
callbacks, no thread starts, no executor calls), so the lock is only ever held for a few
attribute updates. `runtime.lane.tool_lane.ToolLane` adds the threads and the outcome delivery.

The counters follow DESIGN.md's transitions exactly; their invariants are stated next to the
fields in `LaneCore.__init__`.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections import deque
from typing import Any

from components import LaneStats
from runtime.cancel import Cancelled, CancelToken
from runtime.lane.jobs import ToolJob

__all__ = ["DROPPED", "FAILED", "FINISHED", "Entry", "Idler", "LaneCore"]

# How a job ended; each adds one to the counter of the same name.
FINISHED, FAILED, DROPPED = "finished", "failed", "dropped"

# An entry's life: QUEUED -> RUNNING -> DONE, or QUEUED -> ABANDONED.
_QUEUED, _RUNNING, _ABANDONED, _DONE = 0, 1, 2, 3
# Compact the queue when cancelled entries left in it outnumber live ones (and this many).
_COMPACT_AT = 64


class Entry:
    """One submitted job as the lane tracks it; also its cancel callback and its lane slot.

    Only the lane's lock changes ``state``, ``in_queue``, ``parked``, ``waiting``,
    ``depth`` and ``future``. ``depth`` counts the `off_lane` blocks the job's threads are
    in: the thread running it, and any thread it started that asks a person through its
    `ToolContext`. The job holds no permit while one of them is in such a block.
    """

    __slots__ = (
        "depth",
        "future",
        "giveup",
        "in_queue",
        "job",
        "lane",
        "let_go",
        "parked",
        "started_at",
        "state",
        "waiting",
    )

    def __init__(self, lane: LaneCore, job: ToolJob) -> None:
        self.lane = lane
        self.job = job
        self.state = _QUEUED
        self.in_queue = False  # in `lane._queue` and counted in `queued`
        self.parked = False  # running off the lane: counted in `parked`, holds no permit
        self.waiting = False  # parked and in `lane._resumers`, waiting for a permit
        self.let_go = False  # given up: parked for good, holding no permit (`_let_go`)
        self.giveup: Any = None  # the lane's give-up of a job with a bound, once armed
        self.depth = 0  # `off_lane` blocks entered by the job's threads; the first parks
        self.future: concurrent.futures.Future[Any] | None = None
        self.started_at = 0.0

    def __call__(self, token: CancelToken) -> None:
        """The job token's cancel callback."""
        self.lane._on_cancel(self)

    def park(self) -> None:
        """Give this job's permit to the next job (`off_lane` entry)."""
        self.lane._launch_all(self.lane._step_off(self))

    def resume(self) -> None:
        """Take a permit again, waiting while the lane is full (`off_lane` exit).

        Raises:
            Cancelled: the job's token fired; the job stays parked until it ends.
        """
        self.lane._step_back(self)

    def done(self, future: concurrent.futures.Future[Any]) -> None:
        """The executor future's done callback."""
        self.lane._executor_done(self, future)


class Idler:
    """A worker thread's gate, made once per thread: closed while it waits for a job.

    A hand-off sets ``entry`` and opens the gate, both under the lane's lock; the worker
    takes the entry once through the gate (None: the lane closed). A `Condition` made a
    new lock for every wait and ran its wait and notify in Python, on both threads of
    every hand-off to an idle worker.
    """

    __slots__ = ("entry", "gate")

    def __init__(self) -> None:
        self.gate = threading.Lock()
        self.gate.acquire()
        self.entry: Entry | None = None


class LaneCore:
    """Permits, queue and counters of a lane, all guarded by ``_lock``."""

    def __init__(self, capacity: int, name: str, threaded: bool) -> None:
        self._name = name
        self._threaded = threaded  # False: an executor runs the jobs, no lane threads
        self._lock = threading.Lock()
        self._permit_free = threading.Condition(self._lock)  # parked jobs wait to come back
        self._drained = threading.Condition(self._lock)  # `close` waits for busy + parked == 0
        self._closed = False
        self._capacity = capacity
        self._queue: deque[Entry] = deque()  # may hold abandoned entries (`_tombstones`)
        self._tombstones = 0
        self._resumers: deque[Entry] = deque()  # parked jobs waiting for a permit, FIFO
        # Worker threads waiting for a job, each on its own gate; the last to go idle is
        # handed the next job (its stack and caches are the warmest; the others time out).
        self._idlers: list[Idler] = []
        self._threads = 0  # worker threads alive (or about to be started)
        self._draining = 0  # `close` calls waiting on `_drained`
        # Gauges (never negative): queued = live entries in `_queue`; busy = started jobs
        # holding a permit (running, or handed to a worker); parked = started jobs holding
        # none.
        # Transitions: enqueued q+1; abandoned q-1; started q-1 b+1; finished/failed/dropped
        # b-1 (or p-1 when the job ended while parked); parked b-1 p+1; resumed p-1 b+1.
        self._queued = self._busy = self._parked = 0
        # Totals. Invariants, true in every snapshot (the tests check them):
        #   enqueued == started + abandoned + queued
        #   started  == finished + failed + dropped + busy + parked
        #   parks - resumes - parked == jobs that ended while parked (dropped, let go, or
        #   ended with a thread they started off the lane)
        #   busy <= capacity, and busy < capacity => queued == 0 and `_resumers` is empty
        self._enqueued = self._started = self._finished = self._failed = 0
        self._abandoned = self._dropped = self._parks = self._resumes = 0
        self._peak_busy = 0
        # The last snapshot and the counters it was made from: a snapshot of unchanged
        # counters is that same (frozen) object. The tick mirrors every lane's stats every
        # tick, and building a 15-field frozen dataclass cost more than the rest of an
        # idle tick's systems together.
        self._last: tuple[int, LaneStats] | None = None
        # Invariant: bumped, under `_lock`, by every change of a counter or gauge above
        # (and of `_capacity`, `_threads`), so an unchanged version means an unchanged
        # snapshot. `_last` is keyed by it: checking a lane that did not move is one int
        # compared, where building and comparing the counters' tuple cost ~0.4 us a lane
        # a tick (the tick mirrors both lanes every tick).
        self._version = 0

    def _launch(self, entry: Entry) -> None:
        raise NotImplementedError

    def _launch_all(self, entries: list[Entry]) -> None:
        for entry in entries:
            self._launch(entry)

    def _place(self, entries: list[Entry]) -> list[Entry]:
        """Hand started jobs to idle workers; return those that need a thread of their own
        (counted in ``_threads``, as `_grant` counts them)."""
        if not entries:
            return []
        with self._lock:
            self._version += 1
            return [entry for entry in entries if self._hand_off(entry)]

    def _threads_not_started(self, n: int) -> None:
        """Count out ``n`` worker threads that `_hand_off` counted in but never started."""
        with self._lock:
            self._version += 1
            self._threads -= n

    def _executor_done(self, entry: Entry, future: concurrent.futures.Future[Any]) -> None:
        raise NotImplementedError

    def _admit(self, entry: Entry) -> bool | None:
        """Count a new entry in; None if closed, True if the caller must launch it."""
        with self._lock:
            if self._closed:
                return None
            self._version += 1
            self._enqueued += 1
            if entry.state != _QUEUED:  # its token fired before it got here
                self._abandoned += 1
                return False
            if self._busy < self._capacity:  # then nothing is queued or coming back
                self._start(entry)
                return self._hand_off(entry)
            entry.in_queue = True
            self._queue.append(entry)
            self._queued += 1
            return False

    def _admit_all(self, entries: list[Entry]) -> list[Entry] | None:
        """`_admit` for many entries under one hold of the lock, in order; None if closed,
        else the entries the caller must launch."""
        launch: list[Entry] = []
        with self._lock:
            if self._closed:
                return None
            self._version += 1
            for entry in entries:
                self._enqueued += 1
                if entry.state != _QUEUED:
                    self._abandoned += 1
                elif self._busy < self._capacity:
                    self._start(entry)
                    if self._hand_off(entry):
                        launch.append(entry)
                else:
                    entry.in_queue = True
                    self._queue.append(entry)
                    self._queued += 1
        return launch

    def _release(self, entry: Entry, kind: str) -> Entry | None:
        """Count a job as ended; return the next job the caller should run, if any."""
        with self._lock:
            self._version += 1
            entry.state = _DONE
            if kind == FINISHED:
                self._finished += 1
            elif kind == FAILED:
                self._failed += 1
            else:
                self._dropped += 1
            nxt = None
            if entry.parked:  # ended while parked: it held no permit
                entry.parked = False
                self._parked -= 1
                if entry.waiting:  # a thread it started waits to come back: it need not
                    entry.waiting = False
                    self._resumers.remove(entry)
                    self._permit_free.notify_all()
            else:
                self._busy -= 1
                if self._resumers:
                    self._give_back(self._resumers.popleft())
                elif self._queued:
                    nxt = self._pop_queued()
                    self._start(nxt)
            if self._draining and self._busy + self._parked == 0:
                self._drained.notify_all()
            return nxt

    def _wait_for_work(self, idler: Idler, idle_timeout: float) -> Entry | None:
        """Wait as an idle worker on ``idler`` (the thread's own); the next started job, or
        None when the thread should exit (the lane closed, or ``idle_timeout`` passed)."""
        with self._lock:
            if self._closed:
                self._thread_exits()
                return None
            self._idlers.append(idler)
        if not idler.gate.acquire(timeout=min(idle_timeout, threading.TIMEOUT_MAX)):
            with self._lock:
                if idler in self._idlers:  # timed out, and nobody chose this worker since
                    self._idlers.remove(idler)
                    self._thread_exits()
                    return None
            # A hand-off (or `close`) chose this worker as it timed out, and opened its
            # gate under the lock this thread has held since: taking it cannot block.
            idler.gate.acquire()
        entry, idler.entry = idler.entry, None
        if entry is None:  # the lane closed: its idle workers exit
            with self._lock:
                self._thread_exits()
        return entry

    def _thread_exits(self) -> None:
        """A worker thread leaves the lane (with ``_lock`` held)."""
        self._threads -= 1
        self._version += 1

    def _step_off(self, entry: Entry) -> list[Entry]:
        """A thread of a job enters an `off_lane` block. The first to enter parks the job:
        b-1 p+1, and its permit passes on. Returns jobs to launch."""
        with self._lock:
            entry.depth += 1
            if entry.waiting:  # another of its threads waits to come back: it need not now
                entry.waiting = False
                self._resumers.remove(entry)
                self._permit_free.notify_all()
                return []
            # In a block already, given up (`_let_go`: parked for good), or ended (a thread
            # it started asks after it returned): nothing to give back.
            if entry.depth > 1 or entry.parked or entry.state != _RUNNING:
                return []
            self._version += 1
            entry.parked = True
            self._busy -= 1
            self._parked += 1
            self._parks += 1
            return self._grant()

    def _let_go(self, entry: Entry) -> list[Entry]:
        """Park a running job for good: it was given up, and runs on holding no permit (its
        thread cannot be stopped, but the lane's capacity goes to the jobs behind it).
        Returns jobs to launch."""
        with self._lock:
            if entry.state != _RUNNING or entry.let_go:
                return []
            self._version += 1
            entry.let_go = True
            if entry.waiting:  # parked, waiting for a permit to come back: it need not
                entry.waiting = False
                self._resumers.remove(entry)
                self._permit_free.notify_all()
                return []
            if entry.parked:
                return []
            entry.parked = True
            self._busy -= 1
            self._parked += 1
            self._parks += 1
            return self._grant()

    def _step_back(self, entry: Entry) -> None:
        """A thread of a job leaves its `off_lane` block. The last to leave brings the
        parked job back onto the lane: p-1 b+1, waiting for a permit if needed.

        Raises:
            Cancelled: the job's token fired before a permit came; it stays parked.
        """
        token = entry.job.cancel
        with self._lock:
            entry.depth -= 1
            # Another of its threads is still off the lane, the job ended, or it was let go
            # (it runs on without a permit).
            if entry.depth or not entry.parked or entry.let_go:
                return
            token.raise_if_cancelled()
            if self._busy < self._capacity:  # then no other parked job is waiting ahead
                self._take_permit(entry)
                return
            entry.waiting = True
            self._resumers.append(entry)
            try:
                # Until a grant (which keeps the permit even if the token fires now), the
                # job is let go, another of its threads steps off the lane, or it ends.
                while entry.waiting:
                    token.raise_if_cancelled()
                    self._permit_free.wait()  # woken by any of those, or by the token
            except Cancelled:
                entry.waiting = False
                self._resumers.remove(entry)
                raise

    def _on_cancel(self, entry: Entry) -> None:
        """The token of ``entry`` fired: abandon it if queued, wake or stop it if running."""
        future = None
        with self._lock:
            if entry.state == _QUEUED:
                entry.state = _ABANDONED
                if entry.in_queue:  # else `_admit` has not counted it yet and will
                    entry.in_queue = False
                    self._version += 1
                    self._queued -= 1
                    self._abandoned += 1
                    self._tombstones += 1
                    if self._tombstones > _COMPACT_AT and self._tombstones > self._queued:
                        self._queue = deque(e for e in self._queue if e.in_queue)
                        self._tombstones = 0
            elif entry.state == _RUNNING:
                if entry.waiting:
                    self._permit_free.notify_all()
                future = entry.future
        if future is not None:
            future.cancel()

    def _attach_future(self, entry: Entry, future: concurrent.futures.Future[Any]) -> bool:
        """Remember an executor future; True if the job was cancelled before it existed."""
        with self._lock:
            entry.future = future
            return entry.job.cancel.cancelled

    def _widen(self, n: int) -> tuple[int, list[Entry]]:
        with self._lock:
            self._version += 1
            self._capacity += n
            return self._capacity, self._grant()

    def _shrink(self, n: int) -> int:
        with self._lock:
            taken = max(0, min(n, self._capacity - self._busy, self._capacity - 1))
            self._version += 1
            self._capacity -= taken
            return taken

    def _close_queue(self) -> list[Entry]:
        """Close the lane; abandon and return the queued entries."""
        with self._lock:
            if self._closed:
                return []
            self._closed = True
            self._version += 1
            dropped = [e for e in self._queue if e.in_queue]
            for entry in dropped:
                entry.state = _ABANDONED
                entry.in_queue = False
            self._abandoned += len(dropped)
            self._queued = 0
            self._queue.clear()
            self._tombstones = 0
            idlers, self._idlers = self._idlers, []
            for idler in idlers:  # no job: idle workers exit
                idler.gate.release()
            return dropped

    def _wait_drained(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            self._draining += 1
            try:
                while self._busy + self._parked:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._drained.wait(left)
                return True
            finally:
                self._draining -= 1

    def _snapshot(self) -> LaneStats:
        # Without the lock first: the tick mirrors every lane every tick, and most ticks no
        # lane moved. An unchanged version means no change has begun since the last
        # snapshot was made (under the lock), so that consistent snapshot is the answer; a
        # change under way elsewhere has not happened yet for this reader. Anything else
        # takes the lock.
        last = self._last
        if last is not None and last[0] == self._version:
            return last[1]
        with self._lock:
            return self._snapshot_locked()

    def _snapshot_locked(self) -> LaneStats:
        last = self._last
        version = self._version
        if last is not None and last[0] == version:
            return last[1]
        stats = LaneStats(self._name, *self._key())
        self._last = (version, stats)  # one reference: version and snapshot read together
        return stats

    def _key(self) -> tuple[int, ...]:
        # The order of LaneStats' fields after `name`.
        return (
            self._capacity,
            self._queued,
            self._busy,
            self._parked,
            self._enqueued,
            self._started,
            self._finished,
            self._abandoned,
            self._failed,
            self._dropped,
            self._parks,
            self._resumes,
            self._peak_busy,
            self._threads,
        )

    # The helpers below run with `_lock` held.

    def _start(self, entry: Entry) -> None:
        entry.state = _RUNNING
        self._started += 1
        self._busy += 1
        self._peak_busy = max(self._peak_busy, self._busy)

    def _take_permit(self, entry: Entry) -> None:
        self._version += 1  # for `_step_back`, which changes nothing else
        entry.parked = False
        self._parked -= 1
        self._busy += 1
        self._resumes += 1
        self._peak_busy = max(self._peak_busy, self._busy)

    def _give_back(self, entry: Entry) -> None:
        """Hand a free permit to the parked job ``entry`` waiting to come back."""
        entry.waiting = False
        self._take_permit(entry)
        self._permit_free.notify_all()

    def _pop_queued(self) -> Entry:
        while True:
            entry = self._queue.popleft()
            if entry.in_queue:
                entry.in_queue = False
                self._queued -= 1
                return entry
            self._tombstones -= 1

    def _hand_off(self, entry: Entry) -> bool:
        """Give a started job to an idle worker; True if a new thread (or executor) must run it."""
        if not self._threaded:
            return True
        idlers = self._idlers
        if idlers:
            idler = idlers.pop()
            idler.entry = entry
            idler.gate.release()
            return False
        self._threads += 1
        return True

    def _grant(self) -> list[Entry]:
        """Fill free permits, parked jobs coming back first; return the jobs to launch."""
        launch: list[Entry] = []
        while self._busy < self._capacity:
            if self._resumers:
                self._give_back(self._resumers.popleft())
            elif self._queued:
                entry = self._pop_queued()
                self._start(entry)
                if self._hand_off(entry):
                    launch.append(entry)
            else:
                break
        return launch
