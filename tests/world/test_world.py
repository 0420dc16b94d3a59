"""The world and its tick loop: behaviours, prompts, park and wake, interrupts, failures."""

from __future__ import annotations

import dataclasses
import gc
import math
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from runtime import (
    Ask,
    BehaviorNotFound,
    CallTools,
    ConfigError,
    InteractionRequest,
    InteractionResponse,
    Join,
    Journal,
    JournalError,
    ManualClock,
    ModelError,
    ModelReply,
    MonotonicClock,
    Phase,
    ScriptedModel,
    ShellTool,
    Sleep,
    Spawn,
    StatusKind,
    Think,
    TickLimitError,
    ToolCall,
    ToolRegistry,
    UnknownAgentError,
    WaitReason,
    World,
    WorldClosedError,
)
from tests.conftest import CountingBackend, wait_for
from tests.test_cancel import _process_group_alive


def asker(turn):
    answer = yield Ask(InteractionRequest.free_text("", f"ok to {turn.message}?"))
    return answer.value


def sleeper(turn):
    yield Sleep(10)
    return "slept"


def chatter(turn):
    reply = yield Think(f"reply to {turn.message}")
    return reply.text


def test_a_behaviour_thinks_calls_tools_asks_sleeps_and_completes(make_world):
    tools = ToolRegistry()

    @tools.tool()
    def add(args, ctx):
        return args["a"] + args["b"]

    def worker(turn):
        reply = yield Think(f"plan {turn.message}")
        results = yield CallTools(ToolCall("c1", "add", {"a": 2, "b": 3}))
        yield Sleep(5)
        answer = yield Ask(InteractionRequest.free_text("", "go?"))
        return [reply.text, results[0].output, answer.value, turn.now]

    world = make_world(tools=tools, models={"default": ScriptedModel(["plan ok"])})
    world.hub.set_timeout_secs(0)
    agent = world.spawn(worker, "x")
    world.run_until_idle(timeout=10)
    status = world.status(agent)
    assert (status.kind, status.reason) == (StatusKind.WAITING, WaitReason.USER_PROMPT)
    [(owner, request)] = world.hub.pending()
    assert owner == agent
    world.hub.answer(InteractionResponse.text(request.id, "yes"))
    world.run_until_idle(timeout=10)
    assert world.status(agent).kind is StatusKind.COMPLETE
    assert world.result(agent) == ["plan ok", 5, "yes", 5.0]
    roles = [e.role for e in world.history(agent)]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]


def test_a_batch_with_no_thread_to_run_it_gives_its_agent_error_results(make_world, monkeypatch):
    # A process out of threads: the tick that dispatches the batch does not raise, and the
    # agent hears why its tools did not run (it used to wait for ever on a job counted busy).
    tools = ToolRegistry()

    @tools.tool()
    def add(args, ctx):
        return args["a"] + args["b"]

    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        if thread.name.startswith("tickwork-tools-"):
            raise RuntimeError("can't start new thread")
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)

    def worker(turn):
        [result] = yield CallTools(ToolCall("c1", "add", {"a": 2, "b": 3}))
        return result.error

    world = make_world(tools=tools)
    agent = world.spawn(worker)
    world.run_until_idle(timeout=10)
    assert world.status(agent).kind is StatusKind.COMPLETE
    assert "can't start new thread" in world.result(agent)
    assert world.lane.stats().in_flight == 0


def test_an_interactive_agent_goes_idle_after_each_turn_and_runs_the_next_on_send(make_world):
    world = make_world(models={"default": ScriptedModel(["one", "two"])})
    agent = world.spawn(chatter, interactive=True)
    world.run_until_idle(timeout=10)
    assert world.status(agent).kind is StatusKind.IDLE
    world.send(agent, "hi")
    world.run_until_idle(timeout=10)
    assert world.status(agent).kind is StatusKind.IDLE
    assert world.result(agent) == "one"
    world.send(agent, "again")
    world.run_until_idle(timeout=10)
    assert world.result(agent) == "two"
    assert [e.content for e in world.history(agent)] == ["hi", "one", "again", "two"]


@pytest.mark.parametrize("settle", ["answer", "cancel"])
def test_an_answer_wakes_the_parked_loop_before_settling_and_is_not_lost(settle):
    # `hub.answer` (and `cancel`) nudge the wake before they settle, so the loop's wake-up
    # overlaps the bookkeeping (wake_latency). Here the loop is made to run first: the
    # settlement waits until the early nudge has woken it and it has ticked (and found
    # nothing). The settlement must still land, by the nudge after it.
    world = World(clock=MonotonicClock(), interaction_timeout_secs=0)

    def asker(turn):
        answer = yield Ask(InteractionRequest.free_text("", "proceed?"))
        return answer.value

    ticked = threading.Event()
    world.observe(lambda report, inputs: ticked.set())
    hub = world.hub
    real_settle = hub._settle
    woke_first: list[bool] = []

    def settle_after_a_tick(*args):
        woke_first.append(ticked.wait(10))  # the GIL is free: the woken loop ticks
        return real_settle(*args)

    try:
        agent = world.spawn(asker)
        world.start()
        wait_for(lambda: world.status(agent).kind is StatusKind.WAITING, what="WAITING")
        wait_for(lambda: not world.wake.pending(), what="the loop parked")
        [(_, request)] = hub.pending()
        ticked.clear()
        hub._settle = settle_after_a_tick
        if settle == "answer":
            assert hub.answer(InteractionResponse.text(request.id, "yes"))
        else:
            assert hub.cancel(request.id)
        assert woke_first == [True]
        wait_for(lambda: world.status(agent).kind is StatusKind.COMPLETE, what="COMPLETE")
        assert world.result(agent) == ("yes" if settle == "answer" else "")
        hub._settle = real_settle
        ticked.clear()
        assert not hub.answer(InteractionResponse.text(request.id, "again"))
        assert not ticked.wait(0.2)  # an id no longer open wakes nobody
    finally:
        world.close()


