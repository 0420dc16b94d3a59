"""Lockstep delivery: which tick lane work lands in is fixed by the run, not by thread timing."""

from __future__ import annotations

import functools
import threading
import time

import pytest

from runtime import (
    Ask,
    CallTools,
    InteractionRequest,
    InteractionResponse,
    ManualClock,
    MonotonicClock,
    PromptOpened,
    ScriptedModel,
    Sleep,
    Think,
    ToolCall,
    ToolOutcome,
    ToolRegistry,
    World,
)
from runtime.errors import ConfigError
from runtime.lane import tool_lane as tool_lane_module
from tests.conftest import wait_for

WAIT = 10.0


def landings(world: World) -> list[tuple[int, float, str]]:
    """A log of ``(tick, now, batch id)`` for every lane outcome, as the ticks apply them."""
    log: list[tuple[int, float, str]] = []

    def note(report, inputs) -> None:
        for _seq, item in inputs:
            if isinstance(item, ToolOutcome):
                log.append((report.tick, report.now, item.batch_id))

    world.observe(note)
    return log


@functools.cache  # one function per tool: a behaviour name names one function
def call_once(name: str):
    def behaviour(turn):
        results = yield CallTools(ToolCall("c1", name))
        return [turn.now, results[0].output]

    behaviour.__qualname__ = f"call_once_{name}"  # one behaviour name per tool
    return behaviour


def test_lockstep_is_on_under_a_manual_clock_and_off_under_a_real_one(make_world):
    assert make_world().lockstep is True
    assert make_world(clock=MonotonicClock()).lockstep is False
    assert make_world(lockstep=False).lockstep is False
    assert make_world(clock=MonotonicClock(), lockstep=True).lockstep is True
    with pytest.raises(ConfigError, match="`lockstep` must be True, False or None, got 'yes'"):
        World(lockstep="yes")  # type: ignore[arg-type]


def test_every_job_lands_the_tick_after_its_dispatch_in_dispatch_order(make_world):
    # The first-dispatched tool finishes last in real time; it still lands first.
    second_done = threading.Event()
    tools = ToolRegistry()

    @tools.tool()
    def first(args, ctx):
        assert second_done.wait(WAIT)
        return "first"

    @tools.tool()
    def second(args, ctx):
        second_done.set()
        return "second"

    world = make_world(tools=tools)
    log = landings(world)
    a = world.spawn(call_once("first"))
    b = world.spawn(call_once("second"))
    world.tick()  # spawn, step, dispatch
    world.tick()  # waits for both, lands both
    assert log == [(2, 0.0, f"{a}/t1/b1"), (2, 0.0, f"{b}/t1/b1")]


def test_a_virtual_duration_of_2_5_s_lands_at_the_first_tick_at_or_after_it(make_world):
    tools = ToolRegistry()

    @tools.tool(virtual_duration=2.5)
    def weld(args, ctx):
        return "welded"

    clock = ManualClock()
    world = make_world(tools=tools, clock=clock)
    log = landings(world)
    agent = world.spawn(call_once("weld"))
    world.tick()  # t=0: dispatched
    for _ in range(3):  # ticks at t=1, 2, 3: due at 2.5, so it lands at 3
        clock.advance(1.0)
        world.tick()
    assert log == [(4, 3.0, f"{agent}/t1/b1")]
    assert world.result(agent) == [3.0, "welded"]


def test_run_until_idle_skips_virtual_time_to_a_virtual_duration(make_world):
    tools = ToolRegistry()

    @tools.tool(virtual_duration=2.5)
    def weld(args, ctx):
        return "welded"

    def ticker(turn):
        for _ in range(4):
            yield Sleep(1.0)

    world = make_world(tools=tools)
    log = landings(world)
    agent = world.spawn(call_once("weld"))
    world.spawn(ticker)
    world.run_until_idle()
    # Ticks at t=0 (dispatch), 1, 2, then 2.5: the skip stops at the due time.
    assert [(now, batch) for _tick, now, batch in log] == [(2.5, f"{agent}/t1/b1")]
    assert world.result(agent) == [2.5, "welded"]
    assert world.now == 4.0


def test_two_tools_of_different_durations_land_in_duration_order_whatever_their_real_times(
    make_world,
):
    # The 2 s tool is done first in real time, the 1 s tool only after it: durations win.
    long_done = threading.Event()
    tools = ToolRegistry()

    @tools.tool(virtual_duration=2.0)
    def long(args, ctx):
        long_done.set()
        return "long"

    @tools.tool(virtual_duration=1.0)
    def short(args, ctx):
        assert long_done.wait(WAIT)
        return "short"

    world = make_world(tools=tools)
    log = landings(world)
    a = world.spawn(call_once("long"))  # dispatched first
    b = world.spawn(call_once("short"))
    world.run_until_idle()
    assert [(now, batch) for _tick, now, batch in log] == [(1.0, f"{b}/t1/b1"), (2.0, f"{a}/t1/b1")]
    assert world.result(a) == [2.0, "long"] and world.result(b) == [1.0, "short"]


