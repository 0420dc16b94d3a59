"""Agent transitions: turns start, end, fail, resume, get cancelled; agents are created.

Every change of an agent's turn goes through here, so the invariants hold in one place: a
terminal agent is never revived; a paused agent keeps PAUSED (the status it would have goes
to ``paused_from``, see `systems.lifecycle.status`); every change is ``touch``ed for the
digest; history changes go through ``add_history`` (`systems.lifecycle.history`), which
keeps the history's hash foldable (see ``history_hash``).
"""

from __future__ import annotations

import inspect
import logging
import types
from collections import deque
from typing import Any

import esper

from components import (
    Agent,
    AgentSpec,
    History,
    Status,
    StatusKind,
    ToolResult,
    TurnState,
)
from components._members import (
    ACTIVE,
    AWAITING_CHILDREN,
    CANCELLED,
    COMPLETE,
    DONE,
    ERROR,
    IDLE,
    READY,
    WAITING,
)
from runtime.cancel import CancelToken
from runtime.world import sigint
from runtime.world.actions import Turn
from runtime.world.state import AgentRecord, Hold, PendingBatch, WorldState

from .history import add_history, as_text, record_tool_results
from .status import set_active, set_idle, set_waiting_on_children

__all__ = [
    "CANCELLED_CALL",
    "abandon_turn",
    "await_children",
    "check_join",
    "create_agent",
    "describe",
    "end_turn",
    "fail",
    "finish",
    "mint",
    "queue_message",
    "resume_with",
    "start_turn",
    "turn_token",
]

log = logging.getLogger("tickwork.lifecycle")

CANCELLED_CALL = "cancelled before completion"
"""The result of a tool call whose agent was cancelled before the call had one."""


def create_agent(
    state: WorldState,
    agent_id: str,
    behavior: str,
    message: Any,
    *,
    name: str = "",
    interactive: bool = False,
    parent: str | None = None,
    components: tuple[Any, ...] = (),
) -> AgentRecord:
    """Create the agent's entity and record; start its first turn unless it waits for one.

    ``components`` are the host's own, put on the entity with the agent's.

    Raises:
        BehaviorNotFound: ``behavior`` does not resolve.
        ConfigError: a host component's type cannot be found (a journal's).
    """
    fn = state.behaviors.resolve(behavior)
    if components:
        components = tuple(state.host.resolve(c) for c in components)
    agent = Agent(agent_id, name, parent)
    spec = state.specs.get((behavior, interactive))
    if spec is None:
        spec = state.specs[behavior, interactive] = AgentSpec(behavior, interactive)
    status = Status(IDLE)
    turn = TurnState()
    history = History()
    entity = esper.create_entity(agent, spec, status, turn, history, *components)
    # The entity id is the ordinal: esper hands them out in creation order and never
    # again, so it orders agents as a spawn counter would, and one int serves both (a
    # second int per agent cost 32 B).
    rec = AgentRecord(entity, esper._entities[entity], fn)
    state.next_ordinal += 1
    with state.ids_lock:  # other threads read the ids under it (World.agents)
        state.records[agent_id] = rec
    if components:
        state.host.attach(entity, esper._entities[entity], rec)
    state.created.append(agent_id)
    state.dirty[entity] = rec  # `touch`, inlined
    state.changed_this_tick += 1
    if parent is not None:
        parent_rec = state.records.get(parent)
        if parent_rec is not None:
            if parent_rec.children is None:
                parent_rec.children = []
            parent_rec.children.append(agent_id)
            state.touch(parent_rec)
    if message is not None or not interactive:
        start_turn(state, rec, message)
    return rec


