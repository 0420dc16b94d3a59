"""Embedding tickwork in a host: a game-style loop calling tick(), then a background world.

Run it:  python examples/embedded_host.py
"""

from __future__ import annotations

import time

from runtime import (
    Ask,
    CallTools,
    InteractionRequest,
    InteractionResponse,
    ManualClock,
    ScriptedModel,
    ShellTool,
    Sleep,
    StatusKind,
    Think,
    ToolCall,
    ToolRegistry,
    World,
)


def scout(turn):
    """Think, look around with a tool, rest, and report."""
    plan = yield Think(f"how to explore {turn.message}")
    [listing] = yield CallTools(ToolCall("ls", "list", {"path": "."}))
    yield Sleep(turn.rng.uniform(1, 5))  # game time, not wall time
    entries = len(listing.output["stdout"].split())
    return f"{plan.text}: {entries} entries in {turn.message}"


def operator_gated(turn):
    """Ask a person before doing anything."""
    answer = yield Ask(InteractionRequest.free_text("", f"may I deploy {turn.message}?"))
    return f"deploy {turn.message}: {answer.value or 'no answer'}"


def host_loop() -> None:
    """A host that owns the frame loop: one world.tick() per frame, virtual time."""
    tools = ToolRegistry()
    tools.add(ShellTool("list", ["ls", "{path}"], timeout=5))
    models = {"default": ScriptedModel(["walk the walls"], cycle=True)}
    clock = ManualClock()
    with World(seed=1, clock=clock, tools=tools, models=models) as world:
        scouts = [world.spawn(scout, f"room {i}", name=f"scout-{i}") for i in range(5)]
        frame = 0
        while any(not world.status(a).kind.is_terminal for a in scouts):
            world.tick()
            clock.advance(1 / 60)  # one frame of game time
            frame += 1
            time.sleep(0.001)  # the host's own frame work; lane jobs finish meanwhile
        print(f"host loop: {len(scouts)} scouts done in {frame} frames")
        for agent in scouts:
            print(f"  {agent}: {world.result(agent)}")


def background_world() -> None:
    """The world runs on its own thread; the host answers prompts as they appear."""
    with World(seed=2, interaction_timeout_secs=30) as world:
        agents = [world.spawn(operator_gated, env) for env in ("staging", "prod")]
        world.start()
        answered = 0
        while answered < len(agents):
            if not world.running:  # the loop died (world.loop_error): stop() raises why
                world.stop()
            for agent_id, request in world.hub.pending():
                reply = "yes" if "staging" in request.prompt else "not today"
                print(f"host answers {agent_id}: {request.prompt!r} -> {reply!r}")
                world.hub.answer(InteractionResponse.text(request.id, reply))
                answered += 1
            time.sleep(0.01)  # a real host would do its own work here
        deadline = time.monotonic() + 10
        while any(world.status(a).kind is not StatusKind.COMPLETE for a in agents):
            if time.monotonic() > deadline:
                raise SystemExit("agents did not finish")
            time.sleep(0.01)
        world.stop()
        for agent in agents:
            print(f"  {agent}: {world.result(agent)}")


if __name__ == "__main__":
    host_loop()
    background_world()
