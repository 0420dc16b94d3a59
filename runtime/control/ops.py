"""What each control request does: the ops of the control channel, by name.

An op gets the world and the (already authorised) request, checks the fields it needs, and
returns the reply; it raises ``Refused`` for an error reply of its own. Each one talks to
the world only through its thread-safe API: commands that enqueue an input, the hub, and
reads that take whole ticks.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from components import InteractionKind, InteractionRequest, InteractionResponse
from runtime._version import __version__
from runtime.lane.values import shown
from runtime.world import World

__all__ = ["OPS", "Refused", "error_reply", "steer"]

Stats = Callable[[], dict[str, Any]] | None
Op = Callable[[World, dict[str, Any], Stats], dict[str, Any]]


def error_reply(code: str, message: str) -> dict[str, Any]:
    """An error reply: ``{"ok": false, "code": ..., "error": ...}``."""
    return {"ok": False, "code": code, "error": message}


class Refused(Exception):
    """A request that gets the error reply ``code``, ``message``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def field(request: dict[str, Any], name: str, kind: type, default: Any = ...) -> Any:
    """The request's field ``name`` of type ``kind`` (``default`` when absent, if given).

    Raises:
        Refused: the field is missing (and has no default) or has the wrong type.
    """
    if name not in request or request[name] is None:
        if default is ...:
            raise Refused("missing_field", f"missing field {name!r} ({kind.__name__})")
        return default
    value = request[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        shown = repr(value)[:80]
        raise Refused("bad_field", f"field {name!r} must be a {kind.__name__}, got {shown}")
    return value


def ping(world: World, request: dict[str, Any], stats: Stats) -> dict[str, Any]:
    """Check the channel: the reply carries tickwork's version."""
    return {"ok": True, "pong": True, "version": __version__}


def agents(world: World, request: dict[str, Any], stats: Stats) -> dict[str, Any]:
    """Every agent (children too) with its status and last result, in spawn order."""
    found = []
    for agent_id in world.agents():
        status = world.status(agent_id)
        found.append(
            {
                "id": agent_id,
                "status": status.kind.value,
                "reason": status.reason.value if status.reason else None,
                "message": status.message,
                "result": _plain(world.result(agent_id)),
            }
        )
    return {"ok": True, "agents": found}


def _plain(value: Any) -> Any:
    """``value`` if it is plain JSON data, else its ``repr`` (cut short)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return shown(value, 200)
    return value


def prompts(world: World, request: dict[str, Any], stats: Stats) -> dict[str, Any]:
    """Every open prompt, in the order they opened."""
    found = [
        {
            "id": req.id,
            "agent": agent_id,
            "kind": req.kind.value,
            "prompt": req.prompt,
            "choices": list(req.choices),
            "stage": req.stage,
        }
        for agent_id, req in world.hub.pending()
    ]
    return {"ok": True, "prompts": found}


def answer(world: World, request: dict[str, Any], stats: Stats) -> dict[str, Any]:
    """Answer the open prompt ``request_id`` with ``value``, ``choice`` and/or ``approved``."""
    request_id = field(request, "request_id", str)
    value = field(request, "value", str, "")
    choice = field(request, "choice", int, None)
    approved = field(request, "approved", bool, None)
    found = world.hub.try_request(request_id)
    if found is None:
        raise Refused("no_prompt", f"no open prompt {request_id!r}")
    prompt = found[1]
    value = _fitting_answer(prompt, value, choice, approved)
    if not world.hub.answer(InteractionResponse(request_id, value, choice, approved)):
        raise Refused("no_prompt", f"prompt {request_id!r} was settled meanwhile")
    return {"ok": True, "answered": request_id, "agent": found[0]}


def _fitting_answer(
    prompt: InteractionRequest, value: str, choice: int | None, approved: bool | None
) -> str:
    """The answer's value, once it is checked to fit ``prompt``'s kind and not contradict itself.

    Raises:
        Refused: ``bad_answer``: an approval for a choice, a choice for a yes/no question,
            no answer at all, a choice out of range, or a value naming another choice.
    """
    kind, where = prompt.kind, f"prompt {prompt.id!r} ({prompt.kind.value})"
    if kind is InteractionKind.CHOICE:
        if approved is not None:
            raise Refused("bad_answer", f"{where} wants a choice, not an approval or denial")
        if choice is None:
            if value not in prompt.choices:
                shown = ", ".join(repr(c) for c in prompt.choices)
                raise Refused("bad_answer", f"{where} wants one of {shown}, got {value!r}")
            return value
        if not 0 <= choice < len(prompt.choices):
            last = len(prompt.choices) - 1
            raise Refused("bad_answer", f"{where}: 'choice' must be 0..{last}, got {choice}")
        if value and value != prompt.choices[choice]:
            raise Refused(
                "bad_answer",
                f"{where}: value {value!r} and choice {choice}"
                f" ({prompt.choices[choice]!r}) disagree: give one",
            )
        return prompt.choices[choice]
    if choice is not None:
        raise Refused("bad_answer", f"{where} has no choices, got choice {choice}")
    if kind in (InteractionKind.CONFIRM, InteractionKind.TOOL_APPROVAL):
        if approved is None:
            raise Refused("bad_answer", f"{where} wants an approval or a denial ('approved')")
        return value
    if approved is not None:
        raise Refused("bad_answer", f"{where} wants text, not an approval or denial")
    return value


def cancel_prompt(world: World, request: dict[str, Any], stats: Stats) -> dict[str, Any]:
    """Withdraw the open prompt ``request_id`` (the agent gets the neutral answer)."""
    request_id = field(request, "request_id", str)
    if not world.hub.cancel(request_id):
        raise Refused("no_prompt", f"no open prompt {request_id!r}")
    return {"ok": True, "cancelled": request_id}


def send(world: World, request: dict[str, Any], stats: Stats) -> dict[str, Any]:
    """Give ``agent`` the message ``text`` (refused for an agent that has ended)."""
    return steer(world, field(request, "agent", str), "send", text=field(request, "text", str))


def _refuse_no_op(world: World, agent: str, op: str) -> None:
    """Refuse a command that would surely do nothing (`World.no_effect`: judged by the
    world as it is and by the commands queued before it, by anyone; a lockstep world's
    ticks wait for its lane work).

    Raises:
        Refused: ``no_effect``, saying why.
        UnknownAgentError: there is no such agent.
    """
    why = world.no_effect(agent, op)
    if why is not None:
        raise Refused("no_effect", why)


def _command(name: str) -> Op:
    def command(world: World, request: dict[str, Any], stats: Stats) -> dict[str, Any]:
        return steer(world, field(request, "agent", str), name)

    command.__doc__ = f"``world.{name}(agent)`` (refused when it would do nothing)."
    return command


def steer(world: World, agent: str, op: str, *, text: str = "") -> dict[str, Any]:
    """``world.<op>(agent)`` for ``pause``, ``resume``, ``cancel`` or ``interrupt``, or
    ``world.send(agent, text)`` for ``send``, refused when it would do nothing (counting
    the commands queued: see `_refuse_no_op`); the reply gives the command's sequence
    number."""
    _refuse_no_op(world, agent, op)
    seq: int = world.send(agent, text) if op == "send" else getattr(world, op)(agent)
    return {"ok": True, "agent": agent, "seq": seq}


def world_stats(world: World, request: dict[str, Any], stats: Stats) -> dict[str, Any]:
    """The tick, world time, agents by status, lane gauges and hub counters (and ``stats``)."""
    lanes = {}
    for lane in (world.lane, world.inference_lane):
        gauge = lane.stats()
        lanes[gauge.name] = {**dataclasses.asdict(gauge), "saturated": gauge.saturated}
    reply: dict[str, Any] = {
        "ok": True,
        "tick": world.tick_count,
        "now": world.now,
        "agents": {kind.value: n for kind, n in world.counts().items()},
        "lanes": lanes,
        "hub": dataclasses.asdict(world.hub.stats()),
    }
    if stats is not None:
        reply.update(stats())
    return reply


def subscribe(world: World, request: dict[str, Any], stats: Stats) -> dict[str, Any]:
    """Start a stream of events; the server sends them after this reply."""
    return {"ok": True, "subscribed": True}


OPS: dict[str, Op] = {
    "ping": ping,
    "agents": agents,
    "prompts": prompts,
    "answer": answer,
    "cancel_prompt": cancel_prompt,
    "send": send,
    "pause": _command("pause"),
    "resume": _command("resume"),
    "cancel": _command("cancel"),
    "interrupt": _command("interrupt"),
    "stats": world_stats,
    "subscribe": subscribe,
}
