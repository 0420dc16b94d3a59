"""External inputs: everything that enters a world between ticks.

Every input gets a sequence number when it arrives (``Inbox.put``) and is applied at the
start of the next tick, in sequence order; the journal records each applied input with its
tick, which is all a replay needs. Besides the commands below, tool and model outcomes
(``ToolOutcome``) and the hub's change events (``PromptOpened``, ``PromptSettled``) are
inputs too.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from .wake import Wake

__all__ = [
    "CancelAgent",
    "EffectFailed",
    "Inbox",
    "InterruptAgent",
    "PauseAgent",
    "ResumeAgent",
    "SendMessage",
    "SpawnAgent",
]


@dataclass(frozen=True, slots=True)
class SpawnAgent:
    """Create agent ``agent_id`` running the behaviour named ``behavior``."""

    agent_id: str
    behavior: str
    message: Any = None
    name: str = ""
    interactive: bool = False


@dataclass(frozen=True, slots=True)
class SendMessage:
    """Give an agent its next message: starts a turn, or queues behind the current one."""

    agent_id: str
    message: Any


@dataclass(frozen=True, slots=True)
class PauseAgent:
    """Stop stepping an agent; outcomes that land meanwhile are held."""

    agent_id: str


@dataclass(frozen=True, slots=True)
class ResumeAgent:
    """Undo a pause and apply what was held."""

    agent_id: str


@dataclass(frozen=True, slots=True)
class CancelAgent:
    """End an agent for good: its work is cancelled, prompts settled, children cancelled."""

    agent_id: str
    reason: str = "cancelled"


@dataclass(frozen=True, slots=True)
class InterruptAgent:
    """Abandon the agent's current turn, keeping its history."""

    agent_id: str


@dataclass(frozen=True, slots=True)
class EffectFailed:
    """Work the tick thread asked for could not even start (unknown model, clashing
    prompt id); ``ref`` is the id the agent awaits. Travels as an input so a replay,
    which starts no work, sees the same failure at the same tick."""

    agent_id: str
    ref: str
    error: str
    error_type: str = "TickworkError"  # the name of a class in runtime.errors


class Inbox:
    """A thread-safe queue of inputs, numbered on arrival; putting nudges the wake."""

    __slots__ = ("_items", "_lock", "_seq", "_wake")

    def __init__(self, wake: Wake | None = None) -> None:
        self._lock = threading.Lock()
        self._items: list[tuple[int, object]] = []
        self._seq = 0
        self._wake = wake

    def put(self, item: object) -> int:
        """Queue ``item`` and return its sequence number. Safe from any thread."""
        with self._lock:
            self._seq += 1
            seq = self._seq
            self._items.append((seq, item))
        if self._wake is not None:
            self._wake.notify()
        return seq

    def drain(self) -> list[tuple[int, object]]:
        """Take every queued input, in sequence order."""
        with self._lock:
            items, self._items = self._items, []
        return items

    def __len__(self) -> int:
        return len(self._items)

    @property
    def last_seq(self) -> int:
        """The sequence number of the last input put."""
        return self._seq
