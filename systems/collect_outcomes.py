"""CollectOutcomes: hand finished work and prompt settlements to the turns awaiting them."""

from __future__ import annotations

from typing import Any

import esper

from components import (
    InteractionRequest,
    PromptOpened,
    PromptSettled,
    ToolResult,
    response_approved,
)
from components._members import (
    ACTIVE,
    APPROVAL_PROMPT,
    AWAITING_INPUT,
    AWAITING_TOOLS,
    CANCELLED,
    COMPLETE,
    ERROR,
    PAUSED,
    READY,
    THINKING,
    WAITING,
)
from runtime import errors
from runtime.lane.jobs import ToolOutcome
from runtime.models.base import ModelReply
from runtime.world.inputs import EffectFailed
from runtime.world.state import AgentRecord, PendingBatch, Throw, WorldState

from .dispatch_work import launch_tools
from .lifecycle import (
    add_history,
    as_text,
    fail,
    record_tool_results,
    resume_with,
)

__all__ = ["DENIED", "CollectOutcomes", "collect_one"]

DENIED = "denied by operator"


class CollectOutcomes(esper.Processor):
    """Runs after interrupts and cancels, so an outcome for a turn that was abandoned
    this tick is recognised as stale (its id no longer matches) and dropped. Also mirrors
    the hub's open set per agent from the prompt events, which is all ``reflect`` reads:
    mirroring costs O(changes) and replays without a live hub."""

    def process(self, state: WorldState) -> None:
        if not state.outcomes:
            return
        outcomes, state.outcomes = state.outcomes, []
        for seq, item in outcomes:
            rec = state.records.get(item.agent_id)  # type: ignore[attr-defined]
            if rec is None:
                continue  # a prompt a host opened for no agent of ours, say
            try:
                _collect(state, rec, seq, item)
            except BaseException as exc:  # fails this agent only, whatever it is
                fail(state, rec, exc, "CollectOutcomes")


def collect_one(state: WorldState, seq: int, item: Any) -> None:
    """What ``CollectOutcomes.process`` does when ``item`` (at ``seq``) is the tick's only
    outcome: the settlement's tick (`runtime.world.tick`). The same rules; the wake-up's
    case, an answer to the agent's own ``Ask`` while it waits on that prompt alone, is
    applied here without the general dispatch (``_collect``, ``drop_prompt``,
    ``_deliver_settlement``), in the same order and with the same changes."""
    rec = state.records.get(item.agent_id)
    if rec is None:
        return  # a prompt a host opened for no agent of ours, say
    try:
        if item.__class__ is PromptSettled:
            turn = rec.turn
            kind = rec.status.kind
            prompt = rec.prompts
            request_id = item.request_id
            if (
                (kind is WAITING or kind is ACTIVE)
                and turn.phase is AWAITING_INPUT
                and turn.pending is None
                and turn.inflight == request_id
                and item.kind is not APPROVAL_PROMPT
                and prompt.__class__ is InteractionRequest
                and prompt.id == request_id
            ):
                # drop_prompt (the one open prompt was this one), then touch.
                rec.prompts = None
                ordinal = rec.ordinal
                state.prompt_changed[ordinal] = rec
                dirty = state.dirty
                dirty[ordinal] = rec
                state.changed_this_tick += 1
                response = item.response
                add_history(state, rec, "user", response.value)
                # resume_with, for an agent neither paused nor terminal with no prompt open
                # now: make_ready puts it in `ready`, set_active makes it ACTIVE.
                turn.send_value = response
                turn.phase = READY
                turn.inflight = turn.pending = turn.deadline = None
                rec.sleep_seq = 0
                state.lane_waiting.pop(ordinal, None)
                state.ready[ordinal] = rec
                status = rec.status
                status.kind, status.reason, status.message = ACTIVE, None, ""
                dirty[ordinal] = rec
                state.changed_this_tick += 1
                return
        _collect(state, rec, seq, item)
    except BaseException as exc:  # fails this agent only, whatever it is
        fail(state, rec, exc, "CollectOutcomes")


def _hold(rec: AgentRecord, seq: int, item: object) -> None:
    """Keep what landed on a paused agent, whole, for ``resume`` to hand back."""
    if rec.holding is None:
        rec.holding = []
    rec.holding.append((seq, item))


