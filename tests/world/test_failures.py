"""Nothing a behaviour, tool or model does strands another agent or kills the tick thread."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from runtime import (
    CallTools,
    Cancelled,
    ModelReply,
    Sleep,
    StatusKind,
    Think,
    ToolCall,
    ToolRegistry,
    World,
)
from tests.conftest import wait_for


def _raiser(exc: BaseException):
    def behaviour(turn):
        yield Sleep(0)
        raise exc

    return behaviour


def steady(turn):
    yield Sleep(0)
    yield Sleep(0)
    return "done"


@pytest.mark.parametrize(
    "exc",
    [SystemExit(3), Cancelled("stray"), GeneratorExit()],
    ids=["exit", "cancelled", "genexit"],
)
def test_a_base_exception_in_a_behaviour_fails_only_that_agent(make_world, exc):
    world = make_world()
    bad = world.spawn(_raiser(exc), "x")
    good = world.spawn(steady, "y")  # stepped after the bad one in the same tick
    world.run_until_idle(max_ticks=20)
    status = world.status(bad)
    assert status.kind is StatusKind.ERROR
    assert type(exc).__name__ in status.message
    assert world.status(good).kind is StatusKind.COMPLETE
    assert world.result(good) == "done"


def test_a_base_exception_raised_when_a_turn_starts_fails_only_that_agent(make_world):
    def exits_at_once(turn):
        raise SystemExit("no")

    world = make_world()
    bad = world.spawn(exits_at_once, "x")
    good = world.spawn(steady, "y")
    world.run_until_idle(max_ticks=20)
    assert world.status(bad).kind is StatusKind.ERROR
    assert world.status(good).kind is StatusKind.COMPLETE


def test_a_keyboard_interrupt_from_a_behaviour_fails_it_and_is_raised_after_the_whole_tick(
    make_world,
):
    world = make_world()
    bad = world.spawn(_raiser(KeyboardInterrupt()), "x")
    good = world.spawn(steady, "y")
    world.tick()
    with pytest.raises(KeyboardInterrupt):
        world.tick()
    # The tick finished for every agent before it was raised; the world ticks on.
    assert world.status(bad).kind is StatusKind.ERROR
    world.run_until_idle(max_ticks=20)
    assert world.status(good).kind is StatusKind.COMPLETE


@pytest.mark.usefixtures("python_sigint")
def test_ctrl_c_during_a_hosts_tick_lets_the_tick_finish_then_raises(make_world):
    def presses_ctrl_c(turn):
        yield Sleep(0)
        signal.raise_signal(signal.SIGINT)  # Ctrl-C lands while this behaviour runs
        return "finished anyway"

    world = make_world()
    first = world.spawn(presses_ctrl_c, "x")
    second = world.spawn(steady, "y")
    world.tick()
    with pytest.raises(KeyboardInterrupt):
        world.tick()
    assert world.status(first).kind is StatusKind.COMPLETE
    assert world.result(first) == "finished anyway"
    world.run_until_idle(max_ticks=20)
    assert world.status(second).kind is StatusKind.COMPLETE
    # Outside a tick, Ctrl-C is what it always was.
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)


def test_the_tick_thread_survives_a_behaviour_that_raises_system_exit():
    with World(seed=1) as world:
        world.start()
        bad = world.spawn(_raiser(SystemExit(1)), "x")
        wait_for(lambda: world.status(bad).kind is StatusKind.ERROR, what="the agent to fail")
        later = world.spawn(steady, "y")
        wait_for(lambda: world.status(later).kind is StatusKind.COMPLETE, what="a later spawn")
        world.stop()


class _StrayCancelModel:
    def complete(self, request, cancel):
        raise Cancelled("the model gave up on its own")


def test_a_model_raising_cancelled_on_its_own_gives_its_agent_an_error_naming_the_lane(
    make_world,
):
    def thinker(turn):
        reply = yield Think("hello")
        return reply.text

    world = make_world(models={"default": _StrayCancelModel()})
    agent = world.spawn(thinker, "x")
    world.run_until_idle(max_ticks=50, timeout=10)  # no TickLimitError: nothing is stranded
    status = world.status(agent)
    assert status.kind is StatusKind.ERROR
    assert "lane 'inference'" in status.message and "gave up on its own" in status.message


def test_a_tool_job_failing_as_a_whole_gives_every_call_its_error(make_world):
    from runtime import ToolOutcome

    def worker(turn):
        results = yield CallTools(ToolCall("c1", "t"), ToolCall("c2", "t"))
        return [r.error for r in results]

    tools = ToolRegistry()
    release = threading.Event()

    @tools.tool()
    def t(args, ctx):
        release.wait(10)
        return 1

    world = make_world(tools=tools)
    agent = world.spawn(worker, "x")
    world.tick()
    # What a lane delivers for a raw job that failed as a whole (no per-call results).
    world.post(ToolOutcome(agent, f"{agent}/t1/b1", (), 0.0, error="lane 'tools': boom"))
    world.tick()
    world.tick()
    release.set()
    assert world.result(agent) == ["lane 'tools': boom", "lane 'tools': boom"]


def test_close_with_work_that_ignores_its_token_is_bounded_by_the_timeout_as_a_whole():
    release = threading.Event()
    tools = ToolRegistry()

    @tools.tool()
    def stubborn(args, ctx):
        release.wait(30)
        return 1

    class StubbornModel:
        def complete(self, request, cancel):
            release.wait(30)
            return ModelReply("late")

    def tool_user(turn):
        yield CallTools(ToolCall("c1", "stubborn"))

    def thinker(turn):
        yield Think("x")

    world = World(tools=tools, models={"default": StubbornModel()})
    try:
        world.spawn(tool_user, "a")
        world.spawn(thinker, "b")
        world.tick()
        wait_for(
            lambda: world.lane.stats().busy == 1 and world.inference_lane.stats().busy == 1,
            what="both jobs to run",
        )
        started = time.monotonic()
        world.close(timeout=1.0)
        elapsed = time.monotonic() - started
    finally:
        release.set()
        world.close()
    assert elapsed < 1.8, f"close(timeout=1.0) took {elapsed:.2f}s: the timeout is per lane"