def test_a_batch_takes_the_sum_of_its_tools_durations_and_a_model_its_own(make_world):
    tools = ToolRegistry()

    @tools.tool(virtual_duration=0.5)
    def step(args, ctx):
        return "ok"

    def worker(turn):
        yield Think("plan")
        first = turn.now
        yield CallTools(ToolCall("c1", "step"), ToolCall("c2", "step"), ToolCall("c3", "step"))
        return [first, turn.now]

    models = {"default": ScriptedModel(["plan"], virtual_duration=4.0)}
    world = make_world(tools=tools, models=models)
    agent = world.spawn(worker)
    world.run_until_idle()
    assert world.result(agent) == [4.0, 5.5]


def test_lanes_still_run_in_parallel_in_lockstep(make_world):
    tools = ToolRegistry()

    @tools.tool()
    def nap(args, ctx):
        time.sleep(0.1)  # the tool's own work: 100 ms of real time
        return "rested"

    world = make_world(tools=tools, tool_capacity=8)
    log = landings(world)
    for _ in range(8):
        world.spawn(call_once("nap"))
    world.tick()  # dispatches 8 jobs of 100 ms each
    started = time.perf_counter()
    world.tick()  # waits for all 8, which run side by side on the lane of 8
    waited = time.perf_counter() - started
    assert len(log) == 8 and {tick for tick, _now, _batch in log} == {2}
    assert waited < 0.4, f"8 jobs of 100 ms took {waited:.3f}s: not in parallel"


def test_a_prompt_a_tool_opens_waits_for_the_operator_without_holding_the_world(make_world):
    from runtime import AskUserTool

    tools = ToolRegistry()
    tools.add(AskUserTool())

    def asker(turn):
        results = yield CallTools(ToolCall("c1", "ask_user", {"prompt": "colour?"}))
        return results[0].output

    def sleeper(turn):
        yield Sleep(5.0)
        return "slept"

    world = make_world(tools=tools)
    agent = world.spawn(asker)
    other = world.spawn(sleeper)

    def answer_at_one() -> None:  # a simulated operator: a host timer on the tick thread
        for _owner, request in world.hub.pending():
            world.hub.answer(InteractionResponse.text(request.id, "teal"))

    world.call_at(1.0, answer_at_one)
    world.run_until_idle()
    assert world.result(agent) == "teal"
    assert world.result(other) == "slept"


def test_an_interrupt_does_not_wait_for_the_slow_job_it_abandons(make_world):
    release = threading.Event()
    tools = ToolRegistry()

    @tools.tool()
    def stuck(args, ctx):
        release.wait(WAIT)
        return "late"

    world = make_world(tools=tools)
    agent = world.spawn(call_once("stuck"), interactive=True, agent_id="x")
    world.send(agent, "go")
    world.tick()
    world.interrupt(agent)
    started = time.perf_counter()
    world.tick()
    assert time.perf_counter() - started < WAIT / 2
    assert world.history(agent)[-1].content == "[interrupted by user]"
    release.set()


def deaf_and_quick(release: threading.Event) -> ToolRegistry:
    """``deaf`` (timeout 0.1 s) ignores its token until ``release``; ``quick`` answers."""
    tools = ToolRegistry()

    @tools.tool(timeout=0.1)
    def deaf(args, ctx):
        release.wait(WAIT)  # ignores ctx.cancel
        return "too late"

    @tools.tool()
    def quick(args, ctx):
        return "quick"

    return tools


def test_a_job_that_ignores_its_timeout_is_given_up_and_the_world_goes_on(make_world, monkeypatch):
    monkeypatch.setattr(tool_lane_module, "GIVE_UP_GRACE_SECS", 0.05)
    release = threading.Event()
    world = make_world(tools=deaf_and_quick(release))
    log = landings(world)
    agent = world.spawn(call_once("deaf"))
    try:
        world.tick()
        world.tick()  # waits 0.1 s + grace, then gives up: the outcome lands here
        assert [tick for tick, _now, _batch in log] == [2]
        world.run_until_idle(timeout=WAIT)
        [entry] = [e for e in world.history(agent) if e.role == "tool"]
        assert "ignored its timeout" in entry.content
    finally:
        release.set()
    world.tick()  # the late result is dropped, not delivered a second time
    assert len(log) == 1


