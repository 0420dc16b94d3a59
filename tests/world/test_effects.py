"""Live effects hold a tick's lane jobs and hand each lane all of them at once."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pytest

from components import ToolCall, ToolResult
from runtime import Think
from runtime.cancel import CancelToken
from runtime.hub import InteractionHub
from runtime.lane import ToolLane, ToolOutcome
from runtime.models import ModelReply, ModelRequest, ScriptedModel
from runtime.tools import ToolContext, ToolRegistry
from runtime.world.effects import EARLY_SLICE, LiveEffects
from runtime.world.inputs import Inbox
from systems.lifecycle import turn_token
from tests.conftest import callbacks_of
from tests.lane.test_lane import WAIT, wait_until


def _effects(tools: ToolRegistry) -> tuple[LiveEffects, ToolLane, Inbox]:
    inbox = Inbox()
    lane = ToolLane(1, on_outcome=inbox.put)
    effects = LiveEffects(
        inbox=inbox,
        hub=InteractionHub(),
        tool_lane=lane,
        inference_lane=ToolLane(1, name="inference"),
        tools=tools,
        models={},
    )
    return effects, lane, inbox


def test_held_jobs_go_out_at_the_outermost_release_in_the_order_they_were_asked_for():
    tools = ToolRegistry()
    ran: list[str] = []
    gate = threading.Event()

    @tools.tool
    def note(args: Mapping[str, Any], ctx: ToolContext) -> object:
        assert gate.wait(WAIT)
        ran.append(ctx.agent_id)
        return 1

    effects, lane, inbox = _effects(tools)
    try:
        effects.hold()  # the journal's hold around the tick
        effects.hold()  # DispatchWork's, inside it
        for agent in ("a", "b", "c"):
            effects.run_tools(agent, f"{agent}/b1", (ToolCall("c1", "note"),), CancelToken())
        effects.release()
        assert lane.stats().enqueued == 0  # the inner release keeps holding
        effects.release()
        assert lane.stats().enqueued == 3
        gate.set()
        wait_until(lambda: len(inbox) == 3, "three outcomes")
        assert ran == ["a", "b", "c"]
    finally:
        gate.set()
        lane.close(WAIT)


def test_a_lane_closed_before_the_release_gives_each_held_job_an_error_outcome():
    tools = ToolRegistry()
    tools.tool("noop")(lambda args, ctx: None)
    effects, lane, inbox = _effects(tools)
    lane.close()
    effects.hold()
    effects.run_tools("a", "a/b1", (ToolCall("c1", "noop"), ToolCall("c2", "noop")), CancelToken())
    effects.run_tools("b", "b/b1", (ToolCall("c1", "noop"),), CancelToken())
    effects.release()  # refused, but no agent is left waiting for ever
    outcomes = [item for _seq, item in inbox.drain()]
    assert [(o.agent_id, o.batch_id) for o in outcomes] == [("a", "a/b1"), ("b", "b/b1")]
    assert all(isinstance(o, ToolOutcome) and "is closed" in (o.error or "") for o in outcomes)
    first = outcomes[0]
    assert isinstance(first, ToolOutcome)
    assert [r.call_id for r in first.results] == ["c1", "c2"]
    assert all(isinstance(r, ToolResult) and not r.ok for r in first.results)


@pytest.mark.parametrize("held", [False, True], ids=["unheld", "held-alone"])
def test_a_lane_closed_before_a_single_job_gives_it_the_same_error_outcome(held: bool):
    # One job alone (not held, or held alone) raised LaneClosedError into DispatchWork,
    # which failed its agent where a replay, starting nothing, could not: several held
    # jobs got outcomes through the inbox. Now each way gives the outcome.
    tools = ToolRegistry()
    tools.tool("noop")(lambda args, ctx: None)
    effects, lane, inbox = _effects(tools)
    lane.close()
    if held:
        effects.hold()
    effects.run_tools("a", "a/b1", (ToolCall("c1", "noop"),), CancelToken())
    if held:
        effects.release()
    (outcome,) = [item for _seq, item in inbox.drain()]
    assert isinstance(outcome, ToolOutcome)
    assert (outcome.agent_id, outcome.batch_id) == ("a", "a/b1")
    assert outcome.error == "lane 'tools' is closed; job 'a/b1' refused"
    assert [(r.call_id, r.error) for r in outcome.results] == [("c1", outcome.error)]


def test_a_turn_of_many_model_calls_keeps_no_stream_stopper_on_its_token(make_world):
    # Each call puts a callback on the turn's token that stops its stream on a cancel; a
    # call that has ended takes its callback off again, or a long turn keeps every stream.
    seen: list[int] = []
    world = make_world(models={"default": ScriptedModel(["ok"], cycle=True)})

    def thinker(turn):
        for _ in range(30):
            yield Think("go on")
            seen.append(len(callbacks_of(turn_token(world._state.records[turn.agent_id]))))
        return "done"

    agent = world.spawn(thinker)
    world.run_until_idle(timeout=30)
    assert world.result(agent) == "done"
    assert max(seen) <= 1, seen  # none left behind by calls that have ended


def _gated_effects(width: int) -> tuple[LiveEffects, ToolLane, Inbox, threading.Event]:
    """Effects whose tool lane is ``width`` wide and whose one tool, ``wait``, holds its
    job until the returned gate is set."""
    tools = ToolRegistry()
    gate = threading.Event()

    @tools.tool
    def wait(args: Mapping[str, Any], ctx: ToolContext) -> object:
        assert gate.wait(WAIT)
        return 1

    inbox = Inbox()
    lane = ToolLane(width, on_outcome=inbox.put)
    effects = LiveEffects(
        inbox=inbox,
        hub=InteractionHub(),
        tool_lane=lane,
        inference_lane=ToolLane(1, name="inference"),
        tools=tools,
        models={},
    )
    return effects, lane, inbox, gate


def test_a_dispatch_hold_sends_slices_while_the_lane_has_room_and_a_journal_hold_keeps_all():
    slice_ = EARLY_SLICE
    effects, lane, inbox, gate = _gated_effects(2 * slice_ + slice_ // 2)  # room for two slices

    def ask(n: int, tag: str) -> None:
        for i in range(n):
            effects.run_tools(f"{tag}{i}", f"{tag}{i}/b1", (ToolCall("c1", "wait"),), CancelToken())

    try:
        effects.hold()  # a journaled tick's hold: nothing starts before its release
        effects.hold(slices=True)  # DispatchWork's, nested inside it
        ask(3 * slice_, "j")
        effects.release()
        assert lane.stats().enqueued == 0
        effects.release()
        assert lane.stats().enqueued == 3 * slice_
        gate.set()
        wait_until(lambda: lane.stats().in_flight == 0, "the journaled jobs")
        gate.clear()

        effects.hold(slices=True)  # DispatchWork's own: slices go out as they are reached
        ask(slice_ - 1, "a")
        assert lane.stats().enqueued == 3 * slice_
        ask(1, "b")
        assert lane.stats().enqueued == 4 * slice_
        ask(slice_, "c")
        assert lane.stats().enqueued == 5 * slice_  # the second slice: room for it still
        ask(2 * slice_, "d")
        assert lane.stats().enqueued == 5 * slice_  # too little room left: held to the end
        effects.release()
        assert lane.stats().enqueued == 7 * slice_
        gate.set()
        wait_until(lambda: len(inbox) == 7 * slice_, "every outcome")
    finally:
        gate.set()
        lane.close(WAIT)


def test_a_cancel_stops_a_running_calls_stream_and_the_request_carries_that_stream(make_world):
    # The call's one object is both the lane job's body and the turn token's stopper; the
    # request DispatchWork built gets the call's stream in place, not in a copy.
    running, seen = threading.Event(), []

    class Blocking:
        def complete(self, request: ModelRequest, cancel: CancelToken) -> ModelReply:
            seen.append(request)
            running.set()
            assert cancel.wait(WAIT), "never cancelled"
            return ModelReply("late")

    world = make_world(models={"default": Blocking()}, lockstep=False)

    def thinker(turn):
        yield Think("go on")
        return "done"

    agent = world.spawn(thinker)
    world.tick()
    assert running.wait(WAIT)
    (request,) = seen
    stream = request.stream
    assert stream is not None and not stream.stopped
    assert (request.agent_id, request.prompt, request.model) == (agent, "go on", "default")
    token = turn_token(world._state.records[agent])
    world.cancel(agent)
    world.tick()  # the cancel is applied: the turn's token fires
    wait_until(lambda: stream.stopped, "the stream to stop")
    assert stream.delta("more") is False  # a late delta is refused
    wait_until(lambda: world.inference_lane.stats().in_flight == 0, "the call to end")
    assert callbacks_of(token) == []  # nothing left registered


def test_a_lane_narrower_than_a_slice_takes_one_while_it_is_idle():
    effects, lane, inbox, gate = _gated_effects(4)  # narrower than a slice
    try:
        effects.hold(slices=True)
        for i in range(2 * EARLY_SLICE):
            effects.run_tools(f"a{i}", f"a{i}/b1", (ToolCall("c1", "wait"),), CancelToken())
            if i == EARLY_SLICE - 1:
                assert lane.stats().enqueued == EARLY_SLICE  # idle: the first slice went
        assert lane.stats().enqueued == EARLY_SLICE  # busy now: the rest wait
        effects.release()
        assert lane.stats().enqueued == 2 * EARLY_SLICE
        gate.set()
        wait_until(lambda: len(inbox) == 2 * EARLY_SLICE, "every outcome")
    finally:
        gate.set()
        lane.close(WAIT)


def thinker(turn):
    yield Think("go on")
    return "done"


def _one_wide_gated_world(make_world):
    """A world whose one-wide inference lane runs a model that holds each call until
    ``release`` is set (``running`` is set as a call starts)."""
    running, release = threading.Event(), threading.Event()

    class Gate:
        def complete(self, request: ModelRequest, cancel: CancelToken) -> ModelReply:
            running.set()
            assert release.wait(WAIT), "never released"
            return ModelReply("ok")

    world = make_world(models={"default": Gate()}, inference_capacity=1, lockstep=False)
    return world, running, release


def test_a_queued_model_call_puts_no_stopper_on_its_turn_token_until_it_runs(make_world):
    # The stream's stopper goes on the turn's token when the call starts, on the lane's
    # thread: a call queued behind a full lane holds only the lane's own cancel callback
    # (a wave of 10,000 thinking agents held 10,000 stoppers, every one a bound method the
    # collector walked, and the tick thread paid a lock round trip for each).
    world, running, release = _one_wide_gated_world(make_world)
    first, second = world.spawn(thinker), world.spawn(thinker)
    world.tick()
    try:
        assert running.wait(WAIT)
        records = world._state.records
        # The running call: the lane's callback and the stream's stopper.
        wait_until(lambda: len(callbacks_of(turn_token(records[first]))) == 2, "the stopper")
        assert world.inference_lane.stats().queued == 1
        assert len(callbacks_of(turn_token(records[second]))) == 1  # the lane's alone
    finally:
        release.set()
    world.run_until_idle(timeout=WAIT)
    assert world.result(first) == world.result(second) == "done"


def test_a_model_call_that_never_runs_leaves_no_stream_open(make_world):
    # A call's stream opens as the call starts: one cancelled or interrupted while queued
    # behind a full lane never runs, and the world's stream hub keeps nothing for it (it
    # kept one stream per such agent, until that agent thought again).
    world, running, release = _one_wide_gated_world(make_world)
    first, cancelled, interrupted = (world.spawn(thinker) for _ in range(3))
    world.tick()
    try:
        assert running.wait(WAIT)
        assert world.inference_lane.stats().queued == 2
        assert set(world.streams._open) == {first}  # the running call's alone
        world.cancel(cancelled)
        world.interrupt(interrupted)  # nothing streamed yet: no partial text to keep
        world.tick()
        wait_until(lambda: world.inference_lane.stats().queued == 0, "the queue to empty")
    finally:
        release.set()
    world.run_until_idle(timeout=WAIT)
    assert world.result(first) == "done"
    assert world.status(cancelled).kind.value == "cancelled"
    assert [e.role for e in world.history(interrupted)][-1] == "system"  # the marker alone
    assert world.inference_lane.stats().abandoned == 2  # neither call ran
    assert world.streams._open == {}


def test_a_model_call_whose_token_fired_before_its_stopper_was_registered_is_dropped():
    # The window between the lane starting a call and its stopper going on the token: a
    # token that fired in it runs the stopper at once, so the call's reply is stale.
    from runtime.cancel import Cancelled
    from runtime.models import StreamHub
    from runtime.models.usage import UsageMeter
    from runtime.world.effects import _ModelCall

    streams = StreamHub()
    token = CancelToken()
    token.cancel("interrupted")
    request = ModelRequest("a1", "go on")
    call = _ModelCall(
        ScriptedModel(["ok"]), request, "a1", "a1/t1/m1", streams, UsageMeter(), token
    )
    try:
        call(token)
    except Cancelled:
        pass
    else:
        raise AssertionError("a call whose token fired first returned a reply")
    stream = call.stream
    assert stream is not None and stream is request.stream  # opened as the call started
    assert stream.stopped
    assert streams.stop("a1") is None  # ended: the hub forgot it
