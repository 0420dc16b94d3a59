"""Inputs to and from JSON, for the journal.

Every input type has a short kind name and a JSON payload of plain values. Decoding builds
data objects only (dataclasses of strings, numbers and lists): nothing in a journal is
executed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from components import (
    InteractionKind,
    InteractionRequest,
    InteractionResponse,
    PromptOpened,
    PromptSettled,
    Settlement,
    ToolResult,
)
from runtime.errors import JournalError
from runtime.lane import ToolOutcome
from runtime.models.base import ModelReply, decode_reply, encode_reply
from runtime.world.inputs import (
    CancelAgent,
    EffectFailed,
    InterruptAgent,
    PauseAgent,
    ResumeAgent,
    SendMessage,
    SpawnAgent,
)

__all__ = ["decode_input", "encode_input"]


def _output(value: Any) -> dict[str, Any]:
    if isinstance(value, ModelReply):
        return {"reply": encode_reply(value)}
    return {"value": value}


def _unoutput(data: dict[str, Any]) -> Any:
    if "reply" in data:
        return decode_reply(data["reply"])
    return data.get("value")


def _request(request: InteractionRequest) -> dict[str, Any]:
    return {
        "id": request.id,
        "kind": request.kind.value,
        "prompt": request.prompt,
        "choices": list(request.choices),
        "stage": request.stage,
        "required": request.required,
        "payload": request.payload,
    }


def _unrequest(data: dict[str, Any]) -> InteractionRequest:
    return InteractionRequest(
        str(data["id"]),
        InteractionKind(data["kind"]),
        str(data["prompt"]),
        tuple(data["choices"]),
        str(data["stage"]),
        bool(data["required"]),
        data["payload"],
    )


def _response(response: InteractionResponse) -> dict[str, Any]:
    return {
        "request_id": response.request_id,
        "value": response.value,
        "choice": response.choice,
        "approved": response.approved,
    }


def _unresponse(data: dict[str, Any]) -> InteractionResponse:
    return InteractionResponse(
        str(data["request_id"]), str(data["value"]), data["choice"], data["approved"]
    )


_ENCODERS: dict[type, tuple[str, Callable[[Any], dict[str, Any]]]] = {
    SpawnAgent: (
        "spawn",
        lambda i: {
            "agent_id": i.agent_id,
            "behavior": i.behavior,
            "message": i.message,
            "name": i.name,
            "interactive": i.interactive,
        },
    ),
    SendMessage: ("send", lambda i: {"agent_id": i.agent_id, "message": i.message}),
    PauseAgent: ("pause", lambda i: {"agent_id": i.agent_id}),
    ResumeAgent: ("resume", lambda i: {"agent_id": i.agent_id}),
    CancelAgent: ("cancel", lambda i: {"agent_id": i.agent_id, "reason": i.reason}),
    InterruptAgent: (
        "interrupt",
        lambda i: (
            {"agent_id": i.agent_id}
            if i.partial is None
            else {"agent_id": i.agent_id, "ref": i.ref, "partial": i.partial}
        ),
    ),
    EffectFailed: (
        "effect_failed",
        lambda i: {
            "agent_id": i.agent_id,
            "ref": i.ref,
            "error": i.error,
            "error_type": i.error_type,
        },
    ),
    ToolOutcome: (
        "outcome",
        lambda i: {
            "agent_id": i.agent_id,
            "batch_id": i.batch_id,
            "elapsed": i.elapsed,
            "results": [
                {"call_id": r.call_id, "error": r.error, **_output(r.output)} for r in i.results
            ],
        },
    ),
    PromptOpened: (
        "prompt_opened",
        lambda i: {
            "agent_id": i.agent_id,
            "request": _request(i.request),
            "at": i.at,
            "deadline": i.deadline,
        },
    ),
    PromptSettled: (
        "prompt_settled",
        lambda i: {
            "agent_id": i.agent_id,
            "request_id": i.request_id,
            "how": i.how.value,
            "response": _response(i.response),
            "opened_at": i.opened_at,
            "at": i.at,
            "kind": i.kind.value,
        },
    ),
}

_DECODERS: dict[str, Callable[[dict[str, Any]], object]] = {
    "spawn": lambda d: SpawnAgent(
        d["agent_id"], d["behavior"], d["message"], d["name"], d["interactive"]
    ),
    "send": lambda d: SendMessage(d["agent_id"], d["message"]),
    "pause": lambda d: PauseAgent(d["agent_id"]),
    "resume": lambda d: ResumeAgent(d["agent_id"]),
    "cancel": lambda d: CancelAgent(d["agent_id"], d["reason"]),
    "interrupt": lambda d: InterruptAgent(d["agent_id"], d.get("ref", ""), d.get("partial")),
    "effect_failed": lambda d: EffectFailed(d["agent_id"], d["ref"], d["error"], d["error_type"]),
    "outcome": lambda d: ToolOutcome(
        d["agent_id"],
        d["batch_id"],
        tuple(ToolResult(r["call_id"], _unoutput(r), r["error"]) for r in d["results"]),
        float(d["elapsed"]),
    ),
    "prompt_opened": lambda d: PromptOpened(
        d["agent_id"], _unrequest(d["request"]), d["at"], d["deadline"]
    ),
    "prompt_settled": lambda d: PromptSettled(
        d["agent_id"],
        d["request_id"],
        Settlement(d["how"]),
        _unresponse(d["response"]),
        d["opened_at"],
        d["at"],
        InteractionKind(d["kind"]),
    ),
}


def encode_input(item: object) -> tuple[str, str]:
    """The kind name and JSON payload of an input.

    Raises:
        JournalError: the input is of an unknown type or holds a value JSON cannot encode.
    """
    entry = _ENCODERS.get(type(item))
    if entry is None:
        raise JournalError(f"cannot journal an input of type {type(item).__name__}")
    kind, encode = entry
    try:
        payload = json.dumps(encode(item), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise JournalError(f"cannot journal {kind} input {item!r}: {exc}") from exc
    return kind, payload


def decode_input(kind: str, payload: str) -> object:
    """Rebuild an input from its kind name and JSON payload.

    Raises:
        JournalError: unknown kind, or a payload that is not what the kind needs.
    """
    decode = _DECODERS.get(kind)
    if decode is None:
        raise JournalError(f"journal holds an input of unknown kind {kind!r}")
    try:
        return decode(json.loads(payload))
    except (KeyError, TypeError, ValueError) as exc:
        raise JournalError(f"journal holds a malformed {kind} input: {exc}") from exc
