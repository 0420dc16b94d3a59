"""The run behind ``tests/journal/fixtures/*.db``: journals recorded by an older tickwork.

``python -m tests.journal.fixture_run OUT.db`` records it (deterministic: virtual time,
lockstep, scripted answers). A fixture is recorded once, by the tickwork of the commit that
adds it, and committed; ``test_fixtures.py`` replays it with today's code, so a change that
alters what a tick records or how it is digested fails there unless the journal format is
versioned. Keep this module's behaviours as they are: the fixtures name them.

The run touches every part of an agent's digest: tool results with nested, unicode and
float values, a model call, prompts of three kinds, sleeps with fractional deadlines, a
mailbox, a spawned child joined, a result that is a nested structure, and a failed tool.
"""

from __future__ import annotations

import sys
from typing import Any

from runtime import (
    Ask,
    CallTools,
    InteractionRequest,
    InteractionResponse,
    Join,
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


def make_tools() -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool()
    def measure(args: dict[str, Any], ctx: Any) -> Any:
        n = int(args["n"])
        return {
            "n": n,
            "ratio": n / 7,
            "tiny": n * 1e-9,
            "label": f"mesure é 測 🙂 {n}",
            "nested": {"z": [n, None, True], "a": {"b": n * 2.5}},
        }

    @tools.tool()
    def fail(args: dict[str, Any], ctx: Any) -> Any:
        raise RuntimeError(f"no luck with {args.get('what')!r}")

    return tools


def models() -> dict[str, ScriptedModel]:
    return {"default": ScriptedModel(["plan: measure twice", "plan: ask first"], cycle=True)}


def child(turn: Any) -> Any:
    """Sleeps a fraction of a second, then returns what it was sent."""
    yield Sleep(0.125)
    return {"child_of": turn.message, "pi": 3.14159}


def surveyor(turn: Any) -> Any:
    """Think, measure, fail a tool, ask three ways, spawn and join a child, return it all."""
    reply = yield Think(f"survey {turn.message}")
    n = 1 + turn.rng.randrange(5)
    results = yield CallTools(
        ToolCall("m1", "measure", {"n": n}),
        ToolCall("m2", "measure", {"n": n + 1}),
        ToolCall("f1", "fail", {"what": "the weather"}),
    )
    yield Sleep(0.37 * n)
    name = yield Ask(InteractionRequest.free_text("", f"name for {turn.message}?"))
    pick = yield Ask(InteractionRequest.choice("", "which?", ["left", "right", "ünder"]))
    ok = yield Ask(InteractionRequest.confirm("", "go on?"))
    kid = yield Spawn(child, f"{turn.message}-kid")
    joined = yield Join(kid)
    return {
        "reply": reply.text,
        "outputs": [r.output if r.ok else r.error for r in results],
        "name": name.value,
        "pick": pick.choice,
        "ok": ok.approved,
        "child": joined,
        "message": turn.message,
    }


def _answer(world: World) -> int:
    answered = 0
    for _owner, request in sorted(world.hub.pending(), key=lambda pair: pair[1].id):
        kind = request.kind.value
        if kind == "choice":
            response = InteractionResponse.choose(request.id, 2)
        elif kind == "confirm":
            response = InteractionResponse.approval(request.id, True)
        else:
            response = InteractionResponse.text(request.id, f"réponse {request.id}")
        world.hub.answer(response)
        answered += 1
    return answered


def record(path: str) -> tuple[int, str]:
    """Record the fixture run to ``path``; returns its tick count and last digest."""
    world = World(
        seed=2024,
        clock=ManualClock(),
        tools=make_tools(),
        models=models(),
        journal=Journal.create(path),
        lockstep=True,
        interaction_timeout_secs=0,
    )
    try:
        agents = [world.spawn(surveyor, f"site {i}", name=f"surveyor-{i}") for i in range(4)]
        world.run_until_idle(timeout=60)
        # Keys in sorted order: journals before issue 20 sorted an input's keys, so a behaviour
        # that read a message's key order (this one, in an f-string) diverged on replay.
        world.send(agents[0], {"at": 1.5, "note": "über"})
        for _ in range(40):
            world.run_until_idle(timeout=60)
            if not _answer(world):
                break
        world.run_until_idle(timeout=60)
        return world.tick_count, world.digest()
    finally:
        world.close()


if __name__ == "__main__":
    print(record(sys.argv[1]))
