"""Agent transitions at the edges: interrupted joins, cancelled sleepers, queued messages."""

from __future__ import annotations

import pytest

from runtime import (
    Ask,
    CallTools,
    InteractionRequest,
    InteractionResponse,
    Join,
    Sleep,
    Spawn,
    StatusKind,
    ToolCall,
    ToolRegistry,
    UnknownAgentError,
    WaitReason,
)


def napper(turn):
    yield Sleep(turn.message or 10)
    return "rested"


def test_an_interrupted_join_forgets_the_children_and_a_later_join_still_works(make_world):
    def parent(turn):
        if turn.message == "first":
            child = yield Spawn(napper, 50)
            yield Join(child)
            return "never"
        return (yield Join(f"{turn.agent_id}.1"))

    world = make_world()
    agent = world.spawn(parent, "first", interactive=True)
    world.run_until_idle(skip_time=False)
    assert world.status(agent).reason is WaitReason.CHILDREN
    world.interrupt(agent)
    world.tick()
    assert world.status(agent).kind is StatusKind.IDLE
    world.send(agent, "second")
    world.run_until_idle()
    assert world.result(agent) == ["rested"]


def test_a_cancelled_sleeper_never_wakes(make_world):
    woke: list[str] = []

    def sleeper(turn):
        yield Sleep(5)
        woke.append(turn.agent_id)

    world = make_world()
    agent = world.spawn(sleeper)
    world.tick()
    world.cancel(agent)
    world.run_until_idle()
    assert woke == []
    assert world.status(agent).kind is StatusKind.CANCELLED
    assert world.now == 0.0  # the abandoned timer does not pull time forward


def test_a_sleeper_paused_past_its_deadline_wakes_on_resume(make_world):
    world = make_world()
    agent = world.spawn(napper, 5)
    world.tick()
    world.pause(agent)
    world.tick()
    world.clock.advance(10)
    for _ in range(3):
        world.tick()
    assert world.status(agent).kind is StatusKind.PAUSED
    world.resume(agent)
    world.run_until_idle()
    assert world.result(agent) == "rested"


def test_pausing_during_an_approval_keeps_paused_and_resumes_waiting(make_world):
    tools = ToolRegistry()

    @tools.tool(requires_approval=True)
    def launch(args, ctx):
        return "launched"

    def worker(turn):
        return (yield CallTools(ToolCall("c1", "launch")))[0].output

    world = make_world(tools=tools, interaction_timeout_secs=0)
    agent = world.spawn(worker)
    world.run_until_idle()
    assert world.status(agent).reason is WaitReason.TOOL_APPROVAL
    world.pause(agent)
    world.tick()
    assert world.status(agent).kind is StatusKind.PAUSED
    world.resume(agent)
    world.tick()
    status = world.status(agent)
    assert (status.kind, status.reason) == (StatusKind.WAITING, WaitReason.TOOL_APPROVAL)
    [(_, request)] = world.hub.pending()
    world.hub.answer(InteractionResponse.approval(request.id, True))
    world.run_until_idle(timeout=10)
    assert world.result(agent) == "launched"


def test_a_message_sent_mid_turn_runs_as_the_next_turn(make_world):
    def echo(turn):
        yield Sleep(1)
        return turn.message

    world = make_world()
    agent = world.spawn(echo, "one", interactive=True)
    world.tick()
    world.send(agent, "two")
    world.tick()
    assert world.status(agent).kind is StatusKind.ACTIVE
    world.run_until_idle()
    assert world.result(agent) == "two"
    assert [e.content for e in world.history(agent)] == ["one", "two"]


def test_a_terminal_agent_ignores_later_commands(make_world):
    world = make_world()
    agent = world.spawn(napper, 1)
    world.run_until_idle()
    for command in (world.pause, world.resume, world.interrupt, world.cancel):
        command(agent)
    world.send(agent, "hello?")
    world.run_until_idle()
    assert world.status(agent).kind is StatusKind.COMPLETE
    assert world.result(agent) == "rested"


def test_an_answer_to_a_cancelled_agents_prompt_changes_nothing(make_world):
    def asker(turn):
        return (yield Ask(InteractionRequest.free_text("", "?"))).value

    world = make_world(interaction_timeout_secs=0)
    agent = world.spawn(asker)
    world.run_until_idle()
    [(_, request)] = world.hub.pending()
    world.cancel(agent)
    world.run_until_idle()
    assert world.hub.answer(InteractionResponse.text(request.id, "late")) is False
    assert world.status(agent).kind is StatusKind.CANCELLED
    assert world.result(agent) is None


def test_a_behaviour_raising_when_closed_is_contained(make_world):
    def stubborn(turn):
        try:
            yield Sleep(100)
        finally:
            raise RuntimeError("cleanup failed")

    world = make_world()
    agent = world.spawn(stubborn, interactive=True)
    other = world.spawn(napper, 1)
    world.tick()
    world.interrupt(agent)
    world.run_until_idle()
    assert world.status(agent).kind is StatusKind.IDLE
    assert world.result(other) == "rested"


def test_an_agent_paused_while_queued_to_step_does_not_step_until_resumed(make_world):
    steps: list[int] = []

    def ticker(turn):
        while True:
            steps.append(turn.generation)
            yield Sleep(0)  # ready again next tick

    world = make_world()
    agent = world.spawn(ticker)
    for _ in range(3):
        world.tick()
    assert len(steps) == 3  # one step per tick, the first in the spawn's tick
    world.pause(agent)
    for _ in range(5):
        world.tick()
    assert len(steps) == 3
    assert world._state.ready == {}
    world.resume(agent)
    world.tick()
    world.tick()
    assert len(steps) == 5


def test_children_lists_what_an_agent_spawned_that_the_world_still_holds(make_world):
    def parent(turn):
        first = yield Spawn(napper, 1)
        second = yield Spawn(napper, 2)
        return (yield Join(first, second))

    world = make_world()
    agent = world.spawn(parent)
    world.run_until_idle()
    assert world.children(agent) == [f"{agent}.1", f"{agent}.2"]
    assert world.children(f"{agent}.1") == []
    world.forget(f"{agent}.1")
    assert world.children(agent) == [f"{agent}.2"]
    with pytest.raises(UnknownAgentError):
        world.children("nobody")