def test_a_refused_choice_does_not_wake_the_parked_loop():
    # The early nudge comes after the checks an answer can fail: an answer refused (a
    # choice its prompt does not offer) changes nothing, the tick count included.
    world = World(clock=MonotonicClock(), interaction_timeout_secs=0)

    def chooser(turn):
        answer = yield Ask(InteractionRequest.choice("", "which?", ["a", "b"]))
        return answer.choice

    ticks: list[int] = []
    world.observe(lambda report, inputs: ticks.append(report.tick))
    try:
        agent = world.spawn(chooser)
        world.start()
        wait_for(lambda: world.status(agent).kind is StatusKind.WAITING, what="WAITING")
        wait_for(lambda: not world.wake.pending(), what="the loop parked")
        [(_, request)] = world.hub.pending()
        seen = len(ticks)
        with pytest.raises(ConfigError, match=r"offers choices 0\.\.1, got choice 5"):
            world.hub.answer(InteractionResponse.choose(request.id, 5))
        time.sleep(0.2)  # time for a wrongly woken loop to tick
        assert len(ticks) == seen
        assert world.hub.answer(InteractionResponse.choose(request.id, 1))
        wait_for(lambda: world.status(agent).kind is StatusKind.COMPLETE, what="COMPLETE")
        assert world.result(agent) == 1
    finally:
        world.close()


def test_a_plain_function_is_a_behaviour_whose_turn_ends_at_once(make_world):
    world = make_world()
    agent = world.spawn(lambda turn: turn.message * 2, 21)
    world.run_until_idle()
    assert world.result(agent) == 42
    assert world.status(agent).kind is StatusKind.COMPLETE


def test_a_waiting_agent_becomes_active_the_tick_after_an_answer_from_another_thread():
    world = World(clock=MonotonicClock(), interaction_timeout_secs=0)
    log: list[tuple[int, str]] = []

    def worker(turn):
        answer = yield Ask(InteractionRequest.free_text("", "proceed?"))
        log.append((turn.generation, answer.value))
        yield Sleep(3600)

    try:
        agent = world.spawn(worker)
        world.start()
        wait_for(lambda: world.status(agent).kind is StatusKind.WAITING, what="WAITING")
        ticks_while_parked = world.tick_count
        time.sleep(0.2)
        # Parked, not spinning: a waiting world ticks only when something lands.
        assert world.tick_count - ticks_while_parked <= 1
        [(_, request)] = world.hub.pending()
        answered_at = time.monotonic()
        assert world.hub.answer(InteractionResponse.text(request.id, "yes"))
        wait_for(lambda: world.status(agent).kind is StatusKind.ACTIVE, what="ACTIVE")
        latency = time.monotonic() - answered_at
        assert latency < 1.0
        assert log == [(1, "yes")]
    finally:
        world.close()


def test_a_prompt_nobody_answers_expires_under_virtual_time_without_sleeping(make_world):
    clock = ManualClock()
    world = make_world(clock=clock, interaction_timeout_secs=600)
    agent = world.spawn(asker, "deploy")
    started = time.monotonic()
    world.run_until_idle()
    assert time.monotonic() - started < 5
    assert world.status(agent).kind is StatusKind.COMPLETE
    assert world.result(agent) == ""  # the neutral response
    assert clock.now() == 600.0
    assert world.hub.pending() == []
    assert world.hub.stats().expired == 1


def test_run_until_idle_can_stop_before_skipping_time(make_world):
    world = make_world(interaction_timeout_secs=600)
    agent = world.spawn(asker, "deploy")
    world.run_until_idle(skip_time=False)
    assert world.status(agent).kind is StatusKind.WAITING
    assert world.now == 0.0


def test_sleep_skips_virtual_time_and_orders_wakeups(make_world):
    order: list[tuple[str, float]] = []

    def nap(turn):
        yield Sleep(turn.message)
        order.append((turn.agent_id, turn.now))

    world = make_world()
    slow = world.spawn(nap, 30)
    fast = world.spawn(nap, 10)
    world.run_until_idle()
    assert order == [(fast, 10.0), (slow, 30.0)]


def test_an_interrupt_during_think_cancels_the_model_and_keeps_history(make_world):
    slow = ScriptedModel(["late", "fresh"], delay=30)
    world = make_world(clock=MonotonicClock(), models={"default": slow})
    agent = world.spawn(chatter, "first", interactive=True)
    world.tick()
    world.tick()
    assert world.inference_lane.stats().busy == 1
    world.interrupt(agent)
    world.tick()
    assert world.status(agent).kind is StatusKind.IDLE
    wait_for(lambda: world.inference_lane.stats().busy == 0, what="model job cancelled")
    assert [e.content for e in world.history(agent)] == ["first", "[interrupted by user]"]
    slow._delay = 0
    world.send(agent, "second")
    world.run_until_idle(timeout=10)
    assert world.result(agent) == "fresh"
    contents = [e.content for e in world.history(agent)]
    assert contents == ["first", "[interrupted by user]", "second", "fresh"]


