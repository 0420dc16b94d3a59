"""Agent transitions shared by the systems: turns, status and history, in one place.

`systems.lifecycle.turns` starts, ends, fails, resumes and cancels turns and creates agents;
`systems.lifecycle.status` derives an agent's status from its turn and its open prompts;
`systems.lifecycle.history` adds history entries. Every name the systems use imports from
here.
"""

from .history import add_history, add_prompt, as_text, record_tool_results
from .status import derive_status, reflect, set_active
from .turns import (
    CANCELLED_CALL,
    abandon_turn,
    await_children,
    check_join,
    create_agent,
    describe,
    end_turn,
    fail,
    finish,
    mint,
    nothing_to_abort,
    queue_message,
    resume_with,
    start_turn,
    turn_token,
)

__all__ = [
    "CANCELLED_CALL",
    "abandon_turn",
    "add_history",
    "add_prompt",
    "as_text",
    "await_children",
    "check_join",
    "create_agent",
    "derive_status",
    "describe",
    "end_turn",
    "fail",
    "finish",
    "mint",
    "nothing_to_abort",
    "queue_message",
    "record_tool_results",
    "reflect",
    "resume_with",
    "set_active",
    "start_turn",
    "turn_token",
]
