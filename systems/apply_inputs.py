"""ApplyInputs: apply this tick's control commands; set outcomes aside for CollectOutcomes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import esper

from components import StatusKind
from runtime.world.inputs import (
    AddEntity,
    CancelAgent,
    ForgetAgent,
    InterruptAgent,
    PauseAgent,
    ResumeAgent,
    SendMessage,
    SpawnAgent,
)
from runtime.world.state import AgentRecord, WorldState

from .lifecycle import create_agent, derive_status, fail, finish, queue_message

__all__ = ["ApplyInputs", "subtree"]

log = logging.getLogger("tickwork.host")


class ApplyInputs(esper.Processor):
    """Applies spawns, messages, pauses, resumes, cancels and notes interrupts, in sequence
    order. Outcomes (tool, model, prompt events) are only set aside: they are matched to
    turns after interrupts and cancels of this same tick are known."""

    def process(self, state: WorldState) -> None:
        outcomes = state.outcomes
        inputs = state.inputs
        if state.forgets_at_once:  # a replay's: they were released before the live tick
            _forget_at_once(state, inputs)
        for seq, item in inputs:
            cls = type(item)
            if cls is SpawnAgent:
                self._spawn(state, item)  # type: ignore[arg-type]
                continue
            if cls is AddEntity:
                try:
                    state.host.add_entity(item.entity, item.components)  # type: ignore[attr-defined]
                except Exception:  # no agent to fail: the tick's other inputs go on
                    log.exception("ApplyInputs: host entity %r was not added", item.entity)  # type: ignore[attr-defined]
                continue
            handler = _COMMANDS.get(cls)
            if handler is None:
                outcomes.append((seq, item))
                continue
            rec = state.records.get(item.agent_id)  # type: ignore[attr-defined]
            if rec is None:
                continue  # unknown id: refused at the call; nothing to apply
            try:
                handler(state, rec, item)
            except BaseException as exc:  # fails this agent only, whatever it is
                fail(state, rec, exc, "ApplyInputs")

    @staticmethod
    def _spawn(state: WorldState, item: SpawnAgent) -> None:
        if item.agent_id in state.records:
            return
        create_agent(
            state,
            item.agent_id,
            item.behavior,
            item.message,
            name=item.name,
            interactive=item.interactive,
            components=item.components,
        )


def _send(state: WorldState, rec: AgentRecord, item: SendMessage) -> None:
    if not rec.status.kind.is_terminal:
        queue_message(state, rec, item.message)


def _pause(state: WorldState, rec: AgentRecord, item: PauseAgent) -> None:
    # Pause reaches the whole subtree, as cancel does: a parent's children are paused too.
    for agent in subtree(state, rec):
        _pause_one(state, agent)


def _pause_one(state: WorldState, rec: AgentRecord) -> None:
    status = rec.status
    if status.kind.is_terminal or status.kind is StatusKind.PAUSED:
        return
    rec.paused_from = status.kind
    status.kind, status.reason, status.message = StatusKind.PAUSED, None, ""
    waiting_to_step = state.ready.pop(rec.ordinal, None)
    if waiting_to_step is not None:
        state.held[rec.ordinal] = waiting_to_step  # keeps `ready` free of paused agents
    state.touch(rec)


def _resume(state: WorldState, rec: AgentRecord, item: ResumeAgent) -> None:
    # Resume undoes pause: a finished agent's pause paused its live subtree, and so its
    # resume resumes it (journal format 3; format 2 resumed only a paused agent's).
    kind = rec.status.kind
    if kind is not StatusKind.PAUSED and not (kind.is_terminal and state.journal_format >= 3):
        return
    for agent in subtree(state, rec):
        _resume_one(state, agent)


def _resume_one(state: WorldState, rec: AgentRecord) -> None:
    if rec.status.kind is not StatusKind.PAUSED:
        return
    rec.paused_from = None
    rec.status.kind = StatusKind.IDLE  # no longer PAUSED, so derive_status may write it
    derive_status(rec)
    held = state.held.pop(rec.ordinal, None)
    if held is not None:
        state.ready[rec.ordinal] = held  # apply what landed while paused
    if rec.holding:
        # Outcomes held whole while paused: CollectOutcomes applies them later this tick,
        # in the order they arrived.
        state.outcomes.extend(rec.holding)
    rec.holding = None
    state.touch(rec)


def subtree(state: WorldState, rec: AgentRecord) -> list[AgentRecord]:
    """``rec`` and its descendants that still have records, parents before children (from
    journal format 3 also those below an agent released since: `WorldState.cut_off`)."""
    found = [rec]
    index = 0
    while index < len(found):
        children = found[index].children
        index += 1
        for child_id in children or ():
            child = state.records.get(child_id)
            if child is not None:
                found.append(child)
    if state.released_up and state.journal_format >= 3:
        found.extend(state.cut_off(rec))
    return found


def _cancel(state: WorldState, rec: AgentRecord, item: CancelAgent) -> None:
    finish(state, rec, StatusKind.CANCELLED, item.reason)


def _interrupt(state: WorldState, rec: AgentRecord, item: InterruptAgent) -> None:
    state.to_interrupt.append(rec)
    if item.partial is not None:
        state.partials[rec.id] = (item.ref, item.partial)


def _forget(state: WorldState, rec: AgentRecord, item: ForgetAgent) -> None:
    if rec.status.kind.is_terminal and not item.at_once:  # refused at the call otherwise
        state.to_forget.append(rec)  # released at the tick's end, live and replayed


def _forget_at_once(state: WorldState, inputs: list[tuple[int, object]]) -> None:
    """Release the agents the live run released at the `forget` call, between ticks: before
    any input of this tick is applied, earlier ones included (a pause queued before the
    `forget` found the agent gone live, and paused its children in the replay only)."""
    release = None if state.release_now is None else state.release_now()
    for _seq, item in inputs:
        if item.__class__ is ForgetAgent and item.at_once:
            rec = state.records.get(item.agent_id)
            if rec is not None and rec.status.kind.is_terminal and release is not None:
                release(rec)


_COMMANDS: dict[type, Callable[[WorldState, AgentRecord, Any], None]] = {
    SendMessage: _send,
    PauseAgent: _pause,
    ResumeAgent: _resume,
    CancelAgent: _cancel,
    InterruptAgent: _interrupt,
    ForgetAgent: _forget,
}