def test_an_interrupt_during_a_tool_batch_kills_the_subprocess_and_answers_every_call(
    make_world, tmp_path
):
    pidfile = tmp_path / "pid"
    tools = ToolRegistry()
    tools.add(ShellTool("slow", ["sh", "-c", "echo $$ > {pidfile}; sleep 5"]))
    tools.add(ShellTool("echo", ["echo", "{text}"]))
    seen: list[object] = []

    def worker(turn):
        results = yield CallTools(
            ToolCall("c1", "slow", {"pidfile": str(pidfile)}),
            ToolCall("c2", "echo", {"text": "never"}),
        )
        seen.append(results)

    world = make_world(clock=MonotonicClock(), tools=tools)
    agent = world.spawn(worker, "go", interactive=True)
    world.tick()
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), what="subprocess start")
    pid = int(pidfile.read_text())
    started = time.monotonic()
    world.interrupt(agent)
    world.tick()
    assert world.status(agent).kind is StatusKind.IDLE
    wait_for(lambda: not _process_group_alive(pid), timeout=5, what="process group gone")
    assert time.monotonic() - started < 1.0
    tool_entries = [e.content for e in world.history(agent) if e.role == "tool"]
    assert tool_entries == [
        "slow[c1]: error: interrupted by user before completion",
        "echo[c2]: error: interrupted by user before completion",
    ]
    world.run_until_idle(timeout=10)
    assert seen == []  # the abandoned turn never resumed
    wait_for(lambda: world.lane.stats().in_flight == 0, what="the cancelled job to leave")
    assert world.lane.stats().dropped == 1


def test_an_interrupt_during_an_ask_cancels_the_prompt(make_world):
    world = make_world()
    agent = world.spawn(asker, "deploy", interactive=True)
    world.run_until_idle(skip_time=False)
    assert len(world.hub.pending()) == 1
    world.interrupt(agent)
    world.run_until_idle(skip_time=False)
    assert world.hub.pending() == []
    assert world.status(agent).kind is StatusKind.IDLE
    assert world.history(agent)[-1].content == "[interrupted by user]"


def test_a_scripted_reply_is_read_by_call_number_whether_an_abandoned_call_ran_or_not(
    make_world,
):
    # One inference slot, held by another agent's call: the interrupted agent's first call
    # waits in the queue and is abandoned there, never run. Its next call is its second,
    # and reads the script's second entry, as it does when the first call ran (the thread
    # timing a lockstep run cannot fix, and a resumed run counts past); a script read in
    # the order calls reached the model gave the first.
    gate = threading.Event()

    class Gate:
        def complete(self, request, cancel):
            assert gate.wait(10)
            return ModelReply("held")

    script = ScriptedModel(["one", "two", "three"])
    world = make_world(
        clock=MonotonicClock(),
        models={"default": script, "gate": Gate()},
        inference_capacity=1,
    )

    def gated(turn):
        return (yield Think("hold", model="gate")).text

    holder = world.spawn(gated)
    world.tick()  # the gate's call takes the only slot
    wait_for(lambda: world.inference_lane.stats().busy == 1, what="the gate's call")
    agent = world.spawn(chatter, "first", interactive=True)
    world.tick()
    world.tick()  # its call is queued behind the gate's
    assert world.inference_lane.stats().queued == 1
    world.interrupt(agent)
    world.tick()
    wait_for(lambda: world.inference_lane.stats().queued == 0, what="the call abandoned")
    assert script.calls == 0  # it never reached the model
    world.send(agent, "second")
    world.tick()
    gate.set()
    world.run_until_idle(timeout=10)
    assert world.result(holder) == "held"
    assert world.result(agent) == "two"
    assert script.calls == 1


def test_after_an_interrupt_send_starts_a_turn_that_sees_the_history(make_world):
    seen: list[list[str]] = []

    def remember(turn):
        seen.append([e.content for e in turn.history])
        yield Ask(InteractionRequest.free_text("", "?"))

    world = make_world()
    agent = world.spawn(remember, "one", interactive=True)
    world.run_until_idle(skip_time=False)
    world.interrupt(agent)
    world.run_until_idle(skip_time=False)
    world.send(agent, "two")
    world.run_until_idle(skip_time=False)
    assert seen[-1] == ["one", "?", "[interrupted by user]", "two"]


def test_an_interrupt_while_idle_leaves_the_next_turn_alone(make_world):
    world = make_world(models={"default": ScriptedModel(["answer"])})
    agent = world.spawn(chatter, interactive=True)
    world.run_until_idle()
    world.interrupt(agent)
    world.run_until_idle()
    world.send(agent, "question")
    world.run_until_idle(timeout=10)
    assert world.result(agent) == "answer"
    assert "[interrupted by user]" not in [e.content for e in world.history(agent)]


def test_pause_stops_progress_until_resume_and_holds_outcomes(make_world):
    tools = ToolRegistry()
    release = threading.Event()

    @tools.tool()
    def gate(args, ctx):
        assert release.wait(10)
        return "through"

    def worker(turn):
        results = yield CallTools(ToolCall("c1", "gate", {}))
        yield Sleep(1)
        return results[0].output

    world = make_world(clock=MonotonicClock(), tools=tools)
    agent = world.spawn(worker)
    world.tick()
    world.pause(agent)
    world.tick()
    assert world.status(agent).kind is StatusKind.PAUSED
    release.set()
    wait_for(lambda: world.lane.stats().finished == 1, what="tool finished")
    for _ in range(5):
        world.tick()
    assert world.status(agent).kind is StatusKind.PAUSED
    # Held whole: not even the history has the result while paused.
    assert not any(e.content == "gate[c1]: through" for e in world.history(agent))
    assert world.result(agent) is None
    world.resume(agent)
    world.run_until_idle(timeout=10)
    assert world.status(agent).kind is StatusKind.COMPLETE
    assert world.result(agent) == "through"
    assert any(e.content == "gate[c1]: through" for e in world.history(agent))


def test_pause_and_resume_of_an_idle_agent_keeps_it_idle(make_world):
    world = make_world()
    agent = world.spawn(asker, interactive=True)
    world.run_until_idle()
    world.pause(agent)
    world.tick()
    assert world.status(agent).kind is StatusKind.PAUSED
    world.resume(agent)
    world.tick()
    assert world.status(agent).kind is StatusKind.IDLE


