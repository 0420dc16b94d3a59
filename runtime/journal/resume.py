"""Resume: carry on a run that died, from its journal, or fork one from any tick.

Behaviours are generators, which cannot be pickled, so there is no snapshot to load: the
world is rebuilt by replaying the journal's prefix (`runtime.journal.replay.replay_ticks`,
every digest checked), then its effects are swapped for live ones and it records on, into
the same journal or into a fork. What was in flight when the run died is settled at the
restart, and everything the restart decides arrives as an input, so the journal records it
and still replays from tick 1 to its end:

- a tool call gets ``RESTART_ERROR`` (it may have done its work already), unless its tool is
  ``idempotent``, which runs it again;
- a model call is issued again (a model with ``seek``, like ``ScriptedModel``, is first told
  how many calls each agent made, so it reads on where the dead run was);
- a prompt the journal shows open is put back in the hub with its id, its opening time and
  its deadline, without a second opening event; one the tick thread asked for whose opening
  never reached the journal is opened now; one a tool had open is cancelled (its call is
  settled as above);
- sleeps and the world's time carry on: a virtual clock is set to the last tick's time, a
  real one continues from it;
- token budgets carry on: each model's ``budget`` is charged with the tokens its recorded
  replies used, agent by agent, so an agent past its allowance stays past it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from functools import partial
from pathlib import Path
from typing import Any

from components import (
    InteractionResponse,
    Phase,
    PromptOpened,
    PromptSettled,
    Settlement,
)
from runtime.clock import Clock, ManualClock, MonotonicClock
from runtime.errors import ConfigError, JournalError, ScenarioError
from runtime.journal.replay import ReplayEffects, check_behaviors, rebuild, replay_ticks
from runtime.journal.store import Journal, JournalReader, RecordedTick
from runtime.lane.backend import ToolBackend
from runtime.lane.jobs import ToolOutcome
from runtime.models import Budget, Model, ModelReply
from runtime.scenario import Scenario, build_models, build_tools, recorded_scenario
from runtime.scenario.host import install_host
from runtime.tools import ToolRegistry
from runtime.world import Behavior, World
from runtime.world.effects import RESTART_ERROR, LiveEffects
from runtime.world.state import PendingBatch
from systems.lifecycle import turn_token

__all__ = ["RESTART_ERROR", "resume"]


def resume(
    path: str | Path,
    *,
    tools: ToolRegistry | None = None,
    models: Mapping[str, Model] | None = None,
    behaviors: Mapping[str, Behavior] | None = None,
    setup: Callable[[World], object] | None = None,
    clock: Clock | None = None,
    at_tick: int | None = None,
    journal: Journal | None = None,
    tool_executor: Executor | ToolBackend | None = None,
) -> World:
    """A live world carrying on the run the journal at ``path`` recorded.

    The world is rebuilt by replaying the journal (up to ``at_tick`` if given), then goes
    live: it records on into the same journal, or into ``journal`` (a new, empty
    ``Journal.create(...)``: a fork, which gets the header and the prefix first, so it
    replays on its own; the original is left untouched; handed over, it is closed with the
    world, or here if the resume fails). Nothing ticks until you do.

    ``tools``, ``models`` and ``behaviors`` are what the live run had; for a scenario run
    any left out are built from the scenario the journal stores, importing code only from
    installed modules, never from the place the journal names. ``setup(world)`` registers
    again what the host registered (as for ``replay``). ``clock`` defaults to the journal's
    kind of clock, starting at its last tick's time; world time never goes back.
    ``tool_executor`` is what the live run's tool jobs run on, as for ``World`` (a
    `runtime.cluster.DaskBackend` for a run that had one: handed over, it is closed with
    the world, or here if the resume fails); tools built from the scenario are then
    shipped by value, as ``tickwork run`` ships them.

    Raises:
        JournalError: the journal cannot be read, a tick of it is missing, or it cannot be
            resumed with what was given (a tool or model the run used is missing, a tool's
            approval rule changed, a clock of the other kind, ``at_tick`` out of range).
        BehaviorNotFound: the journal spawned a behaviour that cannot be found.
        ReplayDivergence: the prefix does not replay (the code of a behaviour changed).
        ScenarioError: the stored scenario no longer checks.
        ConfigError: a bad argument (``at_tick`` without a new ``journal``).
    """
    where = str(path)
    try:
        with JournalReader(path) as reader:
            header = reader.header
            journal_format = reader.format
            last = reader.tick_count()
            until = _checked_at_tick(where, at_tick, journal, last)
            recorded = list(reader.ticks(until, states=False))
        if journal is not None and Path(journal.path).resolve() == Path(path).resolve():
            raise JournalError(f"cannot fork {where!r} into itself: `journal` must be a new file")
        ship = tool_executor is not None
        tools, models, behaviors, scenario = _parts(where, header, tools, models, behaviors, ship)
        _check_settings(where, header, tools, models)
        last_now = recorded[-1].now if recorded else float(header.get("start", 0.0))
        clock = _clock(where, header, clock, last_now)
    except BaseException:
        _abandon(None, tool_executor, journal)
        raise
    effects = ReplayEffects(frozenset(header.get("approval_required", ())))
    try:
        world = rebuild(  # which closes the backend if it fails
            header,
            effects,
            behaviors=behaviors,
            tools=tools,
            models=models,
            clock=clock,
            setup=setup,
            scenario_behaviors=False,
            tool_executor=tool_executor,
            journal_format=journal_format,
        )
    except BaseException:
        _abandon(None, None, journal)
        raise
    target: Journal | None = None
    try:
        if scenario is not None:  # the host systems and actions the scenario names
            install_host(world, scenario.systems, scenario.actions)
        check_behaviors(world, recorded)
        replay_ticks(world, recorded, path)
        if isinstance(clock, ManualClock) and clock.now() < last_now:
            clock.set(last_now)
        if journal is None:
            target = Journal.append(path)
        else:
            target = journal
            journal.write_prefix(header, path, until)
        _charge_budgets(world, effects, recorded)
        live = world._go_live(target)
        _restart(world, effects, live, _open_at_end(recorded))
    except BaseException:
        _abandon(world, None, target if target is not None else journal)
        raise
    return world


def _abandon(world: World | None, backend: object, journal: Journal | None) -> None:
    """Close what a resume that failed made or was handed: the world (which closes its
    backend), else the backend no world took, and the journal it would have recorded into
    (the fork handed over, or the one opened to append; the world closed it if it went
    live, and closing is idempotent). Unclosed, a journal keeps its writer's lock."""
    try:
        if world is not None:
            world.close()
        elif isinstance(backend, ToolBackend):
            backend.close()
    finally:
        if journal is not None:
            journal.close()


