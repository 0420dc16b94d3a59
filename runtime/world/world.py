"""The world: agents as esper entities, advanced tick by tick by the systems pipeline.

One thread, the tick thread, runs ``tick()``; it is the only thread that touches esper.
Other threads talk to a world through its thread-safe commands (``spawn``, ``send``,
``pause``, ``resume``, ``cancel``, ``interrupt``), which only enqueue an input and nudge
the wake, and through the hub. Reads (``status``, ``result``, ``history``, ``agents``)
take the world's lock, so they see the state between two ticks, never half a tick.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from types import TracebackType
from typing import Any

import esper

from components import LaneStats
from runtime.clock import Clock, ManualClock, MonotonicClock
from runtime.errors import ConfigError, WorldClosedError
from runtime.hub import InteractionHub
from runtime.lane.backend import BackendInfo, ToolBackend, describe_tool_backend, take_tool_executor
from runtime.lane.tool_lane import ToolLane
from runtime.lane.values import shown
from runtime.models.base import Model
from runtime.models.streaming import StreamHub
from runtime.models.usage import UsageMeter
from runtime.tools.registry import ToolRegistry
from runtime.wake import Wake
from runtime.world.actions import Behavior
from runtime.world.agent_api import AgentAPI
from runtime.world.behaviors import GLOBAL_BEHAVIORS, BehaviorRegistry
from runtime.world.effects import LiveEffects
from runtime.world.host import HOST_IDS_START, HostECS
from runtime.world.host_api import HostAPI, builtin_priority, stage_name
from runtime.world.inputs import (
    Inbox,
)
from runtime.world.lockstep import Lockstep
from runtime.world.loop import REDRIVE_SECS, RunLoop, check_timeout
from runtime.world.metrics import MetricsRecorder
from runtime.world.observing import Observing
from runtime.world.probe import Probe, process_probes
from runtime.world.recorder import Recorder
from runtime.world.report import TickReport
from runtime.world.skip import SkipAhead
from runtime.world.state import Effects, WorldState
from runtime.world.tick import ESPER_LOCK as _ESPER_LOCK
from runtime.world.tick import TickMachine
from runtime.world.timers import HostTimers

__all__ = ["REDRIVE_SECS", "TickReport", "World"]

log = logging.getLogger("tickwork.world")

_world_numbers = itertools.count(1)

# The esper worlds of Worlds collected unclosed that could not go at once (another thread
# held the esper lock, or the world was esper's current one): the next World made or
# closed drops them.
_orphaned: list[str] = []


def _drop_esper_world(name: str) -> None:
    """A World was collected without ``close()``: drop its esper world, which esper's
    module-global map would otherwise hold, every agent in it, for the process's life.

    A finalizer: it runs on whatever thread the collection happened on, perhaps one that
    holds locks of its own, so it never waits for the esper lock.
    """
    _orphaned.append(name)
    if _ESPER_LOCK.acquire(blocking=False):
        try:
            _drop_orphans()
        finally:
            _ESPER_LOCK.release()


def _drop_orphans() -> None:
    # Under the esper lock. A world esper is switched to stays until it no longer is.
    kept = []
    while _orphaned:
        name = _orphaned.pop()
        if esper.current_world == name:
            kept.append(name)
        elif name in esper.list_worlds():
            esper.delete_world(name)
    _orphaned.extend(kept)


def _tick_time_of(attrs: dict[str, Any]) -> Callable[[], float]:
    """The time of the world's tick, read through its attributes (``world.__dict__``), not
    the world: what the effects hold must not keep an unclosed World alive."""
    return lambda: float(attrs["_state"].now)


# The order of the bases matters: a mixin's stub of a method another provides comes after it.
class World(TickMachine, SkipAhead, RunLoop, HostAPI, AgentAPI, Observing):
    """A world of agents, advanced tick by tick. See the module docstring for threads.

    The commands on agents and the reads (``spawn``, ``send``, ``status``, ...) come from
    `AgentAPI`; the run loops (``run_until_idle``, ``run``, ``start``, ``stop``) from
    `RunLoop`; the host's entities, systems and actions (``add_entity``, ``add_system``,
    ``add_action``, ``query``) from `HostAPI`.

    ``tool_executor`` runs tool jobs off the lane's own threads: a bare ``Executor`` is
    borrowed, a `runtime.cluster.ToolBackend` (such as ``DaskBackend``) is handed over and
    closed with the world. Either way the lane keeps capacity and counters, and ``local_only``
    tools (``AskUserTool``) are refused: they need this process's hub. A ``journal`` is
    handed over too. Both are closed when the world is, or at once when the constructor
    raises (a bad setting), so ``World(journal=Journal.create(path), ...)`` never leaves
    ``path`` locked.

    ``lockstep`` fixes the tick at which lane work lands (DESIGN.md, "Determinism contract",
    **Delivery**): every job dispatched at tick t lands at tick t+1, in dispatch order, the
    tick waiting for it while the lanes run it; a tool or model with a ``virtual_duration``
    lands at the first tick at or after that much world time. ``None`` (the default) means
    on under a `ManualClock` and off under a real clock, which delivers outcomes as soon as
    they are done. See `runtime.world.lockstep`.

    ``keep_finished=None`` keeps every finished agent's status, result and history (tests
    read them). ``keep_finished=N`` keeps the N most recently finished whole and releases
    older ones entirely (esper entity, record, history, id) at the end of the tick, in the
    order they finished, so a replay releases the same ones; a finished child is kept
    until its parent has finished too, so a live parent can always ``Join`` it. A released
    id is unknown afterwards (``status`` raises `UnknownAgentError`). ``forget(agent_id)``
    releases one finished agent at once. Either way, a finished agent never keeps its
    generator, rng, interrupt handle or lane tokens.

    Raises:
        ConfigError: a setting is out of range (the message names it and its value).
    """

    def __init__(  # noqa: PLR0915 - the constructor wires every part, in order
        self,
        *,
        seed: int = 0,
        clock: Clock | None = None,
        tool_capacity: int = 8,
        inference_capacity: int = 8,
        interaction_timeout_secs: float = 3600.0,
        tools: ToolRegistry | None = None,
        models: Mapping[str, Model] | None = None,
        journal: Recorder | None = None,
        behaviors: Mapping[str, Behavior] | None = None,
        tool_executor: Executor | ToolBackend | None = None,
        track_digests: bool = False,
        lockstep: bool | None = None,
        effects: Effects | None = None,
        keep_finished: int | None = None,
    ) -> None:
        # A journal and a backend handed over are the world's from the call: closed here
        # when it refuses to be made, as `close()` closes them (an unclosed `Journal` kept
        # its writer's lock for the process's life, and `Journal.create` refused the path).
        try:
            _check_settings(
                seed,
                tool_capacity,
                inference_capacity,
                interaction_timeout_secs,
                lockstep,
                keep_finished,
            )
            _check_parts(
                clock=clock, tools=tools, models=models, journal=journal, behaviors=behaviors
            )
            self.seed = seed
            self.clock: Clock = clock if clock is not None else MonotonicClock()
            if lockstep is None:
                lockstep = isinstance(self.clock, ManualClock)
            self.lockstep = lockstep
            self.wake = Wake()
            self._inbox = Inbox(self.wake)
            self._lockstep = Lockstep(self._inbox, self.clock) if lockstep else None
            self.hub = InteractionHub(
                clock=self.clock if self._lockstep is None else self._lockstep.hub_clock(),
                timeout_secs=interaction_timeout_secs,
                listener=self._inbox.put if self._lockstep is None else self._lockstep.hub_event,
            )
            self.hub.attach_wake(self.wake)
            self.tools = tools if tools is not None else ToolRegistry()
            self.models: dict[str, Model] = dict(models or {})
            self.streams = StreamHub()  # streamed model deltas: never inputs (see on_stream)
            self._usage = UsageMeter()
            self._tool_backend, executor = take_tool_executor(tool_executor, self.tools)
            self._tool_executor = executor
            on_outcome = self._inbox.put if self._lockstep is None else self._lockstep.outcome
            on_end = None if self._lockstep is None else self._lockstep.ended
            self.lane = ToolLane(
                tool_capacity,
                name="tools",
                executor=executor,
                on_outcome=on_outcome,
                on_end=on_end,
            )
            self.inference_lane = ToolLane(
                inference_capacity, name="inference", on_outcome=on_outcome, on_end=on_end
            )
            self.behaviors = BehaviorRegistry(parent=GLOBAL_BEHAVIORS)
            self.behaviors.update(behaviors or {})
            # A replay hands in its own effects: its ticks are not live (no probes, no metrics).
            live = self._live = effects is None
            if effects is None:
                effects = self._live_effects()
            self._state = WorldState(
                seed=seed,
                effects=effects,
                behaviors=self.behaviors,
                now=self.clock.now(),
                keep_finished=keep_finished,
            )
            self._host = self._state.host = HostECS(self._state)
            # Weakly: nothing below the World may refer back to it (esper's global map reaches
            # the state, and an unclosed World would live as long as the process).
            self._state.release_now = weakref.WeakMethod(self._release)
            self._lock = threading.RLock()  # held by a tick and by reads: whole ticks only
            # Guards the agent ids: `_pending_ids` and the adding and dropping of records.
            self._ids_lock = self._state.ids_lock
            # Ids `spawn` handed out whose agent the tick has not created yet, in order; once
            # created, an id lives on as its record's key alone (a second dict of every id
            # ever handed out cost ~38 B an agent).
            self._pending_ids: dict[str, None] = {}
            self._spawned = 0
            self._next_host_id = HOST_IDS_START
            self._closed = False
            self._digest_total = 0
            self._journal = journal
            self._track_digests = track_digests or journal is not None
            self._runner: threading.Thread | None = None
            self._stop = threading.Event()
            self._run_error: BaseException | None = None
            # Host timers (call_at) and tick observers: run on the tick thread, never in a replay.
            self._timers = HostTimers()
            # Observers of every tick, and of ticks with inputs only (typed in `Observing`).
            self._observers, self._input_observers = [], []
            # Probes (telemetry) see live ticks only; `_probe` is the one the tick calls.
            # A live world starts with the probes the process set up (telemetry); a replay none.
            self._probes: list[Probe] = process_probes() if live else []
            self._probe: Probe | None = None
            self._set_probe()
            self._recorder: MetricsRecorder | None = None
            self._name = f"tickwork-{next(_world_numbers)}"
            self._stages = self._install_pipeline()
            # A world dropped unclosed takes its esper world with it: nothing below the World
            # refers to it (the effects read the tick's time through its attributes, the hub
            # tells lockstep, not the world), so it can be collected though esper holds them.
            self._forget_esper = weakref.finalize(self, _drop_esper_world, self._name)
            self._forget_esper.atexit = False
            if journal is not None:
                journal.begin(self._settings())
        except BaseException:
            close_handed(journal, tool_executor)
            raise

    def _install_pipeline(self) -> list[str]:
        """Create this world's esper world: the lane gauges and the built-in systems, with
        gaps between their priorities for host systems. Returns the stage names in order."""
        from systems import LaneGauge, build_pipeline  # systems import the world's data types

        with _ESPER_LOCK, self._in_esper():
            _drop_orphans()
            for name in ("tools", "inference"):
                esper.create_entity(LaneGauge(name, LaneStats(name=name)))
            pipeline = build_pipeline(
                {"tools": self.lane.gauge, "inference": self.inference_lane.gauge}
            )
            for index, system in enumerate(pipeline):
                esper.add_processor(system, builtin_priority(index, len(pipeline)))
        self._pipeline = pipeline
        return [stage_name(system) for system in pipeline]

    @property
    def now(self) -> float:
        """The time of the last tick."""
        return self._state.now

    @property
    def tick_count(self) -> int:
        """How many ticks have run."""
        return self._state.tick

    @property
    def inbox(self) -> Inbox:
        """The world's input queue (for tools that post inputs directly)."""
        return self._inbox

    @property
    def name(self) -> str:
        """The name of this world's esper world."""
        return self._name

    @property
    def journal_format(self) -> int:
        """The journal format whose rules this world's ticks follow: the newest
        (`runtime.journal.FORMAT_VERSION`), or the format of the journal a replay or
        resume carries on (see `runtime.world.state.JOURNAL_FORMAT` for what each
        changed)."""
        return self._state.journal_format

    def backend_info(self) -> BackendInfo:
        """What runs the tool jobs (threads, or a cluster's workers), for a live view.

        For a Dask backend this asks the scheduler (at most once a second): call it from a
        view's thread, not from a tick observer.
        """
        return describe_tool_backend(self.lane, self._tool_executor)

    # -- the tick ------------------------------------------------------------------------

    def _live_effects(self) -> LiveEffects:
        return LiveEffects(
            inbox=self._inbox,
            hub=self.hub,
            tool_lane=self.lane,
            inference_lane=self.inference_lane,
            tools=self.tools,
            models=self.models,
            tools_can_ask=self._tool_executor is None,
            lockstep=self._lockstep,
            now=_tick_time_of(self.__dict__),
            streams=self.streams,
            usage=self._usage,
        )

    def _go_live(self, journal: Recorder | None) -> LiveEffects:
        """Swap the effects of a replayed prefix for live ones and record to ``journal``.

        For `runtime.resume`: the world was rebuilt by replaying a journal (with effects that
        start nothing); from the next tick on, work runs on the lanes and prompts go to the
        hub. ``journal`` already holds the header and the prefix, so ``begin`` is not
        called. Returns the live effects, for the restart to re-dispatch in-flight work.
        """
        effects = self._live_effects()
        with self._lock:
            self._state.effects = effects
            self._journal = journal
            self._track_digests = self._track_digests or journal is not None
            self._live = True
            self._probes.extend(process_probes())  # the probes the process set up
            self._set_probe()
        return effects

    # -- running (the loops themselves are `RunLoop`'s) ----------------------------------

    def close(self, timeout: float = 5.0) -> None:
        """Stop the loop, cancel work in flight, settle prompts, close lanes and owned backend.

        ``timeout`` bounds the whole close: the loop's stop and the wait for every lane's
        running jobs share it (work that ignores its token is left running, logged).
        Idempotent. Agents keep their last status.

        Called on the tick thread during a tick (from an observer, a host timer, system or
        action handler), it closes the world as soon as that tick is over: the tick
        finishes for every agent (and is journaled) first, and ``closed`` reads True from
        then on. ``run``, ``run_until_idle`` and ``start``'s loop then end.

        Raises:
            ConfigError: ``timeout`` is not a number >= 0 (nothing is closed).
        """
        if self._closed:
            return
        check_timeout(timeout)
        if self._lock._is_owned():  # type: ignore[attr-defined]  # (C RLock's own check)
            self._close_after_tick = timeout  # `TickMachine.tick` closes once it is over
            self._reconfigured += 1  # and a skip under way stops at this tick's end
            return
        self._close_now(timeout)

    def _close_now(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        try:
            self.stop(timeout)
        finally:
            self._closed = True
            if self._lockstep is not None:
                self._lockstep.close()
            with self._lock:
                for rec in self._state.records.values():
                    if rec.token is not None:
                        rec.token.cancel("world closed")
                probes = list(self._probes)
            for probe in probes:  # a probe's optional `close()`: tracing ends its open spans
                close = getattr(probe, "close", None)
                if callable(close):
                    try:
                        close()
                    except Exception:
                        log.exception("probe %r raised in close", probe)
            self.hub.close()
            self.lane.close(left())
            self.inference_lane.close(left())
            if self._tool_backend is not None:  # after the lane: its jobs are settled
                self._tool_backend.close()
            if self._journal is not None:
                self._journal.close()
            with _ESPER_LOCK:
                if esper.current_world == self._name:
                    esper.switch_world("default")
                if self._name in esper.list_worlds():
                    esper.delete_world(self._name)
                _drop_orphans()
            self._forget_esper.detach()

    def __enter__(self) -> World:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<World {self._name} tick={self._state.tick} agents={len(self._state.records)}>"

    # -- helpers -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether ``close()`` has been called."""
        return self._closed

    def _can_move(self) -> bool:
        # Something is left for the next tick without waiting: an input, a ready agent, or
        # (lockstep) lane work dispatched since the last tick began, or due by now. Never
        # "a job happens to be done": that would make the number of ticks depend on timing.
        if len(self._inbox) or self._state.ready:
            return True
        lockstep = self._lockstep
        return lockstep is not None and lockstep.can_move(self.clock.now())

    def _settings(self) -> dict[str, Any]:
        """What a recorder needs to rebuild this world: seed, clock, capacities, names."""
        tools = self.tools
        return {
            "seed": self.seed,
            "clock": "virtual" if self.clock.virtual else "real",
            "lockstep": self.lockstep,
            "start": self.now,
            "tool_capacity": self.lane.capacity,
            "inference_capacity": self.inference_lane.capacity,
            "interaction_timeout_secs": self.hub.timeout_secs,
            "keep_finished": self._state.keep_finished,
            "tools": sorted(tools.names()),
            "approval_required": sorted(n for n in tools.names() if tools.requires_approval(n)),
            "models": sorted(self.models),
        }

    def _check_open(self) -> None:
        if self._closed:
            raise WorldClosedError(f"world {self._name} is closed")


def _check_settings(
    seed: int,
    tool_capacity: int,
    inference_capacity: int,
    interaction_timeout_secs: float,
    lockstep: bool | None,
    keep_finished: int | None,
) -> None:
    _check_int("seed", seed)
    _check_keep_finished(keep_finished)
    for arg, value in (
        ("tool_capacity", tool_capacity),
        ("inference_capacity", inference_capacity),
    ):
        _check_int(arg, value)
        if value < 1:
            raise ConfigError(f"`{arg}` must be >= 1, got {value}")
    if not math.isfinite(interaction_timeout_secs) or interaction_timeout_secs < 0:
        raise ConfigError(
            f"`interaction_timeout_secs` must be >= 0 (0 waits forever), "
            f"got {interaction_timeout_secs}"
        )
    if lockstep is not None and not isinstance(lockstep, bool):
        raise ConfigError(f"`lockstep` must be True, False or None, got {lockstep!r}")


_OWN_CLOCKS = (MonotonicClock, ManualClock)


def _is_recorder(journal: object) -> bool:
    """Whether ``journal`` has what a world calls on its journal."""
    return all(
        callable(getattr(journal, method, None)) for method in ("begin", "record_tick", "close")
    )


def close_handed(journal: object, tool_executor: object) -> None:
    """Close the journal and the tool backend a ``World`` was handed when it refuses to be
    made (a `ToolBackend`'s ``close`` is idempotent; a bare executor is only borrowed, and
    something that is not a journal was never taken)."""
    try:
        if tool_executor is not None and isinstance(tool_executor, ToolBackend):
            tool_executor.close()
    finally:
        if journal is not None and _is_recorder(journal):
            journal.close()  # type: ignore[attr-defined]


def _check_parts(
    *, clock: object, tools: object, models: object, journal: object, behaviors: object
) -> None:
    """Refuse a part of the wrong kind at the call, naming it (each raised an
    AttributeError from deep inside the constructor: ``journal="run.db"``, say)."""
    # The two clocks tickwork makes pass on their class: a runtime-checkable Protocol's
    # isinstance walks its members in Python (~17 us, a tenth of a World's making).
    if clock is not None and clock.__class__ not in _OWN_CLOCKS and not isinstance(clock, Clock):
        raise ConfigError(
            f"`clock` must be a Clock (MonotonicClock, ManualClock), got {shown(clock)}"
        )
    if tools is not None and not isinstance(tools, ToolRegistry):
        raise ConfigError(f"`tools` must be a ToolRegistry, got {shown(tools)}")
    if models is not None:
        if not isinstance(models, Mapping):
            raise ConfigError(f"`models` must map model names to models, got {shown(models)}")
        for name, model in models.items():
            if not isinstance(name, str) or not callable(getattr(model, "complete", None)):
                raise ConfigError(
                    f"`models[{shown(name)}]` must be a model (with a `complete` method),"
                    f" got {shown(model)}"
                )
    if journal is not None and not _is_recorder(journal):
        raise ConfigError(
            f"`journal` must be a Journal (`Journal.create(path)`), got {shown(journal)}"
        )
    if behaviors is not None and not isinstance(behaviors, Mapping):
        raise ConfigError(
            f"`behaviors` must map behaviour names to functions, got {shown(behaviors)}"
        )


def _check_keep_finished(keep_finished: int | None) -> None:
    if keep_finished is not None:
        _check_int("keep_finished", keep_finished)
        if keep_finished < 0:
            raise ConfigError(f"`keep_finished` must be >= 0 (None keeps all), got {keep_finished}")


def _check_int(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"`{name}` must be an integer, got {value!r}")
