"""Skipping ahead: the ticks of a virtual-time run that only sleepers and host code move.

`SkipAhead` is mixed into `World`. At a fixed point, ``run_until_idle`` on a ``ManualClock``
would set the clock to the next deadline and tick, then tick once more to find the next
fixed point, and so on: two whole pipelines per wake-up, though such a tick can have no
input, no outcome, no prompt due and no lane to mirror. When nobody watches the world tick
by tick (no every-tick observer, probe, metrics, journal or digest tracking) and no lane
work is in flight, ``_skip_ahead`` runs exactly those ticks itself, with their numbers and
times: each deadline set (a sleeper's or a host timer's), the host timers run, then only
the stages that can have work (abort, interrupts, host systems, step, dispatch, reflect),
no report made, and the quiet tick that ends a burst counted without being run when no
host system could change something in it. A tick with no host system or timer and nothing
queued but the sleepers due is leaner still: ``_wake_run`` wakes and steps that deadline's
bucket and nothing else runs unless the step queued work; while the agents it steps only
sleep again, it runs on through the quiet tick and the next deadline's wake-up in one loop.
A tick whose only work is agents that just ended runs their abort alone. The results,
tick numbers, times, digest and host-system calls are the whole pipeline's;
``tests/world/test_tick.py`` compares them.

It hands back to the loop at the first tick that sends work to a lane (mirrored as the
whole tick would, then ``moving``), before a prompt or lockstep deadline, when an input
arrives (a command, a prompt event) or a Ctrl-C lands, when something starts watching, and
at the tick budget. It takes the world's locks a slice of ticks at a time (`SKIP_SLICE`
ticks, or `WAKE_SLICE` seconds for a run of wake-ups), and gives up the GIL every
`YIELD_AFTER` seconds, so that readers (``status``, ``counts``, ...) and other worlds'
ticks are not shut out for the whole run.
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

import esper

from components import AgentSpec, Phase, StatusKind
from runtime.clock import Clock, ManualClock
from runtime.hub import InteractionHub
from runtime.lane.tool_lane import ToolLane
from runtime.world import sigint
from runtime.world.actions import Sleep
from runtime.world.host import HostECS
from runtime.world.inputs import Inbox
from runtime.world.lockstep import Lockstep
from runtime.world.metrics import MetricsRecorder
from runtime.world.probe import Probe
from runtime.world.recorder import Recorder
from runtime.world.report import TickReport
from runtime.world.state import WorldState, end_hold
from runtime.world.tick import ESPER_LOCK
from runtime.world.timers import HostTimers
from systems.lifecycle import end_turn, fail, nothing_to_abort
from systems.step_behaviors import fail_step, step_ready, take_action

__all__ = ["SKIP_SLICE", "WAKE_SLICE", "YIELD_AFTER", "SkipAhead"]

SKIP_SLICE = 64
"""Ticks run under one hold of the world's locks (a few hundred microseconds)."""

WAKE_SLICE = 0.001
"""Seconds a run of wake-ups (`SkipAhead._wake_run`) may hold the locks, looked at every
64 of its ticks: its ticks are cheap, and taking the locks again every `SKIP_SLICE`
ticks was ~7% of a sparse run (four locks and the esper switch, every ~32 wake-ups)."""

YIELD_AFTER = 0.005
"""Seconds of skipping after which the GIL is given up between two slices, so that a
thread waiting for the world's locks takes them (``time.sleep(0)`` costs a context switch
on a busy machine: doing it every slice cost the sparse runs ~15% of their wall time)."""

# Stages a skipped tick cannot need: no inputs, so no outcomes; no prompt due; the lanes
# are mirrored only in a tick that sends them work.
_NOT_NEEDED = {"apply_inputs", "expire_prompts", "collect_outcomes", "mirror_lane_stats"}

# What a skipped tick runs: every stage that can have work, the step alone for the due
# sleepers (`_wake_run`), the abort alone for agents that just ended, or nothing at all.
_WHOLE, _WAKE, _ABORT, _QUIET = "whole", "wake", "abort", "quiet"


def _end_holds(state: WorldState, bucket: Sequence[tuple[int, Any]]) -> bool:
    """End the holds among a deadline's live sleepers, in order, before any of them steps
    (as `WorldState.wake_sleepers` does); whether there was one."""
    ended = False
    for entry, rec in bucket:
        if rec.sleep_seq == entry and rec.turn.pending is not None:
            end_hold(state, rec)
            ended = True
    return ended


