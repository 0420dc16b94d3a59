"""StepBehaviors: advance every agent that has something to do by one action."""

from __future__ import annotations

from typing import Any

import esper

from components._members import AWAITING_CHILDREN, ERROR, READY, SLEEPING
from runtime.errors import JoinCycleError, UnknownAgentError
from runtime.lane.values import shown
from runtime.world.actions import Ask, CallTools, Join, Sleep, Spawn, Think
from runtime.world.state import AgentRecord, Throw, WorldState

from .lifecycle import await_children, create_agent, end_turn, fail, finish, resume_with

__all__ = ["StepBehaviors", "fail_step", "join_cycle", "step_one", "step_ready", "take_action"]

_WORK = (Think, CallTools, Ask)


class StepBehaviors(esper.Processor):
    """Runs after outcomes are collected, so an agent whose result arrived this tick steps
    this tick. Touches only the ready set (plus sleepers now due), in spawn order."""

    def process(self, state: WorldState) -> None:
        if state.sleepers and state.sleepers[0] <= state.now:
            state.wake_sleepers()
        if state.ready:
            step_ready(state)


def step_ready(state: WorldState) -> None:  # noqa: PLR0915 - the inner loop
    """Step every agent in ``state.ready`` by one action, in order; what becomes ready
    for the next tick is the new ``state.ready``."""
    ready = state.ready
    state.ready = next_ready = {}
    action: Any = None  # bound for `fail_step` however early an agent's step fails
    now = state.now
    dirty = state.dirty
    buckets = state.sleep_buckets
    add_sleeper = state.add_sleeper
    ready_phase, sleeping = READY, SLEEPING  # locals: read per agent in the loop
    throw = Throw
    to_dispatch = state.to_dispatch
    # Everything looked at here may change; one C-level update marks the whole batch
    # for the digest instead of one dict store per agent.
    dirty.update(ready)
    skipped = 0
    # The inner loop of the runtime: kept flat and in one function on purpose, since
    # every attribute lookup here is paid once per agent per tick. It walks the ready
    # set in insertion order, not sorted: every insertion happens on the tick thread in
    # an order fixed by the inputs and their ticks, so a replay walks it in the same
    # order, and not sorting saves a list and a lookup per agent.
    # No pause check: a paused agent is never in `ready` (see WorldState.held).
    for ordinal, rec in ready.items():
        turn = rec.turn
        try:
            phase = turn.phase
            if phase is not ready_phase and phase is not sleeping:
                skipped += 1
                continue  # readiness went stale (interrupted, cancelled)
            value = turn.send_value
            try:
                if value is None:
                    action = turn.behavior.send(None)  # type: ignore[union-attr]
                else:
                    turn.send_value = None
                    gen = turn.behavior
                    assert gen is not None
                    action = gen.throw(value.error) if value.__class__ is throw else gen.send(value)
            except StopIteration as stop:
                end_turn(state, rec, stop.value)
                continue
            except BaseException as exc:  # SystemExit, a stray Cancelled: this agent's
                fail(state, rec, exc)
                continue
            if action.__class__ is Sleep:  # take_action's first case, inlined
                turn.phase = sleeping
                seconds = action._seconds
                if seconds <= 0:
                    turn.deadline = now
                    next_ready[ordinal] = rec
                elif not seconds > 0:  # NaN (neither <= 0 nor > 0): no deadline to pass
                    finish(state, rec, ERROR, "Sleep: `seconds` is NaN")
                else:  # finite, or infinite: sleeps until interrupted or cancelled
                    deadline = turn.deadline = now + seconds
                    bucket = buckets.get(deadline)
                    if bucket is None:
                        add_sleeper(rec, deadline)  # a new deadline: onto the heap
                    else:  # inlined add_sleeper: the common case, per agent
                        seq = state.sleep_seq = state.sleep_seq + 1
                        rec.sleep_seq = seq
                        bucket.append((seq, rec))
            elif action.__class__ in _WORK:  # take_action's second case, inlined
                turn.phase = ready_phase  # DispatchWork sets the awaiting phase
                to_dispatch.append((rec, action))
            else:
                take_action(state, rec, action, next_ready)
        except BaseException as exc:
            fail_step(state, rec, exc, action)
    stepped = len(ready) - skipped  # behaviours advanced (or ended) this tick
    state.stepped += stepped
    state.changed_this_tick += stepped


