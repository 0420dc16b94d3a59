"""Lockstep delivery: the tick at which a lane outcome lands is fixed by the run, not by threads.

DESIGN.md, "Determinism contract", **Delivery**. Every job dispatched at tick t (a tool batch,
a model call) is tracked here as a `_Slot` before it is submitted. Its outcome does not go to
the inbox when a lane thread finishes it: it waits in its slot, and the next tick first
*settles* (waits until no tracked job is still running) and then *releases* every outcome
that is due, in order of (due time, dispatch order), into the inbox. A job takes no world
time unless it declares a virtual duration, so a plain job is due at once and lands at t+1;
one of duration d dispatched at world time n lands at the first tick whose time is >= n + d.

A job is still running until it ends, its token fires, or it is waiting on a person: the
prompt it opened from its lane thread is open. Prompt events a job's own thread causes are
held in its slot and released in dispatch order too, so that their order does not depend
on which lane thread got there first; a settlement of such a prompt that arrives before
its opening was released waits behind it. Settling a prompt a job waits on makes the job
run again: the next tick waits for it.

The prompt events and posts of a job whose agent is interrupted or cancelled (its slot
abandoned, or its token fired) are dropped unreleased, like its outcome: how far its thread
got before the command landed is thread timing, so the world never sees them. Its prompt is
withdrawn from the hub as the token fires.

A job that never returns (a tool that ignores its token) would hold every tick: the tool
timeout still bounds it. The lane gives up a job with a bound (`ToolJob.bound`, the sum of
its calls' timeouts) once it has run `runtime.lane.GIVE_UP_GRACE_SECS` past it: every call
of the batch gets an error result saying so, the job counts as ended here, and whatever it
returns later is dropped. A job with no bound (a call of a tool without a timeout, a model
call) is waited for until it returns.

`fresh` is what keeps the number of ticks independent of timing: the loop asks whether
anything was dispatched (or resumed) since the last settle, never whether a job happens
to be finished yet.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time

from components import PromptOpened, PromptSettled, ToolCall
from runtime.cancel import CancelToken
from runtime.clock import Clock
from runtime.lane.jobs import ToolJob, ToolOutcome
from runtime.lane.parking import current as _lane_slot
from runtime.world.inputs import Inbox

__all__ = ["JobClock", "Lockstep"]


class _Slot:
    """One tracked job. Fields change under `Lockstep._cond` (``started`` excepted: a plain
    write by the job's thread, read by the tick thread)."""

    __slots__ = (
        "abandoned",
        "agent_id",
        "asking",
        "at",
        "calls",
        "due",
        "ended",
        "events",
        "outcome",
        "owner",
        "ref",
        "released",
        "seq",
        "token",
        "unreleased_opens",
    )

    def __init__(
        self,
        owner: Lockstep,
        seq: int,
        agent_id: str,
        ref: str,
        calls: tuple[ToolCall, ...],
        due: float,
        token: CancelToken,
        at: float,
    ) -> None:
        self.owner = owner
        self.seq = seq
        self.agent_id = agent_id
        self.ref = ref
        self.calls = calls
        self.due = due
        self.at = at  # the world time it was dispatched at
        self.token = token
        self.ended = False  # ended, or given up by its lane (`on_end` heard of it either way)
        self.abandoned = False  # an interrupt or cancel is on its way: do not wait
        self.released = False
        self.outcome: ToolOutcome | None = None
        self.events: list[object] = []
        self.asking: set[str] = set()  # prompts it opened that are still open
        self.unreleased_opens: set[str] = set()  # ... whose PromptOpened is still held

    def __call__(self, token: CancelToken) -> None:
        """The token's cancel callback: a cancelled job's outcome is stale."""
        self.owner._cancelled(self)

    def quiet(self) -> bool:
        """Whether the tick need not wait for this job now."""
        return self.ended or self.abandoned or bool(self.asking) or self.token.cancelled


class Lockstep:
    """The slots of every job in flight, and the settle/release steps of a lockstep tick.

    ``track`` and ``settle``/``release`` run on the tick thread; ``outcome``, ``ended`` and
    ``caused`` on any thread (lane workers, the hub's callers).
    """

    def __init__(self, inbox: Inbox, clock: Clock) -> None:
        self._inbox = inbox
        self._clock = clock
        self._cond = threading.Condition(threading.Lock())
        self._seq = itertools.count(1)
        self._slots: dict[tuple[str, str], _Slot] = {}  # (agent id, ref) -> slot
        self._running: dict[int, _Slot] = {}  # seq -> slot the tick must wait for
        self._due: list[tuple[float, int, _Slot]] = []  # heap of (due, seq) not released
        self._held: dict[int, _Slot] = {}  # due, but waiting on a person
        self._evented: dict[int, _Slot] = {}  # slots holding prompt events
        self._dropped: list[_Slot] = []  # token fired: release drops them
        self._by_request: dict[str, _Slot] = {}
        self._retired: set[tuple[str, str]] = set()  # given up: swallow what comes later
        self._fresh = False
        self._closed = False

    # -- the tick thread ---------------------------------------------------------------

    def track(self, job: ToolJob, *, due: float) -> None:
        """Track ``job``, before it is submitted."""
        slot = _Slot(
            self,
            next(self._seq),
            job.agent_id,
            job.batch_id,
            job.calls,
            due,
            job.cancel,
            self._clock.now(),
        )
        with self._cond:
            self._slots[(slot.agent_id, slot.ref)] = slot
            self._running[slot.seq] = slot
            heapq.heappush(self._due, (due, slot.seq, slot))
            self._fresh = True
        job.cancel.add_callback(slot)

    def untrack(self, job: ToolJob) -> None:
        """Forget a job that was refused (its lane is closed)."""
        with self._cond:
            slot = self._slots.pop((job.agent_id, job.batch_id), None)
            if slot is not None:
                self._retire(slot)

    def abandon(self, agent_id: str) -> None:
        """Stop waiting for ``agent_id``'s jobs: an interrupt or cancel of it is on its way.

        Whatever tick that command lands in abandons the agent's turn before outcomes are
        collected, so the outcome of any job in flight now is stale there: not waiting for
        it changes no state, only how soon a slow job stops holding the world. Its outcome,
        should it come, is still released when due (a token that fires drops it).
        """
        with self._cond:
            for (owner, _ref), slot in self._slots.items():
                if owner == agent_id:
                    slot.abandoned = True
                    self._wake_if(slot)

    @property
    def fresh(self) -> bool:
        """Whether a job was dispatched (or resumed) since the last settle."""
        return self._fresh

    def can_move(self, now: float) -> bool:
        """Whether a tick at ``now`` would release something (after ``fresh`` is clear)."""
        if self._fresh:
            return True
        due = self.next_due()
        return due is not None and due <= now

    def next_due(self) -> float | None:
        """The earliest due time of an outcome not yet released, or None."""
        with self._cond:
            heap = self._due
            while heap and heap[0][2].released:
                heapq.heappop(heap)
            return heap[0][0] if heap else None

    def settle(self, timeout: float | None = None) -> bool:
        """Wait until no tracked job is running; False if ``timeout`` passed first."""
        if not self._running and not self._fresh:
            return True  # the idle tick: nothing dispatched, nothing running (GIL-atomic reads)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                running = self._running
                for seq in [s for s, slot in running.items() if slot.quiet()]:
                    del running[seq]
                if not running or self._closed:
                    self._fresh = False
                    return True
                if deadline is None:
                    self._cond.wait()  # `_wake_if` and `close` notify, under the lock
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)

    def release(self, now: float) -> int:
        """Put held prompt events and every outcome due at ``now`` into the inbox, in order.

        Call after ``settle``. Returns how many inputs were put.
        """
        heap = self._due
        if not (self._evented or self._dropped or self._held or (heap and heap[0][0] <= now)):
            return 0  # the common idle tick: nothing to release (read without the lock:
            # what a lane thread adds meanwhile is released by the next tick, as before)
        with self._cond:
            items: list[object] = []
            if self._evented:
                for seq in sorted(self._evented):
                    slot = self._evented[seq]
                    if slot.abandoned or slot.token.cancelled:
                        # Stale, as its outcome is: whether its thread got this far before
                        # the interrupt or cancel is thread timing. Its unreleased openings
                        # stay listed, so that their settlements are held and dropped too.
                        slot.events = []
                        continue
                    items.extend(slot.events)
                    slot.events = []
                    slot.unreleased_opens.clear()
                self._evented.clear()
            for slot in self._dropped:
                self._retire(slot)
            self._dropped.clear()
            held = self._held
            while heap and heap[0][0] <= now:
                slot = heapq.heappop(heap)[2]
                if not slot.released:
                    held[slot.seq] = slot
            if held:
                for seq in sorted(held, key=lambda s: (held[s].due, s)):
                    slot = held[seq]
                    if slot.released:
                        del held[seq]
                    elif slot.ended:
                        del held[seq]
                        if slot.outcome is not None:
                            items.append(slot.outcome)
                        self._retire(slot)
        put = self._inbox.put
        for item in items:
            put(item)
        return len(items)

    def close(self) -> None:
        """Stop waiting for anything (the world is closing)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def hub_clock(self) -> Clock:
        """The clock for the world's hub. On a virtual clock, a `JobClock`: a prompt a job
        opens is stamped with the job's dispatch time, not with whatever the clock reads
        when its thread gets there. A real clock is real time on every thread."""
        if not self._clock.virtual:
            return self._clock
        return JobClock(self._clock, self._slots)

    # -- any thread --------------------------------------------------------------------

    def outcome(self, outcome: ToolOutcome) -> None:
        """A lane's ``on_outcome``: keep the outcome in its slot until it is due."""
        key = (outcome.agent_id, outcome.batch_id)
        with self._cond:
            slot = self._slots.get(key)
            if slot is not None:
                slot.outcome = outcome
                return
            if key in self._retired:
                return
        self._inbox.put(outcome)  # not a job of ours

    def ended(self, job: ToolJob) -> None:
        """A lane's ``on_end``: the job ended (its outcome, if any, is delivered)."""
        key = (job.agent_id, job.batch_id)
        with self._cond:
            slot = self._slots.get(key)
            if slot is None:
                self._retired.discard(key)
                return
            slot.ended = True
            self._wake_if(slot)

    def hub_event(self, event: object) -> None:
        """The hub's listener in lockstep: a prompt event a lane job caused waits in its
        slot (`caused`); any other goes to the inbox."""
        if not self.caused(event):
            self._inbox.put(event)

    def caused(self, event: object) -> bool:
        """Hold an input a tracked job's own thread caused (a prompt event, a post), or the
        settlement of a prompt whose opening is held; False if it is neither."""
        entry = getattr(_lane_slot, "slot", None)
        job = getattr(entry, "job", None)
        cls = type(event)
        with self._cond:
            if cls is PromptSettled:
                request_id = event.request_id  # type: ignore[attr-defined]
                slot = self._by_request.pop(request_id, None)
                if slot is not None:
                    slot.asking.discard(request_id)
                    if not slot.quiet() and not slot.released:
                        # It runs again: wait for it. (Not one the tick need not wait for
                        # anyway, abandoned or cancelled: were it listed, no end of the
                        # others would empty the list, and the tick would wait for it.)
                        self._running[slot.seq] = slot
                        self._fresh = True
                    if request_id in slot.unreleased_opens:
                        self._hold(slot, event)  # behind its opening
                        return True
            if job is None:
                return False
            slot = self._slots.get((job.agent_id, job.batch_id))
            if slot is None:
                return False
            if cls is PromptOpened:
                request_id = event.request.id  # type: ignore[attr-defined]
                slot.asking.add(request_id)
                slot.unreleased_opens.add(request_id)
                self._by_request[request_id] = slot
                self._wake_if(slot)
            self._hold(slot, event)
            return True

    # -- helpers (under the lock) ----------------------------------------------------------

    def _hold(self, slot: _Slot, event: object) -> None:
        slot.events.append(event)
        self._evented[slot.seq] = slot

    def _wake_if(self, slot: _Slot) -> None:
        if self._running.pop(slot.seq, None) is not None and not self._running:
            self._cond.notify_all()

    def _cancelled(self, slot: _Slot) -> None:
        with self._cond:
            if slot.released:
                return
            self._dropped.append(slot)
            self._wake_if(slot)

    def _retire(self, slot: _Slot) -> None:
        if slot.released:
            return
        slot.released = True
        key = (slot.agent_id, slot.ref)
        self._slots.pop(key, None)
        self._running.pop(slot.seq, None)
        self._held.pop(slot.seq, None)
        for request_id in slot.asking:
            self._by_request.pop(request_id, None)
        if not slot.ended:
            self._retired.add(key)
        slot.token.remove_callback(slot)


class JobClock:
    """A virtual clock that reads, on a lockstep job's own thread, the world time the job
    was dispatched at.

    A job takes no world time, but its thread runs while the host moves the clock on
    between ticks: a prompt a tool opens would be stamped (and given its deadline) by
    whichever came first. Stamped with the job's dispatch time instead, it expires at the
    same tick on every run.
    """

    __slots__ = ("_clock", "_slots")

    def __init__(self, clock: Clock, slots: dict[tuple[str, str], _Slot]) -> None:
        self._clock = clock
        self._slots = slots

    @property
    def virtual(self) -> bool:
        return self._clock.virtual

    def now(self) -> float:
        job = getattr(getattr(_lane_slot, "slot", None), "job", None)
        if job is not None:
            slot = self._slots.get((job.agent_id, job.batch_id))  # one GIL-atomic read
            if slot is not None:
                return slot.at
        return self._clock.now()
