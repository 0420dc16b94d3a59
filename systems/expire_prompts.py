"""ExpirePrompts: settle prompts whose deadline has passed at this tick's time."""

from __future__ import annotations

import esper

from runtime.world.state import WorldState

__all__ = ["ExpirePrompts"]


class ExpirePrompts(esper.Processor):
    """Runs before outcomes are collected; its settlements (neutral responses, which an
    approval reads as deny) arrive as inputs and are applied next tick, so a replay, which
    gets them from the journal, sees them at the same tick. On a virtual clock this is
    the only thing that enforces prompt deadlines."""

    def process(self, state: WorldState) -> None:
        state.effects.expire_prompts(state.now)
