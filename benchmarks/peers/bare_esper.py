"""Bare esper entities with the same component data as a tickwork agent.

The floor for memory: one esper entity per agent in its own esper world, carrying exactly
the components a tickwork agent has (``Agent``, ``AgentSpec``, ``Status``, ``TurnState``,
``History``) with the same values, and nothing else: no index, no record, no id map.
"""

from __future__ import annotations

import itertools

import esper

from components import Agent, AgentSpec, History, Status, TurnState

__all__ = ["BareEsperWorld"]

_names = itertools.count(1)


class BareEsperWorld:
    """An esper world of its own, filled with bare agent entities."""

    def __init__(self) -> None:
        self.name = f"bench-bare-{next(_names)}"

    def fill(self, ids: list[str], behavior: str, interactive: bool) -> None:
        """One entity per id, with the components an idle tickwork agent holds."""
        previous = esper.current_world
        esper.switch_world(self.name)
        try:
            for agent_id in ids:
                esper.create_entity(
                    Agent(agent_id, "", None),
                    AgentSpec(behavior, interactive),
                    Status(),
                    TurnState(),
                    History(),
                )
        finally:
            esper.switch_world(previous)

    def close(self) -> None:
        """Delete the esper world."""
        if esper.current_world == self.name:
            esper.switch_world("default")
        if self.name in esper.list_worlds():
            esper.delete_world(self.name)
