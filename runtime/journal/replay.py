"""Replay: rebuild a recorded run from its journal and check every tick's digest.

No tool runs and no prompt is shown: outcomes and settlements come from the journal as
the inputs they were, at the ticks they were applied, and the clock is set to each
tick's recorded time. A behaviour's code runs again, so a change to it that changes what
it does is caught at the first tick where the state differs.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components import InteractionRequest, ToolCall
from runtime.cancel import CancelToken
from runtime.clock import Clock, ManualClock
from runtime.errors import BehaviorNotFound, ConfigError, JournalError, ReplayDivergence
from runtime.journal.store import FORMAT_VERSION, JournalReader, RecordedTick
from runtime.lane.backend import ToolBackend
from runtime.lane.values import shown
from runtime.models import Model, ModelRequest
from runtime.scenario.host import install_host
from runtime.scenario.load import register_scenario_behaviors
from runtime.tools import ToolRegistry
from runtime.world import Behavior, World, sigint
from runtime.world.digest import agent_text
from runtime.world.host_data import field_names
from runtime.world.inputs import AddEntity, ComponentData, ForgetAgent, SpawnAgent

__all__ = [
    "ReplayEffects",
    "ReplayReport",
    "check_behaviors",
    "rebuild",
    "replay",
    "replay_ticks",
]


@dataclass(slots=True)
class ReplayEffects:
    """Effects that start nothing: in a replay, every outcome comes from the journal.

    They count what was asked for, and remember what a resume needs to start again the work
    that was in flight when the run died: each agent's last model request, how many model
    calls each agent made of each model, the model each call asked (by its ref: a resume
    charges the replies' tokens to the live model's budget), and every prompt the tick
    thread opened.
    """

    approval_required: frozenset[str] = frozenset()
    calls: dict[str, int] = field(default_factory=dict)
    thinking: dict[str, tuple[str, ModelRequest]] = field(default_factory=dict)
    model_calls: dict[tuple[str, str], int] = field(default_factory=dict)
    models_of: dict[str, str] = field(default_factory=dict)
    prompts: dict[str, tuple[str, InteractionRequest]] = field(default_factory=dict)

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def think(self, agent_id: str, ref: str, request: ModelRequest, cancel: CancelToken) -> None:
        self._count("think")
        self.thinking[agent_id] = (ref, request)
        key = (request.model, agent_id)
        self.model_calls[key] = self.model_calls.get(key, 0) + 1
        self.models_of[ref] = request.model

    def run_tools(
        self, agent_id: str, ref: str, calls: tuple[ToolCall, ...], cancel: CancelToken
    ) -> None:
        self._count("run_tools")

    def open_prompt(self, agent_id: str, request: InteractionRequest) -> None:
        self._count("open_prompt")
        self.prompts[request.id] = (agent_id, request)

    def cancel_prompt(self, request_id: str) -> None:
        self._count("cancel_prompt")

    def cancel_prompts_of(self, agent_id: str) -> None:
        self._count("cancel_prompts_of")

    def expire_prompts(self, now: float) -> None:
        pass  # expiries were recorded as settlements

    def requires_approval(self, tool: str) -> bool:
        return tool in self.approval_required


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """What a replay did: ticks and inputs replayed, agents seen, and its wall time."""

    path: str
    ticks: int
    inputs: int
    agents: int
    wall_time: float
    effects: dict[str, int]
    recorded_ticks: int


def replay(
    path: str | Path,
    *,
    until_tick: int | None = None,
    behaviors: Mapping[str, Behavior] | None = None,
    setup: Callable[[World], object] | None = None,
    progress: Callable[[int, int], None] | None = None,
    import_path: Sequence[str | Path] = (),
) -> ReplayReport:
    """Replay the journal at ``path`` and compare every tick's digest with the recording.

    ``behaviors`` maps behaviour names the journal uses to functions, for behaviours that
    cannot be imported by name (nested functions, lambdas). ``setup(world)`` registers the
    host systems and actions the live run had (``add_system``, ``add_action``,
    ``register_component``); it must not add entities or agents, which the journal holds.
    ``progress(done, total)`` is called as ticks are replayed. ``import_path`` lists
    directories to import the journal's ``module:function`` behaviours (and ``setup``) from,
    besides ``sys.path``: a journal is data, so the directory it says its scenario lived in
    is never searched unless listed here.

    Raises:
        JournalError: the journal cannot be read, or names a component type that is
            neither registered by ``setup`` nor importable.
        BehaviorNotFound: the journal names a behaviour that cannot be found.
        ReplayDivergence: a tick's state differs from the recording (names tick and agents).
        ConfigError: ``until_tick`` is not an integer >= 0 (or None).
    """
    if until_tick is not None and (
        isinstance(until_tick, bool) or not isinstance(until_tick, int) or until_tick < 0
    ):
        raise ConfigError(f"`until_tick` must be an integer >= 0 or None, got {shown(until_tick)}")
    started = time.monotonic()
    with JournalReader(path) as reader:
        header = reader.header
        journal_format = reader.format
        recorded = list(reader.ticks(until_tick, states=False))
        # Every tick was read when no bound was given: no second count of them.
        total = len(recorded) if until_tick is None else min(reader.tick_count(), until_tick)
    with _importable(import_path):
        effects = ReplayEffects(frozenset(header.get("approval_required", ())))
        world = rebuild(
            header, effects, behaviors=behaviors or {}, setup=setup, journal_format=journal_format
        )
        try:
            check_behaviors(world, recorded)
            _check_components(world, recorded)
            inputs = replay_ticks(world, recorded, path, progress=progress, total=total)
            return ReplayReport(
                path=str(path),
                ticks=len(recorded),
                inputs=inputs,
                agents=len(list(world.agents())),
                wall_time=time.monotonic() - started,
                effects=dict(effects.calls),
                recorded_ticks=total,
            )
        finally:
            world.close()


@contextlib.contextmanager
def _importable(dirs: Sequence[str | Path]) -> Iterator[None]:
    """Put ``dirs`` first on ``sys.path`` while the block runs."""
    added = [str(Path(d).resolve()) for d in dirs]
    added = [d for d in dict.fromkeys(added) if d not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for entry in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(entry)


def replay_ticks(
    world: World,
    recorded: list[RecordedTick],
    path: str | Path,
    *,
    progress: Callable[[int, int], None] | None = None,
    total: int | None = None,
) -> int:
    """Feed ``recorded`` ticks to ``world`` at their times, checking each tick's digest.

    The one replay loop: ``replay`` checks a run with it, ``resume`` rebuilds one. Returns
    how many inputs were applied. On a divergence the recorded agent fields are read from
    the journal at ``path``, to name what differs.

    Raises:
        JournalError: the journal skips a tick.
        ReplayDivergence: a tick's state differs from the recording.
    """
    inputs = 0
    total = len(recorded) if total is None else total
    inbox = world._inbox
    # `spawn`'s auto ids (a1, a2, ...) followed as the recorded run minted them: a resumed
    # world mints on from there, never an id the run gave out and released since.
    minted, spawned = world._spawned, set(world._state.records)
    for done, tick in enumerate(recorded, 1):
        if tick.tick != world.tick_count + 1:
            raise JournalError(f"journal skips from tick {world.tick_count} to {tick.tick}")
        # What host code run again here (setup, host systems, timers, observers) posted
        # before this tick is in the journal already, as this tick's inputs or a later
        # one's: dropped, or a resumed world would apply it twice. What the last tick
        # posts stays, for the live run's first tick, as it would have without the crash.
        inbox.drain()
        at_once = False
        for _seq, item in tick.inputs:
            cls = item.__class__
            if cls is ForgetAgent:
                at_once = at_once or item.at_once  # type: ignore[attr-defined]
            elif cls is SpawnAgent:
                minted = _followed_mint(minted, spawned, item.agent_id)  # type: ignore[attr-defined]
            elif cls is AddEntity:  # minted by the recorded run's host code
                world._host_id_taken(item.entity)  # type: ignore[attr-defined]
        changed: list[tuple[str, str]] = []
        world._state.forgets_at_once = at_once
        # Ctrl-C as in a live tick (`runtime.world.sigint`): held to the tick's end and
        # raised there, or at once under `sigint.abandoning()`, never landing inside a
        # behaviour, whose catch-all failed the agent with it: a replay then reported a
        # divergence where the user had pressed Ctrl-C.
        deferring = sigint.enter()
        try:
            report = world._tick(tick.inputs, tick.now, changed)
        finally:
            world._state.forgets_at_once = False
            if deferring:
                sigint.leave()  # raises a Ctrl-C that landed during the tick
        inputs += len(tick.inputs)
        if report.digest != tick.digest:
            assert report.digest is not None
            with JournalReader(path) as reader:
                expected, at_tick = reader.states_until(tick.tick)
            raise ReplayDivergence(
                tick.tick,
                tick.digest,
                report.digest,
                _explain(world, at_tick, changed, expected),
            )
        if progress is not None:
            progress(done, total)
    with world._ids_lock:
        world._spawned = max(world._spawned, minted)
    return inputs


def _followed_mint(minted: int, spawned: set[str], agent_id: str) -> int:
    """`spawn`'s counter after the spawn of ``agent_id``: moved on when the id is the one
    it would have minted next (the first ``a<n>`` past it not spawned before), else kept
    (an id the host chose). ``spawned`` gains the id."""
    n = minted + 1
    while f"a{n}" in spawned:
        n += 1
    spawned.add(agent_id)
    return n if agent_id == f"a{n}" else minted


def rebuild(
    header: dict[str, Any],
    effects: ReplayEffects,
    *,
    behaviors: Mapping[str, Behavior],
    tools: ToolRegistry | None = None,
    models: Mapping[str, Model] | None = None,
    clock: Clock | None = None,
    setup: Callable[[World], object] | None = None,
    scenario_behaviors: bool = True,
    tool_executor: Executor | ToolBackend | None = None,
    journal_format: int = FORMAT_VERSION,
) -> World:
    """A world built from a journal's header, before its first tick, with ``effects``.

    The world's ticks follow the rules of ``journal_format`` (the journal's format: see
    `runtime.journal.FORMAT_VERSION`), set before ``setup`` runs (a resource made there
    takes its actions as that format did).

    ``scenario_behaviors`` registers the behaviours of the scenario the header stores
    (``replay`` does; ``resume`` registers its own). ``tool_executor`` is handed to the
    world (``resume``'s live run: a Dask backend); the world closes it, even on failure.
    ``setup(world)`` runs last.

    Raises:
        JournalError: the header lacks a setting or holds a bad one.
        ScenarioError: the stored scenario no longer checks.
    """
    try:
        world = World(
            seed=int(header["seed"]),
            clock=clock if clock is not None else ManualClock(float(header.get("start", 0.0))),
            tool_capacity=int(header.get("tool_capacity", 1)),
            inference_capacity=int(header.get("inference_capacity", 1)),
            interaction_timeout_secs=float(header.get("interaction_timeout_secs", 3600.0)),
            tools=tools,
            models=models,
            keep_finished=header.get("keep_finished"),
            behaviors=behaviors,
            effects=effects,
            track_digests=True,
            # A resumed world goes on delivering as the run did (None: the clock decides).
            lockstep=header.get("lockstep"),
            tool_executor=tool_executor,
        )
    except (KeyError, TypeError, ValueError) as exc:
        _close(tool_executor)  # a bad header: the world may not have taken it yet
        raise JournalError(f"journal header is missing or has a bad setting: {exc}") from exc
    world._state.journal_format = journal_format
    try:
        if scenario_behaviors and header.get("scenario"):
            # Imported from sys.path (and the caller's import_path), never from the
            # directory the journal names.
            scenario = register_scenario_behaviors(world.behaviors, header["scenario"])
            install_host(world, scenario.systems, scenario.actions)
        if setup is not None:
            setup(world)
    except BaseException:
        world.close()
        raise
    return world


def _close(executor: Executor | ToolBackend | None) -> None:
    # A backend handed over is ours to close (idempotent); a bare executor is borrowed.
    if executor is not None and isinstance(executor, ToolBackend):  # None: no Protocol walk
        executor.close()


def check_behaviors(world: World, recorded: list[RecordedTick]) -> None:
    """Fail before replaying anything if a spawned behaviour cannot be found.

    Raises:
        BehaviorNotFound: the journal names a behaviour that does not resolve.
    """
    names = sorted(
        {
            item.behavior
            for tick in recorded
            for _, item in tick.inputs
            if isinstance(item, SpawnAgent)
        }
    )
    for name in names:
        try:
            world.behaviors.resolve(name)
        except BehaviorNotFound as exc:
            module = name.partition(":")[0]
            raise BehaviorNotFound(
                f"the journal's {exc}; if it lives in module {module!r}, replay from the"
                " directory holding it or pass --path DIR (a journal never says where code"
                " is imported from)"
            ) from None


def _check_components(world: World, recorded: list[RecordedTick]) -> None:
    """Fail before replaying anything if a host component's type cannot be found, or its
    fields are not the ones the journal holds (the type changed since the run)."""
    shapes = {
        (comp.type_name, tuple(comp.fields))
        for tick in recorded
        for _, item in tick.inputs
        if isinstance(item, (SpawnAgent, AddEntity))
        for comp in item.components
        if isinstance(comp, ComponentData)
    }
    for name, held in sorted(shapes):
        try:
            cls = world._host.find_type(name)
        except ConfigError as exc:
            raise JournalError(f"the journal's {exc}") from None
        fields = field_names(cls)
        if set(held) != set(fields):
            raise JournalError(
                f"the journal's component {name!r} has the fields {list(held)}, the type has"
                f" {list(fields)}: it changed since the run"
            )


def _explain(
    world: World,
    recorded_at_tick: dict[str, dict[str, Any]],
    changed: list[tuple[str, str]],
    expected: dict[str, dict[str, Any]],
) -> dict[str, list[str]]:
    # The changed agents' fields as the journal would hold them (their canonical text
    # read back), to compare with what it holds.
    actual = {agent_id: json.loads(text) for agent_id, text in changed}
    suspects = sorted(set(recorded_at_tick) | set(actual))
    found: dict[str, list[str]] = {}
    for agent_id in suspects:
        want = expected.get(agent_id)
        have = actual.get(agent_id)
        if have is None and agent_id.startswith("entity "):
            have = world._host.entity_fields(int(agent_id.removeprefix("entity ")))
        elif have is None:
            rec = world._state.records.get(agent_id)
            have = (
                json.loads(agent_text(rec, world._state.journal_format))
                if rec is not None
                else None
            )
        if want is None or have is None:
            found[agent_id] = [
                "exists in the replay only" if want is None else "missing from the replay"
            ]
            continue
        lines = [
            f"{key}: expected {want.get(key)!r}, got {have.get(key)!r}"
            for key in sorted(set(want) | set(have))
            if want.get(key) != have.get(key)
        ]
        if lines:
            found[agent_id] = lines
    return found or {"?": ["the digests differ but no changed agent's fields do"]}
