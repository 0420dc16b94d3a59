"""The tick: the sleepers' fast path gives exactly what the whole pipeline gives.

``run_until_idle`` on a virtual clock, in a world nobody watches tick by tick, runs the
ticks in which only sleepers can move without walking the pipeline for each
(``TickMachine._skip_ahead``). Observing a world turns that path off (an observer must see
every tick's report), so every test here runs the same population twice, watched and
unwatched, and asks for the same ticks, times, statuses, results and digest.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components import InteractionRequest, StatusKind
from runtime import (
    PENDING,
    Ask,
    Join,
    ManualClock,
    Sleep,
    Spawn,
    SystemContext,
    TickLimitError,
    World,
)

# A program is a list of steps an agent takes; a step is one of:
#   ("sleep", seconds) | ("spawn", program) | ("join",) | ("ask",) | ("send",)
#   | ("rng",) | ("raise",)
SECONDS = st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.0, 2.0, 1e-300, 3.7, float("inf")])


def _programs(depth: int) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    leaf = st.one_of(
        st.tuples(st.just("sleep"), SECONDS),
        st.tuples(st.just("sleep"), st.floats(0.001, 5.0)),
        st.tuples(st.just("ask")),
        st.tuples(st.just("send")),
        st.tuples(st.just("rng")),
        st.tuples(st.just("raise")),
        st.tuples(st.just("nap"), st.sampled_from([0.0, 0.5, 1.0, 2.25])),
    )
    if depth:
        leaf = st.one_of(
            leaf, st.tuples(st.just("spawn"), _programs(depth - 1)), st.just(("join",))
        )
    return st.lists(leaf, max_size=6)


_CTX: dict[str, Any] = {}  # the world being run, for the "send" step


def scripted(turn: Any) -> Generator[Any, Any, Any]:
    """Run the program in ``turn.message``; the result collects what each step gave."""
    program = turn.message
    children: list[str] = []
    seen: list[Any] = []
    for index, step in enumerate(program):
        kind = step[0]
        if kind == "sleep":
            if step[1] == float("inf"):
                continue  # would never end: the test wants runs that finish
            yield Sleep(step[1])
        elif kind == "spawn":
            children.append((yield Spawn("scripted", step[1])))
        elif kind == "join" and children:
            yield Join(*children)
        elif kind == "ask":
            response = yield Ask(
                InteractionRequest.free_text(f"{turn.agent_id}.q{index}", "anyone?")
            )
            seen.append(response.value)
        elif kind == "send":
            # A thread-safe command from inside a batch of ticks: an input, next tick
            # (the first agent takes it as its next turn's message, or has ended).
            _CTX["world"].send("a1", [])
        elif kind == "nap" and "naps" in _CTX:
            seen.append((yield Nap(step[1])))
        elif kind == "rng":
            seen.append(turn.rng.random())
        elif kind == "raise":
            raise RuntimeError("planned failure")
    return seen


@dataclass(frozen=True)
class Nap:
    """A host action: wait ``seconds`` of world time (a host timer, then a host system)."""

    seconds: float


@dataclass
class Counter:
    """A host component a host system bumps now and then (it is in the digest)."""

    value: int = 0


def _host(world: World, conditional: bool = False, early: bool = False) -> None:
    """Host ECS parts: the `Nap` action, a timer per nap, a system completing naps due
    and bumping a counter on some ticks (``conditional``: only in the ticks its
    ``run_if`` says it has work, so that skipped runs may skip its quiet ticks; ``early``:
    placed before the step, so that a skipped run may also wake sleepers without it)."""
    naps: dict[str, float] = {}
    _CTX["naps"] = naps
    world.add_entity(Counter())

    def nap(ctx: SystemContext, agent_id: str, action: Nap) -> object:
        due = ctx.now + action.seconds
        naps[agent_id] = due
        world.call_at(due, lambda: None)  # so that the world ticks then
        return PENDING

    calls: list[tuple[int, float]] = []
    _CTX["calls"] = calls

    def wake_nappers(ctx: SystemContext) -> None:
        calls.append((ctx.tick, ctx.now))  # every tick a host system runs in, and when
        for agent_id, due in sorted(naps.items()):
            if due <= ctx.now:
                del naps[agent_id]
                ctx.complete(agent_id, ctx.tick)
        if ctx.tick % 3 == 0:
            for entity, (counter,) in ctx.query(Counter):
                if counter.value < 4:
                    counter.value += 1
                    ctx.set(entity, counter)

    def has_work(ctx: SystemContext) -> bool:
        return any(due <= ctx.now for due in naps.values()) or ctx.tick % 3 == 0

    world.add_action(Nap, nap)
    world.add_system(
        wake_nappers,
        after="handle_interrupts" if early else None,
        run_if=has_work if conditional else None,
    )


def _run(
    programs: list[list[tuple[Any, ...]]],
    *,
    watched: bool,
    keep_finished: int | None = None,
    hosted: bool = False,
    conditional: bool = False,
    early: bool = False,
) -> dict[str, Any]:
    world = World(
        clock=ManualClock(),
        interaction_timeout_secs=1.5,
        keep_finished=keep_finished,
    )
    world.behaviors.register("scripted", scripted)
    _CTX.clear()
    _CTX["world"] = world
    if hosted:
        _host(world, conditional, early)
    try:
        if watched:
            world.observe(lambda report, inputs: None)
        ids = [world.spawn("scripted", program) for program in programs]
        world.tick()
        world.digest()  # folds the spawns: the final digest has only what ticks marked
        ticks = world.run_until_idle(max_ticks=100_000)
        agents = {}
        for agent_id in ids:
            try:
                status = world.status(agent_id)
            except Exception:  # released (keep_finished)
                continue
            agents[agent_id] = (status.kind, status.message, world.result(agent_id))
        return {
            "ticks": ticks,
            "tick_count": world.tick_count,
            "now": world.now,
            "agents": agents,
            "digest": world.digest(),
            "host_system_calls": _CTX.get("calls"),
        }
    finally:
        world.close()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(_programs(2), min_size=1, max_size=8),
    st.sampled_from([None, 2]),
    st.sampled_from(["no", "always", "run_if", "run_if early"]),
)
def test_the_fast_path_gives_what_the_pipeline_gives(
    programs: list[list[tuple[Any, ...]]], keep_finished: int | None, hosted: str
) -> None:
    host = {
        "hosted": hosted != "no",
        "conditional": hosted.startswith("run_if"),
        "early": hosted.endswith("early"),
    }
    fast = _run(programs, watched=False, keep_finished=keep_finished, **host)
    whole = _run(programs, watched=True, keep_finished=keep_finished, **host)
    assert fast == whole


# Mostly sleeps (ties, distinct times, sleeps that round to no time at all), now and then
# something else: the skip's run of wake-ups goes on while agents only sleep, and must
# stop where one does anything else, in the middle of a deadline's bucket or at its end.
_SLEEPY = st.lists(
    st.one_of(
        st.tuples(st.just("sleep"), st.sampled_from([0.5, 1.0, 1e-300, 0.0])),
        st.tuples(st.just("sleep"), st.floats(0.001, 3.0)),
        st.tuples(st.just("sleep"), st.floats(0.001, 3.0)),
        st.tuples(st.just("sleep"), st.floats(0.001, 3.0)),
        st.tuples(st.just("raise")),
        st.tuples(st.just("ask")),
        st.just(("spawn", [("sleep", 0.75), ("sleep", 1.0)])),
    ),
    max_size=8,
)


@settings(max_examples=80, deadline=None)
@given(st.lists(_SLEEPY, min_size=1, max_size=24), st.sampled_from([None, 3]))
def test_runs_of_wake_ups_give_what_the_pipeline_gives(
    programs: list[list[tuple[Any, ...]]], keep_finished: int | None
) -> None:
    fast = _run(programs, watched=False, keep_finished=keep_finished)
    assert fast == _run(programs, watched=True, keep_finished=keep_finished)


@settings(max_examples=60, deadline=None)
@given(st.lists(_SLEEPY, min_size=1, max_size=16))
def test_runs_of_wake_ups_ask_host_systems_placed_before_the_step_as_the_pipeline_does(
    programs: list[list[tuple[Any, ...]]],
) -> None:
    # The run goes on past a host system placed before the step, asking its `run_if`
    # at every tick it begins (true every third tick): the ticks it runs in are the same.
    host = {"hosted": True, "conditional": True, "early": True}
    fast = _run(programs, watched=False, **host)
    assert fast == _run(programs, watched=True, **host)


def test_host_systems_timers_and_actions_take_the_fast_path_alike() -> None:
    programs = [
        [("nap", 1.0), ("sleep", 0.5), ("nap", 0.0)],
        [("sleep", 0.25), ("nap", 2.25), ("spawn", [("nap", 0.5)]), ("join",)],
    ]
    fast = _run(programs, watched=False, hosted=True)
    assert fast == _run(programs, watched=True, hosted=True)
    assert fast["now"] == 3.0
    assert all(kind is StatusKind.COMPLETE for kind, _m, _r in fast["agents"].values())


def test_a_conditional_host_system_runs_in_the_same_ticks_when_skipped() -> None:
    # Its `run_if` is true on every third tick: skipped quiet ticks must still ask it
    # (and run it) there, and a tick it has no work in is skipped as if it were absent.
    programs = [
        [("sleep", 1.0), ("sleep", 1.0), ("sleep", 0.5), ("sleep", 2.0)],
        [("sleep", 0.25), ("sleep", 3.7)],
    ]
    for early in (False, True):  # after the step (the default place), before it
        fast = _run(programs, watched=False, hosted=True, conditional=True, early=early)
        assert fast == _run(programs, watched=True, hosted=True, conditional=True, early=early)
        assert [tick for tick, _now in fast["host_system_calls"]] == [3, 6, 9, 12, 15]


def _sleeper(turn: Any) -> Generator[Any, Any, None]:
    for seconds in turn.message:
        yield Sleep(seconds)


def test_ties_ends_and_zero_sleeps_count_the_same_ticks() -> None:
    programs = [
        [("sleep", 1.0), ("sleep", 1.0)],
        [("sleep", 1.0), ("sleep", 0.0), ("sleep", 1.0)],
        [("sleep", 0.5), ("spawn", [("sleep", 2.0)]), ("join",)],
        [("sleep", 2.5), ("raise",)],
    ]
    fast = _run(programs, watched=False)
    assert fast == _run(programs, watched=True)
    assert fast["now"] == 2.5
    kinds = [kind for kind, _message, _result in fast["agents"].values()]
    assert kinds == [StatusKind.COMPLETE] * 3 + [StatusKind.ERROR]


def _sleepers_run(*, watched: bool) -> list[Any]:
    """Sleepers due at distinct times (the lean tick's case), one of them paused while it
    sleeps and resumed later, one ending in a sleep that never ends: what the world shows
    at each fixed point."""
    world = World(clock=ManualClock())
    seen: list[Any] = []
    try:
        if watched:
            world.observe(lambda report, inputs: None)
        ids = [
            world.spawn(_sleeper, [0.5, 1.25, float("inf")]),  # then sleeps for ever
            world.spawn(_sleeper, [1.0, 0.75]),  # paused in its first sleep, from 0 s
            world.spawn(_sleeper, [0.25, 0.5, 3.0]),
        ]
        world.tick()
        world.pause(ids[1])
        world.tick()
        seen.append(world.digest())  # from here on, only what the ticks mark is folded
        for step in range(2):
            ticks = world.run_until_idle(max_ticks=1_000)
            seen.append((ticks, world.tick_count, world.now, world.digest()))
            seen.append([(world.status(i).kind, world.result(i)) for i in ids])
            if step == 0:
                world.resume(ids[1])
        return seen
    finally:
        world.close()


def test_lean_ticks_hold_paused_sleepers_and_mark_what_they_step() -> None:
    fast, whole = _sleepers_run(watched=False), _sleepers_run(watched=True)
    assert fast == whole
    # The paused agent waited out the first run, then finished once resumed.
    assert fast[2][1][0] is StatusKind.PAUSED
    assert fast[4][1][0] is StatusKind.COMPLETE
    assert fast[4][0][0] is StatusKind.ACTIVE  # asleep for ever (a Sleep of inf)


def test_a_prompt_deadline_stops_the_fast_path_in_time() -> None:
    # The prompt expires at 1.5 s, between the sleepers' deadlines: it must expire then,
    # and the asker resume at 1.5 s, not when the next sleeper wakes.
    programs = [[("ask",), ("sleep", 0.25)], [("sleep", 1.0), ("sleep", 1.0), ("sleep", 1.0)]]
    fast = _run(programs, watched=False)
    assert fast == _run(programs, watched=True)
    assert fast["agents"]["a1"][2] == [""]  # the neutral response of an expired prompt


def test_max_ticks_is_honoured_inside_the_fast_path() -> None:
    world = World(clock=ManualClock())
    try:
        world.spawn(_sleeper, [1.0] * 50)
        with pytest.raises(TickLimitError, match="max_ticks"):
            world.run_until_idle(max_ticks=30)
        assert world.tick_count == 30
    finally:
        world.close()


def test_an_inputs_only_observer_sees_every_tick_with_inputs_and_keeps_the_fast_path() -> None:
    seen: list[tuple[int, int]] = []
    every: list[int] = []
    world = World(clock=ManualClock())
    try:
        world.observe(
            lambda report, inputs: seen.append((report.tick, len(inputs))), every_tick=False
        )
        assert world._unwatched()  # white box: the fast path stays on
        first = world.spawn(_sleeper, [1.0, 2.0])
        world.run_until_idle()
        sent_at = world.tick_count + 1
        world.send(first, [0.5])
        world.run_until_idle()
        assert seen == [(1, 1), (sent_at, 1)]  # the spawn's tick, then the send's
        world.observe(lambda report, inputs: every.append(report.tick))
        assert not world._unwatched()
        world.tick()
        assert every == [world.tick_count] and len(seen) == 2
    finally:
        world.close()


@dataclass
class Badge:
    """A host component on agents, to see released agents' entities go."""

    number: int = 0


def test_released_agents_entities_go_as_in_the_whole_pipeline() -> None:
    def run(watched: bool) -> list[Any]:
        world = World(clock=ManualClock(), keep_finished=0)
        try:
            seen: list[tuple[int, list[int]]] = []

            def census(ctx: SystemContext) -> None:  # what a host system's query sees
                seen.append((ctx.tick, [badge.number for _e, (badge,) in ctx.query(Badge)]))

            world.add_system(census, after="apply_inputs")
            if watched:
                world.observe(lambda report, inputs: None)
            for n in range(6):
                world.spawn(_sleeper, [0.5 * (n + 1), 1.0], components=[Badge(n)])
            world.run_until_idle()
            return [world.tick_count, world.query(Badge), seen]
        finally:
            world.close()

    assert run(watched=False) == run(watched=True)


@pytest.mark.usefixtures("python_sigint")
def test_a_ctrl_c_in_a_skipped_tick_is_raised_after_that_tick() -> None:
    def kicker(turn: Any) -> Generator[Any, Any, str]:
        yield Sleep(1.0)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C lands during this tick
        yield Sleep(1.0)
        yield Sleep(1.0)
        return "done"

    def run(watched: bool) -> tuple[int, int, float]:
        world = World(clock=ManualClock())
        try:
            if watched:
                world.observe(lambda report, inputs: None)
            world.spawn(kicker)
            with pytest.raises(KeyboardInterrupt):
                world.run_until_idle()
            at = world.tick_count
            world.run_until_idle()
            return at, world.tick_count, world.now
        finally:
            world.close()

    assert run(watched=False) == run(watched=True)


def test_host_systems_after_the_mirror_see_the_lanes_as_after_a_whole_tick() -> None:
    from runtime import CallTools, ToolCall
    from systems import LaneGauge

    def caller(turn: Any) -> Generator[Any, Any, str]:
        yield Sleep(1.0)
        yield CallTools(ToolCall("c1", "quick", {}))  # work goes out in a skipped tick
        return "done"

    def run(watched: bool) -> list[tuple[int, float, int]]:
        world = World(clock=ManualClock())
        try:

            @world.tools.tool("quick")
            def quick(args: Any, ctx: Any) -> str:
                return "ok"

            seen: list[tuple[int, float, int]] = []

            def after_mirror(ctx: SystemContext) -> None:
                for _entity, (gauge,) in ctx.query(LaneGauge):
                    if gauge.name == "tools":
                        seen.append((ctx.tick, ctx.now, gauge.stats.enqueued))

            world.add_system(after_mirror, after="mirror_lane_stats")
            if watched:
                world.observe(lambda report, inputs: None)
            world.spawn(caller)
            world.run_until_idle(timeout=30)
            return seen
        finally:
            world.close()

    assert run(watched=False) == run(watched=True)


def test_an_observer_or_system_added_mid_skip_sees_what_it_would_have() -> None:
    def run(watched: bool) -> tuple[list[tuple[int, float]], list[int]]:
        world = World(clock=ManualClock())
        try:
            if watched:
                world.observe(lambda report, inputs: None)
            seen: list[tuple[int, float]] = []
            calls: list[int] = []
            late = lambda report, inputs: seen.append((report.tick, report.now))  # noqa: E731
            world.call_at(2.0, lambda: world.observe(late))
            world.call_at(1.5, lambda: world.add_system(lambda ctx: calls.append(ctx.tick)))
            world.spawn(_sleeper, [1.0] * 5)
            world.run_until_idle()
            return seen, calls
        finally:
            world.close()

    assert run(watched=False) == run(watched=True)


def test_the_skip_lets_a_reader_in_between_slices_of_ticks() -> None:
    # A reader blocked on the world's lock must get in while the skip goes on: the
    # behaviour sleeps until the reader is through (or a million ticks went by).
    asked, through = threading.Event(), threading.Event()

    def waiter(turn: Any) -> Generator[Any, Any, int]:
        asked.set()
        steps = 0
        while not through.is_set() and steps < 1_000_000:
            steps += 1
            yield Sleep(1.0)
        return steps

    world = World(clock=ManualClock())
    try:
        counts: list[Any] = []

        def reader() -> None:
            assert asked.wait(30)
            counts.append(world.counts())  # takes the world's lock
            through.set()

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        agent = world.spawn(waiter)
        world.run_until_idle(max_ticks=10_000_000)
        thread.join(30)
        assert through.is_set() and counts
        assert world.result(agent) < 1_000_000  # the reader got in before the end
    finally:
        world.close()


def test_an_agent_ending_with_a_prompt_open_has_it_settled_in_a_run_of_wake_ups() -> None:
    # A host opened a prompt for a sleeping agent (as a tool would): when the agent ends
    # among sleepers, its abort has work (the prompt), so the run must not forget it.
    def run(watched: bool) -> tuple[Any, ...]:
        world = World(clock=ManualClock())
        try:
            if watched:
                world.observe(lambda report, inputs: None)
            asked = world.spawn(_sleeper, [1.0, 0.5])
            others = [world.spawn(_sleeper, [0.25 * n, 0.3, 0.7]) for n in range(1, 4)]
            world.tick()
            world.hub.open(asked, InteractionRequest.free_text("q", "still there?"))
            world.tick()  # the prompt is on the record now
            ticks = world.run_until_idle(max_ticks=1_000)
            kinds = [world.status(agent).kind for agent in [asked, *others]]
            return ticks, world.tick_count, world.now, kinds, world.hub.pending(), world.digest()
        finally:
            world.close()

    fast = run(watched=False)
    assert fast == run(watched=True)
    assert fast[4] == []  # settled when the agent ended
    assert fast[3] == [StatusKind.COMPLETE] * 4


def test_sleepers_alone_are_woken_in_one_run_of_the_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    # The skip's run of wake-ups goes on from one deadline to the next while agents only
    # sleep (or end with nothing to abort): 24 wake-ups at distinct times, one run.
    calls: list[int] = []
    original = World._wake_run

    def counted(self: World, *args: Any) -> tuple[int, float]:
        calls.append(1)
        return original(self, *args)

    monkeypatch.setattr(World, "_wake_run", counted)
    world = World(clock=ManualClock())
    try:
        for n in range(8):
            world.spawn(_sleeper, [0.1 + n / 100, 0.3 + n / 50, 0.2])
        world.tick()
        world.run_until_idle(max_ticks=1_000)
        assert all(world.status(a).kind is StatusKind.COMPLETE for a in world.agents())
    finally:
        world.close()
    assert calls == [1]


def test_a_behaviour_may_move_the_clock_while_the_skip_holds_its_lock() -> None:
    # The skip holds the ManualClock's lock for a slice of ticks; a behaviour (or a host
    # timer) that calls `advance` or `set` in one of them must not deadlock on it.
    clock = ManualClock()

    def mover(turn: Any) -> Generator[Any, Any, None]:
        yield Sleep(1.0)
        clock.advance(0.0)
        clock.set(clock.now())
        yield Sleep(1.0)

    world = World(clock=clock)
    done = threading.Event()

    def run() -> None:
        world.run_until_idle(max_ticks=1_000)
        done.set()

    try:
        world.spawn(mover)
        world.spawn(_sleeper, [0.5, 2.5])
        world.tick()
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        assert done.wait(10), "run_until_idle deadlocked on the clock's lock"
        assert world.now == 3.0  # the sleeper's 0.5 + 2.5
    finally:
        if done.is_set():
            world.close()
