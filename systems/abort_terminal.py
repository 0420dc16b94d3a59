"""AbortTerminalWork: cancel the in-flight work and prompts of agents that just ended."""

from __future__ import annotations

import esper

from components import StatusKind
from components._members import CANCELLED
from runtime.world.state import AgentRecord, WorldState

from .lifecycle import finish

__all__ = ["AbortTerminalWork"]

# An ending's default reason by kind (`kind.value` is an enum property, ~0.5 us on 3.11).
_ENDED = {kind: kind.value for kind in StatusKind}


class AbortTerminalWork(esper.Processor):
    """Runs right after inputs so a cancel takes effect this tick: the turn's token fires
    (lane jobs stop, subprocess groups die), open prompts are settled (rule: a cancelled
    run leaves no orphaned prompt, in any interleaving: see also CollectOutcomes), and a
    cancelled agent's children are cancelled too."""

    def process(self, state: WorldState) -> None:
        queue = state.to_abort
        if not queue:
            return
        effects = state.effects
        # Agents that ended before this stage; those after them in the queue are what
        # their cancels reached here, whose cut-off descendants are their top's too.
        tops = len(queue)
        index = 0
        while index < len(queue):  # grows while children are cancelled
            rec = queue[index]
            index += 1
            kind = rec.status.kind
            token = rec.token
            if token is not None:
                token.cancel(rec.status.message or _ENDED[kind])
                rec.token = None  # a finished agent keeps no token
            if rec.prompts:
                effects.cancel_prompts_of(rec.id)
            # A prompt open in the hub but not yet on the record (its PromptOpened event is
            # applied this tick or later) is settled when CollectOutcomes meets its event.
            if kind is CANCELLED and rec.children:
                for child_id in rec.children:
                    child = state.records.get(child_id)
                    if child is None:
                        continue
                    if not child.status.kind.is_terminal:
                        finish(state, child, CANCELLED, f"parent {rec.id} cancelled")
                    elif child.children and state.journal_format >= 3:
                        _cancel_under(state, child, rec.id)
                if state.released_up and state.journal_format >= 3 and index <= tops:
                    # Below an agent released since: once for a cancelled tree, at its top.
                    for other in state.cut_off(rec):
                        finish(state, other, CANCELLED, f"ancestor {rec.id} cancelled")
        queue.clear()


def _cancel_under(state: WorldState, finished: AgentRecord, ancestor: str) -> None:
    """Cancel the live descendants of ``finished``, a finished child of the cancelled
    ``ancestor`` (journal format 3): the subtree a cancel reaches goes on below a child
    that ended first. Each one cancelled here is queued, and its own children follow."""
    below = [finished]
    index = 0
    while index < len(below):  # breadth first, children in spawn order
        rec = below[index]
        index += 1
        for child_id in rec.children or ():
            child = state.records.get(child_id)
            if child is None:
                continue
            if child.status.kind.is_terminal:
                if child.children:
                    below.append(child)
            else:
                finish(state, child, CANCELLED, f"ancestor {ancestor} cancelled")
