"""Agent status from its turn and its open prompts: ACTIVE, WAITING, IDLE, kept if paused.

A terminal agent is never revived; a paused one keeps PAUSED, and the status it would have
goes to ``paused_from``.
"""

from __future__ import annotations

from components import InteractionKind, Phase, StatusKind, WaitReason
from runtime.world.state import AgentRecord

__all__ = ["derive_status", "reflect", "set_active", "set_idle", "set_waiting_on_children"]

_PROMPT_REASONS = (WaitReason.USER_PROMPT, WaitReason.TOOL_APPROVAL)
# Enum members as module names, as `tests/world/test_enum_reads.py` explains and counts.
# `StatusKind.is_terminal` is a property: a Python call, where identity tests are not.
_COMPLETE, _ERROR, _CANCELLED = StatusKind.COMPLETE, StatusKind.ERROR, StatusKind.CANCELLED
_ACTIVE = StatusKind.ACTIVE
_WAITING = StatusKind.WAITING
_PAUSED = StatusKind.PAUSED
_IDLE = StatusKind.IDLE
_APPROVAL_PROMPT = InteractionKind.TOOL_APPROVAL
_ON_PROMPT = WaitReason.USER_PROMPT
_ON_APPROVAL = WaitReason.TOOL_APPROVAL
_ON_CHILDREN = WaitReason.CHILDREN
_DONE = Phase.DONE
_AWAITING_CHILDREN = Phase.AWAITING_CHILDREN


def set_active(rec: AgentRecord) -> None:
    """Make the agent ACTIVE, or WAITING if it has open prompts (kept if paused/terminal)."""
    status = rec.status
    was = status.kind
    if was is _COMPLETE or was is _ERROR or was is _CANCELLED:  # `is_terminal`, inlined
        return
    kind, reason = _ACTIVE, None
    if rec.prompts:
        kind, reason = _WAITING, _prompt_reason(rec)
    if was is _PAUSED:
        rec.paused_from = kind
        return
    status.kind, status.reason, status.message = kind, reason, ""


def derive_status(rec: AgentRecord) -> None:
    """Set a live, unpaused agent's status from its turn: IDLE between turns, WAITING on
    children while joining, else ACTIVE (or WAITING on its open prompts)."""
    phase = rec.turn.phase
    if phase is _DONE:
        set_idle(rec)
    elif phase is _AWAITING_CHILDREN:
        set_waiting_on_children(rec)
    else:
        set_active(rec)


def set_waiting_on_children(rec: AgentRecord) -> None:
    if rec.status.kind is _PAUSED:
        rec.paused_from = _WAITING
    elif not rec.status.kind.is_terminal:
        rec.status.kind, rec.status.reason = _WAITING, _ON_CHILDREN


def _prompt_reason(rec: AgentRecord) -> WaitReason:
    assert rec.prompts
    if _APPROVAL_PROMPT in rec.prompt_kinds():
        return _ON_APPROVAL
    return _ON_PROMPT


def reflect(rec: AgentRecord) -> bool:
    """Mirror the agent's open prompts into its status; returns whether it changed.

    The truth table: an open prompt flips ACTIVE to WAITING; no open prompt flips a
    prompt-WAITING back to ACTIVE; a paused or terminal agent is never flipped.
    """
    status = rec.status
    kind = status.kind
    if kind is _COMPLETE or kind is _ERROR or kind is _CANCELLED or kind is _PAUSED:
        return False
    if rec.prompts:
        waiting_on_prompt = kind is _WAITING and status.reason in _PROMPT_REASONS
        if kind is _ACTIVE or waiting_on_prompt:
            reason = _prompt_reason(rec)
            if kind is _WAITING and status.reason is reason:
                return False
            status.kind, status.reason = _WAITING, reason
            return True
        return False
    if kind is _WAITING and status.reason in _PROMPT_REASONS:
        status.kind, status.reason = _ACTIVE, None
        return True
    return False


def set_idle(rec: AgentRecord) -> None:
    if rec.status.kind is _PAUSED:
        rec.paused_from = _IDLE
    else:
        rec.status.kind, rec.status.reason, rec.status.message = _IDLE, None, ""