@pytest.mark.parametrize("lockstep", [True, False], ids=["lockstep", "real-time"])
def test_a_given_up_job_lets_go_of_its_lane_permit(make_world, monkeypatch, lockstep):
    # On a one-wide lane, the deaf tool's thread runs on after the give-up: were it still
    # holding the lane's only permit, the next batch would queue behind it, and a lockstep
    # tick would wait for that batch (it never starts) until the deaf tool returned. In
    # real time the agent waited for the deaf tool to return, its timeout notwithstanding.
    monkeypatch.setattr(tool_lane_module, "GIVE_UP_GRACE_SECS", 0.05)
    release = threading.Event()

    def deaf_then_quick(turn):
        first = yield CallTools(ToolCall("c1", "deaf"))
        second = yield CallTools(ToolCall("c2", "quick"))
        return [first[0].error, second[0].output]

    clock = ManualClock() if lockstep else MonotonicClock()
    world = make_world(clock=clock, tools=deaf_and_quick(release), tool_capacity=1)
    assert world.lockstep is lockstep
    agent = world.spawn(deaf_then_quick)
    try:
        started = time.perf_counter()
        world.run_until_idle(timeout=WAIT)
        error, second = world.result(agent)
        assert "no result after 0.15s" in error and "ignored its timeout" in error, error
        assert second == "quick"
        assert time.perf_counter() - started < WAIT / 2  # not once the deaf tool returned
        stats = world.lane.stats()
        assert (stats.busy, stats.parked, stats.finished) == (0, 1, 1), stats
    finally:
        release.set()
    wait_for(lambda: world.lane.stats().parked == 0, WAIT, "the deaf job's end")
    stats = world.lane.stats()
    # The late job ends where it was let go: counted dropped, its result delivered nowhere.
    assert (stats.busy, stats.dropped, stats.finished) == (0, 1, 1), stats
    world.run_until_idle(timeout=WAIT)
    tool_entries = [e.content for e in world.history(agent) if e.role == "tool"]
    assert len(tool_entries) == 2 and "ignored its timeout" in tool_entries[0], tool_entries


def test_an_answer_from_another_thread_is_an_input_of_the_tick_after_it_arrives(make_world):
    def asker(turn):
        answer = yield Ask(InteractionRequest.free_text("q1", "go?"))
        return answer.value

    world = make_world(interaction_timeout_secs=0)
    settled: list[int] = []
    world.observe(
        lambda report, inputs: settled.extend(
            report.tick for _seq, item in inputs if type(item).__name__ == "PromptSettled"
        )
    )
    agent = world.spawn(asker)
    world.run_until_idle()  # waits for a person: nothing can move
    answered = threading.Thread(
        target=world.hub.answer, args=(InteractionResponse.text("q1", "yes"),)
    )
    answered.start()
    answered.join(WAIT)
    before = world.tick_count
    world.run_until_idle()
    assert world.result(agent) == "yes" and settled == [before + 1]


def test_a_scenario_on_a_virtual_clock_runs_lockstep_unless_told_not_to(tmp_path):
    from runtime.scenario import build_world, parse_scenario

    source = """
    [world]
    clock = "virtual"
    {extra}
    [tools.t]
    sleep = true
    virtual_duration = 2.5
    [models.default]
    replies = ["x"]
    virtual_duration = 1.5
    [[agents]]
    steps = [{{ finish = "done" }}]
    """
    scenario = parse_scenario(source.format(extra=""), "s.toml")
    assert scenario.world.lockstep is None
    assert scenario.tools["t"].virtual_duration == 2.5
    assert scenario.models["default"].virtual_duration == 1.5
    with build_world(scenario) as world:
        assert world.lockstep is True
        assert world.tools.lockstep_bounds([ToolCall("c", "t")]) == (2.5, None)
    scenario = parse_scenario(source.format(extra="lockstep = false"), "s.toml")
    with build_world(scenario) as world:
        assert world.lockstep is False


def test_a_bad_virtual_duration_is_refused_naming_it():
    tools = ToolRegistry()
    with pytest.raises(ConfigError, match=r"`virtual_duration` must be a finite number >= 0"):
        tools.tool(virtual_duration=-1.0)
    with pytest.raises(ValueError, match="`virtual_duration` must be a finite number >= 0"):
        ScriptedModel(["x"], virtual_duration=float("nan"))


