"""Agent transitions shared by the systems: turns start, end, fail, resume, get cancelled.

Every change of an agent's status or turn goes through here, so the invariants hold in one
place: a terminal agent is never revived; a paused agent keeps PAUSED (the status it would
have goes to ``paused_from``); every change is ``touch``ed for the digest; history changes
go through ``add_history``, which keeps the history's hash foldable (see ``history_hash``).
"""

from __future__ import annotations

import inspect
import json
import logging
import math
from collections import deque
from typing import Any

import esper

from components import (
    Agent,
    AgentSpec,
    Entry,
    History,
    InteractionKind,
    Phase,
    Status,
    StatusKind,
    ToolResult,
    TurnState,
    WaitReason,
)
from runtime.cancel import CancelToken, InterruptHandle
from runtime.world import sigint
from runtime.world.actions import HistoryView, Turn
from runtime.world.state import AgentRecord, PendingBatch, WorldState

__all__ = [
    "CANCELLED_CALL",
    "abandon_turn",
    "add_history",
    "await_children",
    "create_agent",
    "derive_status",
    "end_turn",
    "fail",
    "finish",
    "mint",
    "record_tool_results",
    "resume_with",
    "set_active",
    "start_turn",
    "turn_token",
]

log = logging.getLogger("tickwork.lifecycle")

_PROMPT_REASONS = (WaitReason.USER_PROMPT, WaitReason.TOOL_APPROVAL)

CANCELLED_CALL = "cancelled before completion"
"""The result of a tool call whose agent was cancelled before the call had one."""


