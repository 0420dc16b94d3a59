"""Behaviours and tools for journal and replay tests, importable by name in a subprocess."""

from __future__ import annotations

import random
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime import (
    Ask,
    CallTools,
    InteractionKind,
    InteractionRequest,
    Journal,
    ManualClock,
    ScriptedModel,
    Sleep,
    Spawn,
    Think,
    ToolCall,
    ToolRegistry,
    World,
)

CALLS = {"tools": 0}
_lock = threading.Lock()


def make_tools() -> ToolRegistry:
    """Tools whose every call is counted, so a test can prove a replay ran none."""
    tools = ToolRegistry()

    @tools.tool()
    def work(args: dict[str, Any], ctx: Any) -> Any:
        with _lock:
            CALLS["tools"] += 1
        ctx.cancel.wait(float(args.get("secs", 0)))
        return {"done": args.get("n", 0)}

    @tools.tool()
    def echo(args: dict[str, Any], ctx: Any) -> Any:
        return args["text"]

    return tools


def worker(turn: Any) -> Any:
    """Think, call two tools, ask, sleep; the path taken depends on the agent's rng."""
    reply = yield Think(f"plan {turn.message}")
    secs = turn.rng.random() * 0.02
    results = yield CallTools(
        ToolCall("c1", "work", {"n": 1, "secs": secs}), ToolCall("c2", "work", {"n": 2})
    )
    answer = yield Ask(InteractionRequest.free_text("", f"continue {turn.message}?"))
    yield Sleep(turn.rng.choice([0, 0.01, 0.02]))
    return [reply.text, [r.output for r in results], answer.value]


def looper(turn: Any) -> Any:
    """Sleeps a tick at a time, forever (for the kill -9 test)."""
    n = 0
    while True:
        n += 1
        yield Sleep(0)
        if n % 7 == 0:
            yield Sleep(turn.rng.random())


def parent(turn: Any) -> Any:
    """Spawns a child and returns its id."""
    child = yield Spawn(looper, "child")
    return child


def record_forever(path: str) -> None:
    """Record looping agents until killed (run in a subprocess)."""
    world = World(seed=11, clock=ManualClock(), journal=Journal.create(path))
    for _ in range(20):
        world.spawn(looper)
    world.spawn(parent)
    while True:
        world.tick()
        world.clock.advance(0.1)  # type: ignore[attr-defined]


def random_answers(world: World, stop: threading.Event, seed: int) -> None:
    """Answer every open prompt after a random short delay until ``stop`` is set."""
    from runtime import InteractionResponse

    rng = random.Random(seed)
    while not stop.is_set():
        for _owner, request in world.hub.pending():
            time.sleep(rng.random() * 0.005)
            world.hub.answer(InteractionResponse.text(request.id, f"ok {rng.randint(0, 9)}"))
        time.sleep(0.001)


def scripted_models() -> dict[str, ScriptedModel]:
    return {"default": ScriptedModel(["fine", "good"], cycle=True)}


if __name__ == "__main__":
    record_forever(str(Path(sys.argv[1])))


@dataclass
class Box:
    """A dataclass holding anything: a behaviour's result that JSON cannot write as it is."""

    value: Any


def returns_unjsonable(turn: Any) -> Any:
    """Return what JSON cannot write: a tuple key, keys of mixed kinds, a 5,000-digit int."""
    yield Sleep(0)
    return {(1, 2): "pair", 1: "one", "a": Box(10**5000)}


def splits_a_pair(turn: Any) -> Any:
    """A tool's output and the behaviour's result holding half a surrogate pair (what a
    streamed model reply split inside a pair gives), and an answer with the other half."""
    results = yield CallTools(ToolCall("c1", "echo", {"text": "half \ud83d"}))
    answer = yield Ask(InteractionRequest.free_text("", "the other half?"))
    return [results[0].output, answer.value]


def nested(depth: int) -> Any:
    """A list holding a list ... ``depth`` levels deep, around a 0."""
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def returns_deep(turn: Any) -> Any:
    """Return a value nested ``turn.message`` levels deep."""
    yield Sleep(0)
    return nested(int(turn.message))


def asks_badly(turn: Any) -> Any:
    """Ask with a request built by hand whose kind is a string, not an InteractionKind."""
    yield Sleep(1)
    answer = yield Ask(InteractionRequest("", "free_text", "name?"))  # type: ignore[arg-type]
    return answer


def asks_with_a_bad_field(turn: Any) -> Any:
    """Ask a free-text question one of whose fields (``turn.message`` names it) is of the
    wrong kind: a prompt of 6, a stage of None, ``required="no"``."""
    fields: dict[str, Any] = {"prompt": "name?", "stage": "", "required": True}
    fields[turn.message] = {"prompt": 6, "stage": None, "required": "no"}[turn.message]
    yield Sleep(1)
    request = InteractionRequest(
        "", InteractionKind.FREE_TEXT, fields["prompt"], (), fields["stage"], fields["required"]
    )
    answer = yield Ask(request)
    return answer