def test_a_journal_of_a_lockstep_run_replays(tmp_path):
    from runtime import Journal, replay
    from tests import journal_behaviors as jb

    path = tmp_path / "run.db"
    world = World(
        seed=3,
        clock=ManualClock(),
        tools=jb.make_tools(),
        models=jb.scripted_models(),
        journal=Journal.create(path),
    )
    try:
        for i in range(4):
            world.spawn(jb.worker, f"t{i}")
        world.call_at(
            0.5,
            lambda: [
                world.hub.answer(InteractionResponse.text(request.id, "go"))
                for _owner, request in world.hub.pending()
            ],
        )
        world.run_until_idle(timeout=WAIT)
        ticks = world.tick_count
    finally:
        world.close()
    report = replay(path)
    assert report.ticks == ticks and report.effects.get("run_tools") == 4


def _asking_run(make_world) -> tuple[list[tuple[int, str | None]], list[str], list[object]]:
    """A lockstep run whose tools ask a person: three agents, each asking through the
    built-in tool twice (the same call id in two batches of one turn) and through a tool
    that asks twice in one call; an operator (a host timer) answers every second.
    Returns every tick's digest, the prompt ids in the order they opened, the results."""
    from runtime import AskUserTool
    from runtime.tools import ToolContext

    tools = ToolRegistry()
    tools.add(AskUserTool())

    @tools.tool()
    def twice(args, ctx: ToolContext) -> object:
        first = ctx.ask(InteractionRequest.free_text("", "first?"))
        second = ctx.ask(InteractionRequest.free_text("", "second?"))
        return [first.value, second.value]

    def asker(turn):
        got = []
        for _ in range(2):
            results = yield CallTools(ToolCall("c1", "ask_user", {"prompt": "colour?"}))
            got.append(results[0].output)
        results = yield CallTools(ToolCall("c1", "twice"))
        return [*got, results[0].output]

    world = make_world(tools=tools, track_digests=True)
    agents = [world.spawn(asker) for _ in range(3)]

    def operator() -> None:  # answers with the prompt's own id, so the results show them
        for _owner, request in world.hub.pending():
            world.hub.answer(InteractionResponse.text(request.id, request.id))
        if any(not world.status(a).kind.is_terminal for a in agents):
            world.call_at(world.now + 1.0, operator)

    world.call_at(1.0, operator)
    digests: list[tuple[int, str | None]] = []
    opened: list[str] = []

    def note(report, inputs) -> None:
        digests.append((report.tick, report.digest))
        opened.extend(item.request.id for _seq, item in inputs if type(item) is PromptOpened)

    world.observe(note)
    world.run_until_idle(max_ticks=500)
    return digests, opened, [world.result(a) for a in agents]


def test_a_lockstep_run_whose_tools_ask_a_person_repeats_its_digests_and_prompt_ids(make_world):
    # The determinism contract: same seed and scenario, same digest after every tick. An
    # open prompt's id is in the digest, so a tool's prompt must be named by the run, not
    # by chance (a uuid) or by which lane thread asked first (the hub's counter).
    first_digests, first_ids, first_results = _asking_run(make_world)
    second_digests, second_ids, second_results = _asking_run(make_world)
    assert first_digests == second_digests
    assert sorted(first_ids) == sorted(second_ids)
    assert first_results == second_results
    assert len(first_ids) == len(set(first_ids)) == 3 * 4  # unique across agents and batches
    # Each result is the id of the prompt it answered: named by the batch and the call,
    # the second ask of one call numbered.
    agent = first_results[0]
    assert agent[0].endswith("/b1/c1") and agent[1].endswith("/b2/c1"), agent
    assert agent[2] == [f"{agent[2][0]}", f"{agent[2][0]}#2"] and agent[2][0].endswith("/b3/c1")


def test_a_prompt_a_tool_opened_before_its_agent_was_interrupted_never_reaches_the_world(
    make_world,
):
    # Whether the tool's thread got to its prompt before the interrupt landed is thread
    # timing, so the world must see the same either way: no prompt. Here the prompt is
    # surely open in the hub first (the worst case for a run that is to repeat itself).
    from runtime import AskUserTool

    tools = ToolRegistry()
    tools.add(AskUserTool())

    def asker(turn):
        results = yield CallTools(ToolCall("c1", "ask_user", {"prompt": "colour?"}))
        return results[0].output

    world = make_world(tools=tools)
    seen: list[tuple[int, str]] = []
    world.observe(
        lambda report, inputs: seen.extend(
            (report.tick, type(item).__name__) for _seq, item in inputs
        )
    )
    agent = world.spawn(asker, interactive=True)
    world.send(agent, "go")
    world.tick()  # the batch is dispatched; its tool opens the prompt on a lane thread
    wait_for(lambda: bool(world.hub.pending()), what="the tool's prompt")
    world.interrupt(agent)
    world.tick()  # the interrupt lands; the tool's prompt is withdrawn from the hub
    world.tick()
    assert world.hub.pending() == []
    assert world._state.records[agent].prompt_ids() == []
    kinds = {kind for _tick, kind in seen}
    assert "PromptOpened" not in kinds and "PromptSettled" not in kinds, seen
    assert world.history(agent)[-1].content == "[interrupted by user]"


