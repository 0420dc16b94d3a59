"""Enum members under plain module names, for the runtime's hot paths.

On Python 3.11 ``EnumType`` defines ``__getattr__``, so ``StatusKind.ACTIVE`` runs that hook
on every read (~100 ns, against ~15 ns for a global); the tick reads members on every step
of every agent. ``tests/world/test_enum_reads.py`` counts the reads a turn makes. Import
the names from here; not part of the public API.
"""

from __future__ import annotations

from .agent import Phase, StatusKind, WaitReason
from .interaction import InteractionKind

__all__ = [
    "ACTIVE",
    "APPROVAL_PROMPT",
    "AWAITING_ACTION",
    "AWAITING_CHILDREN",
    "AWAITING_INPUT",
    "AWAITING_TOOLS",
    "CANCELLED",
    "COMPLETE",
    "DONE",
    "ERROR",
    "IDLE",
    "ON_APPROVAL",
    "ON_CHILDREN",
    "ON_PROMPT",
    "PAUSED",
    "READY",
    "SLEEPING",
    "THINKING",
    "WAITING",
]

# StatusKind
IDLE, ACTIVE, WAITING, PAUSED = (
    StatusKind.IDLE,
    StatusKind.ACTIVE,
    StatusKind.WAITING,
    StatusKind.PAUSED,
)
# The terminal three: `StatusKind.is_terminal` is a property (a call); identity tests of
# these are not.
COMPLETE, ERROR, CANCELLED = StatusKind.COMPLETE, StatusKind.ERROR, StatusKind.CANCELLED
# Phase
READY, THINKING, AWAITING_TOOLS, AWAITING_INPUT = (
    Phase.READY,
    Phase.THINKING,
    Phase.AWAITING_TOOLS,
    Phase.AWAITING_INPUT,
)
SLEEPING, AWAITING_CHILDREN, AWAITING_ACTION, DONE = (
    Phase.SLEEPING,
    Phase.AWAITING_CHILDREN,
    Phase.AWAITING_ACTION,
    Phase.DONE,
)
# WaitReason
ON_PROMPT, ON_APPROVAL, ON_CHILDREN = (
    WaitReason.USER_PROMPT,
    WaitReason.TOOL_APPROVAL,
    WaitReason.CHILDREN,
)
# InteractionKind
APPROVAL_PROMPT = InteractionKind.TOOL_APPROVAL
