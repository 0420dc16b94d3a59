"""Agent status from its turn and its open prompts: ACTIVE, WAITING, IDLE, kept if paused.

A terminal agent is never revived; a paused one keeps PAUSED, and the status it would have
goes to ``paused_from``.
"""

from __future__ import annotations

from components import WaitReason
from components._members import (
    ACTIVE,
    APPROVAL_PROMPT,
    AWAITING_CHILDREN,
    CANCELLED,
    COMPLETE,
    DONE,
    ERROR,
    IDLE,
    ON_APPROVAL,
    ON_CHILDREN,
    ON_PROMPT,
    PAUSED,
    WAITING,
)
from runtime.world.state import AgentRecord

__all__ = ["derive_status", "reflect", "set_active", "set_idle", "set_waiting_on_children"]

_PROMPT_REASONS = (WaitReason.USER_PROMPT, WaitReason.TOOL_APPROVAL)


def set_active(rec: AgentRecord) -> None:
    """Make the agent ACTIVE, or WAITING if it has open prompts (kept if paused/terminal)."""
    status = rec.status
    was = status.kind
    if was is COMPLETE or was is ERROR or was is CANCELLED:  # `is_terminal`, inlined
        return
    kind, reason = ACTIVE, None
    if rec.prompts:
        kind, reason = WAITING, _prompt_reason(rec)
    if was is PAUSED:
        rec.paused_from = kind
        return
    status.kind, status.reason, status.message = kind, reason, ""


def derive_status(rec: AgentRecord) -> None:
    """Set a live, unpaused agent's status from its turn: IDLE between turns, WAITING on
    children while joining, else ACTIVE (or WAITING on its open prompts)."""
    phase = rec.turn.phase
    if phase is DONE:
        set_idle(rec)
    elif phase is AWAITING_CHILDREN:
        set_waiting_on_children(rec)
    else:
        set_active(rec)


def set_waiting_on_children(rec: AgentRecord) -> None:
    if rec.status.kind is PAUSED:
        rec.paused_from = WAITING
    elif not rec.status.kind.is_terminal:
        rec.status.kind, rec.status.reason = WAITING, ON_CHILDREN


def _prompt_reason(rec: AgentRecord) -> WaitReason:
    assert rec.prompts
    if APPROVAL_PROMPT in rec.prompt_kinds():
        return ON_APPROVAL
    return ON_PROMPT


def reflect(rec: AgentRecord) -> bool:
    """Mirror the agent's open prompts into its status; returns whether it changed.

    The truth table: an open prompt flips ACTIVE to WAITING; no open prompt flips a
    prompt-WAITING back to ACTIVE; a paused or terminal agent is never flipped.
    """
    status = rec.status
    kind = status.kind
    if kind is COMPLETE or kind is ERROR or kind is CANCELLED or kind is PAUSED:
        return False
    if rec.prompts:
        waiting_on_prompt = kind is WAITING and status.reason in _PROMPT_REASONS
        if kind is ACTIVE or waiting_on_prompt:
            reason = _prompt_reason(rec)
            if kind is WAITING and status.reason is reason:
                return False
            status.kind, status.reason = WAITING, reason
            return True
        return False
    if kind is WAITING and status.reason in _PROMPT_REASONS:
        status.kind, status.reason = ACTIVE, None
        return True
    return False


def set_idle(rec: AgentRecord) -> None:
    if rec.status.kind is PAUSED:
        rec.paused_from = IDLE
    else:
        rec.status.kind, rec.status.reason, rec.status.message = IDLE, None, ""
