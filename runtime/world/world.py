"""The world: agents as esper entities, advanced tick by tick by the systems pipeline.

One thread, the tick thread, runs ``tick()``; it is the only thread that touches esper.
Other threads talk to a world through its thread-safe commands (``spawn``, ``send``,
``pause``, ``resume``, ``cancel``, ``interrupt``), which only enqueue an input and nudge
the wake, and through the hub. Reads (``status``, ``result``, ``history``, ``agents``)
take the world's lock, so they see the state between two ticks, never half a tick.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Executor
from types import TracebackType
from typing import Any

import esper

from components import Entry, LaneStats, Status, StatusKind
from runtime.clock import Clock, MonotonicClock
from runtime.errors import ConfigError, UnknownAgentError, WorldClosedError
from runtime.hub import InteractionHub
from runtime.lane.backend import BackendInfo, ToolBackend, describe_tool_backend, take_tool_executor
from runtime.lane.tool_lane import ToolLane
from runtime.models.base import Model
from runtime.models.streaming import StreamHook, StreamHub
from runtime.models.usage import Usage, UsageMeter
from runtime.tools.registry import ToolRegistry
from runtime.wake import Wake
from runtime.world.actions import Behavior
from runtime.world.behaviors import GLOBAL_BEHAVIORS, BehaviorRegistry
from runtime.world.digest import agent_digest, agent_fields, combine, hexdigest
from runtime.world.effects import LiveEffects
from runtime.world.inputs import (
    CancelAgent,
    Inbox,
    InterruptAgent,
    PauseAgent,
    ResumeAgent,
    SendMessage,
    SpawnAgent,
)
from runtime.world.loop import REDRIVE_SECS, RunLoop
from runtime.world.recorder import Recorder
from runtime.world.report import TickReport
from runtime.world.state import Effects, WorldState
from runtime.world.timers import HostTimers
from runtime.world.values import is_json

__all__ = ["REDRIVE_SECS", "TickReport", "World"]

log = logging.getLogger("tickwork.world")

# esper keeps module-global state: ticks of different worlds in one process take turns.
_ESPER_LOCK = threading.RLock()
_world_numbers = itertools.count(1)


class World(RunLoop):
    """A world of agents, advanced tick by tick. See the module docstring for threads.

    The run loops (``run_until_idle``, ``run``, ``start``, ``stop``) come from `RunLoop`.

    ``tool_executor`` runs tool jobs off the lane's own threads: a bare ``Executor`` is
    borrowed, a `runtime.cluster.ToolBackend` (such as ``DaskBackend``) is handed over and
    closed with the world. Either way the lane keeps capacity and counters, and ``local_only``
    tools (``AskUserTool``) are refused: they need this process's hub.

    Raises:
        ConfigError: a setting is out of range (the message names it and its value).
    """

    def __init__(
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
        effects: Effects | None = None,
    ) -> None:
        _check_int("seed", seed)
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
        self.seed = seed
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self.wake = Wake()
        self._inbox = Inbox(self.wake)
        self.hub = InteractionHub(
            clock=self.clock, timeout_secs=interaction_timeout_secs, listener=self._inbox.put
        )
        self.hub.attach_wake(self.wake)
        self.tools = tools if tools is not None else ToolRegistry()
        self.models: dict[str, Model] = dict(models or {})
        self.streams = StreamHub()  # streamed model deltas: never inputs (see on_stream)
        self._usage = UsageMeter()
        self._tool_backend, tool_executor = take_tool_executor(tool_executor, self.tools)
        self._tool_executor = tool_executor
        self.lane = ToolLane(
            tool_capacity, name="tools", executor=tool_executor, on_outcome=self._inbox.put
        )
        self.inference_lane = ToolLane(
            inference_capacity, name="inference", on_outcome=self._inbox.put
        )
        self.behaviors = BehaviorRegistry(parent=GLOBAL_BEHAVIORS)
        self.behaviors.update(behaviors or {})
        if effects is None:
            effects = LiveEffects(
                inbox=self._inbox,
                hub=self.hub,
                tool_lane=self.lane,
                inference_lane=self.inference_lane,
                tools=self.tools,
                models=self.models,
                tools_can_ask=tool_executor is None,
                streams=self.streams,
                usage=self._usage,
            )
        self._state = WorldState(
            seed=seed, effects=effects, behaviors=self.behaviors, now=self.clock.now()
        )
        self._lock = threading.RLock()  # held by a tick and by reads: whole ticks only
        self._ids_lock = threading.Lock()
        self._known: dict[str, None] = {}  # every id handed out, in order (incl. children)
        self._spawned = 0
        self._closed = False
        self._digest_total = 0
        self._journal = journal
        self._track_digests = track_digests or journal is not None
        self._runner: threading.Thread | None = None
        self._stop = threading.Event()
        self._run_error: BaseException | None = None
        # Host timers (call_at) and tick observers: run on the tick thread, never in a replay.
        self._timers = HostTimers()
        self._observers: list[Callable[[TickReport, list[tuple[int, object]]], object]] = []
        self._name = f"tickwork-{next(_world_numbers)}"
        from systems import LaneGauge, build_pipeline  # systems import the world's data types

        with _ESPER_LOCK, self._in_esper():
            for name in ("tools", "inference"):
                esper.create_entity(LaneGauge(name, LaneStats(name=name)))
            pipeline = build_pipeline(
                {"tools": self.lane.stats, "inference": self.inference_lane.stats}
            )
            for priority, system in enumerate(reversed(pipeline)):
                esper.add_processor(system, priority)
        if journal is not None:
            journal.begin(self._settings())

    # -- thread-safe commands: they only enqueue an input and nudge the wake ------------

    def spawn(
        self,
        behavior: Behavior | str,
        message: Any = None,
        *,
        name: str = "",
        interactive: bool = False,
        agent_id: str | None = None,
    ) -> str:
        """Add an agent running ``behavior`` and return its id; it starts next tick.

        ``behavior`` is a generator function or a behaviour name. A non-interactive agent
        starts its turn at once (on ``message``, which may be None); an interactive one
        waits for ``send`` unless given a message.

        Raises:
            BehaviorNotFound: ``behavior`` is a name that does not resolve.
            ConfigError: ``agent_id`` is taken or malformed, or ``message`` is not a JSON
                value while a journal records the world.
            WorldClosedError: the world is closed.
        """
        self._check_open()
        behavior_name = behavior if isinstance(behavior, str) else self.behaviors.name_of(behavior)
        self.behaviors.resolve(behavior_name)  # fail at the call, not on the tick thread
        self._check_recordable("message", message)
        with self._ids_lock:
            if agent_id is None:
                while True:
                    self._spawned += 1
                    agent_id = f"a{self._spawned}"
                    if agent_id not in self._known:
                        break
            else:
                _check_agent_id(agent_id)
                if agent_id in self._known:
                    raise ConfigError(f"agent id {agent_id!r} is already taken")
            self._known[agent_id] = None
            # Under the ids lock: sequence numbers follow the order ids were handed out.
            self._inbox.put(SpawnAgent(agent_id, behavior_name, message, name, interactive))
        return agent_id

    def send(self, agent_id: str, message: Any) -> None:
        """Give an agent its next message (a new turn now, or after the current one).

        Raises:
            UnknownAgentError: no agent has that id.
        """
        self._check_recordable("message", message)
        self._command(SendMessage(self._checked(agent_id), message))

    def pause(self, agent_id: str) -> None:
        """Stop stepping an agent (from ACTIVE, WAITING or IDLE); outcomes are held."""
        self._command(PauseAgent(self._checked(agent_id)))

    def resume(self, agent_id: str) -> None:
        """Undo ``pause``; what landed meanwhile is applied."""
        self._command(ResumeAgent(self._checked(agent_id)))

    def cancel(self, agent_id: str, reason: str = "cancelled by user") -> None:
        """End an agent for good: work cancelled, prompts settled, children cancelled."""
        self._command(CancelAgent(self._checked(agent_id), reason))

    def interrupt(self, agent_id: str) -> None:
        """Abandon the agent's current turn, keeping its history; it waits for input.

        A model reply streaming in is stopped here and now (its HTTP stream closed), and
        the text it had is kept in the history, marked ``[interrupted by user]``.
        """
        self._check_open()
        stopped = self.streams.stop(self._checked(agent_id))
        if stopped is None:
            self._command(InterruptAgent(agent_id))
        else:
            self._command(InterruptAgent(agent_id, stopped[0], stopped[1]))

    def on_stream(self, fn: StreamHook) -> None:
        """Call ``fn(agent_id, delta_text)`` as each streamed model delta arrives.

        ``fn`` runs on the lane thread that reads the stream: keep it quick and thread-safe.
        Deltas are not inputs (only the final reply is), so a replay calls no hook. One
        that raises is logged. ``world.streams.remove_hook(fn)`` stops the calls.
        """
        self.streams.add_hook(fn)

    def call_at(self, when: float, fn: Callable[[], object]) -> None:
        """Run ``fn()`` on the tick thread at the first tick whose time is >= ``when``.

        A host timer in world time (virtual or real): ``run_until_idle`` and ``run`` wake
        for it, and with a ``ManualClock`` skip time to it. ``fn`` talks to the world like
        any host code (hub, commands); what it causes lands at the next tick. An ``fn``
        that raises is logged. Timers are host code: a replay does not run them (their
        effects are in the journal).
        """
        if not math.isfinite(when):
            raise ConfigError(f"`when` must be a finite time, got {when}")
        self._timers.add(when, fn)
        self.wake.notify()

    def call_later(self, delay: float, fn: Callable[[], object]) -> None:
        """Run ``fn()`` on the tick thread ``delay`` seconds of world time from now."""
        if not delay >= 0:
            raise ConfigError(f"`delay` must be >= 0, got {delay}")
        self.call_at(self.clock.now() + delay, fn)

    def observe(self, fn: Callable[[TickReport, list[tuple[int, object]]], object]) -> None:
        """Call ``fn(report, inputs)`` after every tick, on the tick thread.

        ``inputs`` are the tick's applied inputs as ``(seq, input)`` pairs (commands, tool
        and model outcomes, prompt events). Keep ``fn`` quick; one that raises is logged.
        """
        self._observers.append(fn)

    def unobserve(self, fn: Callable[[TickReport, list[tuple[int, object]]], object]) -> bool:
        """Stop calling ``fn`` after ticks; returns whether it was observing."""
        try:
            self._observers.remove(fn)
        except ValueError:
            return False
        return True

    def token_usage(self) -> dict[str, Usage]:
        """Tokens in and out per model name, over the replies this world has received.

        A report of the live run (a replay calls no model, so it meters nothing).
        """
        return self._usage.totals()

    def post(self, item: object) -> int:
        """Put a raw input into the inbox (an outcome, a prompt event); returns its seq."""
        self._check_open()
        return self._inbox.put(item)

    # -- reads: whole ticks only ---------------------------------------------------------

    def status(self, agent_id: str) -> Status:
        """A copy of the agent's status (IDLE with a note while its spawn is pending).

        Raises:
            UnknownAgentError: no agent has that id.
        """
        with self._lock:
            rec = self._state.records.get(agent_id)
            if rec is not None:
                s = rec.status
                return Status(s.kind, s.reason, s.message)
        self._checked(agent_id)
        return Status(StatusKind.IDLE, None, "spawn pending")

    def result(self, agent_id: str) -> Any:
        """The value the agent's last turn returned (None before that)."""
        with self._lock:
            rec = self._state.records.get(agent_id)
            if rec is not None:
                return rec.result
        self._checked(agent_id)
        return None

    def history(self, agent_id: str) -> list[Entry]:
        """A copy of the agent's history."""
        with self._lock:
            rec = self._state.records.get(agent_id)
            if rec is not None:
                return list(rec.history.entries)
        self._checked(agent_id)
        return []

    def agents(self) -> Iterator[str]:
        """Every agent id, in the order they were spawned (children included)."""
        with self._ids_lock:
            ids = list(self._known)
        return iter(ids)

    def counts(self) -> dict[StatusKind, int]:
        """How many agents are in each status (O(agents))."""
        with self._lock:
            counts = dict.fromkeys(StatusKind, 0)
            for rec in self._state.records.values():
                counts[rec.status.kind] += 1
            return counts

    def digest(self) -> str:
        """The digest of every agent's state now (incremental: O(changed agents))."""
        with self._lock:
            self._fold_dirty(None)
            return hexdigest(self._digest_total)

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

    def backend_info(self) -> BackendInfo:
        """What runs the tool jobs (threads, or a cluster's workers), for a live view.

        For a Dask backend this asks the scheduler (at most once a second): call it from a
        view's thread, not from a tick observer.
        """
        return describe_tool_backend(self.lane, self._tool_executor)

    # -- the tick ------------------------------------------------------------------------

    def tick(self) -> TickReport:
        """Run the pipeline once: apply inputs, step what can move, dispatch its work.

        Raises:
            WorldClosedError: the world is closed.
        """
        self._check_open()
        return self._tick(self._inbox.drain(), None)

    def _tick(
        self,
        inputs: list[tuple[int, object]],
        now: float | None,
        changed: list[tuple[str, dict[str, Any]]] | None = None,
    ) -> TickReport:
        with self._lock, _ESPER_LOCK, self._in_esper():
            state = self._state
            state.tick += 1
            state.now = self.clock.now() if now is None else now
            if self._timers:
                self._timers.run_due(state.now)
            state.inputs = inputs
            state.changed_this_tick = len(inputs)
            state.stepped = 0
            esper.process(state)
            state.inputs = []
            digest = None
            if self._track_digests:
                if changed is None and self._journal is not None:
                    changed = []
                self._fold_dirty(changed)
                digest = hexdigest(self._digest_total)
                if self._journal is not None:
                    assert changed is not None
                    self._journal.record_tick(state.tick, state.now, inputs, digest, changed)
            self._note_new_agents()
            report = TickReport(
                state.tick, state.now, len(inputs), state.stepped, state.changed_this_tick, digest
            )
            for observer in self._observers:
                try:
                    observer(report, inputs)
                except Exception:
                    log.exception("tick observer %r raised", observer)
            return report

    def _fold_dirty(self, changed: list[tuple[str, dict[str, Any]]] | None) -> None:
        state = self._state
        if not state.dirty:
            return
        total = self._digest_total
        for ordinal in sorted(state.dirty):
            rec = state.dirty[ordinal]
            fields = agent_fields(rec)
            new = agent_digest(fields)
            total = combine(total, rec.digest, new)
            rec.digest = new
            if changed is not None:
                changed.append((rec.id, fields))
        state.dirty.clear()
        self._digest_total = total

    def _note_new_agents(self) -> None:
        # O(agents created this tick): children spawned on the tick thread become known
        # ids for the thread-safe commands (host spawns are known from the call).
        created = self._state.created
        if not created:
            return
        with self._ids_lock:
            for agent_id in created:
                self._known.setdefault(agent_id, None)
        created.clear()

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

    # -- running (the loops themselves are `RunLoop`'s) ----------------------------------

    def close(self, timeout: float = 5.0) -> None:
        """Stop the loop, cancel work in flight, settle prompts, close lanes and owned backend.

        Idempotent. Agents keep their last status.
        """
        if self._closed:
            return
        try:
            self.stop(timeout)
        finally:
            self._closed = True
            with self._lock:
                for rec in self._state.records.values():
                    if rec.handle is not None:
                        rec.handle.interrupt("world closed")
            self.hub.close()
            self.lane.close(timeout)
            self.inference_lane.close(timeout)
            if self._tool_backend is not None:  # after the lane: its jobs are settled
                self._tool_backend.close()
            if self._journal is not None:
                self._journal.close()
            with _ESPER_LOCK:
                if esper.current_world == self._name:
                    esper.switch_world("default")
                if self._name in esper.list_worlds():
                    esper.delete_world(self._name)

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
        return f"<World {self._name} tick={self._state.tick} agents={len(self._known)}>"

    # -- helpers -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether ``close()`` has been called."""
        return self._closed

    def _can_move(self) -> bool:
        # Something is left for the next tick without waiting: an input, or a ready agent.
        return bool(len(self._inbox) or self._state.ready)

    def _settings(self) -> dict[str, Any]:
        """What a recorder needs to rebuild this world: seed, clock, capacities, names."""
        tools = self.tools
        return {
            "seed": self.seed,
            "clock": "virtual" if self.clock.virtual else "real",
            "start": self.now,
            "tool_capacity": self.lane.capacity,
            "inference_capacity": self.inference_lane.capacity,
            "interaction_timeout_secs": self.hub.timeout_secs,
            "tools": sorted(tools.names()),
            "approval_required": sorted(n for n in tools.names() if tools.requires_approval(n)),
            "models": sorted(self.models),
        }

    def _check_open(self) -> None:
        if self._closed:
            raise WorldClosedError(f"world {self._name} is closed")

    def _checked(self, agent_id: str) -> str:
        if agent_id not in self._known and agent_id not in self._state.records:
            raise UnknownAgentError(f"unknown agent {agent_id!r}")
        return agent_id

    def _check_recordable(self, name: str, value: Any) -> None:
        # A journal stores inputs as JSON: refuse what it cannot store here, at the call,
        # rather than on the tick thread when the tick is written.
        if self._journal is not None and not is_json(value):
            raise ConfigError(
                f"`{name}` must be a JSON value when the world records a journal, got {value!r}"
            )

    def _command(self, item: object) -> None:
        self._check_open()
        self._inbox.put(item)


def _check_int(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"`{name}` must be an integer, got {value!r}")


def _check_agent_id(agent_id: object) -> None:
    if not isinstance(agent_id, str) or not agent_id or "/" in agent_id:
        raise ConfigError(f"`agent_id` must be a non-empty string without '/', got {agent_id!r}")
