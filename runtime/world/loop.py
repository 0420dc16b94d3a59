"""The run loops: ticking a world until it is idle, or for ever, parking when nothing moves.

`RunLoop` is mixed into `World`, so the world class reads as its API and this module as its
loop. ``run_until_idle`` and ``run`` tick to a fixed point (a tick that changed nothing, with
no input waiting and nobody ready), then ask ``_idle_wait`` how long to park on the world's
wake: until the nearest deadline (a sleeper, a prompt, a host timer), capped by
``REDRIVE_SECS`` against a lost wake. A virtual clock never waits: it jumps to the next
deadline when no lane work is in flight. ``start``/``stop`` run ``run`` on a background
thread.

In lockstep (`runtime.world.lockstep`) each tick first waits for the lane work in flight;
the loops do that wait in slices before they tick, so that ``timeout`` and ``stop`` are
still honoured while a slow job runs. Lane work then never makes the loop park: what is
due lands at the next tick, and what has a virtual duration is one more deadline to skip
time to.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

from runtime.clock import Clock, ManualClock
from runtime.errors import ConfigError, TickLimitError
from runtime.hub import InteractionHub
from runtime.lane.tool_lane import ToolLane
from runtime.lane.values import shown
from runtime.wake import Wake
from runtime.world.lockstep import Lockstep
from runtime.world.report import TickReport
from runtime.world.state import WorldState
from runtime.world.timers import HostTimers

__all__ = ["REDRIVE_SECS", "RunLoop"]

log = logging.getLogger("tickwork.world")

REDRIVE_SECS = 30.0
"""The longest a parked ``run()`` sleeps: a backstop against a lost wake."""

_SETTLE_SLICE_SECS = 0.05  # how often a lockstep wait looks at `stop`


class RunLoop:
    """The run loops of a `World` (mixed into it): ``run_until_idle``, ``run``, ``start``, ``stop``.

    The world provides the attributes declared here; the loop only reads them and ticks.
    """

    clock: Clock
    wake: Wake
    hub: InteractionHub
    lane: ToolLane
    inference_lane: ToolLane
    _state: WorldState
    _timers: HostTimers
    _lockstep: Lockstep | None
    _runner: threading.Thread | None
    _stop: threading.Event
    _run_error: BaseException | None
    _closed: bool
    _close_after_tick: float | None  # `close()`'s timeout, asked for during a tick

    # Provided by `World`; declared so that the loop type-checks on its own.
    @property
    def name(self) -> str:
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        raise NotImplementedError

    def tick(self) -> TickReport:
        raise NotImplementedError

    def _check_open(self) -> None:
        raise NotImplementedError

    def _close_now(self, timeout: float) -> None:
        raise NotImplementedError

    def _can_move(self) -> bool:
        raise NotImplementedError

    def _unwatched(self) -> bool:
        raise NotImplementedError

    def _skip_ahead(self, budget: int) -> tuple[int, bool]:
        raise NotImplementedError

    def run_until_idle(
        self, max_ticks: int = 1_000_000, *, timeout: float | None = None, skip_time: bool = True
    ) -> int:
        """Tick until nothing can move without outside input; returns the ticks run.

        Work in flight on a lane is waited for (parked on the wake, not spinning). With a
        ``ManualClock`` and ``skip_time``, time jumps to the next sleep or prompt deadline
        when nothing else can move (like trio's autojump clock); with a real clock the
        wait for a sleeper is real, and open prompts alone end the run (they need a person),
        also when a tool asked them (its job parked on the lane).

        Raises:
            TickLimitError: ``max_ticks`` ticks ran, or ``timeout`` seconds of real time
                passed waiting for lane work, and work was still left.
            ConfigError: ``max_ticks`` is not an integer >= 1, or ``timeout`` is not a
                number >= 0 (or None).
        """
        if isinstance(max_ticks, bool) or not isinstance(max_ticks, int) or max_ticks < 1:
            raise ConfigError(f"`max_ticks` must be an integer >= 1, got {shown(max_ticks)}")
        if timeout is not None:
            check_timeout(timeout, " or None")
        started = time.monotonic()
        ticks = 0
        lockstep = self._lockstep
        while True:
            if ticks >= max_ticks:
                raise TickLimitError(f"world still busy after `max_ticks`={max_ticks} ticks")
            if lockstep is not None:
                left = None if timeout is None else timeout - (time.monotonic() - started)
                if not lockstep.settle(None if left is None else max(0.0, left)):
                    raise TickLimitError(
                        f"world still waiting on lane work after `timeout`={timeout}s"
                    )
            report = self.tick()
            ticks += 1
            if self._closed:
                return ticks  # closed by host code during the tick
            if report.changed or self._can_move():
                continue
            if skip_time and self._unwatched():
                ran, moving = self._skip_ahead(max_ticks - ticks)
                ticks += ran
                if self._close_after_tick is not None:
                    self._close_now(self._close_after_tick)  # asked during a skipped tick
                    return ticks
                if moving or self._can_move():
                    continue
            wait = self._idle_wait(skip_time=skip_time, stop_on_prompts=True)
            if wait is None:
                return ticks
            if wait <= 0:
                continue
            if timeout is not None:
                left = timeout - (time.monotonic() - started)
                if left <= 0:
                    waiting = len(self._state.lane_waiting)
                    raise TickLimitError(
                        f"world still waiting on lane work of {waiting} agents after"
                        f" `timeout`={timeout}s"
                    )
                wait = min(wait, left)
            self.wake.wait(min(wait, REDRIVE_SECS))  # a far sleeper: wait in slices

    def run(self, stop: threading.Event | Callable[[], bool] | None = None) -> None:
        """Tick until ``stop`` is set (or returns True), parking when nothing can move.

        At a fixed point the loop parks on the wake with a timeout of the nearest deadline
        (sleep or prompt), capped by a ``REDRIVE_SECS`` backstop against a lost wake. If
        ``stop`` is your own event, call ``world.wake.notify()`` after setting it, or use
        ``start()``/``stop()`` which do.
        """
        should_stop = _stopper(stop)
        lockstep = self._lockstep
        # `_closed`, not the `closed` property: a call fewer between a wake-up and its tick.
        while not should_stop() and not self._closed:
            if lockstep is not None and not lockstep.settle(_SETTLE_SLICE_SECS):
                continue  # still waiting on lane work: look at `stop` again
            report = self.tick()
            if report.changed or self._can_move():
                continue
            wait = self._idle_wait(skip_time=True, stop_on_prompts=False)
            if wait is None:
                wait = REDRIVE_SECS
            if wait > 0:
                self.wake.wait(min(wait, REDRIVE_SECS))

    def _idle_wait(self, *, skip_time: bool, stop_on_prompts: bool) -> float | None:
        """At a fixed point: how long to park (0: go on at once; None: nothing to wait for).

        A virtual clock jumps straight to the next deadline when no lane work is in flight.
        In lockstep lane work is never "in flight" here (the tick waited for it): a job
        with a virtual duration is a deadline like a sleeper's.
        """
        state = self._state
        clock = self.clock
        timer = _earliest(state.next_timer(), self._timers.next_due())
        if timer is not None and timer == math.inf:
            timer = None  # `Sleep(inf)`: only an interrupt or a cancel ends it, never time
        prompt = self.hub.next_deadline()
        if self._lockstep is not None:
            timer = _earliest(timer, self._lockstep.next_due())
        elif state.lane_waiting and not self._parked_only():
            # Lane work runs: wait for it. Work that only waits on a person (tools that
            # asked, their jobs parked) is waited for as open prompts are, below: a run
            # ends on it, a virtual clock jumps to its deadline (it waited out the timeout
            # for good, and a host that answers once `run_until_idle` returns hung).
            nearest = min((d for d in (timer, prompt) if d is not None), default=None)
            if nearest is None or clock.virtual:
                return REDRIVE_SECS
            return max(0.0, nearest - clock.now())
        if clock.virtual:
            nearest = min((d for d in (timer, prompt) if d is not None), default=None)
            if nearest is None or not skip_time or not isinstance(clock, ManualClock):
                return None
            if nearest > clock.now():
                clock.set(nearest)
            return 0.0
        if timer is None and (stop_on_prompts or prompt is None):
            return None
        nearest = min(d for d in (timer, prompt) if d is not None)
        return max(0.0, nearest - clock.now())

    def _parked_only(self) -> bool:
        """Whether the lanes' only work in flight is parked on prompts still open: every
        agent with lane work has a prompt open (as the tick thread last applied them: an
        answered one's job may not have left its parking yet), and no job is queued or
        running."""
        for rec in self._state.lane_waiting.values():
            if not rec.prompts:
                return False
        parked = 0
        for lane in (self.lane, self.inference_lane):
            stats = lane.stats()
            if stats.queued or stats.busy:
                return False
            parked += stats.parked
        return parked > 0

    def start(self) -> None:
        """Run the loop on a background thread until ``stop()`` or ``close()``.

        Raises:
            RuntimeError: the loop is already running.
            WorldClosedError: the world is closed.
        """
        self._check_open()
        if self._runner is not None and self._runner.is_alive():
            raise RuntimeError("the world is already running")
        self._stop.clear()
        self._run_error = None
        # Set before it starts (an observer on it may call `stop()` at once), and dropped
        # if it cannot start: `stop()` (and `close()`) would join a thread never started.
        # Only then: a Ctrl-C landing in `start()` may come after the thread has started.
        self._runner = threading.Thread(
            target=self._run_guarded, name=f"{self.name}-tick", daemon=True
        )
        try:
            self._runner.start()
        except RuntimeError:  # "can't start new thread"
            self._runner = None
            raise

    @property
    def running(self) -> bool:
        """Whether ``start()``'s loop is running on its thread: False before ``start()``,
        after ``stop()``, and once the loop has died of an error (a journal that cannot
        be written), which ``stop()`` then raises. A host waiting on a started world
        watches this to learn that nothing will tick any more."""
        runner = self._runner
        return runner is not None and runner.is_alive()

    @property
    def loop_error(self) -> BaseException | None:
        """The error that killed ``start()``'s loop, until ``stop()`` raises it (or
        ``start()`` runs the loop again); None while it runs, before ``start()`` and after
        ``stop()``. With ``running`` False, it says why nothing ticks any more."""
        return self._run_error

    def _run_guarded(self) -> None:
        try:
            self.run(self._stop)
        except BaseException as exc:  # reported by stop(), never lost
            self._run_error = exc
            log.exception("the tick loop of %s died", self.name)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the background loop and wait for it; re-raises an error that killed it.

        Raises:
            TimeoutError: the loop did not stop within ``timeout`` seconds.
            ConfigError: ``timeout`` is not a number >= 0 (nothing is stopped).
        """
        check_timeout(timeout)
        runner = self._runner
        if runner is None:
            return
        self._stop.set()
        self.wake.notify()
        if runner is threading.current_thread():
            return  # asked from the loop's own thread (an observer): it ends after this tick
        runner.join(min(timeout, threading.TIMEOUT_MAX))  # past it, join() overflows
        if runner.is_alive():
            raise TimeoutError(f"the tick loop did not stop within {timeout}s")
        self._runner = None
        error, self._run_error = self._run_error, None
        if error is not None:
            raise error


def check_timeout(timeout: object, also: str = "") -> None:
    """Refuse a ``timeout`` that is not a number of seconds >= 0 (NaN, a string, a bool);
    ``also`` names what else the caller takes (" or None").

    Raises:
        ConfigError: naming the value.
    """
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise ConfigError(f"`timeout` must be a number >= 0{also}, got {shown(timeout)}")


def _earliest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


def _stopper(stop: threading.Event | Callable[[], bool] | None) -> Callable[[], bool]:
    if stop is None:
        return lambda: False
    if isinstance(stop, threading.Event):
        return stop.is_set
    return stop