def step_one(state: WorldState) -> None:
    """``step_ready`` when ``state.ready`` holds exactly one agent (the settlement's tick,
    `runtime.world.tick`): the same step and the same counts, without the loop's set-up;
    the action goes to ``take_action``, but for a ``Sleep(0)`` (one more step next tick)."""
    ready = state.ready
    next_ready: dict[int, AgentRecord] = {}
    state.ready = next_ready
    ((ordinal, rec),) = ready.items()
    state.dirty[ordinal] = rec
    turn = rec.turn
    action: Any = None
    try:
        phase = turn.phase
        if phase is not READY and phase is not SLEEPING:
            return  # readiness went stale (interrupted, cancelled): nothing stepped
        value = turn.send_value
        try:
            if value is None:
                action = turn.behavior.send(None)  # type: ignore[union-attr]
            else:
                turn.send_value = None
                gen = turn.behavior
                assert gen is not None
                action = gen.throw(value.error) if value.__class__ is Throw else gen.send(value)
        except StopIteration as stop:
            end_turn(state, rec, stop.value)
        except BaseException as exc:  # SystemExit, a stray Cancelled: this agent's
            fail(state, rec, exc)
        else:
            if action.__class__ is Sleep and action._seconds <= 0:  # take_action's, inlined
                turn.phase = SLEEPING
                turn.deadline = state.now
                next_ready[ordinal] = rec
            else:
                take_action(state, rec, action, next_ready)
    except BaseException as exc:
        fail_step(state, rec, exc, action)
    state.stepped += 1
    state.changed_this_tick += 1


def fail_step(state: WorldState, rec: AgentRecord, exc: BaseException, action: Any) -> None:
    """End ``rec`` in ERROR for what taking its ``action`` raised (not its behaviour's own
    errors, which `fail` reports as they are). From journal format 4, a ``Sleep`` longer
    than a float can hold (``Sleep(10**400)``: its deadline overflows) fails it naming the
    action and the value, as a NaN one does; older formats wrote Python's error,
    ``StepBehaviors: OverflowError: int too large to convert to float``."""
    if (
        exc.__class__ is OverflowError
        and isinstance(action, Sleep)
        and state.journal_format >= 4
        and not _fits_a_float(action.seconds)
    ):
        finish(state, rec, ERROR, f"Sleep: `seconds` is too large: {shown(action.seconds)}")
    else:
        fail(state, rec, exc, "StepBehaviors")


def _fits_a_float(seconds: object) -> bool:
    try:
        float(seconds)  # type: ignore[arg-type]
    except OverflowError:
        return False
    except Exception:  # not a number a float is made of: not this error's cause
        return True
    return True