def _collect(state: WorldState, rec: AgentRecord, seq: int, item: Any) -> None:
    cls = type(item)
    # Rule: what lands on a paused agent is held whole (history included) until resume.
    # The mirror of the hub's open set is not the agent's progress: it is kept current.
    kind = rec.status.kind
    paused = kind is PAUSED
    if cls is PromptOpened:
        if kind is COMPLETE or kind is ERROR or kind is CANCELLED:  # `is_terminal`
            # Opened before the agent ended but reported after AbortTerminalWork asked the
            # hub (a tool's prompt, or one opened the tick before): it has nobody to answer
            # it, so settle it now (rule: a cancelled run leaves no orphaned prompt).
            state.effects.cancel_prompt(item.request.id)
            return
        rec.add_prompt(item.request)
        state.prompt_changed[rec.ordinal] = rec
        state.dirty[rec.ordinal] = rec  # `touch`, inlined
        state.changed_this_tick += 1
    elif cls is PromptSettled:
        if rec.drop_prompt(item.request_id):
            state.prompt_changed[rec.ordinal] = rec
            state.dirty[rec.ordinal] = rec  # `touch`, inlined
            state.changed_this_tick += 1
        if paused:
            _hold(rec, seq, item)
        else:
            _deliver_settlement(state, rec, item)
    elif paused:
        _hold(rec, seq, item)
    elif cls is ToolOutcome:
        _deliver_outcome(state, rec, item)
    elif cls is EffectFailed:
        if rec.turn.inflight == item.ref and not rec.status.kind.is_terminal:
            error_type = getattr(errors, item.error_type, errors.TickworkError)
            resume_with(state, rec, Throw(error_type(item.error)))
        else:
            state.stale_dropped += 1


def _deliver_outcome(state: WorldState, rec: AgentRecord, outcome: ToolOutcome) -> None:
    turn = rec.turn
    kind = rec.status.kind
    if kind is COMPLETE or kind is ERROR or kind is CANCELLED or turn.inflight != outcome.batch_id:
        state.stale_dropped += 1  # rule: an outcome for a batch no longer awaited is stale
        return
    if turn.phase is THINKING:
        no_reply = outcome.error or "the model lane delivered no reply"
        result = outcome.results[0] if outcome.results else ToolResult("", error=no_reply)
        if result.error is not None:  # `not result.ok`, without the property's call
            resume_with(state, rec, Throw(errors.ModelError(result.error)))
            return
        reply = result.output
        if not isinstance(reply, ModelReply):
            reply = ModelReply(as_text(reply, state.journal_format))
        add_history(state, rec, "assistant", reply.text)
        resume_with(state, rec, reply)
    elif turn.phase is AWAITING_TOOLS:
        pending: PendingBatch = turn.pending
        for result in outcome.results:
            pending.results.setdefault(result.call_id, result)
        if outcome.error is not None:  # the job failed as a whole: every call says why
            for call in pending.calls:
                if call.id not in pending.results:
                    pending.results[call.id] = ToolResult(call.id, error=outcome.error)
        finish_batch(state, rec, pending)


def finish_batch(state: WorldState, rec: AgentRecord, pending: PendingBatch) -> None:
    """Record every call's result in history and send the results to the behaviour."""
    resume_with(state, rec, record_tool_results(state, rec, pending))


def _deliver_settlement(state: WorldState, rec: AgentRecord, settled: PromptSettled) -> None:
    turn = rec.turn
    kind = rec.status.kind
    if kind is COMPLETE or kind is ERROR or kind is CANCELLED or turn.phase is not AWAITING_INPUT:
        return
    pending = turn.pending
    if isinstance(pending, PendingBatch):
        call_id = pending.approvals.pop(settled.request_id, None)
        if call_id is None:
            return
        if not response_approved(settled.response):
            # Rule: the neutral response of a timeout or cancel reads as deny.
            pending.results[call_id] = ToolResult(call_id, error=DENIED)
        state.touch(rec)
        if not pending.approvals:
            if len(pending.results) == len(pending.calls):
                finish_batch(state, rec, pending)
            else:
                launch_tools(state, rec, pending)
    elif turn.inflight == settled.request_id:
        if settled.kind is not APPROVAL_PROMPT:
            add_history(state, rec, "user", settled.response.value)
        resume_with(state, rec, settled.response)
