"""Models: what a ``Think`` runs on the inference lane, and what it sends and gets back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from components import Entry, ToolCall
from components._frozen import fast_frozen_init
from runtime.cancel import CancelToken
from runtime.models.usage import Usage

if TYPE_CHECKING:
    from runtime.models.streaming import Stream

__all__ = ["Model", "ModelReply", "ModelRequest", "decode_reply", "encode_reply"]


@fast_frozen_init  # one per model call, on the tick thread
@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One completion request: the prompt, the model's name, and the agent's history.

    ``stream`` is where a streaming model reports its deltas as they arrive (the world
    gives every call one; a model that does not stream ignores it). It is not part of the
    request's value: two requests that differ only in their stream are equal.
    """

    agent_id: str
    prompt: str
    model: str = "default"
    history: tuple[Entry, ...] = ()
    stream: Stream | None = field(default=None, compare=False, repr=False)


@fast_frozen_init  # one per model call, on the lane's thread
@dataclass(frozen=True, slots=True)
class ModelReply:
    """A model's answer: text, the tool calls it proposes, the tokens it cost, and why it
    stopped (the provider's word: ``stop``, ``length``, ``tool_calls``, ``end_turn``...)."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    finish_reason: str | None = None


@runtime_checkable
class Model(Protocol):
    """Anything that completes a request; it should give up when ``cancel`` fires."""

    def complete(self, request: ModelRequest, cancel: CancelToken) -> ModelReply:
        """Answer ``request``; raise ``Cancelled`` (or return early) when ``cancel`` fires."""
        ...


def encode_reply(reply: ModelReply) -> dict[str, Any]:
    """A reply as JSON data (for journals and cassettes); `decode_reply` reads it back."""
    data: dict[str, Any] = {
        "text": reply.text,
        "tool_calls": [
            {"id": c.id, "name": c.name, "args": dict(c.args)} for c in reply.tool_calls
        ],
    }
    if reply.usage is not None:
        data["usage"] = [reply.usage.input_tokens, reply.usage.output_tokens]
    if reply.finish_reason is not None:
        data["finish_reason"] = reply.finish_reason
    return data


def decode_reply(data: dict[str, Any]) -> ModelReply:
    """The reply `encode_reply` wrote (older data without usage reads as None)."""
    calls = tuple(
        ToolCall(str(c["id"]), str(c["name"]), dict(c["args"])) for c in data["tool_calls"]
    )
    usage = data.get("usage")
    finish = data.get("finish_reason")
    return ModelReply(
        str(data["text"]),
        calls,
        None if usage is None else Usage(int(usage[0]), int(usage[1])),
        None if finish is None else str(finish),
    )
