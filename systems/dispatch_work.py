"""DispatchWork: start the model calls, tool batches and prompts that behaviours asked for."""

from __future__ import annotations

import esper

from components import InteractionRequest
from components._members import AWAITING_INPUT, AWAITING_TOOLS, CANCELLED, COMPLETE, ERROR, THINKING
from runtime.hub.core import screen_request
from runtime.models.base import ModelRequest
from runtime.world.actions import Action, Ask, CallTools, Think
from runtime.world.state import AgentRecord, PendingBatch, WorldState

from .lifecycle import add_prompt, fail, mint, resume_with, turn_token

__all__ = ["DispatchWork", "launch_tools"]


class DispatchWork(esper.Processor):
    """Runs after every behaviour has stepped, so all of a tick's work goes out together
    and none of it can land (as an input) before the next tick. Each item's id is minted
    from the turn (deterministic), so a replay, which starts nothing, awaits the same ids
    the journal's outcomes carry."""

    def process(self, state: WorldState) -> None:
        if not state.to_dispatch:
            return
        work, state.to_dispatch = state.to_dispatch, []
        probe = state.probe  # telemetry: sees each item as it goes out
        host_actions = state.host_actions
        # Live effects hold the tick's lane jobs and hand each lane all of them at once
        # (one lock round trip per lane, not per job); a replay's effects start nothing.
        hold = getattr(state.effects, "hold", None)
        if hold is not None and len(work) > 1:
            hold(slices=True)  # a big dispatch's jobs go out in slices as it goes
        else:
            hold = None
        try:
            for rec, action in work:
                kind = rec.status.kind
                if kind is COMPLETE or kind is ERROR or kind is CANCELLED:  # `is_terminal`
                    continue
                try:
                    if action.__class__ in host_actions:
                        state.host.run_action(rec, action)  # a host action: its handler, now
                        continue
                    _dispatch(state, rec, action)
                    if probe is not None:
                        probe.dispatched(rec, action)
                except BaseException as exc:  # fails this agent only, whatever it is
                    fail(state, rec, exc, "DispatchWork")
        finally:
            if hold is not None:
                state.effects.release()  # type: ignore[attr-defined]
        if host_actions:
            state.host.end_actions()  # the handlers' structural changes, batched


def _dispatch(state: WorldState, rec: AgentRecord, action: Action) -> None:
    turn = rec.turn
    cls = type(action)
    if cls is Think:
        assert isinstance(action, Think)
        ref = mint(rec, "m")
        turn.phase, turn.inflight = THINKING, ref
        state.lane_waiting[rec.ordinal] = rec
        calls = rec.model_calls
        rec.model_calls = calls + 1
        model_request = ModelRequest(
            rec.id, action.prompt, action.model, tuple(rec.history.entries), call=calls
        )
        state.effects.think(rec.id, ref, model_request, turn_token(rec))
    elif cls is CallTools:
        assert isinstance(action, CallTools)
        pending = PendingBatch(mint(rec, "b"), action.calls)
        turn.inflight, turn.pending = pending.ref, pending
        if not action.calls:
            resume_with(state, rec, [])
            return
        requires_approval = state.effects.requires_approval
        name: str | None = None
        gated = False
        for call in action.calls:
            if call.name != name:  # a batch's calls often name one tool: ask once for a run
                name = call.name
                gated = requires_approval(name)
            if gated:
                request_id = mint(rec, "p")
                pending.approvals[request_id] = call.id
                stage = f"turn {turn.generation}"
                request = InteractionRequest.tool_approval(request_id, call.name, call.args, stage)
                state.effects.open_prompt(rec.id, request)
        if pending.approvals:
            turn.phase = AWAITING_INPUT
        else:
            launch_tools(state, rec, pending)
    elif cls is Ask:
        assert isinstance(action, Ask)
        request = action.request
        if isinstance(request, InteractionRequest):
            # A hand-built request the hub would refuse, refused here, where a replay (which
            # opens no prompt) refuses it at the same step. (Not a request at all cannot
            # get here: `Ask` refuses it when it is made.)
            screen_request(request)
        if not request.id:
            request = request.with_id(mint(rec, "p"))
        turn.phase, turn.inflight = AWAITING_INPUT, request.id
        add_prompt(state, rec, request.prompt)
        state.effects.open_prompt(rec.id, request)
    state.dirty[rec.ordinal] = rec  # `touch`, inlined
    state.changed_this_tick += 1


def launch_tools(state: WorldState, rec: AgentRecord, pending: PendingBatch) -> None:
    """Send the calls of ``pending`` that have no result yet (approved ones) to the lane."""
    results = pending.results
    calls = (
        tuple(call for call in pending.calls if call.id not in results)
        if results
        else pending.calls  # nothing approved or denied yet: every call goes (the usual)
    )
    turn = rec.turn
    turn.phase = AWAITING_TOOLS
    ordinal = rec.ordinal
    state.lane_waiting[ordinal] = rec
    state.dirty[ordinal] = rec  # `touch`, inlined
    state.changed_this_tick += 1
    state.effects.run_tools(rec.id, pending.ref, calls, turn_token(rec))