def _step_woken(state: WorldState, bucket: Sequence[tuple[int, Any]]) -> None:
    """Step a deadline's live sleepers, then what their holds' ends resumed (already in
    ``state.ready``), as the whole tick's `step_ready` would: the rare end of a run."""
    resumed = dict(state.ready)
    state.ready.clear()
    paused = StatusKind.PAUSED
    for entry, rec in bucket:
        if rec.sleep_seq == entry:
            (state.held if rec.status.kind is paused else state.ready)[rec.ordinal] = rec
    state.ready.update(resumed)
    step_ready(state)


def _take_other(state: WorldState, rec: Any, action: Any, next_ready: dict[int, Any]) -> bool:
    """Take what a stepped sleeper yielded other than a positive float ``Sleep``, as the
    run's general loop takes it: another positive sleep (an int's), a step action (a
    resource's) or anything else through `take_action`; whether the tick must end the
    run (the agent did something but sleep or park)."""
    if action.__class__ is Sleep and not (s := action._seconds) <= 0 and s > 0:
        deadline = rec.turn.deadline = state.now + s
        state.add_sleeper(rec, deadline)
        return False
    handler = state.step_actions.get(action.__class__)
    if handler is not None:  # a resource's: it parks, or moves on
        handler(state, rec, action)
        return bool(next_ready or state.to_abort or state.to_dispatch)
    take_action(state, rec, action, next_ready)
    return True


def pipeline_order(systems: Sequence[tuple[int, Any]]) -> list[Any]:
    """Host systems ``(gap, system)`` in the order the pipeline runs them (by place, in the
    order added within one): the order a skipped tick asks their ``run_if`` in, as the
    whole pipeline asks each at its turn (one may read what an earlier one changes)."""
    return [system for _gap, system in sorted(systems, key=itemgetter(0))]