def test_a_cancelled_agent_stops_its_prompts_leave_and_its_children_are_cancelled(make_world):
    def child(turn):
        yield Ask(InteractionRequest.free_text("", "child question"))

    def parent(turn):
        kid = yield Spawn(child, "x")
        yield Join(kid)
        return "never"

    world = make_world(interaction_timeout_secs=0)
    agent = world.spawn(parent)
    world.run_until_idle()
    kid = f"{agent}.1"
    assert world.status(agent).reason is WaitReason.CHILDREN
    assert world.status(kid).kind is StatusKind.WAITING
    assert [owner for owner, _ in world.hub.pending()] == [kid]
    world.cancel(agent)
    world.run_until_idle()
    assert world.status(agent).kind is StatusKind.CANCELLED
    assert world.status(kid).kind is StatusKind.CANCELLED
    assert world.hub.pending() == []
    assert world.result(agent) is None


def test_join_returns_the_childrens_results_in_order(make_world):
    def child(turn):
        yield Sleep(turn.message)
        return turn.message * 10

    def parent(turn):
        a = yield Spawn(child, 3)
        b = yield Spawn(child, 1)
        return (yield Join(a, b))

    world = make_world()
    agent = world.spawn(parent)
    world.run_until_idle()
    assert world.result(agent) == [30, 10]
    assert world.agents() and list(world.agents()) == [agent, f"{agent}.1", f"{agent}.2"]


def test_a_tool_that_needs_approval_is_denied_by_a_timeout(make_world):
    tools = ToolRegistry()
    ran: list[str] = []

    @tools.tool(requires_approval=True)
    def deploy(args, ctx):
        ran.append("deploy")
        return "deployed"

    @tools.tool()
    def status(args, ctx):
        return "green"

    def worker(turn):
        return (
            yield CallTools(ToolCall("c1", "deploy", {"env": "prod"}), ToolCall("c2", "status"))
        )

    world = make_world(tools=tools, interaction_timeout_secs=60)
    agent = world.spawn(worker)
    world.run_until_idle(skip_time=False)
    assert world.status(agent).reason is WaitReason.TOOL_APPROVAL
    world.run_until_idle(timeout=10)  # skips to the approval's deadline: neutral = deny
    results = world.result(agent)
    assert [r.error for r in results] == ["denied by operator", None]
    assert results[1].output == "green"
    assert ran == []


def test_an_approved_tool_runs(make_world):
    tools = ToolRegistry()

    @tools.tool(requires_approval=True)
    def deploy(args, ctx):
        return f"deployed {args['env']}"

    def worker(turn):
        return (yield CallTools(ToolCall("c1", "deploy", {"env": "prod"})))

    world = make_world(tools=tools)
    agent = world.spawn(worker)
    world.run_until_idle(skip_time=False)
    [(_, request)] = world.hub.pending()
    assert request.payload == {"tool": "deploy", "args": {"env": "prod"}}
    world.hub.answer(InteractionResponse.approval(request.id, True))
    world.run_until_idle(timeout=10)
    assert world.result(agent)[0].output == "deployed prod"


def run_the_production_deadlock(make_world, ask, timeout=None):
    """A parent's tool waits (off the lane) for an answer only a child's tool can give, on
    a lane of capacity one; ``ask(ctx, request)`` is how the tool asks. Returns the world
    and the parent, once the world is idle."""
    tools = ToolRegistry()

    @tools.tool(timeout=timeout)
    def wait_for_child(args, ctx):
        return ask(ctx, InteractionRequest.free_text("", "child, report")).value

    @tools.tool()
    def report(args, ctx):
        for owner, request in ctx.hub.pending():
            if owner == args["parent"] and request.prompt == "child, report":
                ctx.hub.answer(InteractionResponse.text(request.id, "done by child"))
                return "answered"
        return "no question yet"

    def child(turn):
        while True:
            [result] = yield CallTools(ToolCall("r", "report", {"parent": turn.message}))
            if result.output == "answered":
                return result.output
            yield Sleep(0.01)

    def parent(turn):
        kid = yield Spawn(child, turn.agent_id)
        [result] = yield CallTools(ToolCall("w", "wait_for_child"))
        yield Join(kid)
        return result.output

    world = make_world(
        clock=MonotonicClock(), tools=tools, tool_capacity=1, interaction_timeout_secs=10
    )
    agent = world.spawn(parent)
    world.run_until_idle(timeout=20)
    return world, agent


def test_the_production_deadlock_ends_on_a_lane_of_capacity_one(make_world):
    world, agent = run_the_production_deadlock(make_world, lambda ctx, request: ctx.ask(request))
    assert world.result(agent) == "done by child"  # not the neutral answer of an expiry
    assert world.status(f"{agent}.1").kind is StatusKind.COMPLETE
    assert world.lane.stats().parks >= 1


def test_the_same_deadlock_ends_when_a_copy_of_the_context_asks_from_a_tool_thread(make_world):
    # A copy with a token of its own (a tool giving its question a shorter deadline) lost
    # the lane slot: asked from a thread the tool started, its wait held the parent's
    # permit, the child's tool never ran, and the question expired unanswered.
    def with_a_deadline(ctx, request):
        copy = dataclasses.replace(ctx, cancel=ctx.cancel.child())
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(copy.ask, request).result(timeout=20)

    world, agent = run_the_production_deadlock(make_world, with_a_deadline)
    assert world.result(agent) == "done by child"
    s = world.lane.stats()
    assert (s.parks, s.resumes, s.busy, s.parked) == (1, 1, 0, 0)


