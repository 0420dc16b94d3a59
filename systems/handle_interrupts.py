"""HandleInterrupts: abandon the current turn of interrupted agents, keeping history."""

from __future__ import annotations

import esper

from components import Phase, ToolResult
from runtime.cancel import INTERRUPTED
from runtime.world.state import AgentRecord, PendingBatch, WorldState

from .lifecycle import abandon_turn, add_history, fail, record_tool_results

__all__ = ["INTERRUPTED_CALL", "HandleInterrupts"]

INTERRUPTED_CALL = "interrupted by user before completion"
MARKER = "[interrupted by user]"


class HandleInterrupts(esper.Processor):
    """Runs before outcomes are collected, so an outcome of the abandoned work that lands
    in this same tick is already stale. Per phase: a model call is cancelled; a tool batch
    is cancelled and every call without a result gets an error result (rule: every tool
    call gets exactly one result on every path); an open prompt is cancelled. History
    keeps everything and gains a marker; the agent then waits for its next input."""

    def process(self, state: WorldState) -> None:
        if not state.to_interrupt:
            return
        batch, state.to_interrupt = state.to_interrupt, []
        partials, state.partials = state.partials, {}
        for rec in batch:
            if rec.status.kind.is_terminal or rec.turn.phase is Phase.DONE:
                continue  # rule: an interrupt while idle leaves the next turn alone
            try:
                self._interrupt(state, rec, partials.get(rec.id))
            except BaseException as exc:  # fails this agent only, whatever it is
                fail(state, rec, exc, "HandleInterrupts")

    @staticmethod
    def _interrupt(state: WorldState, rec: AgentRecord, partial: tuple[str, str] | None) -> None:
        turn = rec.turn
        if rec.token is not None:
            rec.token.cancel(INTERRUPTED)  # the model job / tool batch; kills subprocesses
        pending = turn.pending
        if isinstance(pending, PendingBatch):
            for request_id in pending.approvals:
                state.effects.cancel_prompt(request_id)
            for call in pending.calls:
                if call.id not in pending.results:
                    pending.results[call.id] = ToolResult(call.id, error=INTERRUPTED_CALL)
            record_tool_results(state, rec, pending)
        elif turn.phase is Phase.AWAITING_INPUT and turn.inflight is not None:
            state.effects.cancel_prompt(turn.inflight)
        elif turn.phase is Phase.THINKING and partial is not None:
            ref, text = partial  # what the stream held when world.interrupt stopped it
            if ref == turn.inflight and text:
                add_history(state, rec, "assistant", text)
        add_history(state, rec, "system", MARKER)
        abandon_turn(state, rec)