def _checked_at_tick(where: str, at_tick: int | None, journal: Journal | None, last: int) -> int:
    if at_tick is None:
        return last
    if journal is None:
        raise ConfigError(
            "`at_tick` forks the run into a new journal: pass `journal=Journal.create(...)`"
            " (the original journal is never rewritten)"
        )
    if isinstance(at_tick, bool) or not isinstance(at_tick, int) or not 0 <= at_tick <= last:
        raise JournalError(f"`at_tick` must be a tick of {where!r} (0 to {last}), got {at_tick!r}")
    return at_tick


def _parts(
    where: str,
    header: dict[str, Any],
    tools: ToolRegistry | None,
    models: Mapping[str, Model] | None,
    behaviors: Mapping[str, Behavior] | None,
    ship_by_value: bool,
) -> tuple[ToolRegistry, Mapping[str, Model], dict[str, Behavior], Scenario | None]:
    """What the live world runs: as given, else built from the header's scenario (which is
    returned too, when the header stores one and something was built from it; its tools
    ``ship_by_value`` to an executor in other processes)."""
    stored = header.get("scenario")
    missing = tools is None or models is None or behaviors is None
    scenario = None
    if stored and missing:
        try:
            scenario = recorded_scenario(stored, import_tools=tools is None)
        except ScenarioError as exc:
            raise JournalError(
                f"cannot resume {where!r} from its stored scenario: {exc.problems[0]}"
                " (code beside a scenario is imported only when you name the scenario:"
                " `tickwork resume --scenario FILE`, or pass tools, models and behaviors)"
            ) from None
        if tools is None:
            tools = build_tools(scenario, ship_by_value=ship_by_value)
        if models is None:
            models = build_models(scenario)
        behaviors = {**scenario.behaviors, **(behaviors or {})}
    return tools or ToolRegistry(), dict(models or {}), dict(behaviors or {}), scenario


def _check_settings(
    where: str, header: dict[str, Any], tools: ToolRegistry, models: Mapping[str, Model]
) -> None:
    """Refuse a world that would not carry on the same run: a tool, model or rule gone."""
    problems = []
    for name in header.get("tools", ()):
        if name not in tools:
            problems.append(f"the run had tool {name!r}, which was not given")
    approvals = set(header.get("approval_required", ()))
    for name in tools.names():
        if name in header.get("tools", ()) and tools.requires_approval(name) != (name in approvals):
            had = "needed" if name in approvals else "did not need"
            problems.append(f"tool {name!r} {had} approval in the run, and now does not agree")
    for name in header.get("models", ()):
        if name not in models:
            problems.append(f"the run had model {name!r}, which was not given")
    if problems:
        raise JournalError(f"cannot resume {where!r}: " + "; ".join(problems))


