"""The tool lane: bounded capacity for slow work, and stepping off it while waiting.

A `ToolLane` runs `ToolJob`s with at most ``capacity`` of them holding a permit at once. Jobs
beyond that wait in an unbounded, counted queue; ``submit`` never blocks. Worker threads grow
on demand and exit after ``idle_timeout`` seconds without work. A running job may step off the
lane with `off_lane()` (the hub's blocking ``ask`` does): its permit goes to the next job while
it waits, and it takes one again afterwards. Rule: a job waiting on a person or on another
agent must not hold lane capacity, or a full lane deadlocks on an answer that only a queued
job can give.

The bookkeeping (permits, queue, counters, cancellation) lives in `runtime.lane.core`; this
module adds the threads that run the jobs, or hands them to a `concurrent.futures.Executor`.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType

from components import LaneStats, ToolCall, ToolResult
from runtime.cancel import Cancelled, CancelToken
from runtime.errors import ConfigError, LaneClosedError
from runtime.lane.core import DROPPED, FAILED, FINISHED, Entry, Idler, LaneCore
from runtime.lane.deadlines import Deadline, schedule
from runtime.lane.jobs import ToolJob, ToolOutcome, build_outcome
from runtime.lane.parking import current as _current
from runtime.wake import Wake

__all__ = ["GIVE_UP_GRACE_SECS", "ToolLane"]

log = logging.getLogger(__name__)

# Per thread: the executor launches still to make. A done-callback that runs inline (the
# future finished before `add_done_callback`) would otherwise launch the next job from inside
# the launch of the previous one, recursing once per job.
_launching = threading.local()


def _run_job(
    run: Callable[[CancelToken], Sequence[ToolResult]], cancel: CancelToken
) -> tuple[ToolResult, ...]:
    """Run one job's body and return its results as a tuple.

    Module-level on purpose: an executor that ships work to another process (Dask's
    ``client.get_executor(pure=False)``) pickles this function by reference, so a picklable
    ``job.run`` is all a remote job needs.
    """
    return tuple(run(cancel))


_NO_RESULTS: tuple[ToolResult, ...] = ()

GIVE_UP_GRACE_SECS = 1.0
"""How long past its ``bound`` a job that ignores its token is waited for (`ToolLane`)."""


class _GiveUp:
    """The give-up of one job with a bound: what its deadline fires. Exactly one of the
    deadline (`cancel`) and the job's own end (`settle`) delivers the job's outcome; each
    claims it by taking the one item of ``claim`` (a list pop is atomic). Either way the
    winner lets go of the lane and the job (a cancelled deadline stays in the timer's heap
    until it surfaces)."""

    __slots__ = ("claim", "deadline", "done", "entry", "lane", "limit")

    def __init__(self, lane: ToolLane, entry: Entry, limit: float) -> None:
        self.lane: ToolLane | None = lane
        self.entry: Entry | None = entry
        self.limit = limit
        self.claim = [True]
        self.deadline: Deadline | None = None
        self.done = threading.Lock()  # held until the give-up has delivered
        self.done.acquire()

    def cancel(self, reason: str) -> None:
        """The deadline fired: give the job up, unless it ended first."""
        try:
            self.claim.pop()
        except IndexError:
            return
        lane, entry = self.lane, self.entry
        self.lane = self.entry = None
        try:
            if lane is not None and entry is not None:  # (only `settle` clears them)
                lane._give_up(entry, self.limit)
        finally:
            self.done.release()

    def settle(self) -> bool:
        """The job ended: whether its own outcome is the one to deliver (False: it was
        given up, and that outcome is out; returns once it is, so that the job stops
        counting as in flight only after every outcome is delivered)."""
        try:
            self.claim.pop()
        except IndexError:
            self.done.acquire()
            return False
        self.lane = self.entry = None
        if self.deadline is not None:
            self.deadline.cancel()
        return True


class _ArmOnStart:
    """An executor job's body that arms its give-up as it starts, on the executor's
    thread: the time it waited in the executor's own queue (behind a job given up, whose
    thread runs on) is not its run. Pickles as the body alone: a job shipped to another
    process has no clock here, and is never given up."""

    __slots__ = ("entry", "lane", "run")

    def __init__(
        self, lane: ToolLane, entry: Entry, run: Callable[[CancelToken], Sequence[ToolResult]]
    ) -> None:
        self.lane = lane
        self.entry = entry
        self.run = run

    def __call__(self, cancel: CancelToken) -> Sequence[ToolResult]:
        bound = self.entry.job.bound
        assert bound is not None
        self.lane._arm(self.entry, bound)
        return self.run(cancel)

    def __reduce__(self) -> tuple[object, ...]:
        return (_same, (self.run,))


def _same(run: object) -> object:
    return run


def _error_results(calls: Sequence[ToolCall], error: str) -> tuple[ToolResult, ...]:
    return tuple(ToolResult(call.id, error=error) for call in calls)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class ToolLane(LaneCore):
    """A bounded lane of tool jobs: ``capacity`` permits, a counted queue, growing threads.

    Jobs run on the lane's own daemon threads (``tickwork-{name}-{n}``), or, with
    ``executor=``, on any `concurrent.futures.Executor`; the lane owns permits, queue and
    counters either way and submits to the executor only when a permit is free. In executor
    mode `off_lane` does nothing (the executor's threads are not lane threads): a job keeps its
    permit while it waits, so do not run jobs that ask a person on an executor lane.

    Each finished job's `ToolOutcome` goes to ``on_outcome`` and then nudges ``wake``, both
    before the job stops counting as in flight: ``stats().in_flight == 0`` means every outcome
    has been delivered. ``on_end`` hears of every started job that ended, however it ended
    (finished, failed, dropped), after its outcome went to ``on_outcome``: a lockstep world
    waits for exactly that. Only a job whose own token fired is dropped (nothing
    delivered). One that fails in any other way (it raises, raises `Cancelled` though its
    token never fired, or its executor drops it) delivers an outcome whose ``error`` names
    the lane and the job, with one error result per call in ``job.calls``: a job never ends
    in silence, so nobody waits for ever on an outcome that will not come.

    A job with a ``bound`` (a tool batch whose tools all have timeouts) that is still
    running ``bound + GIVE_UP_GRACE_SECS`` seconds after it started (on an executor: after
    the executor began running it in this process; never, shipped to another) is given
    up: a tool ignored its timeout (its token). Every call gets an error result saying so,
    delivered at once, with ``on_end``; the job's thread runs on, counted as parked,
    holding no permit (it cannot be stopped, but the lane's capacity goes to the jobs
    behind it), and ends counted as dropped, whatever it returns delivered nowhere.

    Fairness: a parked job coming back gets the next free permit before any queued job that
    has not started (FIFO among returning jobs). A returning job has already done part of its
    work and its agent is waiting on it, and there are at most as many of them as threads,
    whereas the queue can grow without bound: queued-first would let a busy lane starve a
    returning job forever.
    """

    def __init__(
        self,
        capacity: int = 8,
        *,
        name: str = "tools",
        executor: concurrent.futures.Executor | None = None,
        on_outcome: Callable[[ToolOutcome], object] | None = None,
        wake: Wake | None = None,
        idle_timeout: float = 5.0,
        on_end: Callable[[ToolJob], object] | None = None,
    ) -> None:
        """Make a lane with ``capacity`` permits (values below 1 become 1).

        Raises:
            ConfigError: ``idle_timeout`` is not positive.
        """
        if not idle_timeout > 0:
            raise ConfigError(f"`idle_timeout` must be > 0, got {idle_timeout}")
        super().__init__(max(1, int(capacity)), name, executor is None)
        self._executor = executor
        self._on_outcome = on_outcome
        self._on_end = on_end
        self._wake = wake
        self._idle_timeout = idle_timeout
        self._thread_ids = itertools.count(1)

    @property
    def capacity(self) -> int:
        """How many jobs may hold a permit at once."""
        return self._capacity

    @property
    def name(self) -> str:
        """The lane's name, used in thread names and in `LaneStats`."""
        return self._name

    def submit(self, job: ToolJob) -> None:
        """Queue ``job``; it starts as soon as a permit is free. Never blocks.

        A job whose token is already cancelled is counted as abandoned and never runs.

        Raises:
            LaneClosedError: the lane has been closed.
        """
        entry = Entry(self, job)
        # Registered before the entry is visible to workers, so a cancel can never fall
        # between "queued" and "listening"; it runs at once if the token already fired.
        job.cancel.add_callback(entry)
        launch = self._admit(entry)
        if launch is None:
            job.cancel.remove_callback(entry)
            raise LaneClosedError(f"lane {self._name!r} is closed; job {job.batch_id!r} refused")
        if launch:
            self._launch(entry)

    def submit_all(self, jobs: Sequence[ToolJob]) -> None:
        """Queue every job of ``jobs``, in order, as ``submit`` would one by one, taking the
        lane's lock once for them all (a tick's jobs: one lock round trip, not one per job,
        against workers that contend for the same lock). Never blocks.

        Raises:
            LaneClosedError: the lane has been closed; none of ``jobs`` was queued.
        """
        entries = []
        for job in jobs:
            entry = Entry(self, job)
            job.cancel.add_callback(entry)  # before visible to workers, as in `submit`
            entries.append(entry)
        launch = self._admit_all(entries)
        if launch is None:
            for entry in entries:
                entry.job.cancel.remove_callback(entry)
            raise LaneClosedError(f"lane {self._name!r} is closed; {len(entries)} jobs refused")
        self._launch_all(launch)

    def free_permits(self) -> int:
        """How many permits are free now, read without the lock: a hint (a worker may be
        taking or giving one back at this moment), for deciding whether to submit now."""
        return self._capacity - self._busy

    def stats(self) -> LaneStats:
        """Return a consistent snapshot of the lane's counters."""
        return self._snapshot()

    def gauge(self) -> LaneStats:
        """A snapshot for a gauge that is read every tick: like ``stats()``, but never waits.

        When a worker holds the lane's lock at that moment, the counters are read without
        it: then a counter the workers are changing may be off by the job in flight (the
        snapshot is torn between two moments), while those this thread changes are exact.
        Use ``stats()`` where the invariants between counters matter.
        """
        # The tick's lane mirror calls this. A worker holding the lock may be waiting for
        # the GIL, and a tick thread blocked behind it gives the GIL away and queues to get
        # it back: ~20 us a lane a tick under load (asyncio_10k). A torn read is never
        # cached for ``stats()``.
        last = self._last
        if last is not None and last[0] == self._version:
            return last[1]
        if not self._lock.acquire(blocking=False):
            return LaneStats(self._name, *self._key())
        try:
            return self._snapshot_locked()
        finally:
            self._lock.release()

    def relieve(self, n: int = 1) -> int:
        """Add ``n`` permits, start what they let start, and return the new capacity.

        Raises:
            ConfigError: ``n`` is negative.
        """
        if n < 0:
            raise ConfigError(f"`n` must be >= 0, got {n}")
        capacity, launch = self._widen(n)
        self._launch_all(launch)
        return capacity

    def narrow(self, n: int = 1) -> int:
        """Take back up to ``n`` idle permits (never busy ones, never the last one).

        Returns how many permits were taken; busy jobs keep theirs.

        Raises:
            ConfigError: ``n`` is negative.
        """
        if n < 0:
            raise ConfigError(f"`n` must be >= 0, got {n}")
        return self._shrink(n)

    def close(self, timeout: float = 5.0) -> None:
        """Abandon every queued job, refuse new ones, and wait up to ``timeout`` for the rest.

        Running and parked jobs are not cancelled; they finish and deliver as usual. Calling
        ``close`` again only waits again. An executor passed in is not shut down.
        """
        for entry in self._close_queue():
            entry.job.cancel.remove_callback(entry)
        if not self._wait_drained(timeout):
            log.warning("lane %r closed with jobs still running after %gs", self._name, timeout)

    def __enter__(self) -> ToolLane:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<ToolLane {self._name!r} capacity={self._capacity}>"

    def _launch(self, entry: Entry) -> None:
        """Run a started job that no existing thread will pick up."""
        if self._executor is None:
            self._start_worker([entry])
            return
        pending: list[Entry] | None = getattr(_launching, "pending", None)
        if pending is not None:
            pending.append(entry)
            return
        _launching.pending = pending = [entry]
        try:
            while pending:
                self._submit_to_executor(pending.pop())
        finally:
            _launching.pending = None

    def _launch_all(self, entries: list[Entry]) -> None:
        """Run started jobs that no existing thread will pick up, each on a thread of its own.

        On the lane's threads the caller starts one thread, which starts the next before it
        runs its job, and so on: ``Thread.start`` waits until the new thread runs, ~1 ms
        under load, and a tick that dispatched 40 jobs to a lane growing its threads paid
        for 40 starts before it could go on (asyncio_1k: ~40-75 ms of a ~280 ms run).
        """
        if not entries:
            return
        if self._executor is not None or len(entries) == 1:
            for entry in entries:
                self._launch(entry)
            return
        entries.reverse()  # each thread pops its own job off the end: the first goes first
        self._start_worker(entries)

    def _start_worker(self, entries: list[Entry]) -> None:
        """`_spawn` a worker for the started jobs ``entries``; when no thread can be started
        (``Thread.start`` raising: the process is out of threads or memory), fail them
        here, on the caller's thread, and the jobs their permits go to, rather than leave
        them counted busy with no thread to run them (their agents waiting for ever).
        Wherever a lane starts jobs: a submit, ``relieve``, a job stepping off the lane
        (`off_lane`), a give-up."""
        try:
            self._spawn(entries)
        except Exception as exc:
            log.exception("lane %r: could not start a worker thread", self._name)
            self._fail_unlaunched(entries, exc)

    def _spawn(self, entries: list[Entry]) -> None:
        """Start a worker thread for the started jobs ``entries`` (the last one its own)."""
        name = f"tickwork-{self._name}-{next(self._thread_ids)}"
        # In a list the workers empty: a Thread keeps its `args` until it ends, which kept
        # each worker's first job (its token, its results) alive that long.
        threading.Thread(target=self._work, args=(entries,), name=name, daemon=True).start()

    def _work(self, first: list[Entry]) -> None:
        """Be a worker thread: start the next thread for the jobs after this one's own in
        ``first``, run jobs while there are any, wait idle, then exit."""
        local = _current
        idler = Idler()
        entry: Entry | None = first.pop()
        backlog: list[Entry] = []
        if first:
            try:
                self._spawn(first)
            except BaseException:  # no thread to be had: run them here, one by one
                log.exception("lane %r: could not start a worker thread", self._name)
                backlog = first[:]  # in the same order: `pop` gives the next
                first.clear()
                self._threads_not_started(len(backlog))
        while entry is not None:
            job = entry.job
            results = _NO_RESULTS
            local.slot = entry
            if job.bound is not None:
                self._arm(entry, job.bound)
            started = time.perf_counter()
            error = None
            try:
                results = _run_job(job.run, job.cancel)
                kind = FINISHED
            except BaseException as exc:  # the worker never dies for a tool's sake
                kind, error, results = self._failure(entry, exc)
            finally:
                local.slot = None
            entry = self._finish(entry, kind, results, time.perf_counter() - started, error)
            # An idle worker must not keep its last job alive (its token, its agent's
            # results) for `idle_timeout`: a finished agent keeps no lane tokens.
            del job, results
            if entry is None:
                entry = backlog.pop() if backlog else self._wait_for_work(idler, self._idle_timeout)

    def _failure(
        self, entry: Entry, exc: BaseException
    ) -> tuple[str, str | None, tuple[ToolResult, ...]]:
        """How a job that raised ``exc`` ended: dropped (its token fired, or it was given
        up and stopped: `runtime.lane.parking.given_up`), else failed, with the outcome's
        error (naming the lane and the job) and one error result per call."""
        job = entry.job
        if isinstance(exc, Cancelled):
            if job.cancel.cancelled or entry.let_go:
                return DROPPED, None, _NO_RESULTS
            # Rule: a job that ends without a real outcome gives its agent an error naming
            # the lane, never a silent wait (a model raising Cancelled on its own).
            error = (
                f"lane {self._name!r}: job {job.batch_id!r} raised Cancelled"
                f" ({exc.reason}) though its token was not cancelled"
            )
            log.error("%s", error)
            return FAILED, error, _error_results(job.calls, error)
        log.error("lane %r: job %r raised", self._name, job.batch_id, exc_info=exc)
        error = f"lane {self._name!r}: job {job.batch_id!r} raised {_describe(exc)}"
        return FAILED, error, _error_results(job.calls, _describe(exc))

    def _finish(
        self,
        entry: Entry,
        kind: str,
        results: tuple[ToolResult, ...],
        elapsed: float,
        error: str | None = None,
    ) -> Entry | None:
        """Deliver a job's outcome (unless dropped), then count it as ended.

        Delivery comes first so that ``in_flight == 0`` implies every outcome is delivered.
        Returns the next job for the caller to run.
        """
        job = entry.job
        giveup = entry.giveup
        if giveup is not None:
            entry.giveup = None  # (the two point at each other)
            if not giveup.settle():
                # Given up: its outcome went out then, and `on_end` heard of its end then.
                if not job.cancel.cancelled:
                    job.cancel.remove_callback(entry)
                return self._release(entry, DROPPED)
        if job.cancel.cancelled:
            kind = DROPPED  # cancelled while running: the outcome is stale
        else:
            job.cancel.remove_callback(entry)
        if kind != DROPPED:
            self._deliver(job, results, elapsed, error)
        if self._on_end is not None:
            self._ended(job)
        return self._release(entry, kind)

    def _deliver(
        self, job: ToolJob, results: tuple[ToolResult, ...], elapsed: float, error: str | None
    ) -> None:
        """Hand a job's outcome to ``on_outcome`` (one that raises is logged), then nudge
        the wake."""
        if self._on_outcome is not None:
            try:
                self._on_outcome(build_outcome(job.agent_id, job.batch_id, results, elapsed, error))
            except Exception:
                log.exception("lane %r: on_outcome raised for %r", self._name, job.batch_id)
        if self._wake is not None:
            self._wake.notify()

    def _ended(self, job: ToolJob) -> None:
        """Tell ``on_end`` (set) that ``job`` ended; one that raises is logged."""
        try:
            self._on_end(job)  # type: ignore[misc]
        except Exception:
            log.exception("lane %r: on_end raised for %r", self._name, job.batch_id)

    def _arm(self, entry: Entry, bound: float) -> None:
        """Schedule the give-up of a job with a bound, as it starts."""
        limit = bound + GIVE_UP_GRACE_SECS
        giveup = entry.giveup = _GiveUp(self, entry, limit)
        giveup.deadline = schedule(limit, giveup, "given up")

    def _give_up(self, entry: Entry, limit: float) -> None:
        """Give up a job that ran past its bound (its deadline's thread): its permit goes to
        the next job, its calls get an error result each, and ``on_end`` hears of it."""
        job = entry.job
        if not job.cancel.cancelled:  # else stale, as any outcome of a cancelled job
            log.warning(
                "lane %r: job %r still running after %gs; given up", self._name, job.batch_id, limit
            )
            error = f"no result after {limit:g}s: a tool of this batch ignored its timeout"
            self._deliver(job, _error_results(job.calls, error), limit, None)
        self._launch_all(self._let_go(entry))  # after the outcome: it comes before the next
        if self._on_end is not None:
            self._ended(job)

    def _fail_unlaunched(self, entries: list[Entry], exc: BaseException) -> None:
        """Started jobs of a threaded lane no thread could be started for (``entries``, the
        next to run last), on a thread that cannot run them: each ends failed (an error
        result per call, naming the lane). The jobs their permits go to are started as any
        job is, by an idle worker or a thread of their own, and fail only if that thread
        cannot start either: one failed start does not fail the whole queue."""
        pending = entries
        while pending:
            self._threads_not_started(len(pending))
            granted: list[Entry] = []
            while pending:
                entry = pending.pop()
                job = entry.job
                error = (
                    f"lane {self._name!r}: no thread to run job {job.batch_id!r}: {_describe(exc)}"
                )
                nxt = self._finish(entry, FAILED, _error_results(job.calls, error), 0.0, error)
                if nxt is not None:
                    granted.append(nxt)
            launch = self._place(granted)
            if not launch:
                return
            launch.reverse()  # each thread pops its own job off the end: the first goes first
            try:
                self._spawn(launch)
                return
            except Exception as again:
                log.exception("lane %r: could not start a worker thread", self._name)
                exc, pending = again, launch

    def _submit_to_executor(self, entry: Entry) -> None:
        assert self._executor is not None
        job = entry.job
        run = job.run if job.bound is None else _ArmOnStart(self, entry, job.run)
        entry.started_at = time.perf_counter()
        try:
            future = self._executor.submit(_run_job, run, job.cancel)
        except Exception as exc:  # e.g. the executor was shut down under us
            log.exception("lane %r: executor refused job %r", self._name, job.batch_id)
            error = f"lane {self._name!r}: executor refused job {job.batch_id!r}: {_describe(exc)}"
            results = _error_results(job.calls, _describe(exc))
            nxt = self._finish(entry, FAILED, results, 0.0, error)
            if nxt is not None:
                self._launch(nxt)
            return
        if self._attach_future(entry, future):
            future.cancel()  # best effort: a job already running cannot be stopped this way
        future.add_done_callback(entry.done)

    def _executor_done(
        self, entry: Entry, future: concurrent.futures.Future[tuple[ToolResult, ...]]
    ) -> None:
        job = entry.job
        kind, results, error = DROPPED, _NO_RESULTS, None
        if future.cancelled():
            if not job.cancel.cancelled:  # the executor dropped it (shut down), not us
                kind = FAILED
                error = f"lane {self._name!r}: the executor cancelled job {job.batch_id!r}"
        else:
            exc = future.exception()
            if exc is None:
                kind, results = FINISHED, future.result()
            else:
                kind, error, results = self._failure(entry, exc)
        if kind == FAILED and not results:
            results = _error_results(job.calls, error or "failed")
        elapsed = time.perf_counter() - entry.started_at
        nxt = self._finish(entry, kind, results, elapsed, error)
        if nxt is not None:
            self._launch(nxt)
