"""Models: what a ``Think`` runs on the inference lane, and what it sends and gets back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from components import Entry, ToolCall
from components._frozen import fast_frozen_init
from runtime.cancel import CancelToken
from runtime.lane.values import shown
from runtime.models.usage import Usage, token_count

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

    ``call`` is how many model calls the world dispatched for the agent before this one
    (None in a request built by hand). The world counts them as it dispatches, on its own
    thread, so a replay and a resumed run count the same: a model that follows a script
    per agent (`ScriptedModel`) reads it by this number, and a call an interrupt abandoned
    holds its place whether or not its thread got to run it.
    """

    agent_id: str
    prompt: str
    model: str = "default"
    history: tuple[Entry, ...] = ()
    stream: Stream | None = field(default=None, compare=False, repr=False)
    call: int | None = None


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
    """The reply `encode_reply` wrote (older data without usage reads as None).

    Values stand as decoded, never coerced (a journal or a cassette is data from outside:
    ``str()`` made a ``null`` text "None", ``int()`` took a negative token count, which
    gives an agent's budget back, and cut 1.7 to 1).

    Raises:
        TypeError: a field of the wrong kind, naming it.
        ValueError: a token count that is not a whole number >= 0.
    """
    calls = tuple(
        ToolCall(
            _text(c["id"], "a tool call's id"),
            _text(c["name"], "a tool call's name"),
            _args(c["args"]),
        )
        for c in data["tool_calls"]
    )
    usage = data.get("usage")
    finish = data.get("finish_reason")
    if usage is not None and (usage.__class__ is not list or len(usage) != 2):
        raise TypeError(f"a reply's usage must be [input, output] tokens, got {shown(usage)}")
    return ModelReply(
        _text(data["text"], "a reply's text"),
        calls,
        None if usage is None else Usage(token_count(usage[0]), token_count(usage[1])),
        None if finish is None else _text(finish, "a reply's finish_reason"),
    )


def _text(value: Any, what: str) -> str:
    if value.__class__ is not str:
        raise TypeError(f"{what} must be a string, got {shown(value)}")
    return str(value)


def _args(value: Any) -> dict[str, Any]:
    if value.__class__ is not dict:
        raise TypeError(f"a tool call's args must be an object, got {shown(value)}")
    return dict(value)