def as_text(value: Any) -> str:
    """A message or output as history text: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    # Scalars the way the JSON encoder writes them, without running it (a tool's output
    # is often a number); the encoder itself is made once (see `_TEXT`).
    kind = type(value)
    if kind is int and -_INT_TEXT < value < _INT_TEXT:
        return int.__repr__(value)
    if kind is float and math.isfinite(value):
        return float.__repr__(value)
    if kind is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    try:
        return _TEXT.encode(value)
    except (TypeError, ValueError, RecursionError):
        return _unencodable(value)


_INT_TEXT = 10**4300  # CPython's int -> str limit: beyond it even repr() raises


def _unencodable(value: Any) -> str:
    # Only values that never passed the lane's boundary get here (a host posting raw
    # outcomes); the text must not raise in turn (str() of a 5,000-digit int does).
    if isinstance(value, int):
        return f"<int of {value.bit_length()} bits>"
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__}>"


# What `json.dumps(value, sort_keys=True, default=str)` uses, made once instead of per call.
_TEXT = json.JSONEncoder(sort_keys=True, default=str)


def add_history(state: WorldState, rec: AgentRecord, role: str, content: str) -> None:
    """Append an entry to the agent's history.

    The history's hash is not updated here: ``runtime.world.digest.history_hash`` folds the new
    entries in when a digest needs it. A world that tracks no digests (the default) then
    never pays for canonical JSON and blake2b per entry on the hot path.
    """
    rec.history.entries.append(Entry(role, content))
    state.touch(rec)


def record_tool_results(
    state: WorldState, rec: AgentRecord, pending: PendingBatch
) -> list[ToolResult]:
    """Write one history entry per call of ``pending`` (in call order) and return the results."""
    results = pending.final()
    for call, result in zip(pending.calls, results, strict=True):
        text = as_text(result.output) if result.ok else f"error: {result.error}"
        add_history(state, rec, "tool", f"{call.name}[{call.id}]: {text}")
    return results


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
    spec = AgentSpec(behavior, interactive)
    status = Status(StatusKind.IDLE)
    turn = TurnState()
    history = History()
    entity = esper.create_entity(agent, spec, status, turn, history, *components)
    rec = AgentRecord(state.next_ordinal, entity, agent, spec, status, turn, history, fn)
    state.next_ordinal += 1
    state.records[agent_id] = rec
    if components:
        state.host.attach(entity, esper._entities[entity], rec)
    state.created.append(agent_id)
    state.touch(rec)
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


def set_active(rec: AgentRecord) -> None:
    """Make the agent ACTIVE, or WAITING if it has open prompts (kept if paused/terminal)."""
    status = rec.status
    if status.kind.is_terminal:
        return
    kind, reason = StatusKind.ACTIVE, None
    if rec.prompts:
        kind, reason = StatusKind.WAITING, _prompt_reason(rec)
    if status.kind is StatusKind.PAUSED:
        rec.paused_from = kind
        return
    status.kind, status.reason, status.message = kind, reason, ""


def derive_status(rec: AgentRecord) -> None:
    """Set a live, unpaused agent's status from its turn: IDLE between turns, WAITING on
    children while joining, else ACTIVE (or WAITING on its open prompts)."""
    phase = rec.turn.phase
    if phase is Phase.DONE:
        _set_idle(rec)
    elif phase is Phase.AWAITING_CHILDREN:
        _set_waiting_on_children(rec)
    else:
        set_active(rec)


def _set_waiting_on_children(rec: AgentRecord) -> None:
    if rec.status.kind is StatusKind.PAUSED:
        rec.paused_from = StatusKind.WAITING
    elif not rec.status.kind.is_terminal:
        rec.status.kind, rec.status.reason = StatusKind.WAITING, WaitReason.CHILDREN


def _prompt_reason(rec: AgentRecord) -> WaitReason:
    assert rec.prompts
    if InteractionKind.TOOL_APPROVAL in rec.prompts.values():
        return WaitReason.TOOL_APPROVAL
    return WaitReason.USER_PROMPT


def reflect(rec: AgentRecord) -> bool:
    """Mirror the agent's open prompts into its status; returns whether it changed.

    The truth table: an open prompt flips ACTIVE to WAITING; no open prompt flips a
    prompt-WAITING back to ACTIVE; a paused or terminal agent is never flipped.
    """
    status = rec.status
    kind = status.kind
    if kind.is_terminal or kind is StatusKind.PAUSED:
        return False
    if rec.prompts:
        waiting_on_prompt = kind is StatusKind.WAITING and status.reason in _PROMPT_REASONS
        if kind is StatusKind.ACTIVE or waiting_on_prompt:
            reason = _prompt_reason(rec)
            if kind is StatusKind.WAITING and status.reason is reason:
                return False
            status.kind, status.reason = StatusKind.WAITING, reason
            return True
        return False
    if kind is StatusKind.WAITING and status.reason in _PROMPT_REASONS:
        status.kind, status.reason = StatusKind.ACTIVE, None
        return True
    return False


def _set_idle(rec: AgentRecord) -> None:
    if rec.status.kind is StatusKind.PAUSED:
        rec.paused_from = StatusKind.IDLE
    else:
        rec.status.kind, rec.status.reason, rec.status.message = StatusKind.IDLE, None, ""


def start_turn(state: WorldState, rec: AgentRecord, message: Any) -> None:
    """Start a new turn of the agent's behaviour on ``message``."""
    turn = rec.turn
    turn.generation += 1
    turn.counter = 0
    turn.inflight = None
    turn.deadline = None
    turn.pending = None
    turn.send_value = None
    if rec.handle is not None:
        # A fresh token per turn: an interrupt that landed while idle must not eat this one.
        rec.handle.rearm()
    probe = state.probe
    if probe is not None:
        probe.turn_started(rec)
    if message is not None:
        add_history(state, rec, "user", as_text(message))
    view = HistoryView(rec.history.entries)
    try:
        gen = rec.fn(Turn(rec.id, message, view, turn.generation, state, rec))
    except BaseException as exc:  # rule: whatever a behaviour raises fails that agent only
        fail(state, rec, exc)
        return
    state.touch(rec)
    if not inspect.isgenerator(gen):
        # A plain function is a behaviour whose turn ends at once with its return value.
        end_turn(state, rec, gen)
        return
    turn.behavior = gen
    turn.phase = Phase.READY
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
    finish(state, rec, StatusKind.ERROR, f"{where}: {text}" if where else text)


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
    turn.phase = Phase.DONE
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
    _clear_turn(state, rec, "ok")
    rec.result = value
    if rec.mailbox:
        start_turn(state, rec, rec.mailbox.popleft())
    elif rec.spec.interactive:
        _set_idle(rec)
    else:
        finish(state, rec, StatusKind.COMPLETE, "")