def start_turn(state: WorldState, rec: AgentRecord, message: Any) -> None:
    """Start a new turn of the agent's behaviour on ``message``."""
    turn = rec.turn
    turn.generation += 1
    turn.counter = 0
    turn.inflight = None
    turn.deadline = None
    turn.pending = None
    turn.send_value = None
    # A fresh token per turn (made when the turn first hands out work): an interrupt that
    # landed while idle must not eat this one.
    rec.token = None
    probe = state.probe
    if probe is not None:
        probe.turn_started(rec)
    if message is not None:
        add_history(state, rec, "user", as_text(message, state.journal_format))
    try:
        # No HistoryView yet: the Turn makes it from the record on first read (40 B an
        # agent that never reads its history).
        gen = rec.fn(Turn(rec.id, message, None, turn.generation, state, rec))
    except BaseException as exc:  # rule: whatever a behaviour raises fails that agent only
        fail(state, rec, exc)
        return
    state.dirty[rec.ordinal] = rec  # `touch`, inlined
    state.changed_this_tick += 1
    if gen.__class__ is not _GENERATOR and not inspect.isgenerator(gen):
        # A plain function is a behaviour whose turn ends at once with its return value.
        end_turn(state, rec, gen)
        return
    turn.behavior = gen
    turn.phase = READY
    status = rec.status
    kind = status.kind
    if (kind is IDLE or kind is ACTIVE) and not rec.prompts:
        # `make_ready` and `set_active` of an agent neither paused nor terminal with no
        # prompt open (every new agent's first turn): to `ready`, and ACTIVE.
        state.ready[rec.ordinal] = rec
        status.kind, status.reason, status.message = ACTIVE, None, ""
    else:
        state.make_ready(rec)
        set_active(rec)


def fail(state: WorldState, rec: AgentRecord, exc: BaseException, where: str = "") -> None:
    """End the agent in ERROR for ``exc``, whatever it is (``SystemExit``, a stray
    ``Cancelled`` and ``KeyboardInterrupt`` included): one agent's failure never strands
    the agents after it in the tick, nor kills the tick thread. A ``KeyboardInterrupt``
    on the main thread is raised again once the tick is over (`runtime.world.sigint`)."""
    if isinstance(exc, KeyboardInterrupt):
        sigint.note_keyboard_interrupt()
    text = describe(exc)
    finish(state, rec, ERROR, f"{where}: {text}" if where else text)


