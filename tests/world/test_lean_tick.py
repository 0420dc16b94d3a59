"""The lean tick: a world without host systems runs only the stages that have work.

``TickMachine._lean_tick`` leaves out a built-in stage exactly when it would return at once,
and sets outcome inputs aside itself instead of walking ``ApplyInputs``. A host system
(even one that does nothing) puts the world back on ``esper.process``, so each test here
runs the same deterministic (lockstep) population twice, with and without a no-op host
system, and asks for the same report and digest after every tick.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from components import InteractionRequest, PromptOpened, ToolCall
from runtime import (
    Ask,
    CallTools,
    InteractionResponse,
    ManualClock,
    ScriptedModel,
    Sleep,
    Think,
    TickReport,
    World,
)
from runtime.world.inputs import COMMANDS
from systems.apply_inputs import _COMMANDS as APPLIED
from systems.apply_inputs import AddEntity, SpawnAgent


def worker(turn: Any) -> Generator[Any, Any, str]:
    reply = yield Think(f"plan {turn.message}")
    results = yield CallTools(ToolCall("c1", "echo", {"x": 1}), ToolCall("c2", "echo", {"x": 2}))
    yield Sleep(0.5)
    answer = yield Ask(InteractionRequest.free_text("", f"{reply.text}: {len(results)} ok?"))
    yield Sleep(0)
    return f"{turn.message}: {answer.value}"


def _run(with_host_system: bool) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    world = World(
        clock=ManualClock(),
        track_digests=True,
        models={"default": ScriptedModel(["plan"] * 20)},
    )
    try:
        world.tools.tool("echo")(lambda args, ctx: args["x"])
        if with_host_system:
            world.add_system(lambda ctx: None, after="step_behaviors")
        ticks: list[tuple[Any, ...]] = []
        agents = [world.spawn(worker, f"task {i}") for i in range(6)]

        def operator(report: TickReport, inputs: list[tuple[int, object]]) -> None:
            ticks.append(
                (
                    report.tick,
                    report.now,
                    report.inputs,
                    report.stepped,
                    report.changed,
                    report.digest,
                )
            )
            for _seq, item in inputs:
                if isinstance(item, PromptOpened):
                    world.hub.answer(InteractionResponse.text(item.request.id, "yes"))
            # Commands at fixed ticks: these ticks take the whole pipeline.
            if report.tick == 2:
                world.interrupt(agents[0])
                world.pause(agents[1])
            if report.tick == 4:
                world.resume(agents[1])
                world.cancel(agents[2])
            if report.tick == 6:
                world.send(agents[0], "again")

        world.observe(operator)
        world.run_until_idle(timeout=30)
        results = {a: (world.status(a).kind, world.result(a)) for a in agents}
        return ticks, results
    finally:
        world.close()


def test_a_tick_without_host_systems_reports_what_the_whole_pipeline_reports() -> None:
    lean = _run(with_host_system=False)
    whole = _run(with_host_system=True)
    assert lean == whole
    assert len(lean[0]) > 10


def test_an_outcome_only_tick_does_not_walk_apply_inputs() -> None:
    world = World(
        clock=ManualClock(),
        models={"default": ScriptedModel(["plan"] * 2)},
        interaction_timeout_secs=0,
    )
    try:
        world.tools.tool("echo")(lambda args, ctx: args["x"])
        calls: list[int] = []
        apply = world._pipeline[0]
        original = apply.process
        apply.process = lambda state: (calls.append(state.tick), original(state))[1]
        agent = world.spawn(worker, "one")  # the spawn is a command: the whole pipeline
        world.run_until_idle(timeout=30)
        assert world.result(agent) is None  # asked, and nobody answers
        assert calls == [1]
    finally:
        world.close()


def test_commands_are_exactly_the_inputs_apply_inputs_applies() -> None:
    # The lean tick sets every other input aside as an outcome, as ApplyInputs does.
    assert set(COMMANDS) == {SpawnAgent, AddEntity, *APPLIED}


def test_a_pipeline_the_lean_tick_does_not_know_is_walked_whole() -> None:
    world = World(clock=ManualClock(), models={"default": ScriptedModel(["plan"] * 2)})
    try:
        world.tools.tool("echo")(lambda args, ctx: args["x"])
        world._stages = [*world._stages, "a_stage_added_later"]  # as a new built-in would
        calls: list[int] = []
        apply = world._pipeline[0]
        original = apply.process
        apply.process = lambda state: (calls.append(state.tick), original(state))[1]
        world.spawn(worker, "one")
        world.tick()
        world.tick()
        assert calls == [1, 2]
    finally:
        world.close()