@pytest.mark.parametrize("timeout", [None, 30.0], ids=["no-timeout", "timeout"])
def test_the_same_deadlock_ends_when_a_thread_the_tool_started_asks(make_world, timeout):
    """The question asked from a thread the parent's tool started (a pool that fans its
    work out): its wait gives back the parent's permit all the same, whether the call
    runs on the batch's token or on a token of its own (a tool with a timeout)."""

    def from_a_pool(ctx, request):
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(ctx.ask, request).result(timeout=20)

    world, agent = run_the_production_deadlock(make_world, from_a_pool, timeout)
    assert world.result(agent) == "done by child"
    s = world.lane.stats()
    assert (s.parks, s.resumes, s.busy, s.parked) == (1, 1, 0, 0)


def test_two_worlds_in_one_process_each_drive_their_own_agents(make_world):
    first = make_world(seed=1)
    second = make_world(seed=2)
    a = first.spawn(sleeper)
    b = second.spawn(asker, "x")
    for _ in range(3):
        first.tick()
        second.tick()
    assert list(first.agents()) == ["a1"]
    assert list(second.agents()) == ["a1"]
    assert first.status(a).kind is StatusKind.ACTIVE
    assert second.status(b).kind is StatusKind.WAITING
    first.run_until_idle()
    assert first.result(a) == "slept"
    assert second.status(b).kind is StatusKind.WAITING


def test_ticks_of_two_worlds_on_two_threads_are_serialised(make_world):
    worlds = [make_world(seed=i) for i in range(2)]
    for world in worlds:
        for _ in range(50):
            world.spawn(sleeper)
    barrier = threading.Barrier(2, timeout=10)
    errors: list[BaseException] = []

    def drive(world: World) -> None:
        try:
            barrier.wait()
            world.run_until_idle()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=drive, args=(w,)) for w in worlds]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    for world in worlds:
        assert world.counts()[StatusKind.COMPLETE] == 50


def test_a_behaviour_that_raises_fails_only_that_agent(make_world):
    def broken(turn):
        yield Sleep(1)
        raise ValueError("bad input 7")

    world = make_world()
    bad = world.spawn(broken)
    good = world.spawn(sleeper)
    world.run_until_idle()
    status = world.status(bad)
    assert status.kind is StatusKind.ERROR
    assert status.message == "ValueError: bad input 7"
    assert world.status(good).kind is StatusKind.COMPLETE


def test_a_system_that_raises_for_one_agent_fails_only_that_agent(make_world, monkeypatch):
    from systems import dispatch_work

    real = dispatch_work._dispatch

    def flaky(state, rec, action):
        if rec.id == "a2":
            raise RuntimeError("dispatch exploded")
        return real(state, rec, action)

    monkeypatch.setattr(dispatch_work, "_dispatch", flaky)
    world = make_world(models={"default": ScriptedModel(["ok"], cycle=True)})
    agents = [world.spawn(chatter, i) for i in range(3)]
    world.run_until_idle(timeout=10)
    kinds = [world.status(a).kind for a in agents]
    assert kinds == [StatusKind.COMPLETE, StatusKind.ERROR, StatusKind.COMPLETE]
    assert world.status("a2").message == "DispatchWork: RuntimeError: dispatch exploded"


def test_a_failing_model_is_thrown_into_the_behaviour(make_world):
    def careful(turn):
        try:
            yield Think("x", model="missing")
        except ModelError as exc:
            return f"caught: {exc}"

    world = make_world(models={"default": ScriptedModel(["x"])})
    agent = world.spawn(careful)
    world.run_until_idle(timeout=10)
    assert world.result(agent) == "caught: unknown model 'missing' (known: default)"


def test_yielding_something_that_is_not_an_action_fails_the_agent(make_world):
    def confused(turn):
        yield 42

    world = make_world()
    agent = world.spawn(confused)
    world.run_until_idle()
    assert world.status(agent).message == "behaviour yielded 42, which is not an action"


class _FailingRecorder:
    """A journal whose header cannot be written: the constructor's last step fails."""

    def __init__(self) -> None:
        self.closed = 0

    def begin(self, settings: dict[str, Any]) -> None:
        raise OSError("disk full")

    def record_tick(self, *args: Any) -> None:
        raise AssertionError("no tick is recorded")

    def close(self) -> None:
        self.closed += 1


@pytest.mark.parametrize(
    "bad",
    [{"tool_capacity": 0}, {"seed": "x"}, {"behaviors": {"b": 42}}],
    ids=["setting", "seed", "behaviour"],
)
def test_a_world_that_refuses_to_be_made_closes_the_journal_and_backend_handed_to_it(tmp_path, bad):
    # The journal kept its writer's lock until the process ended (a bare descriptor, which
    # no collector closes): `Journal.create(path, overwrite=True)` then said a running
    # tickwork was writing it. The backend kept its worker threads.
    path = tmp_path / "run.db"
    backend = CountingBackend()
    journal = Journal.create(path)  # kept referenced: the world must close it, not a free
    gc.disable()
    try:
        with pytest.raises((ConfigError, TypeError)):
            World(journal=journal, tool_executor=backend, **bad)
        assert backend.closed >= 1
        Journal.create(path, overwrite=True).close()
    finally:
        gc.enable()
    recorder = _FailingRecorder()
    with pytest.raises(OSError, match="disk full"):
        World(journal=recorder)
    assert recorder.closed == 1


def test_a_loop_whose_thread_cannot_start_can_be_started_again_and_closed(monkeypatch):
    # The unstarted thread was kept as the runner: `stop()` and `close()` raised "cannot
    # join thread before it is started".
    world = World(clock=ManualClock())
    start = threading.Thread.start

    def refuse(thread: threading.Thread) -> None:
        if thread.name.endswith("-tick"):
            raise RuntimeError("can't start new thread")
        start(thread)

    with monkeypatch.context() as patched:
        patched.setattr(threading.Thread, "start", refuse)
        with pytest.raises(RuntimeError, match="can't start new thread"):
            world.start()
    world.stop()  # joined the thread that never started
    agent = world.spawn(_rests)
    world.start()
    wait_for(lambda: world.status(agent).kind is StatusKind.COMPLETE, what="the agent to end")
    world.close()