def describe(exc: BaseException) -> str:
    """``Type: message`` of an exception, for an agent's ERROR status."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _close(rec: AgentRecord) -> None:
    gen = rec.turn.behavior
    rec.turn.behavior = None
    if gen is not None:
        try:
            gen.close()
        except BaseException:  # SystemExit in a `finally:` of the behaviour, say
            log.exception("behaviour of agent %s raised while being closed", rec.id)


def _clear_turn(state: WorldState, rec: AgentRecord, outcome: str, message: str = "") -> None:
    turn = rec.turn
    probe = state.probe
    if probe is not None:
        probe.turn_ended(rec, outcome, message)
    _close(rec)
    pending = turn.pending
    if pending is not None and isinstance(pending, Hold):
        pending.cut(state)  # a resource's slot or place in its queue: given up
    turn.phase = DONE
    turn.inflight = None
    turn.deadline = None
    turn.pending = None
    turn.send_value = None
    rec.sleep_seq = 0
    rec.holding = None  # outcomes held while paused belong to this turn: stale now
    state.ready.pop(rec.ordinal, None)
    state.held.pop(rec.ordinal, None)
    state.lane_waiting.pop(rec.ordinal, None)
    state.touch(rec)


def end_turn(state: WorldState, rec: AgentRecord, value: Any) -> None:
    """The behaviour returned ``value``: the turn ends.

    A queued message starts the next turn; otherwise an interactive agent goes IDLE and
    any other becomes COMPLETE with ``value``.
    """
    if rec._extras is None and state.probe is None and rec.turn.pending is None:
        _end_plain(state, rec, value)
    else:
        _end_whole(state, rec, value)


def _end_whole(state: WorldState, rec: AgentRecord, value: Any) -> None:
    """`end_turn` of any agent, step by step (`_end_plain` is its commonest case)."""
    _clear_turn(state, rec, "ok")
    rec.result = value
    if rec.mailbox:
        start_turn(state, rec, rec.mailbox.popleft())
    elif rec.spec.interactive:
        set_idle(rec)
    else:
        finish(state, rec, COMPLETE, "", turn_over=True)


def _end_plain(state: WorldState, rec: AgentRecord, value: Any) -> None:
    """`end_turn` of the commonest ending, inlined (~2x cheaper: an agent's end is every
    wake-up of a run where each agent sleeps once): no probe to tell, no tool batch in
    progress, and none of the record's rare fields ever set (no mailbox, rng, pause,
    held outcomes or children), so `_clear_turn` and `finish` reduce to these stores."""
    turn = rec.turn
    gen = turn.behavior
    turn.behavior = None
    if gen is not None:
        try:
            gen.close()
        except BaseException:  # as in `_close`
            log.exception("behaviour of agent %s raised while being closed", rec.id)
    turn.phase = DONE
    turn.inflight = turn.deadline = turn.send_value = None  # `pending` is None already
    rec.sleep_seq = 0
    ordinal = rec.ordinal
    state.ready.pop(ordinal, None)
    state.held.pop(ordinal, None)
    state.lane_waiting.pop(ordinal, None)
    state.dirty[ordinal] = rec  # `touch`, inlined
    state.changed_this_tick += 1
    rec.result = value
    if rec._comps[AgentSpec].interactive:
        set_idle(rec)
        return
    status = rec.status
    kind = status.kind
    if kind is COMPLETE or kind is ERROR or kind is CANCELLED:
        return  # as `finish`: a terminal agent is never re-terminated
    status.kind, status.reason, status.message = COMPLETE, None, ""
    state.to_abort.append(rec)
    if state.keep_finished is not None:
        _queue_release(state, rec)
    joined = state.joiners.pop(rec.id, None)
    if joined:
        for parent in joined:
            check_join(state, parent)


_GENERATOR = types.GeneratorType


def abandon_turn(state: WorldState, rec: AgentRecord) -> None:
    """Drop the current turn (an interrupt); the agent waits for its next input."""
    _clear_turn(state, rec, "interrupted")
    if rec.mailbox:
        start_turn(state, rec, rec.mailbox.popleft())
    else:
        set_idle(rec)


def queue_message(state: WorldState, rec: AgentRecord, message: Any) -> None:
    """Start a turn on ``message`` now if the agent is between turns, else queue it."""
    if rec.turn.phase is DONE:
        start_turn(state, rec, message)
        return
    if rec.mailbox is None:
        rec.mailbox = deque()
    rec.mailbox.append(message)
    state.touch(rec)


def finish(
    state: WorldState, rec: AgentRecord, kind: StatusKind, message: str, *, turn_over: bool = False
) -> None:
    """End the agent for good with a terminal ``kind``; its work is aborted next.

    A tool batch still in progress is closed first: every call without a result gets an
    error result in history (rule: every tool call gets exactly one result on every path).
    ``turn_over``: the turn was just cleared (`end_turn`), so it is not cleared again.
    """
    assert kind is COMPLETE or kind is ERROR or kind is CANCELLED  # `is_terminal`
    was = rec.status.kind
    if was is COMPLETE or was is ERROR or was is CANCELLED:
        return  # rule: a terminal agent is never revived, nor re-terminated
    pending = rec.turn.pending
    if isinstance(pending, PendingBatch):
        error = CANCELLED_CALL if kind is CANCELLED else f"agent ended: {message}"
        for call in pending.calls:
            if call.id not in pending.results:
                pending.results[call.id] = ToolResult(call.id, error=error)
        record_tool_results(state, rec, pending)
    if not turn_over:
        _clear_turn(state, rec, kind.value, message)
    rec.status.kind, rec.status.reason, rec.status.message = kind, None, message
    # A finished agent keeps no generator (closed above), rng, mailbox or paused status;
    # its handle (and the turn's token) goes once AbortTerminalWork has fired it.
    rec.drop_ended_extras()
    state.to_abort.append(rec)
    if state.keep_finished is not None:
        _queue_release(state, rec)
    for parent in state.joiners.pop(rec.id, ()):
        check_join(state, parent)


def nothing_to_abort(queue: list[AgentRecord]) -> bool:
    """Whether `AbortTerminalWork` would do nothing for ``queue`` (what `finish` queued) but
    clear it: no agent in it has an interrupt handle to fire, a prompt open or children to
    cancel. Kept beside `finish`: what it checks is what that system acts on."""
    cancelled = CANCELLED
    for rec in queue:
        if rec.token is not None or rec.prompts:
            return False
        if rec.status.kind is cancelled and rec.children:  # (`children`: a property)
            return False
    return True


def _queue_release(state: WorldState, rec: AgentRecord) -> None:
    """Queue ``rec`` for release once its parent has finished too, and its finished
    children with it (they waited for this parent: a live parent may still Join them)."""
    released = state.finished
    for child_id in rec.children or ():
        child = state.records.get(child_id)
        if child is not None and child.status.kind.is_terminal:
            released.append(child)
    parent = None if rec.agent.parent is None else state.records.get(rec.agent.parent)
    if parent is None or parent.status.kind.is_terminal:
        released.append(rec)


def resume_with(state: WorldState, rec: AgentRecord, value: Any) -> None:
    """What the turn awaited has arrived: step the behaviour with ``value`` next."""
    turn = rec.turn
    turn.send_value = value
    turn.phase = READY
    turn.inflight = turn.pending = turn.deadline = None
    rec.sleep_seq = 0  # no sleep of this turn is live now (see WorldState.sleep_buckets)
    ordinal = rec.ordinal
    state.lane_waiting.pop(ordinal, None)
    status = rec.status
    kind = status.kind
    if (kind is ACTIVE or kind is WAITING) and not rec.prompts:
        # `make_ready` and `set_active` of an agent neither paused nor terminal with no
        # prompt open (a model reply, a tool batch, the answer to its own prompt: every
        # resumption of a plain turn): it goes to `ready` and is ACTIVE.
        state.ready[ordinal] = rec
        status.kind, status.reason, status.message = ACTIVE, None, ""
    else:
        state.make_ready(rec)
        set_active(rec)
    state.dirty[ordinal] = rec  # `touch`, inlined
    state.changed_this_tick += 1


def await_children(state: WorldState, rec: AgentRecord, agent_ids: tuple[str, ...]) -> None:
    """Park the turn until every agent in ``agent_ids`` has ended (a ``Join``)."""
    turn = rec.turn
    turn.phase = AWAITING_CHILDREN
    turn.pending = agent_ids
    for agent_id in agent_ids:
        if not state.records[agent_id].status.kind.is_terminal:
            state.joiners.setdefault(agent_id, []).append(rec)
    set_waiting_on_children(rec)
    state.touch(rec)
    state.join_scan.pop(rec.ordinal, None)  # a new join scans from its first agent
    check_join(state, rec)


def check_join(state: WorldState, rec: AgentRecord) -> None:
    """Resume a joining agent if every agent it joins has ended.

    Called as each joined agent ends; the scan goes on from the first agent not seen
    ended last time (agents never come back from ending), so a join of N agents costs
    O(N) in all. A joined agent released meanwhile (`forget`, ``keep_finished``) has
    ended: its result is None, as a failed one's (its record was looked up and raised).
    """
    turn = rec.turn
    if turn.phase is not AWAITING_CHILDREN:
        return
    ids: tuple[str, ...] = turn.pending
    records = state.records
    scan = state.join_scan
    for index in range(scan.get(rec.ordinal, 0), len(ids)):
        other = records.get(ids[index])
        if other is not None and not other.status.kind.is_terminal:
            scan[rec.ordinal] = index
            return
    scan.pop(rec.ordinal, None)
    results = []
    for agent_id in ids:
        other = records.get(agent_id)
        ok = other is not None and other.status.kind is COMPLETE
        results.append(other.result if ok else None)  # type: ignore[union-attr]
    resume_with(state, rec, results)


def mint(rec: AgentRecord, kind: str) -> str:
    """A new id for work of the agent's current turn: ``<agent>/t<turn>/<kind><n>``.

    Deterministic (replay mints the same ids) and unlike the hub's own minted ids
    (``<agent>-<kind>-<n>``), so the two never clash.
    """
    turn = rec.turn
    turn.counter += 1
    return f"{rec.id}/t{turn.generation}/{kind}{turn.counter}"


def turn_token(rec: AgentRecord) -> CancelToken:
    """The current turn's cancel token, made on first use."""
    token = rec.token
    if token is None:
        token = rec.token = CancelToken()
    return token
