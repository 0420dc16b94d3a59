"""Inputs to and from JSON, for the journal.

Every input type has a short kind name and a JSON payload of plain values. Decoding builds
data objects only (dataclasses of strings, numbers and lists): nothing in a journal is
executed. A host component is stored as its type's ``module:qualname`` and its fields, and
decodes to a `ComponentData`; the world makes the component when it applies the input, and
only of a type it knows (registered, or importable by name).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from collections.abc import Callable, Sequence
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from components import (
    InteractionKind,
    InteractionRequest,
    InteractionResponse,
    PromptOpened,
    PromptSettled,
    Settlement,
)
from components.tools import build_result
from runtime.errors import JournalError
from runtime.lane import ToolOutcome
from runtime.lane.jobs import build_outcome
from runtime.lane.values import NotJSON, json_value, shown
from runtime.models.base import ModelReply, decode_reply, encode_reply
from runtime.world.digest import canonical
from runtime.world.host_data import field_names, type_name
from runtime.world.inputs import (
    AddEntity,
    CancelAgent,
    ComponentData,
    EffectFailed,
    ForgetAgent,
    InterruptAgent,
    PauseAgent,
    ResumeAgent,
    SendMessage,
    SpawnAgent,
    build_spawn,
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
        "choices": _storable(list(request.choices)),
        "stage": request.stage,
        "required": request.required,
        "payload": _storable(request.payload),
    }


def _storable(value: Any) -> Any:
    """A prompt's payload as JSON: as it is when it can be, else its canonical text.

    A behaviour's ``Ask`` may carry any payload (a set, an object); a replay never reads it
    (only the prompt's id and kind reach the state), so it must not fail the tick that
    journals the prompt.
    """
    try:
        return json_value(value)
    except NotJSON:
        return {"unstorable": canonical(value)}


def _unrequest(data: dict[str, Any]) -> InteractionRequest:
    # Values as decoded (no `str()` or `bool()` around them): `_check_shape` refuses a
    # field of the wrong kind by name, where a coercion made `5` an id and `"no"` true.
    return InteractionRequest(
        data["id"],
        InteractionKind(data["kind"]),
        data["prompt"],
        _choices(data["choices"]),
        data["stage"],
        data["required"],
        data["payload"],
    )


def _choices(value: Any) -> tuple[str, ...]:
    if value.__class__ is not list or any(c.__class__ is not str for c in value):
        raise TypeError(f"a prompt's choices must be a list of strings, got {shown(value)}")
    return tuple(value)


def _response(response: InteractionResponse) -> dict[str, Any]:
    return {
        "request_id": response.request_id,
        "value": response.value,
        "choice": response.choice,
        "approved": response.approved,
    }


def _unresponse(data: dict[str, Any]) -> InteractionResponse:
    return InteractionResponse(data["request_id"], data["value"], data["choice"], data["approved"])


def _components(components: tuple[Any, ...]) -> list[dict[str, Any]]:
    # A host component by its type's qualified name and its fields: data, never code.
    out = []
    for comp in components:
        if isinstance(comp, ComponentData):  # a replay's input, journaled again (resume)
            out.append({"type": comp.type_name, "fields": dict(comp.fields)})
            continue
        cls = type(comp)
        values = {name: getattr(comp, name) for name in field_names(cls)}
        out.append({"type": type_name(cls), "fields": values})
    return out


def _uncomponents(data: list[dict[str, Any]]) -> tuple[ComponentData, ...]:
    out = []
    for item in data:
        name, values = item["type"], item["fields"]
        if not isinstance(name, str) or not isinstance(values, dict):
            raise TypeError(f"a component needs a type name and fields, got {item!r}")
        out.append(ComponentData(name, values))
    return tuple(out)


def _spawn(i: SpawnAgent) -> dict[str, Any]:
    data = {
        "agent_id": i.agent_id,
        "behavior": i.behavior,
        "message": i.message,
        "name": i.name,
        "interactive": i.interactive,
    }
    if i.components:  # only then: journals without host components read as before
        data["components"] = _components(i.components)
    return data


_ENCODERS: dict[type, tuple[str, Callable[[Any], dict[str, Any]]]] = {
    SpawnAgent: ("spawn", _spawn),
    AddEntity: (
        "add_entity",
        lambda i: {"entity": i.entity, "components": _components(i.components)},
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
    ForgetAgent: (
        "forget",
        lambda i: (
            {"agent_id": i.agent_id, "at_once": True} if i.at_once else {"agent_id": i.agent_id}
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
            "error": i.error,
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
    "spawn": lambda d: build_spawn(
        d["agent_id"],
        d["behavior"],
        d["message"],
        d["name"],
        d["interactive"],
        _uncomponents(d.get("components", [])),
    ),
    "add_entity": lambda d: AddEntity(d["entity"], _uncomponents(d["components"])),
    "send": lambda d: SendMessage(d["agent_id"], d["message"]),
    "pause": lambda d: PauseAgent(d["agent_id"]),
    "resume": lambda d: ResumeAgent(d["agent_id"]),
    "cancel": lambda d: CancelAgent(d["agent_id"], d["reason"]),
    "interrupt": lambda d: InterruptAgent(d["agent_id"], d.get("ref", ""), d.get("partial")),
    "forget": lambda d: ForgetAgent(d["agent_id"], d.get("at_once", False)),
    "effect_failed": lambda d: EffectFailed(d["agent_id"], d["ref"], d["error"], d["error_type"]),
    # Through the builders the lane uses (every field, positionally): a replay decodes
    # one outcome per batch the recording ran; `_check_shape` checks them after.
    "outcome": lambda d: build_outcome(
        d["agent_id"],
        d["batch_id"],
        tuple([build_result(r["call_id"], _unoutput(r), r["error"]) for r in d["results"]]),
        float(_finite(d["elapsed"])),
        d.get("error"),  # absent in journals written before outcomes had one
    ),
    "prompt_opened": lambda d: PromptOpened(
        d["agent_id"],
        _unrequest(d["request"]),
        _finite(d["at"]),
        None if d["deadline"] is None else _finite(d["deadline"]),
    ),
    "prompt_settled": lambda d: PromptSettled(
        d["agent_id"],
        d["request_id"],
        Settlement(d["how"]),
        _unresponse(d["response"]),
        _finite(d["opened_at"]),
        _finite(d["at"]),
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
        # Keys in the order the value has them: a behaviour that reads a message's or a
        # tool output's key order (an f-string, a loop over items) sees in a replay what
        # it saw live. Journals that sorted them still decode: decoders read by key.
        payload = _dumps(encode(item))
    except (TypeError, ValueError, RecursionError) as exc:
        # Not `{item!r}`: the repr of what JSON refused may raise too (a 5,000-digit int).
        agent = getattr(item, "agent_id", None)
        raise JournalError(f"cannot journal the {kind} input of agent {agent!r}: {exc}") from exc
    return kind, payload


# `json.dumps(value, allow_nan=False)`'s C encoder, built once with the very arguments
# dumps builds it with on every call (with a JSONEncoder around it: ~2.6 of the ~6.4 us a
# tool outcome's payload took), less the circular-reference check, which keeps state
# within a call: a cycle raises RecursionError instead of ValueError, refused alike. The
# same text; no state between calls, so threads share it (the control server encodes too).
_PAYLOAD: Callable[[Any, int], Sequence[str]] | None = (
    None
    if c_make_encoder is None
    else c_make_encoder(
        None,
        json.JSONEncoder().default,
        encode_basestring_ascii,
        None,
        ": ",
        ", ",
        False,
        False,
        False,
    )
)


def _dumps(value: Any) -> str:
    """``json.dumps(value, allow_nan=False)``."""
    if _PAYLOAD is None:  # Python without the C accelerator
        return json.dumps(value, allow_nan=False)
    return "".join(_PAYLOAD(value, 0))


def decode_input(kind: str, payload: str) -> object:
    """Rebuild an input from its kind name and JSON payload.

    Raises:
        JournalError: unknown kind, or a payload that is not what the kind needs.
    """
    decode = _DECODERS.get(kind)
    if decode is None:
        raise JournalError(f"journal holds an input of unknown kind {kind!r}")
    try:
        item = decode(_loads(payload))
        _check_shape(item)
    except (KeyError, TypeError, ValueError, OverflowError, RecursionError) as exc:
        # OverflowError: a number no float holds (`1e999` as an int field); RecursionError:
        # nesting deeper than the decoder goes (a tampered file, never one tickwork wrote).
        raise JournalError(f"journal holds a malformed {kind} input: {exc}") from exc
    except _Misshapen as bad:
        where = "".join(reversed(bad.path)).replace(".[", "[")
        raise JournalError(f"journal holds a malformed {kind} input: `{where}` {bad.why}") from None
    return item


# The classes a field's value may have, by its annotation: a float field takes an int too
# (JSON may write 2.0 as 2); a bool is no int here, though Python says it is one.
_SCALARS: dict[object, tuple[type, ...]] = {
    str: (str,),
    bool: (bool,),
    int: (int,),
    float: (float, int),
}


# A dataclass's checks: each scalar field (its name, the classes its value may have,
# whether it may be None) and the other fields, which may hold data to look into. A class
# that is no dataclass (a str, a dict, a list) has none: `_NONE`.
_Shape = tuple[tuple[tuple[str, tuple[type, ...], bool], ...], tuple[str, ...]]
_NONE: _Shape = ((), ())
_NAMED = {str: "a string", bool: "true or false", int: "an integer", float: "a number"}
_PLAIN = frozenset({str, int, float, bool, type(None), list, dict})  # JSON's own: no fields


def _read_shape(cls: type) -> _Shape:
    if not dataclasses.is_dataclass(cls):
        return _NONE
    hints = typing.get_type_hints(cls)
    scalars, others = [], []
    for field in dataclasses.fields(cls):
        hint, optional = hints[field.name], False
        args = typing.get_args(hint)
        if isinstance(hint, types.UnionType) and len(args) == 2 and type(None) in args:
            hint, optional = args[0] if args[1] is type(None) else args[1], True
        kinds = _SCALARS.get(hint)
        if kinds is not None:
            scalars.append((field.name, kinds, optional))
        elif not (isinstance(hint, type) and issubclass(hint, enum.Enum)):
            others.append(field.name)  # an enum's decoder built it from its value already
    return tuple(scalars), tuple(others)


class _Misshapen(Exception):
    # The path is built only on the way out of a failure: a good input pays nothing for it.
    def __init__(self, name: str, why: str) -> None:
        self.path, self.why = [name], why


def _check_shape(value: Any) -> None:
    """Refuse a decoded input whose scalar fields, or those of the data inside it (a
    request, a response, tool results, a reply's usage), are not of their declared type.

    A journal is data from outside: an agent id of 5 or a list decoded without complaint
    and failed the replay deep inside ("internal error: TypeError: '<' not supported").

    Raises:
        _Misshapen: naming the field (its path) and the value.
    """
    cls = value.__class__
    check = _CHECKS.get(cls)
    if check is None:
        check = _CHECKS[cls] = _compile_check(cls)
    check(value)


# Each class's check, compiled from its shape on first use (`_compile_check`).
_CHECKS: dict[type, Callable[[Any], None]] = {}


def _compile_check(cls: type) -> Callable[[Any], None]:
    """The check of ``cls``'s instances, as one function of straight-line tests.

    A replay decodes every input of a journal, and the checks looped over a class's shape
    field by field cost as much as the decoding itself (4.3 of 8.7 us a tool outcome); as
    code, a field costs one attribute read and one class test. A dataclass's field names
    are identifiers, so they are written into the code as they are (as `dataclasses`
    writes its own ``__init__``).
    """
    scalars, others = _read_shape(cls)
    names: dict[str, Any] = {"_bad": _bad_scalar, "_inner": _check_inner, "_plain": _PLAIN}
    lines = ["def check(value):"]
    for index, (name, kinds, optional) in enumerate(scalars):
        names[f"k{index}"] = kinds
        names.update((f"k{index}_{k}", kind) for k, kind in enumerate(kinds))
        lines.append(f"    v = value.{name}")
        test = " and ".join(f"c is not k{index}_{k}" for k in range(len(kinds)))
        none = "v is not None and " if optional else ""
        lines.append(f"    c = v.__class__\n    if {none}{test}:")
        lines.append(f"        _bad({name!r}, k{index}, {optional}, v)")
    for name in others:  # JSON's own values (a tool's output, a payload) hold nothing to check
        lines.append(f"    v = value.{name}\n    if v.__class__ not in _plain:")
        lines.append(f"        _inner(v, {name!r})")
    if len(lines) == 1:
        lines.append("    return None")
    exec("\n".join(lines), names)
    check: Callable[[Any], None] = names["check"]
    return check


def _bad_scalar(name: str, kinds: tuple[type, ...], optional: bool, field: Any) -> None:
    also = " or null" if optional else ""
    raise _Misshapen(name, f"must be {_NAMED[kinds[0]]}{also}, got {shown(field)}")


def _check_inner(inner: Any, name: str) -> None:
    """Check a field that may hold data to look into (a dataclass, or a tuple of them)."""
    kind = inner.__class__
    if kind in _PLAIN:
        return
    try:
        if kind is tuple:
            for index, item in enumerate(inner):
                if item.__class__ not in _PLAIN:
                    try:
                        _check_shape(item)
                    except _Misshapen as bad:
                        bad.path.append(f"[{index}].")
                        raise
        else:
            _check_shape(inner)
    except _Misshapen as bad:
        bad.path.append(f"{name}.")
        raise


def _no_constant(name: str) -> float:
    # `NaN`, `Infinity`, `-Infinity`: JSON has none, and a journal never holds one (its
    # encoder refuses them); a decoder that took them let `"deadline": NaN` replay.
    raise ValueError(f"{name} is not a JSON number")


def _finite(value: Any) -> Any:
    """A time or duration of a journal's input as decoded, refused if it is a number no
    clock reads: ValueError for an infinite float (`1e999` decodes to inf), OverflowError
    for an int no float holds. Anything else is `_check_shape`'s to refuse, by its type."""
    if value.__class__ is float:
        if not value - value == 0.0:  # inf - inf is nan (no NaN gets here: `_no_constant`)
            raise ValueError(f"{value!r} is not a finite number")
    elif value.__class__ is int:
        float(value)  # OverflowError past a float's range
    return value


_DECODER = json.JSONDecoder(parse_constant=_no_constant)
_scan: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def _loads(text: str) -> Any:
    """``json.loads(text)`` refusing ``NaN`` and ``Infinity``, in a third of its time for
    the text ``json.dumps`` wrote.

    The decoder's scanner reads one value from the start; ``json.loads`` adds two
    whitespace searches and a Python frame or two around it, which cost twice the scan of
    a tool outcome's payload. Anything the scanner does not take whole (leading or
    trailing whitespace, trailing data, a bad value) goes to ``json.loads``, which decodes
    it or raises its own error.
    """
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        return _DECODER.decode(text)
    if end != len(text):
        return _DECODER.decode(text)
    return value
