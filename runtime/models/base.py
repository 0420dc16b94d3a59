"""Models: what a ``Think`` runs on the inference lane, and what it sends and gets back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from components import Entry, ToolCall
from runtime.cancel import CancelToken

__all__ = ["Model", "ModelReply", "ModelRequest"]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One completion request: the prompt, the model's name, and the agent's history."""

    agent_id: str
    prompt: str
    model: str = "default"
    history: tuple[Entry, ...] = ()


@dataclass(frozen=True, slots=True)
class ModelReply:
    """A model's answer: text, and the tool calls it proposes."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()


@runtime_checkable
class Model(Protocol):
    """Anything that completes a request; it should give up when ``cancel`` fires."""

    def complete(self, request: ModelRequest, cancel: CancelToken) -> ModelReply:
        """Answer ``request``; raise ``Cancelled`` (or return early) when ``cancel`` fires."""
        ...