def _rests(turn: Any) -> Any:
    yield Sleep(0)
    return "rested"


class _FullDisk(_FailingRecorder):
    """A journal that takes its header and then cannot record a tick."""

    def begin(self, settings: dict[str, Any]) -> None:
        pass

    def record_tick(self, *args: Any) -> None:
        raise JournalError("cannot write journal 'run.db': disk I/O error")


def test_running_says_whether_the_started_loop_still_ticks():
    # A host waiting on a started world learned that its loop had died (a journal that
    # could not be written) only from `stop()`: `tickwork serve` waited for Ctrl-C.
    world = World(journal=_FullDisk())
    assert not world.running
    world.start()
    wait_for(lambda: not world.running, what="the loop to die of its journal")
    with pytest.raises(JournalError, match="disk I/O error"):
        world.stop()
    assert not world.running
    world.close()
    healthy = World()
    healthy.start()
    assert healthy.running
    healthy.stop()
    assert not healthy.running
    healthy.close()


def test_bad_commands_fail_at_the_call_naming_the_value(make_world):
    world = make_world()
    with pytest.raises(UnknownAgentError, match="'ghost'"):
        world.send("ghost", "hi")
    with pytest.raises(BehaviorNotFound, match="nowhere:thing"):
        world.spawn("nowhere:thing")
    world.spawn(sleeper, agent_id="w1")
    with pytest.raises(ConfigError, match="'w1'"):
        world.spawn(sleeper, agent_id="w1")
    with pytest.raises(ConfigError, match="`tool_capacity` must be >= 1, got 0"):
        World(tool_capacity=0)
    # Parts of the wrong kind, named at the call (each was an AttributeError from inside).
    for part, message in [
        (
            {"journal": "run.db"},
            r"`journal` must be a Journal \(`Journal.create\(path\)`\), got 'run.db'",
        ),
        ({"clock": 5}, "`clock` must be a Clock"),
        ({"tools": {}}, "`tools` must be a ToolRegistry, got {}"),
        ({"models": ["m"]}, r"`models` must map model names to models, got \['m'\]"),
        ({"models": {"m": "gpt"}}, r"`models\['m'\]` must be a model .*, got 'gpt'"),
        ({"behaviors": 5}, "`behaviors` must map behaviour names to functions, got 5"),
    ]:
        with pytest.raises(ConfigError, match=message):
            World(**part)
    world.close()
    with pytest.raises(WorldClosedError):
        world.spawn(sleeper)


def test_run_until_idle_raises_when_work_never_settles(make_world):
    def forever(turn):
        while True:
            yield Sleep(0)

    world = make_world()
    world.spawn(forever)
    with pytest.raises(TickLimitError, match="100"):
        world.run_until_idle(max_ticks=100)


def test_the_turn_rng_is_the_agents_own_seeded_stream(make_world):
    def roll(turn):
        return [turn.rng.random() for _ in range(3)]

    draws = []
    for seed in (5, 5, 6):
        world = make_world(seed=seed)
        agent = world.spawn(roll)
        world.run_until_idle()
        draws.append(world.result(agent))
    assert draws[0] == draws[1]
    assert draws[0] != draws[2]


def test_start_and_stop_run_the_loop_in_the_background():
    world = World(clock=MonotonicClock())
    try:
        world.start()
        agent = world.spawn(lambda turn: "done")
        wait_for(lambda: world.status(agent).kind is StatusKind.COMPLETE, what="completion")
        world.stop()
        assert world.result(agent) == "done"
    finally:
        world.close()


def test_the_world_leaves_esper_on_the_world_it_found():
    import esper

    esper.switch_world("default")
    with World(clock=ManualClock()) as world:
        world.spawn(sleeper)
        world.tick()
        assert esper.current_world == "default"
    assert world.name not in esper.list_worlds()


@pytest.mark.slow
def test_ten_thousand_agents_spawn_and_run_to_completion(make_world):
    def short(turn):
        yield Sleep(turn.rng.random())
        yield Sleep(0)
        return turn.agent_id

    world = make_world()
    for _ in range(10_000):
        world.spawn(short)
    started = time.monotonic()
    world.run_until_idle()
    elapsed = time.monotonic() - started
    assert world.counts()[StatusKind.COMPLETE] == 10_000
    assert elapsed < 60, f"10k agents took {elapsed:.1f}s"


def test_model_reply_tool_calls_reach_the_behaviour(make_world):
    reply = ModelReply("use tool", (ToolCall("t1", "echo", {"text": "hi"}),))

    def agentic(turn):
        answer = yield Think("go")
        results = yield CallTools(*answer.tool_calls)
        return results[0].output["stdout"]

    tools = ToolRegistry()
    tools.add(ShellTool("echo", ["echo", "{text}"]))
    world = make_world(tools=tools, models={"default": ScriptedModel([reply])})
    agent = world.spawn(agentic)
    world.run_until_idle(timeout=10)
    assert world.result(agent) == "hi\n"


def test_phases_are_visible_in_the_turn_state(make_world):
    world = make_world()
    agent = world.spawn(sleeper)
    world.tick()
    world.tick()
    with world._lock:
        rec = world._state.records[agent]
        assert rec.turn.phase is Phase.SLEEPING
        assert rec.turn.deadline == 10.0


def test_no_thread_or_process_leaks_after_close(make_world):
    before = threading.active_count()
    world = make_world(clock=MonotonicClock())
    world.spawn(chatter)
    world.close()
    assert threading.active_count() <= before + 2  # lane workers wind down on their own
    assert os.getpid()