def take_action(
    state: WorldState, rec: AgentRecord, action: Any, next_ready: dict[int, AgentRecord]
) -> None:
    """Do what ``rec``'s behaviour just yielded, ``action``, at ``state.now``: park the
    turn on it, queue it for dispatch, or end the agent if it is not an action. Readiness
    for the next tick goes into ``next_ready``. The one place an action is read (the step
    loops inline its common ``Sleep`` case)."""
    turn = rec.turn
    cls = action.__class__
    if cls is Sleep:
        assert isinstance(action, Sleep)
        turn.phase = SLEEPING
        seconds = action._seconds
        if seconds <= 0:
            turn.deadline = state.now
            next_ready[rec.ordinal] = rec
        elif not seconds > 0:  # NaN (neither <= 0 nor > 0): no deadline to pass
            finish(state, rec, ERROR, "Sleep: `seconds` is NaN")
        else:  # finite, or infinite: sleeps until interrupted or cancelled
            deadline = turn.deadline = state.now + seconds
            state.add_sleeper(rec, deadline)
    elif cls in _WORK:
        turn.phase = READY  # DispatchWork sets the awaiting phase
        state.to_dispatch.append((rec, action))
    elif cls is Spawn:
        assert isinstance(action, Spawn)
        _spawn(state, rec, action)
    elif cls is Join:
        assert isinstance(action, Join)
        unknown = [a for a in action.agent_ids if a not in state.records]
        if unknown:
            error = UnknownAgentError(f"cannot join unknown agents {unknown}")
            resume_with(state, rec, Throw(error))
            return
        cycle = join_cycle(state, rec, action.agent_ids)
        if cycle is not None:
            resume_with(state, rec, Throw(_cycle_error(cycle)))
        else:
            await_children(state, rec, action.agent_ids)
    elif cls in state.step_actions:  # taken here and now (a format-2 resource's)
        state.step_actions[cls](state, rec, action)
    elif cls in state.host_actions:  # a host action: its handler runs in dispatch
        turn.phase = READY
        state.to_dispatch.append((rec, action))
    else:
        message = f"behaviour yielded {action!r}, which is not an action"
        finish(state, rec, ERROR, message)


def join_cycle(
    state: WorldState, rec: AgentRecord, agent_ids: tuple[str, ...]
) -> tuple[str, ...] | None:
    """The loop of joins that ``rec`` joining ``agent_ids`` would close, or None when the
    join can end: ``(rec.id,)`` for a join of itself, else ``rec.id`` then each agent in
    turn that would wait for the next, the last waiting for ``rec``.

    Before this join no agents wait in a loop (each join was checked so), so a loop it
    closes passes through ``rec``: the walk follows the agents among ``agent_ids`` through
    their own joins and looks for ``rec``. O(agents it reaches).
    """
    me = rec.id
    if me in agent_ids:
        return (me,)
    records = state.records
    reached_from: dict[str, str] = {}
    todo = []
    for agent_id in agent_ids:
        if agent_id not in reached_from:
            reached_from[agent_id] = me
            todo.append(agent_id)
    while todo:
        agent_id = todo.pop()
        other = records.get(agent_id)
        if (
            other is None
            or other.turn.phase is not AWAITING_CHILDREN
            or other.status.kind.is_terminal
        ):
            continue  # it waits for no one: the walk ends here
        for waited in other.turn.pending:
            if waited == me:
                path = [agent_id]
                while reached_from[path[-1]] != me:
                    path.append(reached_from[path[-1]])
                return (me, *reversed(path))
            if waited not in reached_from:
                reached_from[waited] = agent_id
                todo.append(waited)
    return None


def _cycle_error(cycle: tuple[str, ...]) -> JoinCycleError:
    if len(cycle) == 1:
        return JoinCycleError(f"agent {cycle[0]!r} cannot join itself", cycle)
    loop = " -> ".join((*cycle, cycle[0]))
    return JoinCycleError(
        f"agent {cycle[0]!r} cannot join {cycle[1]!r}: the join would wait for ever"
        f" ({loop}, each waiting for the next)",
        cycle,
    )


def _spawn(state: WorldState, rec: AgentRecord, action: Spawn) -> None:
    behavior = action.behavior
    name = behavior if isinstance(behavior, str) else state.behaviors.name_of(behavior)
    number = len(rec.children or ()) + 1
    child_id = f"{rec.id}.{number}"
    while child_id in state.records:  # only a raw SpawnAgent input can have taken it
        number += 1
        child_id = f"{rec.id}.{number}"
    create_agent(state, child_id, name, action.message, name=action.name, parent=rec.id)
    resume_with(state, rec, child_id)
