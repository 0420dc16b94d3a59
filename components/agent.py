"""Agent data: identity, status, the current turn, and the conversation history."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from ._enum import IdentityEnum
from ._frozen import fast_frozen_init

__all__ = [
    "Agent",
    "AgentSpec",
    "Entry",
    "History",
    "Phase",
    "Status",
    "StatusKind",
    "TurnState",
    "WaitReason",
]


class StatusKind(IdentityEnum):
    """Where an agent is in its life."""

    IDLE = "idle"
    ACTIVE = "active"
    WAITING = "waiting"
    PAUSED = "paused"
    COMPLETE = "complete"
    ERROR = "error"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        """COMPLETE, ERROR and CANCELLED are final: nothing revives such an agent."""
        # Identity tests, not a frozenset lookup: the tick asks this of every agent it
        # touches, and three `is` tests need no hash.
        return self is _COMPLETE or self is _ERROR or self is _CANCELLED


_COMPLETE, _ERROR, _CANCELLED = StatusKind.COMPLETE, StatusKind.ERROR, StatusKind.CANCELLED


class WaitReason(IdentityEnum):
    """What a WAITING agent waits for."""

    USER_PROMPT = "user_prompt"
    TOOL_APPROVAL = "tool_approval"
    CHILDREN = "children"


@dataclass(slots=True)
class Agent:
    """Who an agent is. ``parent`` is the id of the agent that spawned it, if any."""

    id: str
    name: str = ""
    parent: str | None = None


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """How an agent's turns are made: the behaviour's name and whether it is interactive.

    ``behavior`` is the name a journal stores (``module:function`` or a registered name).
    Frozen: the agents made with one behaviour share one spec (48 B an agent), so a change
    to one in place would change them all (`ctx.query(AgentSpec)` hands out the live one).
    """

    behavior: str
    interactive: bool = False


@dataclass(slots=True)
class Status:
    """An agent's status. A field of a component that stays attached: changing it never
    changes the entity's shape (adding/removing tag components clears esper's whole
    query cache, measured 14x slower ticks at 10k agents with 1% toggling)."""

    kind: StatusKind = StatusKind.IDLE
    reason: WaitReason | None = None
    message: str = ""


class Phase(IdentityEnum):
    """Where the current turn is."""

    READY = "ready"
    THINKING = "thinking"
    AWAITING_TOOLS = "awaiting_tools"
    AWAITING_INPUT = "awaiting_input"
    SLEEPING = "sleeping"
    AWAITING_CHILDREN = "awaiting_children"
    AWAITING_ACTION = "awaiting_action"  # a host action's handler returned PENDING
    DONE = "done"


@dataclass(slots=True)
class TurnState:
    """The agent's current turn.

    ``inflight`` is the id of the model request, tool batch or prompt the turn awaits
    (None when it awaits nothing); an outcome whose id differs is stale and is dropped.
    ``send_value`` is what the behaviour receives at its next step. ``deadline`` is the
    wake-up time of a sleeping turn. ``counter`` mints the turn's request ids.
    """

    phase: Phase = Phase.DONE
    behavior: Generator[Any, Any, Any] | None = None
    generation: int = 0
    inflight: str | None = None
    send_value: Any = None
    deadline: float | None = None
    counter: int = 0
    pending: Any = None  # the action being awaited (CallTools, Join, ...), if any


@fast_frozen_init  # six a turn (the reply, each tool result, the prompt, the answer)
@dataclass(frozen=True, slots=True)
class Entry:
    """One history entry: who said it (``user``, ``assistant``, ``tool``, ``system``)."""

    role: str
    content: str


@dataclass(slots=True)
class History:
    """The agent's conversation, kept across turns and interrupts."""

    entries: list[Entry] = field(default_factory=list)