def test_a_host_timer_runs_at_its_world_time_and_run_until_idle_skips_to_it(make_world):
    world = make_world(interaction_timeout_secs=600)
    agent = world.spawn(asker, "deploy")
    fired: list[float] = []

    def operator() -> None:
        fired.append(world.now)
        [(_, request)] = world.hub.pending()
        world.hub.answer(InteractionResponse.text(request.id, "approved at 30"))

    world.call_at(30.0, operator)
    world.run_until_idle()
    assert fired == [30.0]
    assert world.result(agent) == "approved at 30"  # answered before the 600 s expiry
    assert world.hub.stats().expired == 0


def test_call_later_refuses_a_negative_delay(make_world):
    world = make_world()
    with pytest.raises(ConfigError, match="-1"):
        world.call_later(-1, lambda: None)


def test_timers_and_run_limits_refuse_bad_values_at_the_call_naming_them(make_world):
    world = make_world()
    bad_times = [("1", "'1'"), (True, "True"), (10**400, "1000"), (10**5000, "int of 16610 bits")]
    for when, named in bad_times:
        with pytest.raises(ConfigError, match=f"`when` must be a finite time, got .*{named}"):
            world.call_at(when, lambda: None)
    with pytest.raises(ConfigError, match="`delay` must be a finite number >= 0, got 'x'"):
        world.call_later("x", lambda: None)
    with pytest.raises(ConfigError, match="`fn` must be callable, got 5"):
        world.call_at(1.0, 5)  # it would have raised in the tick, logged, long after the call
    for max_ticks in (0, -1, 2.5, True):
        with pytest.raises(
            ConfigError, match=f"`max_ticks` must be an integer >= 1, got {max_ticks}"
        ):
            world.run_until_idle(max_ticks=max_ticks)
    for timeout in (math.nan, -1, "5"):
        with pytest.raises(ConfigError, match="`timeout` must be a number >= 0 or None"):
            world.run_until_idle(timeout=timeout)
    with pytest.raises(ConfigError, match="`types` must be classes, got 5"):
        world.query(5)
    assert world.run_until_idle() == 1  # nothing was scheduled by the refused calls


def test_stop_and_close_refuse_a_bad_timeout_and_take_a_huge_one(make_world):
    # stop(timeout=1e300) raised OverflowError from Thread.join after it had asked the loop
    # to stop; stop("5") a TypeError, the same way.
    world = make_world(clock=MonotonicClock())
    world.start()
    for timeout in (math.nan, -1, "5", True):
        with pytest.raises(ConfigError, match="`timeout` must be a number >= 0, got"):
            world.stop(timeout)
        with pytest.raises(ConfigError, match="`timeout` must be a number >= 0, got"):
            world.close(timeout)

    def loop_alive() -> bool:
        return any(t.name == f"{world.name}-tick" for t in threading.enumerate())

    assert loop_alive() and not world.closed  # nothing was stopped by the refused calls
    world.stop(1e300)
    assert not loop_alive()
    world.close(1e300)
    assert world.closed


def test_spawn_refuses_a_name_or_interactive_flag_of_the_wrong_kind(make_world):
    # Both were taken as they were: an agent named 7, one "interactive" because "no" is true.
    world = make_world()

    def worker(turn):
        yield Sleep(0)

    with pytest.raises(ConfigError, match="`name` must be a string, got 7"):
        world.spawn(worker, name=7)
    with pytest.raises(ConfigError, match="`interactive` must be True or False, got 'no'"):
        world.spawn(worker, interactive="no")
    assert list(world.agents()) == []  # nothing was spawned by the refused calls


def test_an_observer_sees_every_tick_and_its_inputs_and_survives_its_own_errors(make_world):
    world = make_world()
    seen: list[tuple[int, list[str]]] = []

    def observer(report, inputs):
        seen.append((report.tick, [type(item).__name__ for _, item in inputs]))
        raise RuntimeError("observer bug")

    world.observe(observer)
    agent = world.spawn(sleeper)
    world.run_until_idle()
    assert seen[0] == (1, ["SpawnAgent"])
    assert [tick for tick, _ in seen] == list(range(1, world.tick_count + 1))
    assert world.result(agent) == "slept"


def test_an_observer_can_be_removed(make_world):
    world = make_world()
    seen: list[int] = []

    def observer(report, inputs):
        seen.append(report.tick)

    world.observe(observer)
    world.tick()
    assert world.unobserve(observer) is True
    assert world.unobserve(observer) is False
    world.tick()
    assert seen == [1]


@pytest.mark.parametrize("path", ["whole tick", "settlement's tick"])
@pytest.mark.parametrize("every_tick", [True, False])
def test_an_observer_that_removes_itself_leaves_the_next_one_called(make_world, path, every_tick):
    # A one-shot observer (it unobserves itself) used to shift the list the tick was
    # walking: the observer after it was skipped for that tick.
    world = make_world(interaction_timeout_secs=0)
    calls: list[tuple[str, int]] = []

    def once(report, inputs):
        calls.append(("once", report.tick))
        world.unobserve(once)

    def after(report, inputs):
        calls.append(("after", report.tick))

    if path == "whole tick":
        world.spawn(sleeper)  # the tick applies it: a whole tick
    else:
        world.spawn(asker, "go")
        world.run_until_idle()
        ((_, request),) = world.hub.pending()
        world.hub.answer(InteractionResponse.text(request.id, "yes"))  # a settlement alone
    world.observe(once, every_tick=every_tick)
    world.observe(after, every_tick=every_tick)
    tick = world.tick().tick
    assert calls == [("once", tick), ("after", tick)]
    world.tick()
    assert ("once", tick + 1) not in calls