class SkipAhead:
    """The fast path of ``run_until_idle`` (mixed into `World`); see the module docstring."""

    clock: Clock
    hub: InteractionHub
    lane: ToolLane
    inference_lane: ToolLane
    _state: WorldState
    _host: HostECS
    _inbox: Inbox
    _lockstep: Lockstep | None
    _lock: threading.RLock
    _timers: HostTimers
    _observers: list[Callable[[TickReport, list[tuple[int, object]]], object]]
    _probe: Probe | None
    _recorder: MetricsRecorder | None
    _journal: Recorder | None
    _track_digests: bool
    _keep_dirty: bool
    _dirty_dropped: bool
    _pipeline: list[Any]  # the built-in systems, in order (host systems are esper's)
    _stages: list[str]
    _close_after_tick: float | None  # `close()` asked for during a tick (`World.close`)
    _reconfigured: int  # bumped by whatever a skipped run took as given (`TickMachine`)

    # Provided by `TickMachine`.
    def _in_esper(self) -> Any:
        raise NotImplementedError

    def _note_new_agents(self) -> None:
        raise NotImplementedError

    def _release_finished(self) -> None:
        raise NotImplementedError

    def _notify(
        self,
        observers: list[Callable[[TickReport, list[tuple[int, object]]], object]],
        report: TickReport,
        inputs: list[tuple[int, object]],
    ) -> None:
        raise NotImplementedError

    def _unwatched(self) -> bool:
        """Whether nobody watches this world tick by tick and no lane work is in flight
        (an agent's, or a cancelled agent's job still running): ``_skip_ahead``'s condition."""
        return (
            self._journal is None
            and not self._track_digests
            and not self._observers
            and self._probe is None
            and self._recorder is None
            and not self._state.lane_waiting
            and isinstance(self.clock, ManualClock)
            and not self.lane.stats().in_flight
            and not self.inference_lane.stats().in_flight
        )

    def _skip_limit(self, now: float) -> float | None:
        """The time ``_skip_ahead`` must stop before (a prompt's or a lockstep job's
        deadline, or infinity), or None when lockstep has work to land now."""
        limit = self.hub.next_deadline()
        lockstep = self._lockstep
        if lockstep is not None:
            if lockstep.can_move(now):
                return None
            due = lockstep.next_due()
            if due is not None and (limit is None or due < limit):
                limit = due
        return math.inf if limit is None else limit

    def _lean_pipeline(self) -> tuple[list[Any], list[Any]]:
        """The systems a skipped tick can need, in pipeline order with the host systems in
        their places: those before the lane mirror's place, and those after it."""
        hosted = self._host.systems
        before: list[Any] = []
        after: list[Any] = []
        order = before
        for gap in range(len(self._stages) + 1):
            order.extend(system for at, system in hosted if at == gap)
            if gap < len(self._stages):
                stage = self._stages[gap]
                if stage == "mirror_lane_stats":
                    order = after
                elif stage not in _NOT_NEEDED:
                    order.append(self._pipeline[gap])
        return before, after

    def _run_stages(
        self, stages: list[Any], mirror: Any, after: list[Any]
    ) -> tuple[bool, tuple[str, ...]]:
        """Run ``stages`` (up to the lane mirror's place), ``mirror`` if work went out to a
        lane, then ``after``, as the whole pipeline would from there; returns whether work
        went out and the host systems' and actions' errors of the tick."""
        state = self._state
        for system in stages:
            system.process(state)
        # Lockstep outcomes come only of work dispatched since the skip began
        # (`_skip_limit` saw the rest); dispatching makes it fresh.
        lockstep = self._lockstep
        sent = bool(state.lane_waiting) or (lockstep is not None and lockstep.fresh)
        if sent:  # work went out: the lanes changed
            mirror.process(state)
        for system in after:
            system.process(state)
        return sent, self._host.take_errors()

    def _wake_run(  # noqa: PLR0915 - the skip's inner loop, kept flat
        self,
        now: float,
        room: int,
        limit: float,
        flags: Any,
        deferring: bool,
        until: float,
        changes: int,
    ) -> tuple[int, float, bool]:
        """Wake and step the sleepers due at ``now`` (a tick ``_skip_ahead`` has begun,
        with nothing queued and every host system idle and placed before the step), then
        run on through the ticks that follow while they are sleepers alone: the quiet tick
        after a wake-up, and the next deadline's wake-up, for at most ``room`` ticks more,
        before ``limit``, and until ``time.perf_counter()`` passes ``until`` (the slice's
        end: see `WAKE_SLICE`).

        Each agent is stepped as `step_ready` steps it (the same order, effects, counts
        and failures): a positive ``Sleep`` is handled here, an action the step takes
        (``state.step_actions``: a resource's) by its handler, anything else by
        `take_action`, the end of a behaviour by ``end_turn``. The holds among a
        deadline's sleepers end first, as `WorldState.wake_sleepers` ends them. The run
        stops after the first tick in which anything else happened (an agent did
        something but sleep or park on a resource, failed, or ended leaving anything to
        abort or release; a hold's end resumed a waiter), and when an input arrives, a
        timer or a Ctrl-C is pending, or something starts watching: the caller then ends
        that tick as it ends any. An agent that ended with nothing to abort does not stop
        it: the next tick clears the abort queue, as the whole pipeline's would. Host
        systems are asked at each tick it begins, in order (every stage before them is
        idle there); when one has work, that tick is left begun for the caller to run
        whole. A live sleep entry's turn is SLEEPING with nothing to send but a hold's
        value (see `WorldState.sleep_buckets`). Host code that changes what the run took as
        given (``_reconfigured`` moved past ``changes``: an observer, a probe, metrics, a
        host system, a close asked for) or moves the clock stops it at that tick's end.

        Returns the ticks run (or begun) after the first, the time now, and whether the
        last of them is begun but not run.
        """
        state = self._state
        clock = self.clock
        assert isinstance(clock, ManualClock)  # whose lock `_skip_ahead` holds
        action: Any = None  # bound for `fail_step` however early a step fails
        heap, buckets = state.sleepers, state.sleep_buckets
        pop, push, pushpop = heapq.heappop, heapq.heappush, heapq.heappushpop
        held, dirty, next_ready = state.held, state.dirty, state.ready
        arrived, timer_heap = self._inbox._arrived, self._timers._heap
        systems = pipeline_order(self._host.systems)
        step_actions = state.step_actions
        finished, keep = state.finished, state.keep_finished
        paused, sleep = StatusKind.PAUSED, Sleep
        done, complete = Phase.DONE, StatusKind.COMPLETE
        to_abort, joiners = state.to_abort, state.joiners
        # A world that keeps no dirty set (no digest was ever asked for: see
        # `TickMachine._record_nothing`) drops it at its next whole tick anyway; the
        # stepped agents are then marked by saying it was dropped, not one by one.
        marking = self._keep_dirty
        if not marking:
            self._dirty_dropped = True
        seq = state.sleep_seq
        tick = tick0 = state.tick
        more = 0
        clock_at = 64  # the next `more` at which `until` is looked at
        # Below which `more` a wake-up may count the quiet tick and begin the next in one
        # go: two ticks of `room` left, `clock_at` not reached, no host system to ask.
        lean_until = -1 if systems else min(clock_at, room - 1)
        tick_until = tick0 + lean_until  # the same, as a tick number (the plain run's)
        # The plain run (below): no host system to ask, nothing created or to forget.
        lean = not systems and not state.created and not state.to_forget
        perf_counter = time.perf_counter
        # The next deadline's, popped already (emptied once the plain run stepped it).
        bucket: list[tuple[int, Any]] | tuple[()] | None = None
        # The tick's flags, reset where they are read (not at each tick's start: a plain
        # wake-up pays for none of it): `calls`, a call-out made changes of its own (see
        # below); `ended`, a behaviour ended; `odd`, one did something other than end,
        # sleep or park, so the caller ends the tick (the run returns then). `holding`:
        # holds are live (only call-outs start or end one), so the step looks for them.
        ended = odd = calls = False
        holding = state.holds
        deferred: float | None = None  # a new deadline the plain run has not pushed yet
        try:  # `seq` goes back into `state` whichever way the run ends
            while True:  # one wake-up tick at `now`, numbered `tick`
                # The tick's counts are 0 in `state` (each tick begins so): a positive sleep
                # counts in `stepped` alone, a call-out (`end_turn`, `fail`, `take_action`,
                # a step action, a hold's end) adds its own changes there.
                stepped = 0
                if bucket is None:
                    bucket = buckets.pop(pop(heap))
                if holding:  # the holds due end before anyone steps
                    state.sleep_seq = seq
                    if len(bucket) == 1:  # `_end_holds`, inlined: the usual bucket
                        entry, rec = bucket[0]
                        if rec.sleep_seq == entry and rec.turn.pending is not None:
                            end_hold(state, rec)
                            calls = True
                    else:
                        calls = _end_holds(state, bucket)
                    seq = state.sleep_seq
                    if next_ready:  # a waiter resumed: it steps now, after the woken
                        _step_woken(state, bucket)
                        seq = state.sleep_seq
                        return more, now, False
                if (
                    lean
                    and not holding
                    and len(bucket) == 1
                    and (only := bucket[0])[1].sleep_seq == only[0]
                ):
                    # The plain run: one live sleeper at each instant, sleeping again or
                    # ending with nothing to abort, tick after tick in this loop alone (the
                    # general code below does the same step by step). It leaves with the
                    # tick's agent stepped (`bucket` emptied) for the general end of the
                    # tick as soon as anything else happens (a call-out, a stop, a deadline
                    # it cannot begin here), or with a tie's tick begun for the general
                    # loop to step.
                    entry, rec = only
                    handed = False  # a tick left unstepped for the general loop
                    while True:  # `rec` sleeps until `now`, tick `tick`: step it
                        if rec.status.kind is paused:
                            bucket = [(entry, rec)]  # the general loop holds it
                            handed = True
                            break
                        turn = rec.turn
                        if marking:
                            dirty[rec.ordinal] = rec
                        try:
                            action = turn.behavior.send(None)  # type: ignore[union-attr]
                        except StopIteration as stop:
                            if not (
                                rec._extras is None
                                and rec.token is None
                                and not rec.prompts
                                and keep is None
                                and not joiners
                                and not rec._comps[AgentSpec].interactive
                            ):
                                if deferred is not None:  # onto the heap before a call-out
                                    push(heap, deferred)
                                    deferred = None
                                state.sleep_seq = seq
                                end_turn(state, rec, stop.value)
                                seq = state.sleep_seq
                                ended = calls = True
                                break
                            # `_end_plain` of a live sleeper, inlined: it is in no index
                            # set (not ready, held or awaiting a lane), not terminal (a
                            # live entry never is), its finished generator has nothing to
                            # close, and the abort it queues has nothing to do (see
                            # `nothing_to_abort`): the next tick only clears the queue.
                            turn.behavior = None
                            turn.phase = done
                            turn.inflight = turn.deadline = turn.send_value = None
                            rec.sleep_seq = 0
                            rec.result = stop.value
                            status = rec.status
                            status.kind, status.reason, status.message = complete, None, ""
                            to_abort.append(rec)
                            state.changed_this_tick += 1
                            ended = True
                        except BaseException as exc:  # as in step_ready
                            if deferred is not None:
                                push(heap, deferred)
                                deferred = None
                            state.sleep_seq = seq
                            fail(state, rec, exc)
                            seq = state.sleep_seq
                            odd = calls = True
                            break
                        else:
                            # A positive float sleep, compared without a C-level call (the
                            # float compare is specialized); any other action goes to
                            # `_take_other`, as the general loop would take it.
                            if (
                                action.__class__ is sleep
                                and (s := action._seconds).__class__ is float
                                and s > 0.0
                            ):
                                deadline = turn.deadline = now + s  # still SLEEPING
                                seq += 1
                                rec.sleep_seq = seq
                                later = buckets.get(deadline)
                                if later is None:  # add_sleeper, inlined
                                    buckets[deadline] = [(seq, rec)]
                                    if deferred is not None:
                                        push(heap, deferred)
                                    deferred = deadline  # pushed as the next is popped
                                else:
                                    later.append((seq, rec))
                            else:
                                if deferred is not None:
                                    push(heap, deferred)
                                    deferred = None
                                state.sleep_seq = seq
                                try:
                                    if _take_other(state, rec, action, next_ready):
                                        odd = True
                                except BaseException as exc:
                                    fail_step(state, rec, exc, action)
                                    odd = True
                                seq = state.sleep_seq
                                calls = True
                                holding = state.holds
                                break
                        # The quiet tick after it and the next deadline's tick, counted as
                        # the general code counts them, when nothing stops the run there.
                        if (
                            tick >= tick_until
                            or arrived
                            or timer_heap
                            or (deferring and flags.pending)
                            or self._reconfigured != changes
                            or clock._now is not now  # host code moved it
                        ):
                            # At `clock_at` (not the end of `room`) with nothing else to
                            # stop it: the slice's end looked at here, as the general code
                            # looks at it, and the run goes on (leaving this loop and coming
                            # back cost ~3% of a sparse run, every 32 wake-ups).
                            if (
                                tick < tick_until
                                or clock_at >= room - 1
                                or arrived
                                or timer_heap
                                or (deferring and flags.pending)
                                or self._reconfigured != changes
                                or clock._now is not now
                                or perf_counter() > until
                            ):
                                break
                            clock_at = tick - tick0 + 64
                            lean_until = min(clock_at, room - 1)
                            tick_until = tick0 + lean_until
                        # The next deadline: the last new one pushed as it is popped (one
                        # pass over the heap, none when it is the earliest).
                        if deferred is not None:
                            deadline = pushpop(heap, deferred)
                            deferred = None
                        elif heap:
                            deadline = pop(heap)
                        else:
                            break
                        if deadline <= now or deadline >= limit or deadline.__class__ is not float:
                            push(heap, deadline)  # the general code takes it from here
                            break
                        found = buckets.pop(deadline)
                        try:
                            ((entry, rec),) = found
                        except ValueError:  # a tie: its tick is begun for the general loop
                            first = found[0]
                            if first[1].sleep_seq != first[0]:
                                buckets[deadline] = found  # stale: the general code drops it
                                push(heap, deadline)
                                break
                            if ended:  # the quiet tick's abort: only forgetting them
                                state.changed_this_tick = 0
                                to_abort.clear()
                                ended = False
                            now = state.now = clock._now = deadline
                            tick += 2
                            state.tick = tick
                            bucket = found
                            handed = True
                            break
                        if rec.sleep_seq != entry:
                            buckets[deadline] = found  # stale: the general code drops it
                            push(heap, deadline)
                            break
                        if ended:  # the quiet tick's abort: only forgetting them
                            state.changed_this_tick = 0
                            to_abort.clear()
                            ended = False
                        now = state.now = clock._now = deadline
                        tick += 2
                        state.tick = tick
                    more = tick - tick0
                    if handed:
                        stepped = 0
                    else:  # the last tick's sleeper stepped: nothing left to step
                        stepped = 1
                        bucket = ()
                    if deferred is not None:
                        push(heap, deferred)
                        deferred = None
                    if ended:  # the ends' counts are in `state`, as a call-out's
                        calls = True
                for entry, rec in bucket:
                    if rec.sleep_seq != entry:
                        continue  # a stale entry: the sleep was abandoned
                    if rec.status.kind is paused:
                        held[rec.ordinal] = rec
                        continue
                    turn = rec.turn
                    if marking:
                        dirty[rec.ordinal] = rec
                    stepped += 1
                    try:
                        try:
                            if holding and (value := turn.send_value) is not None:
                                turn.send_value = None  # a hold's end: the time it waited
                                action = turn.behavior.send(value)  # type: ignore[union-attr]
                            else:
                                action = turn.behavior.send(None)  # type: ignore[union-attr]
                        except StopIteration as stop:
                            state.sleep_seq = seq
                            end_turn(state, rec, stop.value)
                            seq = state.sleep_seq
                            ended = calls = True
                            continue
                        except BaseException as exc:  # as in step_ready
                            state.sleep_seq = seq
                            fail(state, rec, exc)
                            seq = state.sleep_seq
                            odd = calls = True
                            continue
                        # A positive sleep, compared as step_ready compares it (`<= 0` first,
                        # so a bad `seconds` fails with the same message).
                        if action.__class__ is sleep and not (s := action._seconds) <= 0 and s > 0:
                            deadline = turn.deadline = now + s  # the phase stays SLEEPING
                            seq += 1
                            rec.sleep_seq = seq
                            later = buckets.get(deadline)
                            if later is None:  # add_sleeper, inlined
                                buckets[deadline] = [(seq, rec)]
                                push(heap, deadline)
                            else:
                                later.append((seq, rec))
                        else:
                            state.sleep_seq = seq
                            handler = step_actions.get(action.__class__)
                            if handler is not None:  # a resource's: it parks, or moves on
                                handler(state, rec, action)
                                calls = True
                                if next_ready or state.to_abort or state.to_dispatch:
                                    odd = True
                                holding = holding or state.holds
                            else:
                                take_action(state, rec, action, next_ready)
                                odd = calls = True
                            seq = state.sleep_seq
                    except BaseException as exc:
                        state.sleep_seq = seq
                        fail_step(state, rec, exc, action)
                        seq = state.sleep_seq
                        odd = calls = True
                bucket = None
                # The usual end of a wake-up, in one go: it moved, did nothing but sleep
                # (or end leaving nothing to abort, or end a hold), nothing stops the run
                # and the next live deadline is after `now` and before `limit`: the quiet
                # tick after it is counted and that deadline's tick begun, as the general
                # code below does step by step (~half of a plain wake-up's bytecodes).
                if (
                    stepped
                    and more < lean_until
                    and (
                        not calls
                        or (
                            not odd
                            and (
                                not ended
                                or not (
                                    state.ready
                                    or state.to_dispatch
                                    or state.prompt_changed
                                    or state.to_interrupt
                                    or state.created
                                    or state.to_forget
                                    or (keep is not None and len(finished) > keep)
                                    or not nothing_to_abort(state.to_abort)
                                )
                            )
                        )
                    )
                    and not (arrived or timer_heap or (deferring and flags.pending))
                    and self._reconfigured == changes
                    and clock._now is now
                    and heap
                    and now < (deadline := heap[0]) < limit
                ):
                    found = buckets.pop(pop(heap))
                    first = found[0]
                    if first[1].sleep_seq == first[0]:
                        if calls:  # the counts the call-outs made were that tick's
                            state.changed_this_tick = state.stepped = 0
                            if ended:  # the quiet tick's abort: only forgetting them
                                state.to_abort.clear()
                            ended = calls = False
                            holding = state.holds
                        bucket = found
                        now = state.now = clock._now = (
                            deadline if deadline.__class__ is float else float(deadline)
                        )
                        more += 2
                        tick += 2
                        state.tick = tick
                        continue
                    buckets[deadline] = found  # stale: the general code drops it
                    push(heap, deadline)
                if not calls:
                    changed = stepped
                else:
                    state.stepped += stepped
                    changed = state.changed_this_tick = state.changed_this_tick + stepped
                    if odd:
                        return more, now, False  # the caller ends this tick as it ends any
                    # Behaviours that ended are still sleepers' business when all they left
                    # is an abort with nothing to do (no handle, prompt or child to cancel):
                    # the next tick then only clears the abort queue. Inlined (a call per
                    # ending is ~4% of a run where every wake-up ends its agent).
                    if ended and (
                        state.ready
                        or state.to_dispatch
                        or state.prompt_changed
                        or state.to_interrupt
                        or state.created
                        or state.to_forget
                        or (keep is not None and len(finished) > keep)
                        or not nothing_to_abort(state.to_abort)
                    ):
                        return more, now, False
                # Sleepers alone still: what the next tick is, as `_skip_ahead` would find.
                halt = (
                    more >= room
                    or arrived
                    or (deferring and flags.pending)
                    or timer_heap
                    or self._reconfigured != changes
                    or clock._now is not now
                )
                if more >= clock_at and not halt:
                    clock_at = more + 64
                    lean_until = -1 if systems else min(clock_at, room - 1)
                    tick_until = tick0 + lean_until
                    halt = perf_counter() > until
                if changed:  # moving: the next tick is at `now`
                    if halt or (ended and heap and heap[0] <= now):
                        state.changed_this_tick, state.stepped = changed, stepped
                        return more, now, False
                    more += 1
                    tick += 1
                    state.tick = tick
                    if calls:  # the counts the call-outs made were that tick's
                        state.changed_this_tick = state.stepped = 0
                        if ended:  # the next tick's abort: nothing to do but forget them
                            state.to_abort.clear()
                        ended = calls = False
                        holding = state.holds
                    if systems:  # asked where their turn comes (every stage before idle)
                        for system in systems:
                            if not system.idle(state):
                                return more, now, True
                    if heap and heap[0] <= now:  # (never after an end: returned above)
                        continue  # a sleep that rounded to `now`: due in this next tick
                    # ... a quiet tick, counted; then the next deadline's tick, if no stop
                    halt = more >= room
                elif calls:  # the counts the call-outs made are the last tick's
                    state.changed_this_tick = state.stepped = 0
                    ended = calls = False
                    holding = state.holds
                if halt:
                    return more, now, False
                # The next live deadline, its bucket popped here (dropping stale ones, as
                # `next_timer` would) rather than looked up and then popped.
                while heap:
                    deadline = heap[0]
                    if deadline >= limit:  # (`limit` is at most infinity)
                        return more, now, False  # (a stale one there: live ones are later)
                    found = buckets.pop(pop(heap))
                    first = found[0]
                    if first[1].sleep_seq == first[0]:
                        bucket = found
                        break
                    live = [entry for entry in found if entry[1].sleep_seq == entry[0]]
                    if live:
                        bucket = live
                        break
                if bucket is None:
                    return more, now, False
                if deadline > now:  # ManualClock.set's work, under its lock (held)
                    now = state.now = clock._now = (
                        deadline if deadline.__class__ is float else float(deadline)
                    )
                more += 1
                tick += 1
                state.tick = tick
                if systems:
                    for system in systems:
                        if not system.idle(state):  # the whole tick wakes the bucket itself
                            buckets[deadline] = bucket
                            push(heap, deadline)
                            return more, now, True
        finally:
            state.sleep_seq = seq
            if deferred is not None:
                push(heap, deferred)

    def _skip_ahead(self, budget: int) -> tuple[int, bool]:  # noqa: PLR0915 - hot
        """Run the ticks ``run_until_idle`` would run from this fixed point while only
        sleepers and host code move (see the module docstring), at most ``budget`` of them.

        Returns ``(ticks run, moving)``: ``moving`` says whether the last tick changed
        something (the caller then ticks on at once, as after any such tick).
        """
        state = self._state
        clock = self.clock
        assert isinstance(clock, ManualClock)
        # What the run takes as given from here (see `_reconfigured`); a watcher that came
        # since the caller looked (`_unwatched`, another thread) stops it before it begins.
        changes = self._reconfigured
        if self._observers or self._probe is not None or self._recorder is not None:
            return 0, False
        limit = self._skip_limit(clock.now())
        if limit is None:
            return 0, False
        before, after = self._lean_pipeline()
        mirror = self._pipeline[self._stages.index("mirror_lane_stats")]
        step = self._pipeline[self._stages.index("step_behaviors")]
        host = self._host
        hosted = len(host.systems)
        systems = pipeline_order(host.systems)
        # Host systems that all run before the step can be asked at the start of a tick
        # whose only work is the due sleepers (every stage before them is idle then).
        step_gap = self._stages.index("step_behaviors")
        early = all(gap <= step_gap for gap, _system in host.systems)
        # The stages after the step, for a lean tick that queued work (no host systems).
        past_step = before[before.index(step) + 1 :]
        abort = self._pipeline[self._stages.index("abort_terminal")]
        past_abort = before[before.index(abort) + 1 :]
        inbox, timers, next_timer = self._inbox, self._timers, state.next_timer
        # Read on every skipped tick, so as C-level truthiness rather than through
        # `__len__`/`__bool__`/`pending()`: the inputs other threads append (the inbox's
        # own deque: only a drain, never run here, moves them on), the timers' heap of
        # (when, seq, fn), and the main thread's Ctrl-C flag.
        arrived, timer_heap, flags = inbox._arrived, timers._heap, sigint.flags()
        heap, buckets = state.sleepers, state.sleep_buckets
        finished, keep = state.finished, state.keep_finished
        ran = 0
        moving = False
        done = False
        begun = False  # a tick counted (its number and time set) but not yet run
        held_since = time.perf_counter()
        deferring = sigint.enter()
        try:
            while not done and ran < budget:
                if ran and time.perf_counter() - held_since > YIELD_AFTER:
                    time.sleep(0)  # a thread waiting for the locks gets them now
                    held_since = time.perf_counter()
                # The clock's lock too: this thread alone moves time in the slice, so
                # each tick sets it with one store (`ManualClock.set`'s lock was ~5% of
                # a sparse wake-up).
                with self._lock, ESPER_LOCK, self._in_esper(), clock._lock:
                    end = min(budget, ran + SKIP_SLICE)
                    until = time.perf_counter() + WAKE_SLICE
                    now = clock.now()
                    if len(inbox) or self._close_after_tick is not None:
                        break
                    while ran < end or begun:
                        if begun:  # a quiet tick counted below found host work
                            begun = False
                            errors: tuple[str, ...] = ()
                            sent = False
                            kind = _WHOLE
                        else:
                            if arrived or (deferring and flags.pending):
                                done = True
                                break
                            if not moving:
                                # The earliest deadline; `next_timer` when its first entry is
                                # stale (it drops stale entries), else read off the heap.
                                deadline: float | None
                                if heap and (top := buckets[heap[0]][0])[1].sleep_seq == top[0]:
                                    deadline = heap[0]
                                else:
                                    deadline = next_timer()
                                if timer_heap:
                                    due = timers.next_due()
                                    if due is not None and (deadline is None or due < deadline):
                                        deadline = due
                                if deadline is None or deadline >= limit or deadline == math.inf:
                                    done = True
                                    break
                                if deadline > now:  # as ManualClock.set, its lock held
                                    now = clock._now = (
                                        deadline if deadline.__class__ is float else float(deadline)
                                    )
                            state.tick += 1
                            state.now = now
                            state.changed_this_tick = state.stepped = 0
                            ran += 1
                            errors = ()
                            sent = False
                            # Which stages have work: with nothing queued and no timer due,
                            # only the sleepers due now (the step) and the host systems can.
                            if (
                                state.ready
                                or state.to_interrupt
                                or state.to_dispatch
                                or state.prompt_changed
                                or (timer_heap and timer_heap[0][0] <= now)
                            ):
                                kind = _WHOLE
                            elif state.to_abort:
                                # Agents that just ended, alone: their abort, and the stages
                                # after it only if it queued something for them.
                                due_now = bool(heap) and heap[0] <= now
                                kind = _WHOLE if systems or due_now else _ABORT
                            elif not (heap and heap[0] <= now):
                                # Nothing is due: quiet, unless a host system has work (asked
                                # in order: every stage before each one is idle, so each is
                                # asked what it would be asked at its turn).
                                kind = _QUIET
                                for system in systems:
                                    if not system.idle(state):
                                        kind = _WHOLE
                                        break
                            else:  # sleepers due: their step alone, unless host code runs
                                kind = _WAKE
                                if systems:
                                    if not early:
                                        kind = _WHOLE
                                    else:
                                        for system in systems:
                                            if not system.idle(state):
                                                kind = _WHOLE
                                                break
                        if kind is _WAKE:
                            # Only the sleepers due now can move: their step alone (and
                            # the wake-ups after it while they only sleep again), and the
                            # stages after it only if it queued something for them.
                            more, now, begun = self._wake_run(
                                now, budget - ran, limit, flags, deferring, until, changes
                            )
                            ran += more
                            if state.to_dispatch or state.prompt_changed:
                                sent, errors = self._run_stages(past_step, mirror, after)
                        elif kind is _ABORT:
                            abort.process(state)
                            if (
                                state.ready
                                or state.to_interrupt
                                or state.to_dispatch
                                or state.prompt_changed
                                or (heap and heap[0] <= now)
                            ):
                                sent, errors = self._run_stages(past_abort, mirror, after)
                        elif kind is _WHOLE:
                            if timer_heap:
                                timers.run_due(now)
                                if len(host.systems) != hosted:  # a timer added one: it
                                    before, after = self._lean_pipeline()  # runs from now
                                    hosted = len(host.systems)
                                    systems = pipeline_order(host.systems)
                                    early = all(g <= step_gap for g, _s in host.systems)
                            esper.clear_dead_entities()  # what esper.process does first
                            sent, errors = self._run_stages(before, mirror, after)
                        # The tail of a tick that tracks no digest (see `_record`).
                        if state.created:
                            self._note_new_agents()
                        if state.to_forget or (keep is not None and len(finished) > keep):
                            self._release_finished()
                            # What the next tick's esper.process would do first, now: a
                            # lean or quiet tick runs none, and readers between slices
                            # must not see the released agents' entities.
                            esper.clear_dead_entities()
                        moving = bool(state.changed_this_tick or state.ready)
                        if self._observers:  # one came (a timer, another thread): it
                            report = TickReport(  # sees this tick, as after a whole one
                                state.tick,
                                now,
                                0,
                                state.stepped,
                                state.changed_this_tick,
                                None,
                                errors,
                            )
                            self._notify(self._observers, report, [])
                            return ran, moving or sent
                        if (
                            sent
                            or self._probe is not None
                            or self._recorder is not None
                            or len(host.systems) != hosted
                            or self._close_after_tick is not None  # host code closed it
                            or self._reconfigured != changes  # or watches it now
                            or clock._now is not now  # host code moved the clock
                        ):
                            return ran, moving or sent
                        if (
                            moving
                            and ran < end
                            and not (state.ready or state.to_abort or state.to_interrupt)
                            and not (state.to_dispatch or state.prompt_changed)
                            and not (heap and heap[0] <= now)
                            and not (timer_heap and timer_heap[0][0] <= now)
                            and not arrived
                            and not (deferring and flags.pending)
                        ):
                            # The next tick is quiet but for the host systems (nothing
                            # queued or due): begun here rather than sorted by the loop
                            # (~0.5 us without host systems, ~1.5 us with), and counted
                            # at once when every one's `run_if` says no (asked in order, as
                            # `_QUIET` asks them); else the loop runs it whole next.
                            state.tick += 1
                            state.changed_this_tick = state.stepped = 0
                            ran += 1
                            moving = False
                            for system in systems:
                                if not system.idle(state):
                                    begun = moving = True
                                    break
        finally:
            if deferring:
                sigint.leave()
        return ran, moving