def _clock(where: str, header: dict[str, Any], clock: Clock | None, last_now: float) -> Clock:
    virtual = header.get("clock") == "virtual"
    if clock is None:
        return ManualClock(last_now) if virtual else MonotonicClock(last_now)
    if clock.virtual != virtual:
        kind = "virtual" if virtual else "real"
        raise JournalError(f"cannot resume {where!r}: the run had a {kind} clock, `clock` is not")
    if not clock.virtual and clock.now() < last_now:
        raise JournalError(
            f"cannot resume {where!r}: `clock` reads {clock.now():g}, before the journal's last"
            f" tick time {last_now:g}, and world time must not go back"
        )
    return clock


def _open_at_end(recorded: list[RecordedTick]) -> dict[str, PromptOpened]:
    """The prompts the journal shows open after its last tick, in opening order."""
    open_: dict[str, PromptOpened] = {}
    for tick in recorded:
        for _, item in tick.inputs:
            cls = type(item)
            if cls is PromptOpened:
                assert isinstance(item, PromptOpened)
                open_[item.request.id] = item
            elif cls is PromptSettled:
                assert isinstance(item, PromptSettled)
                open_.pop(item.request_id, None)
    return open_


def _restart(
    world: World,
    effects: ReplayEffects,
    live: LiveEffects,
    open_at_end: dict[str, PromptOpened],
) -> None:
    """Settle or start again what was in flight at the journal's end (see the docstring)."""
    state = world._state
    thinking: dict[str, str] = {}  # agent id -> model of its model call in flight
    work: list[Callable[[], None]] = []
    reopened: set[str] = set()
    for rec in state.records.values():  # spawn order: the order work was first dispatched
        if rec.status.kind.is_terminal:
            continue
        turn = rec.turn
        if turn.phase is Phase.THINKING:
            ref, model_request = effects.thinking[rec.id]
            thinking[rec.id] = model_request.model
            work.append(partial(live.think, rec.id, ref, model_request, turn_token(rec)))
        elif turn.phase is Phase.AWAITING_TOOLS:
            pending: PendingBatch = turn.pending
            calls = tuple(c for c in pending.calls if c.id not in pending.results)
            work.append(partial(live.restart_tools, rec.id, pending.ref, calls, turn_token(rec)))
        elif turn.phase is Phase.AWAITING_INPUT:
            pending_input = turn.pending
            ids = (
                list(pending_input.approvals)
                if isinstance(pending_input, PendingBatch)
                else [turn.inflight]
            )
            for request_id in ids:
                opened = open_at_end.get(request_id or "")
                if opened is not None:
                    world.hub.reopen(opened.agent_id, opened.request, opened.at, opened.deadline)
                    reopened.add(opened.request.id)
                elif request_id in effects.prompts:
                    agent_id, request = effects.prompts[request_id]
                    live.open_prompt(agent_id, request)
    _seek_models(world, effects, thinking)
    # A tool's prompt (or one a finished agent left) is cancelled before any work starts
    # again: a tool run again asks under the same id (`ToolContext.ask`), and its new
    # opening must come after the old prompt's end, in the inbox as in the lockstep.
    now = world.now
    for request_id, opened in open_at_end.items():
        if request_id not in reopened:
            neutral = InteractionResponse.neutral(request_id)
            kind = opened.request.kind
            settled = PromptSettled(
                opened.agent_id, request_id, Settlement.CANCELLED, neutral, opened.at, now, kind
            )
            world.post(settled)
    for start in work:
        start()


def _charge_budgets(world: World, effects: ReplayEffects, recorded: list[RecordedTick]) -> None:
    """Charge each live model's ``budget`` with what the journal's replies used.

    A budget lives in its provider, which a replay never calls: without this, every agent
    of a resumed run would start on a full allowance again.
    """
    for tick in recorded:
        for _seq, item in tick.inputs:
            if type(item) is not ToolOutcome:
                continue
            model_name = effects.models_of.get(item.batch_id)
            if model_name is None:
                continue
            budget = getattr(world.models.get(model_name), "budget", None)
            if not isinstance(budget, Budget):
                continue
            for result in item.results:
                if isinstance(result.output, ModelReply):
                    budget.charge(item.agent_id, result.output.usage)


def _seek_models(world: World, effects: ReplayEffects, thinking: dict[str, str]) -> None:
    """Tell models that read a script per agent where each agent was (``seek``)."""
    for (model_name, agent_id), calls in effects.model_calls.items():
        seek = getattr(world.models.get(model_name), "seek", None)
        if callable(seek):
            seek(agent_id, calls - 1 if thinking.get(agent_id) == model_name else calls)