@pytest.mark.parametrize("pooled", [False, True], ids=["its-thread", "a-thread-it-started"])
def test_a_prompt_a_tool_opens_is_stamped_with_its_dispatch_time_whenever_its_thread_asks(
    make_world, pooled
):
    # The host moves the clock on between ticks while the tool's thread is still on its
    # way to the prompt: stamped by the clock, its deadline (and the tick it expires at)
    # would depend on which came first. Asked from a pool the tool fans out to, the
    # prompt is the job's all the same (before, the tick waited for the job for ever).
    from concurrent.futures import ThreadPoolExecutor

    from runtime.tools import ToolContext

    go = threading.Event()
    tools = ToolRegistry()

    @tools.tool()
    def consult(args, ctx: ToolContext) -> object:
        assert go.wait(WAIT)
        request = InteractionRequest.free_text("", "which way?")
        if not pooled:
            return ctx.ask(request).value
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(ctx.ask, request).result(WAIT).value

    def consulter(turn):
        (result,) = yield CallTools(ToolCall("c1", "consult"))
        return result.output

    world = make_world(tools=tools, interaction_timeout_secs=10.0)
    world.clock.advance(5.0)
    agent = world.spawn(consulter)
    world.tick()  # dispatched at 5.0
    world.clock.advance(3.0)  # the host moves on before the tool asks
    go.set()
    wait_for(lambda: bool(world.hub.pending()), what="the tool's prompt")
    ((opened),) = world.hub.opened()
    assert (opened.at, opened.deadline) == (5.0, 15.0)
    world.tick()  # at 8.0: the opening reaches the world; the tick does not wait for it
    world.clock.advance(6.9)
    world.tick()  # 14.9: not yet due
    assert world.hub.pending()
    world.clock.advance(0.1)
    world.tick()  # 15.0: expired, on every run
    assert world.hub.pending() == []
    world.run_until_idle()
    assert world.result(agent) == ""  # the neutral answer
    # Off the job's thread the hub reads the world's clock as ever.
    assert world.hub.open("host", InteractionRequest.free_text("", "and you?"))
    assert world.hub.opened()[-1].at == world.now == 15.0


def test_a_tick_does_not_wait_for_an_abandoned_job_whose_prompt_was_answered():
    # A job asking a person is not waited for; its agent interrupted (the job abandoned),
    # the answer used to list it as running again, so that the other job's end left the
    # list non-empty and the tick waited for the abandoned job (for ever, if its tool
    # waits on its token: the interrupt lands only in the tick that was waiting).
    from components import PromptSettled, Settlement
    from runtime.cancel import CancelToken
    from runtime.lane import ToolJob
    from runtime.lane.parking import current
    from runtime.world.inputs import Inbox
    from runtime.world.lockstep import Lockstep

    lockstep = Lockstep(Inbox(), ManualClock())
    asking = ToolJob("s", "S", lambda c: [], (), CancelToken())
    other = ToolJob("x", "X", lambda c: [], (), CancelToken())
    lockstep.track(asking, due=0.0)
    lockstep.track(other, due=0.0)

    class OnItsThread:  # what lockstep finds on a lane thread running `asking`
        job = asking

    def ask() -> None:
        current.slot = OnItsThread()
        request = InteractionRequest.free_text("p1", "go?")
        lockstep.caused(PromptOpened("s", request, 0.0))

    opener = threading.Thread(target=ask)
    opener.start()
    opener.join(WAIT)
    waiting = threading.Event()
    settled = threading.Event()

    def tick() -> None:
        waiting.set()
        if lockstep.settle(None):
            settled.set()

    ticking = threading.Thread(target=tick, daemon=True)
    try:
        ticking.start()
        assert waiting.wait(WAIT)
        lockstep.abandon("s")  # an interrupt of its agent is on its way
        answer = InteractionResponse("p1", "yes")
        lockstep.caused(PromptSettled("s", "p1", Settlement.ANSWERED, answer, 0.0, 0.0))
        lockstep.ended(other)
        assert settled.wait(WAIT), "the tick waited for the abandoned job"
    finally:
        lockstep.close()
        ticking.join(WAIT)
