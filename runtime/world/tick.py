"""The tick: one pass of the systems pipeline over a world, and what it records.

`TickMachine` is mixed into `World` (as `RunLoop` is), so that the world class reads as its
API and this module as what happens inside ``tick()``: lockstep's wait for lane work, the
inputs applied, the pipeline run under the world's lock and the esper lock, the digest
folded, finished agents released, the tick journaled (its lane jobs held until then), and
the report handed to probes and observers. A tick of one outcome and nothing else to do
(the wake-up: an answer, a finished job) takes `TickMachine._settle_tick`, the same stages
in one frame.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from time import perf_counter
from typing import Any

import esper

from components import PromptSettled
from runtime.clock import Clock
from runtime.errors import JournalError
from runtime.lane.jobs import ToolOutcome
from runtime.world import sigint
from runtime.world.digest import agent_text, combine, hexdigest, text_digest
from runtime.world.effects import LiveEffects
from runtime.world.host import HostECS
from runtime.world.inputs import COMMANDS, Inbox
from runtime.world.lockstep import Lockstep
from runtime.world.metrics import QUICK_TICK, MetricsRecorder
from runtime.world.probe import Probe
from runtime.world.recorder import Recorder
from runtime.world.report import TickReport, build_tick_report
from runtime.world.state import AgentRecord, WorldState
from runtime.world.timers import HostTimers
from systems.collect_outcomes import collect_one
from systems.lifecycle import reflect
from systems.step_behaviors import step_one, step_ready

__all__ = ["ESPER_LOCK", "TickMachine"]

_COMMANDS = frozenset(COMMANDS)

# The pipeline `_lean_tick` knows, stage by stage (`systems.pipeline.build_pipeline`).
_LEAN_STAGES = [
    "apply_inputs",
    "abort_terminal",
    "handle_interrupts",
    "expire_prompts",
    "collect_outcomes",
    "step_behaviors",
    "dispatch_work",
    "reflect_status",
    "mirror_lane_stats",
]

log = logging.getLogger("tickwork.world")

ESPER_LOCK = threading.RLock()
"""esper keeps module-global state: ticks of different worlds in one process take turns."""

_get_ident = threading.get_ident
# Only the main thread defers Ctrl-C (`sigint.enter` asks the same first): a tick on another
# thread (`world.start()`, the wake-up's) skips the call.
_MAIN_THREAD = threading.main_thread().ident


class TickMachine:
    """The tick of a `World` (mixed into it). The world provides the attributes declared
    here; see `World.__init__` for what each holds."""

    clock: Clock
    _state: WorldState
    _host: HostECS
    _inbox: Inbox
    _lockstep: Lockstep | None
    _lock: threading.RLock
    _ids_lock: threading.Lock
    _pending_ids: dict[str, None]
    _timers: HostTimers
    _observers: list[Callable[[TickReport, list[tuple[int, object]]], object]]
    _input_observers: list[Callable[[TickReport, list[tuple[int, object]]], object]]
    _probe: Probe | None
    _tick_probe: Probe | None = None  # the probes that want `ticked` (`_set_probe`)
    _recorder: MetricsRecorder | None
    _journal: Recorder | None
    _track_digests: bool
    _digest_total: int
    _live: bool
    _name: str
    _closed: bool
    _runner: threading.Thread | None
    # `close()`'s timeout when it was called during a tick: the tick closes the world once
    # it is over (None: not asked).
    _close_after_tick: float | None = None
    # Bumped whenever host code changes what a virtual-time skip takes as given for its run
    # (`runtime.world.skip`): an every-tick observer, a probe or metrics recorder, a host
    # system, a close asked for during a tick. A run that began before stops at its next
    # tick's end and hands back to the whole pipeline.
    _reconfigured = 0
    # The tick the journal failed to record and why: no later tick may run (see `_record`).
    _journal_failed: tuple[int, Exception] | None = None
    _pipeline: list[Any]  # the built-in systems, in pipeline order
    _stages: list[str]  # their stage names
    # `_lean_tick`'s systems: () until the first tick looks, None if the pipeline is not
    # the one it knows (a stage added or moved: then every tick walks it whole).
    _lean: tuple[Any, ...] | None = ()
    # Whether a tick of one outcome may take `_settle_tick` (tests switch it off to compare
    # it with the whole pipeline).
    _settling = True
    # A world that tracks no digest drops each tick's dirty set (it held every agent ever
    # touched, 52 B each at 100k agents) until `digest()` is first asked for: that call
    # folds every record, as it would have (all are dirty since their creation), and from
    # then on the set is kept for the incremental digest.
    _dirty_dropped = False
    _keep_dirty = False

    def _check_open(self) -> None:
        raise NotImplementedError

    def _close_now(self, timeout: float) -> None:
        raise NotImplementedError

    def tick(self) -> TickReport:
        """Run the pipeline once: apply inputs, step what can move, dispatch its work.

        In lockstep it first waits for the lane work in flight (see ``lockstep``) and lets
        what is due land in this tick.
        Ctrl-C on the main thread during a tick is held until the tick is over (see
        `runtime.world.sigint`): the tick finishes for every agent, then
        ``KeyboardInterrupt`` is raised, leaving a whole world to tick on or close. A host
        that opts in (``sigint.abandoning()``, as ``tickwork run`` does) gets it at once
        instead, the tick abandoned: not journaled, its held lane jobs never started.

        Raises:
            WorldClosedError: the world is closed.
            JournalError: the journal failed to record this tick or an earlier one (the
                world then refuses every later tick: see ``resume``).
            RuntimeError: called during a tick, on its thread (from an observer, a host
                timer, system or action handler): a tick inside a tick would run on the
                outer one's half-made state. Ask for work with commands instead. Or called
                from another thread while ``start()``'s loop runs.
            KeyboardInterrupt: Ctrl-C was pressed during the tick (main thread only).
        """
        if self._closed:
            self._check_open()  # raises
        if self._journal_failed is not None:
            tick, exc = self._journal_failed
            raise JournalError(
                f"{self._name} cannot tick on: its journal failed to record tick {tick} ({exc});"
                " the journal ends at the tick before, where `resume` carries on"
            ) from exc
        if self._lock._is_owned():  # type: ignore[attr-defined]  # (C RLock's own check)
            raise RuntimeError(
                f"{self._name}: tick() called during a tick (from an observer, a host timer,"
                " system or action handler); a tick cannot run inside another"
            )
        ident = _get_ident()
        runner = self._runner
        if runner is not None and runner.ident != ident and runner.is_alive():
            raise RuntimeError(
                f"{self._name} is running on its own thread (start()): call stop() before"
                " ticking it from another"
            )
        lockstep = self._lockstep
        if lockstep is None:
            now = None
        else:  # waiting for lane work is interruptible: nothing of the tick has happened
            lockstep.settle()
            now = self.clock.now()
            lockstep.release(now)
        deferring = ident == _MAIN_THREAD and sigint.enter()
        try:
            # The drain under the tick's lock: a command that acts at its call under that
            # lock (`forget` between ticks releases at once) lands before this tick's
            # inputs are taken or after its end, never between the two (where the live
            # tick went without the agent its journaled inputs still held).
            with self._lock:
                inputs = self._inbox.drain()
                if lockstep is None and len(inputs) == 1 and self._settling:
                    report = self._settle_tick(inputs)
                    if report is not None:
                        return report
                return self._tick(inputs, now)
        finally:
            try:
                if self._close_after_tick is not None:  # `close()` asked for during the tick
                    self._close_now(self._close_after_tick)
            finally:
                if deferring:
                    sigint.leave()  # raises a Ctrl-C that landed during the tick, now it is whole

    def _tick(
        self,
        inputs: list[tuple[int, object]],
        now: float | None,
        changed: list[tuple[str, str]] | None = None,
    ) -> TickReport:
        with self._lock, ESPER_LOCK:
            # `_in_esper`, inlined: a generator context manager costs ~1.5 us a tick.
            previous = esper.current_world
            if previous != self._name:
                esper.switch_world(self._name)
            try:
                return self._tick_body(inputs, now, changed)
            finally:
                if previous != self._name:
                    esper.switch_world(previous)

    def _tick_body(  # noqa: PLR0915 - hot: the tick, inlined
        self,
        inputs: list[tuple[int, object]],
        now: float | None,
        changed: list[tuple[str, str]] | None,
    ) -> TickReport:
        state = self._state
        # Probes and metrics see live ticks only, never a replay's.
        live = self._live
        probe = state.probe = self._probe if live else None
        recorder = self._recorder if live else None
        # The tick's duration, for the metrics and the probes that want it (not tracing's).
        ticking = self._tick_probe if live else None
        timed = recorder is not None or ticking is not None
        started = perf_counter() if timed else 0.0
        state.tick += 1
        state.now = self.clock.now() if now is None else now
        if self._timers:
            self._timers.run_due(state.now)
        state.inputs = inputs
        state.changed_this_tick = len(inputs)
        state.stepped = 0
        if inputs:
            if recorder is not None:
                recorder.applied(inputs)
            if probe is not None:
                probe.applied(inputs)
        # Write-ahead: a journaled tick's lane jobs start once the tick is committed,
        # so no job runs whose dispatch a resume would not find (LiveEffects.hold).
        holding = state.effects if self._journal is not None else None
        if not isinstance(holding, LiveEffects):
            holding = None
        if holding is not None:
            holding.hold()
        try:
            if self._host.systems or not self._lean_tick(state, inputs):
                host = self._host
                host.processing = True
                try:
                    esper.process(state)
                finally:
                    host.processing = False
                    if host.deferred:
                        self._add_deferred_systems()
            state.inputs = []
            if state.created:
                self._note_new_agents()  # before releases: an agent may end where it began
            if self._track_digests or state.to_forget or state.keep_finished is not None:
                digest = self._record(inputs, changed)
            else:
                digest = self._record_nothing()
        finally:
            if holding is not None:  # even if the tick failed: nobody waits for ever
                # ... unless the journal could not take the tick: then it never happened
                # for a resume, and neither may its jobs (the world ticks no more).
                holding.release(drop=self._journal_failed is not None)
        report = build_tick_report(
            state.tick,
            state.now,
            len(inputs),
            state.stepped,
            state.changed_this_tick,
            digest,
            self._host.take_errors() if self._host.errors else (),
        )
        if timed:
            seconds = perf_counter() - started
            if recorder is not None:  # `MetricsRecorder.ticked`, inlined: every tick
                if seconds <= QUICK_TICK:
                    recorder.quick_ticks += 1
                    recorder.quick_seconds += seconds
                else:
                    recorder.tick_seconds.observe(seconds)
            if ticking is not None:
                ticking.ticked(report, seconds)
        observers = self._observers
        if inputs and self._input_observers:
            observers = observers + self._input_observers
        self._notify(observers, report, inputs)
        return report

    def _settle_tick(  # noqa: PLR0915 - hot: the wake-up's tick, inlined
        self, inputs: list[tuple[int, object]]
    ) -> TickReport | None:
        """The settlement's tick: one outcome (a prompt settled, a lane job done) and nothing
        else to do, in a world nobody watches closely; None (nothing done) otherwise.

        The wake-up path: a person answers, a tool batch finishes, and the tick's only work
        is to apply it and step its agent. This is `_tick` + `_tick_body` + `_lean_tick`
        for that case in one frame: the same stages in the same order, the same report,
        made only where the stages it leaves out have nothing to do (not in lockstep, no
        host system or timer, no probe, metrics or journal, no abort, interrupt or outcome
        left over), and the outcome applied by `systems.collect_outcomes.collect_one`.
        Agents ready or due besides the settled one step with it, as in the lean tick.
        ``tests/world/test_settle_tick.py`` compares it with the lean tick.
        """
        item = inputs[0][1]
        cls = item.__class__
        if cls is not PromptSettled and cls is not ToolOutcome:
            return None
        lean = self._lean
        state = self._state
        with self._lock, ESPER_LOCK:  # what it checks may change between ticks, under it
            if (
                not lean
                or self._host.systems
                or self._timers._heap  # `HostTimers.__bool__` without the call
                or self._probe is not None  # else no probe wants `ticked` either
                or self._recorder is not None
                or self._journal is not None
                or state.to_abort
                or state.to_interrupt
                or state.outcomes
            ):
                return None
            name = self._name
            previous = esper.current_world
            if previous != name:
                esper.switch_world(name)
            try:
                state.probe = None
                state.tick += 1
                now = state.now = self.clock.now()
                state.inputs = inputs
                state.changed_this_tick = 1
                state.stepped = 0
                esper.clear_dead_entities()  # what esper.process does first
                # The lean tick's stages from ExpirePrompts on, for one outcome (inputs
                # that are all outcomes are set aside for CollectOutcomes, as ApplyInputs
                # would; nothing was queued for the abort or the interrupts).
                state.effects.expire_prompts(now)  # ExpirePrompts.process
                collect_one(state, inputs[0][0], item)  # CollectOutcomes.process
                sleepers = state.sleepers
                if sleepers and sleepers[0] <= now:
                    lean[5].process(state)  # StepBehaviors
                else:  # StepBehaviors.process, no sleeper due
                    ready = state.ready
                    if len(ready) == 1:
                        step_one(state)  # the settled agent alone, usually
                    elif ready:
                        step_ready(state)
                if state.to_dispatch:
                    lean[6].process(state)  # DispatchWork
                changed = state.prompt_changed
                if changed:  # ReflectInteractionStatus.process
                    state.prompt_changed = {}
                    for rec in changed.values():
                        if reflect(rec):
                            state.touch(rec)
                lean[8].process(state)  # MirrorLaneStats
                state.inputs = []
                if state.created:
                    self._note_new_agents()
                if self._track_digests or state.to_forget or state.keep_finished is not None:
                    digest = self._record(inputs, None)
                else:  # `_record_nothing`, inlined
                    digest = None
                    if state.dirty and not self._keep_dirty:
                        state.dirty.clear()
                        self._dirty_dropped = True
                report = build_tick_report(
                    state.tick,
                    now,
                    1,
                    state.stepped,
                    state.changed_this_tick,
                    digest,
                    self._host.take_errors() if self._host.errors else (),
                )
                observers = self._observers
                if self._input_observers:
                    observers = observers + self._input_observers
                for observer in observers:  # `_notify`, inlined
                    try:
                        observer(report, inputs)
                    except BaseException as exc:  # host code: never the end of the tick thread
                        if isinstance(exc, KeyboardInterrupt):
                            sigint.note_keyboard_interrupt()
                        log.exception("tick observer %r raised", observer)
                return report
            finally:
                if previous != name:
                    esper.switch_world(previous)

    def _lean_tick(self, state: WorldState, inputs: list[tuple[int, object]]) -> bool:
        """Run the built-in stages of a tick that can have work, as ``esper.process`` would
        run them all; False (nothing run) when a command is among the inputs.

        For a world without host systems (``_tick_body`` asks), whose processors are then
        the built-in pipeline alone. A tick that only applies outcomes (a tool batch done, a
        prompt answered: the wake-up path) need not walk every stage: a stage is left out
        exactly when it would return at its first line (no input to apply, no agent to
        abort or interrupt, no outcome, nobody ready or due, no work to send, no prompt
        change), so leaving it out changes nothing but the call. Inputs that are all
        outcomes are set aside as ``ApplyInputs`` would (it leaves outcomes to
        ``CollectOutcomes``). Expiring prompts and the lane mirror look at the hub and the
        lanes, which other threads change: they always run.
        """
        lean = self._lean
        if lean is None:
            return False
        if not lean:  # first tick: the pipeline must be the one these checks were made for
            lean = self._lean = tuple(self._pipeline) if self._stages == _LEAN_STAGES else None
            if lean is None:
                return False
        commands = _COMMANDS
        for _seq, item in inputs:
            if item.__class__ in commands:
                return False
        esper.clear_dead_entities()  # what esper.process does first
        _apply, abort, interrupts, expire, collect, step, dispatch, reflect, mirror = lean
        if inputs:
            state.outcomes.extend(inputs)
        if state.to_abort:
            abort.process(state)
        if state.to_interrupt:
            interrupts.process(state)
        expire.process(state)
        if state.outcomes:
            collect.process(state)
        if state.ready or (state.sleepers and state.sleepers[0] <= state.now):
            step.process(state)
        if state.to_dispatch:
            dispatch.process(state)
        if state.prompt_changed:
            reflect.process(state)
        mirror.process(state)
        return True

    def _notify(
        self,
        observers: list[Callable[[TickReport, list[tuple[int, object]]], object]],
        report: TickReport,
        inputs: list[tuple[int, object]],
    ) -> None:
        """Call each observer with the tick's report; one that raises is logged."""
        for observer in observers:
            try:
                observer(report, inputs)
            except BaseException as exc:  # host code: never the end of the tick thread
                if isinstance(exc, KeyboardInterrupt):
                    sigint.note_keyboard_interrupt()
                log.exception("tick observer %r raised", observer)

    def _record(
        self, inputs: list[tuple[int, object]], changed: list[tuple[str, str]] | None
    ) -> str | None:
        """Fold the tick's changes into the digest, release the finished agents due to go,
        and write the tick to the journal; returns the digest when the world tracks one."""
        state = self._state
        release = state.to_forget or (
            state.keep_finished is not None and len(state.finished) > state.keep_finished
        )
        if not self._track_digests:
            if release:
                self._release_finished()
            return self._record_nothing()
        if changed is None and self._journal is not None:
            changed = []
        self._fold_dirty(changed)  # a released agent's last fields are recorded
        if release:
            self._release_finished()
        digest = hexdigest(self._digest_total)
        if self._journal is not None:
            assert changed is not None
            try:
                self._journal.record_tick(state.tick, state.now, inputs, digest, changed)
            except Exception as exc:
                # The journal ends at the tick before: a tick recorded after this one would
                # leave a gap no replay or resume gets past. From now on the world refuses
                # to tick (`tick`), as if it had crashed here; `resume` carries on.
                self._journal_failed = (state.tick, exc)
                raise
        return digest

    def _record_nothing(self) -> str | None:
        """`_record` of a world that tracks no digest: drop the dirty set (see
        `_dirty_dropped`) unless a digest was asked for once; there is no digest (None)."""
        state = self._state
        if state.dirty and not self._keep_dirty:
            state.dirty.clear()
            self._dirty_dropped = True
        return None

    def _release_finished(self) -> None:
        # O(agents released): what `forget` asked for, then the oldest beyond the bound.
        state = self._state
        for rec in state.to_forget:
            if state.records.get(rec.id) is rec:
                self._release(rec)
        state.to_forget.clear()
        keep = state.keep_finished
        if keep is None:
            return
        finished = state.finished
        while len(finished) > keep:
            rec = finished.popleft()
            if state.records.get(rec.id) is rec:  # else forgotten already
                self._release(rec)

    def _release(self, rec: AgentRecord) -> None:
        """Drop a finished agent entirely: entity, record, digest share, id (tick lock held)."""
        state = self._state
        if state.journal_format >= 3 and (rec.children or state.orphan_up):
            state.note_release(rec)  # walks of `children` may miss agents below it
        with self._ids_lock:
            del state.records[rec.id]
        state.dirty.pop(rec.ordinal, None)
        state.prompt_changed.pop(rec.ordinal, None)
        state.join_scan.pop(rec.ordinal, None)  # a join it ended in
        self._digest_total = combine(self._digest_total, rec.digest, 0)
        if rec.prompts:  # none are left once settled; never leave one orphaned
            state.effects.cancel_prompts_of(rec.id)
        esper.delete_entity(rec.entity)
        self._host.release_agent(rec.entity)
        state.changed_this_tick += 1

    def _fold_dirty(self, changed: list[tuple[str, str]] | None) -> None:
        state = self._state
        if not self._keep_dirty:  # the first fold: keep the set from now on
            self._keep_dirty = True
            if self._dirty_dropped:  # every record, as the dropped sets would have held
                self._dirty_dropped = False
                state.dirty.update((rec.ordinal, rec) for rec in state.records.values())
        self._host.mark_seen()  # host components host code may have changed in place
        if not state.dirty and not self._host.dirty:
            return
        total = self._digest_total
        for ordinal in sorted(state.dirty):
            rec = state.dirty[ordinal]
            text = agent_text(rec, state.journal_format)
            new = text_digest(text)
            if new == rec.digest:
                continue  # looked at again, unchanged: nothing to fold or journal
            total = combine(total, rec.digest, new)
            rec.digest = new
            if changed is not None:
                changed.append((rec.id, text))
        state.dirty.clear()
        if self._host.dirty:
            total = self._host.fold(total, changed)
        self._digest_total = total

    def _add_deferred_systems(self) -> None:
        # The systems host code added while the pipeline ran, in the order added.
        host = self._host
        deferred, host.deferred = host.deferred, []
        for gap, system, priority in deferred:
            host.systems.append((gap, system))
            esper.add_processor(system, priority)

    def _preview_digest(self) -> int:
        """The digest total `_fold_dirty` would reach now, leaving every change to the
        tick's own fold (``digest()`` asked mid-tick: the tick records what it changed)."""
        state = self._state
        if not self._keep_dirty:  # the first fold's step, as `_fold_dirty` takes it
            self._keep_dirty = True
            if self._dirty_dropped:
                self._dirty_dropped = False
                state.dirty.update((rec.ordinal, rec) for rec in state.records.values())
        self._host.mark_seen()  # only moves what host code saw into the dirty sets
        total = self._digest_total
        for ordinal in sorted(state.dirty):
            rec = state.dirty[ordinal]
            total = combine(total, rec.digest, text_digest(agent_text(rec, state.journal_format)))
        return self._host.preview(total) if self._host.dirty else total

    def _note_new_agents(self) -> None:
        # O(agents created this tick): the host's spawns among them stop being pending,
        # their records hold the ids now (children were known from their creation).
        created = self._state.created
        if not created:
            return
        pending = self._pending_ids
        if pending:  # only `spawn` adds to it, and never an id created already
            with self._ids_lock:
                for agent_id in created:
                    pending.pop(agent_id, None)
                if not pending:
                    # An emptied dict keeps the table it grew to: 100k spawns before the
                    # first tick left ~38 B an agent in it.
                    self._pending_ids = {}
        created.clear()

    @contextlib.contextmanager
    def _ticking(self) -> Iterator[None]:
        # What a tick holds: for changes to the pipeline between ticks.
        with self._lock, ESPER_LOCK, self._in_esper():
            yield

    @contextlib.contextmanager
    def _in_esper(self) -> Iterator[None]:
        # Switch to this world's esper context for the block and back again, so a host
        # using esper's default world in the same process is not disturbed.
        previous = esper.current_world
        if previous != self._name:
            esper.switch_world(self._name)
        try:
            yield
        finally:
            if previous != self._name:
                esper.switch_world(previous)
