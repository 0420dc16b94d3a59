"""ReflectInteractionStatus: mirror each agent's open prompts into its status."""

from __future__ import annotations

import esper

from runtime.world.state import WorldState

from .lifecycle import reflect

__all__ = ["ReflectInteractionStatus"]


class ReflectInteractionStatus(esper.Processor):
    """Runs after dispatch so a prompt opened or settled this tick shows at its end.
    Reads only the agents whose open set changed (from the hub's events, applied as
    inputs): O(changes), never a scan, and the same in a replay without a live hub."""

    def process(self, state: WorldState) -> None:
        if not state.prompt_changed:
            return
        changed, state.prompt_changed = state.prompt_changed, {}
        dirty = state.dirty
        for rec in changed.values():
            if reflect(rec):
                dirty[rec.ordinal] = rec  # `touch`, inlined
                state.changed_this_tick += 1
