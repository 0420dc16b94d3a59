"""Pause holds everything that lands, whole, until resume; pause and resume reach the subtree."""

from __future__ import annotations

from runtime import (
    Ask,
    InteractionRequest,
    InteractionResponse,
    Join,
    ScriptedModel,
    Sleep,
    Spawn,
    StatusKind,
    Think,
)
from tests.conftest import wait_for


def _drained(world) -> bool:
    return world.lane.stats().in_flight == 0 and world.inference_lane.stats().in_flight == 0


def test_a_model_reply_landing_while_paused_is_held_whole_history_included(make_world):
    def thinker(turn):
        reply = yield Think("plan")
        return reply.text

    world = make_world(models={"default": ScriptedModel(["the plan"])})
    agent = world.spawn(thinker, "x")
    world.tick()  # the model call is dispatched
    world.pause(agent)
    world.tick()
    wait_for(lambda: _drained(world), what="the model call to finish")
    before = world.history(agent)
    for _ in range(3):
        world.tick()
    assert world.status(agent).kind is StatusKind.PAUSED
    assert world.history(agent) == before
    assert [e.role for e in before] == ["user"]
    world.resume(agent)
    world.run_until_idle(max_ticks=10)
    assert world.status(agent).kind is StatusKind.COMPLETE
    assert [e.content for e in world.history(agent)] == ["x", "the plan"]


def test_a_prompt_answered_while_paused_is_held_until_resume(make_world):
    def asker(turn):
        answer = yield Ask(InteractionRequest.free_text("", "go?"))
        return answer.value

    world = make_world(interaction_timeout_secs=0)
    agent = world.spawn(asker, "x")
    world.run_until_idle(max_ticks=10)
    world.pause(agent)
    world.tick()
    [(_owner, request)] = world.hub.pending()
    world.hub.answer(InteractionResponse.text(request.id, "yes"))
    for _ in range(3):
        world.tick()
    assert world.status(agent).kind is StatusKind.PAUSED
    assert "yes" not in [e.content for e in world.history(agent)]
    assert world.result(agent) is None
    world.resume(agent)
    world.run_until_idle(max_ticks=10)
    assert world.result(agent) == "yes"
    assert world.history(agent)[-1].content == "yes"


def ticker(turn):
    for _ in range(5):
        yield Sleep(0)
    return "child done"


def test_pausing_a_parent_pauses_its_children_and_resuming_resumes_them(make_world):
    def parent(turn):
        child = yield Spawn(ticker, "c")
        grandchild_parent = yield Spawn(_spawner, "g")
        return (yield Join(child, grandchild_parent))

    world = make_world()
    agent = world.spawn(parent, "x")
    world.tick()
    world.tick()
    world.tick()  # the grandchild exists now
    world.pause(agent)
    world.tick()
    family = [agent, f"{agent}.1", f"{agent}.2", f"{agent}.2.1"]
    assert [world.status(a).kind for a in family] == [StatusKind.PAUSED] * 4
    before = world.digest()
    for _ in range(5):
        world.tick()
    assert world.digest() == before  # nobody in the subtree moved
    world.resume(agent)
    world.run_until_idle(max_ticks=50)
    assert [world.status(a).kind for a in family] == [StatusKind.COMPLETE] * 4
    assert world.result(agent) == ["child done", ["child done"]]


def _spawner(turn):
    child = yield Spawn(ticker, "gc")
    return (yield Join(child))
