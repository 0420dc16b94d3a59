"""Plain data attached to entities and passed between threads; no behaviour lives here."""

from .agent import (
    Agent,
    AgentSpec,
    Entry,
    History,
    Phase,
    Status,
    StatusKind,
    TurnState,
    WaitReason,
)
from .interaction import (
    InteractionKind,
    InteractionRequest,
    InteractionResponse,
    PromptOpened,
    PromptSettled,
    Settlement,
    response_approved,
)
from .lane import LaneStats
from .tools import ToolCall, ToolResult

__all__ = [
    "Agent",
    "AgentSpec",
    "Entry",
    "History",
    "InteractionKind",
    "InteractionRequest",
    "InteractionResponse",
    "LaneStats",
    "Phase",
    "PromptOpened",
    "PromptSettled",
    "Settlement",
    "Status",
    "StatusKind",
    "ToolCall",
    "ToolResult",
    "TurnState",
    "WaitReason",
    "response_approved",
]
