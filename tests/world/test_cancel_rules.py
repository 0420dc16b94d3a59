"""Cancel leaves nothing behind, whenever it lands: no orphaned prompt, no call without a result."""

from __future__ import annotations

import threading

import pytest

from runtime import (
    Ask,
    CallTools,
    Cancelled,
    CancelToken,
    InteractionHub,
    InteractionRequest,
    Spawn,
    StatusKind,
    ToolCall,
    ToolContext,
    ToolRegistry,
)


def asker(turn):
    answer = yield Ask(InteractionRequest.free_text("", "go?"))
    return answer.value


@pytest.mark.parametrize("timeout", [0, 3600])
def test_a_cancel_landing_before_the_prompt_opened_event_is_applied_leaves_no_prompt(
    make_world, timeout
):
    world = make_world(interaction_timeout_secs=timeout)
    agent = world.spawn(asker, "x")
    world.tick()  # the Ask is dispatched: the prompt is open, its event not yet applied
    assert len(world.hub.pending()) == 1
    world.cancel(agent)  # lands in the same tick as the PromptOpened event
    world.tick()
    world.run_until_idle(max_ticks=10)
    assert world.status(agent).kind is StatusKind.CANCELLED
    assert world.hub.pending() == []


def test_a_child_prompt_not_yet_recorded_is_settled_when_its_parent_is_cancelled(make_world):
    def parent(turn):
        yield Spawn(asker, "child")
        yield Ask(InteractionRequest.free_text("", "parent?"))

    world = make_world(interaction_timeout_secs=0)
    agent = world.spawn(parent, "x")
    world.tick()  # the parent spawns its child
    world.tick()  # both ask: two prompts open, neither recorded on its agent yet
    assert len(world.hub.pending()) == 2
    world.cancel(agent)
    world.tick()
    world.run_until_idle(max_ticks=10)
    assert world.status(f"{agent}.1").kind is StatusKind.CANCELLED
    assert world.hub.pending() == []


def test_a_prompt_opened_for_an_agent_that_already_ended_is_settled_when_reported(make_world):
    # What a tool's prompt opened after AbortTerminalWork asked the hub looks like: the
    # hub's event for an agent that is already terminal.
    world = make_world(interaction_timeout_secs=0)
    agent = world.spawn(asker, "x")
    world.tick()
    world.cancel(agent)
    world.tick()
    world.hub.open(agent, InteractionRequest.free_text("late", "anyone?"))
    world.tick()
    assert world.hub.pending() == []


class _CancellingClock:
    """A virtual clock whose first reading fires ``token``: a cancel landing inside the
    hub's opening of a prompt, after the asker last looked at its token."""

    virtual = True

    def __init__(self, token: CancelToken) -> None:
        self._token = token

    def now(self) -> float:
        self._token.cancel("batch cancelled")
        return 0.0


def test_a_tool_cancelled_while_its_prompt_is_being_opened_leaves_no_prompt():
    token = CancelToken()
    hub = InteractionHub(clock=_CancellingClock(token), timeout_secs=0)
    ctx = ToolContext("agent", "c1", token, hub)
    raised: list[BaseException] = []

    def ask() -> None:
        try:
            ctx.ask(InteractionRequest.free_text("", "go?"))
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), "the ask waited on a prompt nobody can answer"
    assert [type(exc) for exc in raised] == [Cancelled]
    assert hub.pending() == []


def _blocking_tools(release: threading.Event) -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool()
    def slow(args, ctx):
        ctx.cancel.wait(10)
        release.wait(10)
        return "late"

    @tools.tool(requires_approval=True)
    def risky(args, ctx):
        return "done"

    return tools


def test_a_cancelled_tool_batch_gives_every_call_one_result_in_history(make_world):
    release = threading.Event()

    def worker(turn):
        yield CallTools(ToolCall("c1", "slow"), ToolCall("c2", "slow"))

    world = make_world(tools=_blocking_tools(release))
    try:
        agent = world.spawn(worker, "x")
        world.tick()  # the batch is running
        world.cancel(agent)
        world.tick()
    finally:
        release.set()
    tool_entries = [e.content for e in world.history(agent) if e.role == "tool"]
    assert tool_entries == [
        "slow[c1]: error: cancelled before completion",
        "slow[c2]: error: cancelled before completion",
    ]


def test_a_batch_cancelled_while_waiting_for_approval_gives_every_call_one_result(make_world):
    def worker(turn):
        yield CallTools(ToolCall("c1", "risky"), ToolCall("c2", "risky"))

    world = make_world(tools=_blocking_tools(threading.Event()), interaction_timeout_secs=0)
    agent = world.spawn(worker, "x")
    world.run_until_idle(max_ticks=10)
    assert len(world.hub.pending()) == 2
    world.cancel(agent)
    world.run_until_idle(max_ticks=10)
    tool_entries = [e.content for e in world.history(agent) if e.role == "tool"]
    assert tool_entries == [
        "risky[c1]: error: cancelled before completion",
        "risky[c2]: error: cancelled before completion",
    ]
    assert world.hub.pending() == []