def test_children_become_known_ids_for_commands_the_tick_they_are_created(make_world):
    def parent(turn):
        yield Spawn(sleeper)
        yield Sleep(100)

    world = make_world()
    agent = world.spawn(parent)
    world.tick()
    world.tick()
    child = f"{agent}.1"
    assert list(world.agents()) == [agent, child]
    world.cancel(child)  # a command, not an UnknownAgentError
    world.tick()
    assert world.status(child).kind is StatusKind.CANCELLED
    assert world._state.created == []


def test_a_journaled_world_refuses_a_message_it_could_not_record(tmp_path):
    from runtime import Journal

    with World(clock=ManualClock(), journal=Journal.create(tmp_path / "run.db")) as world:
        with pytest.raises(ConfigError, match="JSON value"):
            world.spawn(sleeper, {1, 2})
        agent = world.spawn(asker, interactive=True)
        with pytest.raises(ConfigError, match="JSON value"):
            world.send(agent, object())
        world.send(agent, {"fine": [1, 2.5, None]})


def _napper(turn):
    for _ in range(50):
        yield Sleep(0.001)
    return "rested"


def test_close_from_an_observer_closes_the_world_once_that_tick_is_over(tmp_path, caplog):
    # An observer runs on the tick thread, inside the tick: closing there used to raise
    # "cannot join current thread" (logged) and tear the esper world down under the tick.
    from runtime import Journal

    world = World(journal=Journal.create(tmp_path / "run.db"))
    closing = threading.Event()
    during: list[tuple[int, bool]] = []

    def close_at_tick_three(report, inputs):
        if report.tick == 3:
            world.close(timeout=5)
            during.append((report.tick, world.closed))  # not yet: the tick is not over
            closing.set()

    world.observe(close_at_tick_three)
    world.spawn(_napper)
    world.start()
    assert closing.wait(10), "the observer never ran at tick 3"
    wait_for(lambda: world.closed, what="the close after the tick")
    world.stop(timeout=5)  # the loop has ended (else TimeoutError)
    assert during == [(3, False)]
    assert world.tick_count == 3  # no tick after the one that asked
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
    from runtime.journal import JournalReader

    with JournalReader(tmp_path / "run.db") as reader:
        assert reader.tick_count() == 3  # the tick that asked was whole, journaled


def test_stop_from_an_observer_ends_the_loop_after_that_tick(caplog):
    world = World()
    stopped = threading.Event()

    def stop_when_done(report, inputs):
        if world.counts().get(StatusKind.COMPLETE) == 1 and not stopped.is_set():
            world.stop()
            stopped.set()

    world.observe(stop_when_done)
    try:
        world.spawn(_napper)
        world.start()
        assert stopped.wait(10), "the agent never completed"
        world.stop(timeout=5)  # joins the loop, which ended on its own
        assert not world.closed
        assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
    finally:
        world.close()


def test_a_tick_inside_a_tick_is_refused_and_the_outer_tick_goes_on(make_world):
    # From an observer or a host timer, tick()/run_until_idle() ran whole ticks inside the
    # outer one (a timer's ran before the outer tick's pipeline, on its half-made state).
    world = make_world()
    refused: list[str] = []

    def tick_again(report, inputs):
        if report.tick == 2 and not refused:
            with pytest.raises(RuntimeError, match="tick\\(\\) called during a tick") as info:
                world.tick()
            refused.append(str(info.value))

    def run_again():
        with pytest.raises(RuntimeError, match="during a tick"):
            world.run_until_idle()
        refused.append("timer")

    world.observe(tick_again)
    world.call_at(1.0, run_again)
    agent = world.spawn(sleeper)
    ticks = world.run_until_idle()
    assert len(refused) == 2 and refused[1] == "timer"
    assert world.status(agent).kind is StatusKind.COMPLETE
    assert ticks == world.tick_count  # every tick was the loop's own


def test_ticking_a_started_world_from_another_thread_is_refused(make_world):
    # Two threads ticking one world interleave their ticks by the lock's luck.
    world = make_world(clock=MonotonicClock())
    world.spawn(sleeper)
    world.start()
    try:
        for call in (world.tick, world.run_until_idle):
            with pytest.raises(RuntimeError, match="running on its own thread"):
                call()
    finally:
        world.stop()
    world.tick()  # stopped: the host may tick it again


def test_a_host_timer_closing_the_world_ends_run_until_idle(make_world):
    import esper

    esper.switch_world("default")
    world = make_world()
    world.spawn(lambda turn: (yield Sleep(5)))
    world.call_at(1.0, world.close)
    ran = world.run_until_idle()
    assert world.closed and ran == world.tick_count
    assert world.now == 1.0  # the tick at the timer's time was the last
    assert esper.current_world == "default" and world.name not in esper.list_worlds()


class _OwnClock:
    """A clock of the host's own: a `Clock` by its members alone."""

    virtual = True

    def now(self) -> float:
        return 0.0


def test_a_world_with_tickworks_clocks_and_no_executor_is_made_without_protocol_checks():
    # A runtime-checkable Protocol's isinstance walks the protocol's members in Python
    # (~17-19 us each, two per World); tickwork's own clocks and the absent executor pass
    # without it. A clock of the host's own is still checked by its members.
    walked: list[str] = []

    def hook(frame: object, event: str, _arg: object) -> None:
        if event == "call" and frame.f_code.co_name == "_get_protocol_attrs":  # type: ignore[attr-defined]
            walked.append(frame.f_back.f_code.co_name)  # type: ignore[attr-defined]

    sys.setprofile(hook)
    try:
        World(seed=1).close()
        World(clock=ManualClock()).close()
    finally:
        sys.setprofile(None)
    assert walked == []
    with World(clock=_OwnClock()) as world:
        assert world.now == 0.0