def abandon_turn(state: WorldState, rec: AgentRecord) -> None:
    """Drop the current turn (an interrupt); the agent waits for its next input."""
    _clear_turn(state, rec, "interrupted")
    if rec.mailbox:
        start_turn(state, rec, rec.mailbox.popleft())
    else:
        _set_idle(rec)


def queue_message(state: WorldState, rec: AgentRecord, message: Any) -> None:
    """Start a turn on ``message`` now if the agent is between turns, else queue it."""
    if rec.turn.phase is Phase.DONE:
        start_turn(state, rec, message)
        return
    if rec.mailbox is None:
        rec.mailbox = deque()
    rec.mailbox.append(message)
    state.touch(rec)


def finish(state: WorldState, rec: AgentRecord, kind: StatusKind, message: str) -> None:
    """End the agent for good with a terminal ``kind``; its work is aborted next.

    A tool batch still in progress is closed first: every call without a result gets an
    error result in history (rule: every tool call gets exactly one result on every path).
    """
    assert kind.is_terminal
    if rec.status.kind.is_terminal:
        return  # rule: a terminal agent is never revived, nor re-terminated
    pending = rec.turn.pending
    if isinstance(pending, PendingBatch):
        error = CANCELLED_CALL if kind is StatusKind.CANCELLED else f"agent ended: {message}"
        for call in pending.calls:
            if call.id not in pending.results:
                pending.results[call.id] = ToolResult(call.id, error=error)
        record_tool_results(state, rec, pending)
    _clear_turn(state, rec, kind.value, message)
    rec.paused_from = None
    rec.status.kind, rec.status.reason, rec.status.message = kind, None, message
    # A finished agent keeps no generator (closed above), rng or mailbox; its handle (and
    # the turn's token) goes once AbortTerminalWork has fired it.
    rec.rng = None
    rec.mailbox = None
    state.to_abort.append(rec)
    if state.keep_finished is not None:
        _queue_release(state, rec)
    for parent in state.joiners.pop(rec.id, ()):
        check_join(state, parent)


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
    turn.phase = Phase.READY
    turn.inflight = None
    turn.pending = None
    turn.deadline = None
    state.lane_waiting.pop(rec.ordinal, None)
    state.make_ready(rec)
    set_active(rec)
    state.touch(rec)


def await_children(state: WorldState, rec: AgentRecord, agent_ids: tuple[str, ...]) -> None:
    """Park the turn until every agent in ``agent_ids`` has ended (a ``Join``)."""
    turn = rec.turn
    turn.phase = Phase.AWAITING_CHILDREN
    turn.pending = agent_ids
    for agent_id in agent_ids:
        if not state.records[agent_id].status.kind.is_terminal:
            state.joiners.setdefault(agent_id, []).append(rec)
    _set_waiting_on_children(rec)
    state.touch(rec)
    check_join(state, rec)


def check_join(state: WorldState, rec: AgentRecord) -> None:
    """Resume a joining agent if every agent it joins has ended."""
    turn = rec.turn
    if turn.phase is not Phase.AWAITING_CHILDREN:
        return
    ids: tuple[str, ...] = turn.pending
    results = []
    for agent_id in ids:
        other = state.records[agent_id]
        if not other.status.kind.is_terminal:
            return
        ok = other.status.kind is StatusKind.COMPLETE
        results.append(other.result if ok else None)
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
    """The current turn's cancel token (the interrupt handle is made on first use)."""
    if rec.handle is None:
        rec.handle = InterruptHandle()
    return rec.handle.token()
