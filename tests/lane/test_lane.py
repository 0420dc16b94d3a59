"""The tool lane: bounded, counted, fair to parked jobs, and never deadlocked by a prompt."""

from __future__ import annotations

import collections
import contextlib
import logging
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from components import InteractionRequest, InteractionResponse, LaneStats, ToolCall, ToolResult
from runtime.cancel import Cancelled, CancelToken
from runtime.errors import ConfigError, LaneClosedError
from runtime.hub import InteractionHub
from runtime.hub import interaction_hub as hub_module
from runtime.lane import ToolJob, ToolLane, ToolOutcome, off_lane
from runtime.lane import tool_lane as tool_lane_module
from runtime.lane.core import Entry
from runtime.lane.parking import held, joined
from runtime.tools import ShellTool, ToolRegistry
from runtime.wake import Wake
from tests.conftest import callbacks_of
from tests.test_cancel import _process_group_alive
from tests.test_process import _alive

ROOT = Path(__file__).resolve().parents[2]
WAIT = 5.0  # the longest any wait here may take before it counts as a hang


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Poll ``predicate`` until it holds; fail (never hang) after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.001)


def check_balance(s: LaneStats, ends_parked: int = 0) -> None:
    """Every gauge is >= 0 and the counter identities of `runtime.lane.core` hold;
    ``ends_parked`` jobs finished parked (a thread they started was off the lane)."""
    for name in LaneStats.__slots__:
        value = getattr(s, name)
        if isinstance(value, int):
            assert value >= 0, f"{name} went negative: {s}"
    assert s.enqueued == s.started + s.abandoned + s.queued, s
    assert s.started == s.finished + s.failed + s.dropped + s.busy + s.parked, s
    assert s.parks >= s.resumes + s.parked, s
    # Only cancelled jobs, jobs let go, and jobs whose helper is off the lane end parked.
    assert s.parks - s.resumes - s.parked <= s.dropped + ends_parked, s
    assert s.busy <= s.capacity, s
    assert s.peak_busy <= s.started, s


def result(batch_id: str, output: object = None) -> list[ToolResult]:
    return [ToolResult(f"{batch_id}-call", output=output)]


class Outcomes:
    """An ``on_outcome`` that keeps outcomes and lets a test wait for them."""

    def __init__(self) -> None:
        self.items: queue.Queue[ToolOutcome] = queue.Queue()

    def __call__(self, outcome: ToolOutcome) -> None:
        self.items.put(outcome)

    def take(self, n: int = 1) -> list[ToolOutcome]:
        return [self.items.get(timeout=WAIT) for _ in range(n)]

    def none_left(self) -> bool:
        return self.items.empty()


@pytest.fixture
def make_lane() -> Iterator[Callable[..., ToolLane]]:
    lanes: list[tuple[ToolLane, int]] = []

    def make(capacity: int = 1, *, ends_parked: int = 0, **kwargs: object) -> ToolLane:
        lane = ToolLane(capacity, **kwargs)  # type: ignore[arg-type]
        lanes.append((lane, ends_parked))
        return lane

    yield make
    for lane, ends_parked in lanes:
        lane.close(timeout=WAIT)
        check_balance(lane.stats(), ends_parked)


def blocker(started: threading.Event | None, release: threading.Event, batch_id: str):
    """A job body that signals it started and then holds its permit until released."""

    def run(cancel: CancelToken) -> list[ToolResult]:
        if started is not None:
            started.set()
        assert release.wait(WAIT), "never released"
        return result(batch_id)

    return run


def test_submit_all_queues_jobs_in_order_as_submit_would_one_by_one(make_lane):
    outcomes, release = Outcomes(), threading.Event()
    lane = make_lane(1, on_outcome=outcomes)
    order: list[str] = []

    def job(batch_id: str) -> ToolJob:
        def run(cancel: CancelToken) -> list[ToolResult]:
            order.append(batch_id)
            assert release.wait(WAIT), "never released"
            return result(batch_id)

        return ToolJob("a1", batch_id, run)

    gone = job("gone")
    gone.cancel.cancel("before it was submitted")
    lane.submit_all([job("b0"), gone, job("b1"), job("b2")])
    s = lane.stats()
    assert (s.enqueued, s.started, s.abandoned, s.queued) == (4, 1, 1, 2)
    release.set()
    assert sorted(o.batch_id for o in outcomes.take(3)) == ["b0", "b1", "b2"]
    assert order == ["b0", "b1", "b2"]  # the queue kept the order they were handed in
    wait_until(lambda: lane.stats().in_flight == 0, "the lane to drain")
    check_balance(lane.stats())


def test_a_closed_lane_refuses_a_whole_submit_all_and_keeps_no_callback(make_lane):
    lane = make_lane(2)
    lane.close()
    jobs = [ToolJob("a1", f"b{i}", lambda c: []) for i in range(3)]
    with pytest.raises(LaneClosedError, match="'tools' is closed; 3 jobs refused"):
        lane.submit_all(jobs)
    assert all(callbacks_of(job.cancel) == [] for job in jobs)
    assert lane.stats().enqueued == 0


def test_the_lane_runs_batches_and_reports_each_one_then_nudges_the_wake(make_lane):
    outcomes, wake = Outcomes(), Wake()
    lane = make_lane(2, on_outcome=outcomes, wake=wake)
    calls = (ToolCall("c1", "t"), ToolCall("c2", "t"))
    for i in range(5):
        lane.submit(ToolJob("a1", f"b{i}", lambda c, i=i: result(f"b{i}", i), calls))
    got = sorted(outcomes.take(5), key=lambda o: o.batch_id)
    assert [(o.agent_id, o.batch_id, o.results) for o in got] == [
        ("a1", f"b{i}", tuple(result(f"b{i}", i))) for i in range(5)
    ]
    assert all(o.elapsed >= 0 for o in got)
    wait_until(lambda: lane.stats().in_flight == 0, "the lane to drain")
    assert wake.notifies == 5
    s = lane.stats()
    assert (s.enqueued, s.started, s.finished, s.name) == (5, 5, 5, "tools")
    check_balance(s)


def test_an_outcome_is_delivered_before_the_job_stops_counting_as_in_flight(make_lane):
    seen: list[LaneStats] = []
    lane = make_lane(1, on_outcome=lambda o: seen.append(lane.stats()))
    lane.submit(ToolJob("a", "b", lambda c: result("b")))
    wait_until(lambda: lane.stats().finished == 1, "the job to finish")
    assert len(seen) == 1
    assert (seen[0].busy, seen[0].finished, seen[0].in_flight) == (1, 0, 1)


def test_the_lane_runs_batches_concurrently_up_to_its_cap_and_not_beyond(make_lane):
    lane = make_lane(3, on_outcome=Outcomes())
    three = threading.Barrier(3, timeout=WAIT)
    release = threading.Event()

    def run(cancel: CancelToken) -> list[ToolResult]:
        three.wait()  # passes only if three jobs run at the same time
        assert release.wait(WAIT)
        return result("x")

    for i in range(3):
        lane.submit(ToolJob("a", f"b{i}", run))
    for i in range(3, 5):
        lane.submit(ToolJob("a", f"b{i}", blocker(None, release, "x")))
    wait_until(lambda: lane.stats().busy == 3, "three running")
    s = lane.stats()
    assert (s.queued, s.saturated, s.peak_busy) == (2, True, 3)
    release.set()
    wait_until(lambda: lane.stats().in_flight == 0, "all five")
    assert (lane.stats().finished, lane.stats().peak_busy) == (5, 3)

    four = threading.Barrier(4, timeout=0.5)  # bounded: a cap of 3 never hosts four
    outcomes: list[str] = []

    def run4(cancel: CancelToken) -> list[ToolResult]:
        try:
            four.wait()
        except threading.BrokenBarrierError:
            outcomes.append("broke")
        else:
            outcomes.append("met")
        return result("y")

    for i in range(4):
        lane.submit(ToolJob("a", f"c{i}", run4))
    wait_until(lambda: lane.stats().in_flight == 0, "the four to end")
    assert outcomes == ["broke"] * 4
    assert lane.stats().peak_busy == 3


def test_a_zero_width_lane_is_clamped_to_one(make_lane):
    assert make_lane(-3).capacity == 1
    outcomes = Outcomes()
    lane = make_lane(0, on_outcome=outcomes)
    assert lane.capacity == 1 and lane.stats().capacity == 1
    lane.submit(ToolJob("a", "b", lambda c: result("b")))
    assert outcomes.take()[0].batch_id == "b"


def test_a_parked_batch_lets_the_batch_it_waits_on_run(make_lane):
    hub = InteractionHub(timeout_secs=30)
    outcomes = Outcomes()
    lane = make_lane(1, on_outcome=outcomes)
    question = InteractionRequest.free_text("q1", "go ahead?")

    def ask(cancel: CancelToken) -> list[ToolResult]:
        return result("A", hub.ask("agent-a", question).value)

    def answer(cancel: CancelToken) -> list[ToolResult]:
        return result("B", hub.answer(InteractionResponse.text("q1", "yes")))

    try:
        lane.submit(ToolJob("agent-a", "A", ask))
        wait_until(lambda: lane.stats().parked == 1, "A to park")
        s = lane.stats()
        assert (s.busy, s.parked) == (0, 1)
        assert hub.pending() == [("agent-a", question)]
        lane.submit(ToolJob("agent-b", "B", answer))
        got = {o.batch_id: o.results[0].output for o in outcomes.take(2)}
    finally:
        hub.close()
    assert got == {"A": "yes", "B": True}
    s = lane.stats()
    assert (s.parks, s.resumes, s.finished, s.peak_busy) == (1, 1, 2, 1)


def test_the_same_wait_not_off_the_lane_deadlocks_until_the_prompt_expires(make_lane, monkeypatch):
    # The hub's ask without its `off_lane`: A holds the only permit while it waits for an
    # answer that only B, queued behind it, can give. The hub's 0.5 s expiry bounds it.
    monkeypatch.setattr(hub_module, "off_lane", contextlib.nullcontext)
    hub = InteractionHub(timeout_secs=0.5)
    outcomes = Outcomes()
    lane = make_lane(1, on_outcome=outcomes)
    question = InteractionRequest.free_text("q1", "go ahead?")
    lane.submit(ToolJob("a", "A", lambda c: result("A", hub.ask("a", question).value)))
    wait_until(lambda: hub.pending() != [], "A to ask")
    lane.submit(
        ToolJob("b", "B", lambda c: result("B", hub.answer(InteractionResponse.text("q1", "y"))))
    )
    s = lane.stats()
    assert (s.busy, s.parked, s.queued, s.saturated) == (1, 0, 1, True)
    got = [(o.batch_id, o.results[0].output) for o in outcomes.take(2)]
    assert got == [("A", ""), ("B", False)]  # A got the neutral expiry; B's answer came late


def test_a_resumed_batch_waits_for_a_permit_and_comes_before_queued_ones(make_lane):
    outcomes = Outcomes()
    lane = make_lane(1, on_outcome=outcomes)
    log: list[str] = []
    parked, leave, b_started, b_release = (threading.Event() for _ in range(4))

    def a(cancel: CancelToken) -> list[ToolResult]:
        with off_lane():
            log.append("A parked")
            parked.set()
            assert leave.wait(WAIT)
        log.append("A back")
        return result("A")

    def b(cancel: CancelToken) -> list[ToolResult]:
        log.append("B start")
        b_started.set()
        assert b_release.wait(WAIT)
        log.append("B end")
        return result("B")

    lane.submit(ToolJob("a", "A", a))
    assert parked.wait(WAIT)
    lane.submit(ToolJob("b", "B", b))
    assert b_started.wait(WAIT)
    leave.set()
    # White-box: the only sign that A is waiting (rather than about to) is the lane's list.
    wait_until(lambda: len(lane._resumers) == 1, "A to wait for a permit")
    s = lane.stats()
    assert (s.busy, s.parked) == (1, 1) and "A back" not in log
    lane.submit(ToolJob("c", "C", lambda c: log.append("C start") or result("C")))
    assert lane.stats().queued == 1
    b_release.set()
    outcomes.take(3)
    assert log == ["A parked", "B start", "B end", "A back", "C start"]
    s = lane.stats()
    assert (s.parks, s.resumes, s.peak_busy, s.in_flight) == (1, 1, 1, 0)


def test_off_lane_outside_a_lane_just_runs_the_block():
    ran = []
    with off_lane():
        ran.append(1)
    with pytest.raises(KeyError), off_lane():
        raise KeyError("passes through")
    assert ran == [1]


def test_nested_off_lane_blocks_park_once(make_lane):
    lane = make_lane(1, on_outcome=Outcomes())
    seen: list[tuple[int, int]] = []

    def run(cancel: CancelToken) -> list[ToolResult]:
        with off_lane():
            with off_lane():
                s = lane.stats()
                seen.append((s.busy, s.parked))
            s = lane.stats()
            seen.append((s.busy, s.parked))
        s = lane.stats()
        seen.append((s.busy, s.parked))
        return result("n")

    lane.submit(ToolJob("a", "n", run))
    wait_until(lambda: lane.stats().finished == 1, "the job")
    assert seen == [(0, 1), (0, 1), (1, 0)]
    assert (lane.stats().parks, lane.stats().resumes) == (1, 1)


def helper(slot, body: Callable[[], None]) -> threading.Thread:
    """A thread a job starts, running ``body`` as one of the job's threads (`joined`)."""

    def run() -> None:
        with joined(slot):
            body()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_thread_a_job_started_gives_back_its_permit_while_off_the_lane(make_lane):
    outcomes = Outcomes()
    lane = make_lane(1, on_outcome=outcomes)
    off, leave, b_ran = (threading.Event() for _ in range(3))
    seen: list[tuple[int, int]] = []

    def side() -> None:
        with off_lane():
            off.set()
            assert leave.wait(WAIT)

    def a(cancel: CancelToken) -> list[ToolResult]:
        thread = helper(held(), side)
        thread.join(WAIT)
        s = lane.stats()
        seen.append((s.busy, s.parked))
        return result("A")

    lane.submit(ToolJob("a", "A", a))
    assert off.wait(WAIT)
    lane.submit(ToolJob("b", "B", lambda c: b_ran.set() or result("B")))
    assert b_ran.wait(WAIT), "B waited behind a job whose helper waits off the lane"
    assert [o.batch_id for o in outcomes.take()] == ["B"]
    assert (lane.stats().busy, lane.stats().parked) == (0, 1)
    leave.set()
    assert [o.batch_id for o in outcomes.take()] == ["A"]
    assert seen == [(1, 0)]  # back on the lane once its helper left the block
    s = lane.stats()
    assert (s.parks, s.resumes, s.finished) == (1, 1, 2)


def test_a_job_parks_once_for_its_threads_and_comes_back_when_the_last_leaves(make_lane):
    lane = make_lane(1, on_outcome=Outcomes())
    steps = {name: threading.Event() for name in ("in", "leave", "left")}
    seen: list[tuple[str, int, int]] = []

    def note(what: str) -> None:
        s = lane.stats()
        seen.append((what, s.busy, s.parked))

    def side() -> None:
        with off_lane():
            steps["in"].set()
            assert steps["leave"].wait(WAIT)
        note("helper left")
        steps["left"].set()

    def a(cancel: CancelToken) -> list[ToolResult]:
        with off_lane():
            note("job off")
            thread = helper(held(), side)
            assert steps["in"].wait(WAIT)
            note("both off")
        note("job left first")
        steps["leave"].set()
        thread.join(WAIT)
        note("all left")
        return result("A")

    lane.submit(ToolJob("a", "A", a))
    wait_until(lambda: lane.stats().finished == 1, "A to end")
    assert seen == [
        ("job off", 0, 1),
        ("both off", 0, 1),
        ("job left first", 0, 1),  # its helper still waits off the lane: no permit yet
        ("helper left", 1, 0),
        ("all left", 1, 0),
    ]
    s = lane.stats()
    assert (s.parks, s.resumes) == (1, 1)


def test_a_thread_waiting_to_come_back_stops_when_another_steps_off(make_lane):
    # A's own thread leaves its block while B holds the only permit, and waits for one;
    # then A's helper steps off the lane: A need not come back now, and its thread runs on
    # (off the lane) until the helper leaves too.
    outcomes = Outcomes()
    lane = make_lane(1, on_outcome=outcomes, ends_parked=1)
    parked, leave, b_started, b_release = (threading.Event() for _ in range(4))
    helper_in, helper_leave, back = (threading.Event() for _ in range(3))
    slots: list[object] = []

    def side() -> None:
        with off_lane():
            helper_in.set()
            assert helper_leave.wait(WAIT)

    def a(cancel: CancelToken) -> list[ToolResult]:
        slots.append(held())
        with off_lane():
            parked.set()
            assert leave.wait(WAIT)
        back.set()
        return result("A")

    lane.submit(ToolJob("a", "A", a))
    assert parked.wait(WAIT)
    lane.submit(ToolJob("b", "B", blocker(b_started, b_release, "B")))
    assert b_started.wait(WAIT)
    leave.set()
    wait_until(lambda: len(lane._resumers) == 1, "A to wait for a permit")
    thread = helper(slots[0], side)
    assert helper_in.wait(WAIT)
    assert back.wait(WAIT), "A's thread still waits for a permit its helper gave up"
    assert [o.batch_id for o in outcomes.take()] == ["A"]
    assert not lane._resumers
    s = lane.stats()
    assert (s.busy, s.parked, s.resumes) == (1, 0, 0)  # A ended parked; B runs
    helper_leave.set()
    thread.join(WAIT)
    assert not thread.is_alive()
    b_release.set()
    assert [o.batch_id for o in outcomes.take()] == ["B"]
    s = lane.stats()
    assert (s.parks, s.resumes, s.finished, s.in_flight) == (1, 0, 2, 0)


def test_a_job_that_ends_while_its_helper_waits_to_come_back_lets_the_helper_go(make_lane):
    outcomes = Outcomes()
    lane = make_lane(1, on_outcome=outcomes, ends_parked=1)
    helper_in, helper_leave, end, b_started, b_release = (threading.Event() for _ in range(5))
    threads: list[threading.Thread] = []
    after: list[str] = []

    def side() -> None:
        with off_lane():
            helper_in.set()
            assert helper_leave.wait(WAIT)
        after.append("helper back")

    def a(cancel: CancelToken) -> list[ToolResult]:
        threads.append(helper(held(), side))
        assert end.wait(WAIT)
        return result("A")

    lane.submit(ToolJob("a", "A", a))
    assert helper_in.wait(WAIT)
    lane.submit(ToolJob("b", "B", blocker(b_started, b_release, "B")))
    assert b_started.wait(WAIT)
    helper_leave.set()
    wait_until(lambda: len(lane._resumers) == 1, "the helper to wait for a permit")
    end.set()  # A returns, parked: the helper's wait for A's permit is over
    wait_until(lambda: bool(threads), "A to note its helper")  # (it may still be appending)
    threads[0].join(WAIT)
    assert after == ["helper back"] and not lane._resumers
    assert [o.batch_id for o in outcomes.take()] == ["A"]
    s = lane.stats()
    assert (s.busy, s.parked, s.resumes) == (1, 0, 0)
    b_release.set()
    assert [o.batch_id for o in outcomes.take()] == ["B"]
    assert lane.stats().in_flight == 0


def test_a_helper_stepping_off_the_lane_after_its_job_ended_changes_nothing(make_lane):
    lane = make_lane(1, on_outcome=Outcomes())
    slots: list[object] = []
    lane.submit(ToolJob("a", "A", lambda c: slots.append(held()) or result("A")))
    wait_until(lambda: lane.stats().finished == 1, "A to end")
    before = lane.stats()
    helper(slots[0], lambda: off_lane().__enter__()).join(WAIT)  # a block never left
    helper(slots[0], lambda: None).join(WAIT)
    ran = []

    def enter_and_leave() -> None:
        with off_lane():
            ran.append(lane.stats())

    helper(slots[0], enter_and_leave).join(WAIT)
    assert ran == [before] and lane.stats() == before


def test_joined_on_another_lane_jobs_thread_makes_it_the_jobs_for_the_block(make_lane):
    # A tool that hands its waiting to a worker of another lane: `joined` there did
    # nothing (the thread ran a job already), so an `off_lane` block in it gave back that
    # other job's permit, and the tool's job kept its own, with the deadlock it invites.
    lane, other = make_lane(1, on_outcome=Outcomes()), make_lane(1, on_outcome=Outcomes())
    slots: list[object] = []
    seen: list[object] = []
    parked: list[tuple[int, int]] = []
    first, release = threading.Event(), threading.Event()

    def a(cancel: CancelToken) -> list[ToolResult]:
        slots.append(held())
        first.set()
        assert release.wait(WAIT)
        return result("A")

    def b(cancel: CancelToken) -> list[ToolResult]:
        own = held()
        with joined(slots[0]):
            seen.append(held())
            with joined(slots[0]):  # nested: still A's
                seen.append(held())
            with off_lane():
                parked.append((lane.stats().parked, other.stats().parked))
        seen.append(held())
        seen.append(own)
        return result("B")

    lane.submit(ToolJob("a", "A", a))
    assert first.wait(WAIT)
    other.submit(ToolJob("b", "B", b))
    wait_until(lambda: other.stats().finished == 1, "B to end")
    assert seen[:2] == [slots[0], slots[0]] and seen[2] is seen[3] is not slots[0]
    assert parked == [(1, 0)]  # A stepped off, not B
    release.set()
    wait_until(lambda: lane.stats().finished == 1, "A to end")
    s = lane.stats()
    assert (s.parks, s.resumes, s.parked) == (1, 1, 0)
    assert other.stats().parks == 0


def test_joined_on_the_jobs_own_thread_or_without_a_slot_just_runs_the_block(make_lane):
    lane = make_lane(1, on_outcome=Outcomes())
    seen: list[object] = []

    def a(cancel: CancelToken) -> list[ToolResult]:
        own = held()
        with joined(own):
            seen.append(held())
        seen.append(held())
        seen.append(own)
        return result("A")

    lane.submit(ToolJob("a", "A", a))
    wait_until(lambda: lane.stats().finished == 1, "A to end")
    assert seen[0] is seen[1] is seen[2] is not None
    with joined(None):
        assert held() is None


def test_many_threads_of_one_job_stepping_off_and_back_keep_the_counters_straight(make_lane):
    # Eight helpers of one job enter and leave `off_lane` blocks at once, the interpreter
    # switching threads as often as it can: the job parks when the first enters, comes
    # back when the last leaves, and never counts twice.
    lane = make_lane(1, on_outcome=Outcomes())
    start = threading.Barrier(8, timeout=WAIT)
    seen: list[tuple[int, int, int, int]] = []
    held_while_off: list[int] = []

    def side() -> None:
        start.wait()
        for _ in range(300):
            with off_lane():
                if lane.stats().busy:  # a thread of the job is off the lane: no permit
                    held_while_off.append(1)

    def a(cancel: CancelToken) -> list[ToolResult]:
        slot = held()
        threads = [helper(slot, side) for _ in range(8)]
        for thread in threads:
            thread.join(WAIT)
        s = lane.stats()
        seen.append((s.busy, s.parked, s.parks, s.resumes))
        return result("A")

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        lane.submit(ToolJob("a", "A", a))
        wait_until(lambda: lane.stats().finished == 1, "A to end", timeout=4 * WAIT)
    finally:
        sys.setswitchinterval(previous)
    [(busy, parked, parks, resumes)] = seen
    assert (busy, parked) == (1, 0) and parks == resumes >= 1
    assert not held_while_off, f"the job held its permit {len(held_while_off)} times"
    assert lane._resumers == collections.deque()


def test_a_batch_cancelled_while_queued_never_runs(make_lane):
    outcomes = Outcomes()
    lane = make_lane(1, on_outcome=outcomes)
    release, ran = threading.Event(), []
    lane.submit(ToolJob("a", "A", blocker(None, release, "A")))
    queued = ToolJob("b", "B", lambda c: ran.append("B") or result("B"))
    lane.submit(queued)
    assert lane.stats().queued == 1
    queued.cancel.cancel("not needed")
    s = lane.stats()  # removed at once, not when a worker gets to it
    assert (s.queued, s.abandoned, s.saturated) == (0, 1, False)
    already = CancelToken()
    already.cancel()
    lane.submit(ToolJob("c", "C", lambda c: ran.append("C") or result("C"), cancel=already))
    release.set()
    assert [o.batch_id for o in outcomes.take()] == ["A"]
    wait_until(lambda: lane.stats().in_flight == 0, "the lane to drain")
    assert ran == [] and outcomes.none_left()
    s = lane.stats()
    assert (s.enqueued, s.started, s.abandoned) == (3, 1, 2)


def test_many_cancelled_queued_batches_are_compacted_away(make_lane):
    lane = make_lane(1, on_outcome=Outcomes())
    release = threading.Event()
    lane.submit(ToolJob("a", "A", blocker(None, release, "A")))
    jobs = [ToolJob("a", f"q{i}", lambda c: result("q")) for i in range(1000)]
    for job in jobs:
        lane.submit(job)
    for job in jobs[:-1]:
        job.cancel.cancel()
    assert lane.stats().queued == 1
    assert len(lane._queue) < 200  # white-box: cancelled entries do not pile up
    release.set()
    wait_until(lambda: lane.stats().in_flight == 0, "the lane to drain")
    assert (lane.stats().finished, lane.stats().abandoned) == (2, 999)


def test_a_cancelled_running_batch_frees_the_lane_and_reports_nothing(make_lane):
    outcomes = Outcomes()
    lane = make_lane(1, on_outcome=outcomes)
    started = threading.Event()
    job_a = ToolJob("a", "A", lambda c: (started.set(), c.wait(WAIT)) and result("A", c.cancelled))
    lane.submit(job_a)
    lane.submit(ToolJob("b", "B", lambda c: result("B")))
    assert started.wait(WAIT)
    job_a.cancel.cancel("interrupted")
    assert [o.batch_id for o in outcomes.take()] == ["B"]
    wait_until(lambda: lane.stats().in_flight == 0, "the lane to drain")
    s = lane.stats()
    assert (s.dropped, s.finished, s.failed) == (1, 1, 0)
    assert outcomes.none_left()


def test_a_job_that_raises_cancelled_after_its_token_fired_is_dropped(make_lane):
    outcomes = Outcomes()
    lane = make_lane(1, on_outcome=outcomes)

    def run(cancel: CancelToken) -> list[ToolResult]:
        cancel.cancel("stop")
        raise Cancelled("stop")

    lane.submit(ToolJob("a", "A", run, (ToolCall("c1", "t"),)))
    lane.submit(ToolJob("a", "B", lambda c: result("B")))
    assert [o.batch_id for o in outcomes.take()] == ["B"]
    wait_until(lambda: lane.stats().in_flight == 0, "the lane to drain")
    assert lane.stats().dropped == 1 and outcomes.none_left()


def test_a_job_that_raises_cancelled_on_its_own_fails_with_an_error_naming_the_lane(make_lane):
    # Rule: a job that ends without a real outcome is never a silent wait for its agent.
    outcomes = Outcomes()
    lane = make_lane(1, on_outcome=outcomes)

    def run(cancel: CancelToken) -> list[ToolResult]:
        raise Cancelled("gave up")

    lane.submit(ToolJob("a", "A", run, (ToolCall("c1", "t"),)))
    [outcome] = outcomes.take()
    assert outcome.error is not None and "lane 'tools'" in outcome.error
    assert "'A'" in outcome.error and "gave up" in outcome.error
    assert [r.error for r in outcome.results] == [outcome.error]
    wait_until(lambda: lane.stats().in_flight == 0, "the lane to drain")
    assert (lane.stats().failed, lane.stats().dropped) == (1, 0)


def test_a_raw_job_without_calls_that_raises_delivers_its_error_in_the_outcome(make_lane):
    outcomes = Outcomes()
    lane = make_lane(1, on_outcome=outcomes)

    def run(cancel: CancelToken) -> list[ToolResult]:
        raise ValueError("boom")

    lane.submit(ToolJob("a", "A", run))
    [outcome] = outcomes.take()
    assert outcome.results == ()
    assert outcome.error == "lane 'tools': job 'A' raised ValueError: boom"


def test_a_cancelled_parked_batch_leaves_the_counters_straight(make_lane):
    outcomes = Outcomes()
    lane = make_lane(1, on_outcome=outcomes)
    parked, after = threading.Event(), []

    def a(cancel: CancelToken) -> list[ToolResult]:
        with off_lane():
            parked.set()
            cancel.wait(WAIT)
        after.append("A came back")  # never: leaving off_lane raises Cancelled
        return result("A")

    job_a = ToolJob("a", "A", a)
    lane.submit(job_a)
    assert parked.wait(WAIT)
    job_a.cancel.cancel("interrupted")
    wait_until(lambda: lane.stats().in_flight == 0, "A to end")
    s = lane.stats()
    assert (s.busy, s.parked, s.parks, s.resumes, s.dropped) == (0, 0, 1, 0, 1)
    assert after == [] and outcomes.none_left()
    check_balance(s)
    lane.submit(ToolJob("b", "B", lambda c: result("B")))  # the lane still works
    assert [o.batch_id for o in outcomes.take()] == ["B"]


def test_a_parked_batch_cancelled_while_waiting_for_a_permit_stops_waiting(make_lane):
    outcomes = Outcomes()
    lane = make_lane(1, on_outcome=outcomes)
    parked, leave, b_started, b_release = (threading.Event() for _ in range(4))
    raised: list[str] = []

    def a(cancel: CancelToken) -> list[ToolResult]:
        try:
            with off_lane():
                parked.set()
                assert leave.wait(WAIT)
        except Cancelled as exc:
            raised.append(exc.reason)
            raise
        return result("A")

    job_a = ToolJob("a", "A", a)
    lane.submit(job_a)
    assert parked.wait(WAIT)
    lane.submit(ToolJob("b", "B", blocker(b_started, b_release, "B")))
    assert b_started.wait(WAIT)
    leave.set()
    wait_until(lambda: len(lane._resumers) == 1, "A to wait for a permit")
    job_a.cancel.cancel("interrupted")
    wait_until(lambda: lane.stats().parked == 0, "A to end")
    assert raised == ["interrupted"]
    s = lane.stats()
    assert (s.busy, s.parked, s.dropped, s.resumes) == (1, 0, 1, 0)
    b_release.set()
    assert [o.batch_id for o in outcomes.take()] == ["B"]


def running_entry(jobs: dict[str, Entry], batch_id: str):
    """A job body that hands the test its lane entry, then runs ``inner``."""

    def wrap(inner: Callable[[CancelToken], list[ToolResult]]):
        def run(cancel: CancelToken) -> list[ToolResult]:
            from runtime.lane.parking import current

            jobs[batch_id] = current.slot
            return inner(cancel)

        return run

    return wrap


def give_up_now(entry: Entry) -> None:
    """Fire the give-up of ``entry``'s job as its deadline would (its bound far off)."""
    entry.giveup.cancel("given up")


def test_a_job_past_its_bound_is_given_up_and_the_lane_goes_on(make_lane, monkeypatch):
    monkeypatch.setattr(tool_lane_module, "GIVE_UP_GRACE_SECS", 0.0)
    outcomes, ended = Outcomes(), []
    lane = make_lane(1, on_outcome=outcomes, on_end=lambda job: ended.append(job.batch_id))
    started, release = threading.Event(), threading.Event()
    calls = (ToolCall("c1", "deaf"), ToolCall("c2", "deaf"))
    lane.submit(ToolJob("a", "A", blocker(started, release, "A"), calls, bound=0.05))
    assert started.wait(WAIT)
    lane.submit(ToolJob("b", "B", lambda c: result("B")))  # queued behind A's permit
    given_up, after = outcomes.take(2)  # A's, at its bound; then B's, on A's permit
    assert (given_up.batch_id, after.batch_id) == ("A", "B")
    assert [r.call_id for r in given_up.results] == ["c1", "c2"]
    assert all("ignored its timeout" in r.error for r in given_up.results)
    wait_until(lambda: sorted(ended) == ["A", "B"], "the lane to hear both ends")
    s = lane.stats()
    assert (s.busy, s.parked, s.parks, s.finished) == (0, 1, 1, 1), s  # A runs on, parked
    check_balance(s)
    release.set()
    wait_until(lambda: lane.stats().in_flight == 0, "A to end")
    s = lane.stats()
    assert (s.busy, s.parked, s.dropped, s.finished) == (0, 0, 1, 1), s
    assert outcomes.none_left() and sorted(ended) == ["A", "B"]  # A's late end: silent


def test_a_job_that_ends_within_its_bound_is_never_given_up(make_lane, monkeypatch):
    monkeypatch.setattr(tool_lane_module, "GIVE_UP_GRACE_SECS", 0.0)
    outcomes = Outcomes()
    lane = make_lane(1, on_outcome=outcomes)
    entries: dict[str, Entry] = {}
    armed = []

    def run(cancel: CancelToken) -> list[ToolResult]:
        armed.append(entries["A"].giveup)  # what the deadline would fire
        return result("A")

    lane.submit(ToolJob("a", "A", running_entry(entries, "A")(run), bound=60))
    [outcome] = outcomes.take()
    assert outcome.results == tuple(result("A"))
    wait_until(lambda: lane.stats().in_flight == 0, "A to end")
    assert entries["A"].giveup is None  # the entry lets go of its give-up as it ends
    armed[0].cancel("given up")  # too late: the job's own end claimed its delivery
    assert outcomes.none_left() and lane.stats().finished == 1


def test_a_job_given_up_while_waiting_to_come_back_runs_on_without_a_permit(make_lane):
    outcomes = Outcomes()
    lane = make_lane(1, on_outcome=outcomes)
    entries: dict[str, Entry] = {}
    parked, release_a, started_b, release_b = (threading.Event() for _ in range(4))
    came_back = threading.Event()

    def a(cancel: CancelToken) -> list[ToolResult]:
        with off_lane():
            parked.set()
            assert release_a.wait(WAIT)
        came_back.set()  # without a permit: B still holds the only one
        return result("A")

    lane.submit(ToolJob("a", "A", running_entry(entries, "A")(a), bound=60))
    assert parked.wait(WAIT)
    lane.submit(ToolJob("b", "B", blocker(started_b, release_b, "B")))
    assert started_b.wait(WAIT)
    release_a.set()  # A leaves off_lane and waits for B's permit
    wait_until(lambda: entries["A"].waiting, "A to wait for a permit")
    assert not came_back.is_set()
    give_up_now(entries["A"])
    assert came_back.wait(WAIT)
    wait_until(lambda: lane.stats().parked == 0, "A to end")
    s = lane.stats()
    assert (s.busy, s.resumes, s.dropped) == (1, 0, 1), s  # B alone holds a permit
    check_balance(s)
    release_b.set()
    assert [o.batch_id for o in outcomes.take(2)] == ["A", "B"]


def test_a_job_given_up_while_parked_does_not_take_a_permit_back(make_lane):
    lane = make_lane(1)
    entries: dict[str, Entry] = {}
    parked, given_up, left = threading.Event(), threading.Event(), threading.Event()
    release = threading.Event()

    def a(cancel: CancelToken) -> list[ToolResult]:
        with off_lane():
            parked.set()
            assert given_up.wait(WAIT)
        left.set()
        assert release.wait(WAIT)
        return result("A")

    lane.submit(ToolJob("a", "A", running_entry(entries, "A")(a), bound=60))
    assert parked.wait(WAIT)
    give_up_now(entries["A"])
    given_up.set()
    assert left.wait(WAIT)
    s = lane.stats()
    assert (s.busy, s.parked, s.parks, s.resumes) == (0, 1, 1, 0), s
    release.set()
    wait_until(lambda: lane.stats().in_flight == 0, "A to end")
    assert lane.stats().dropped == 1


def test_a_cancelled_job_given_up_delivers_nothing_but_frees_its_permit(make_lane):
    outcomes, ended = Outcomes(), []
    lane = make_lane(1, on_outcome=outcomes, on_end=lambda job: ended.append(job.batch_id))
    entries: dict[str, Entry] = {}
    started, release = threading.Event(), threading.Event()
    job = ToolJob("a", "A", running_entry(entries, "A")(blocker(started, release, "A")), bound=60)
    lane.submit(job)
    assert started.wait(WAIT)
    job.cancel.cancel("interrupted")  # ignored by the job: it runs on
    give_up_now(entries["A"])
    assert ended == ["A"] and lane.stats().busy == 0
    lane.submit(ToolJob("b", "B", lambda c: result("B")))
    assert [o.batch_id for o in outcomes.take()] == ["B"]  # nothing of A's, stale
    release.set()
    wait_until(lambda: lane.stats().in_flight == 0, "A to end")
    assert lane.stats().dropped == 1 and ended == ["A", "B"]


def test_an_executor_job_past_its_bound_is_given_up_too(make_lane, monkeypatch):
    monkeypatch.setattr(tool_lane_module, "GIVE_UP_GRACE_SECS", 0.0)
    outcomes = Outcomes()
    started, release = threading.Event(), threading.Event()
    with ThreadPoolExecutor(2) as pool:
        lane = make_lane(1, executor=pool, on_outcome=outcomes)
        lane.submit(ToolJob("a", "A", blocker(started, release, "A"), bound=0.05))
        assert started.wait(WAIT)
        lane.submit(ToolJob("b", "B", lambda c: result("B")))
        assert [o.batch_id for o in outcomes.take(2)] == ["A", "B"]
        release.set()
        wait_until(lambda: lane.stats().in_flight == 0, "A to end")
        s = lane.stats()
        assert (s.dropped, s.finished) == (1, 1), s
        assert outcomes.none_left()


def test_an_executor_job_waiting_in_the_executor_queue_is_not_given_up(make_lane, monkeypatch):
    # Its clock starts as it runs: on a one-thread executor, B waits behind A, given up
    # but still running on the executor's only thread; B must not be given up unrun.
    monkeypatch.setattr(tool_lane_module, "GIVE_UP_GRACE_SECS", 0.0)
    outcomes = Outcomes()
    started, release = threading.Event(), threading.Event()
    with ThreadPoolExecutor(1) as pool:
        lane = make_lane(1, executor=pool, on_outcome=outcomes)
        lane.submit(ToolJob("a", "A", blocker(started, release, "A"), bound=0.05))
        assert started.wait(WAIT)
        lane.submit(ToolJob("b", "B", lambda c: result("B", "ran"), bound=0.05))
        [given_up] = outcomes.take()  # A's, at its bound; B waits in the executor's queue
        assert given_up.batch_id == "A"
        time.sleep(0.2)  # four of B's bounds, had its clock started at the hand-over
        assert outcomes.none_left()
        release.set()
        [b] = outcomes.take()
        assert (b.batch_id, b.results) == ("B", tuple(result("B", "ran")))


def test_an_executor_job_shipped_elsewhere_travels_without_its_clock() -> None:
    # Pickled (a Dask worker in another process), the body that starts the give-up's
    # clock is the job's own body: there is no clock to start out there.
    import pickle

    lane = ToolLane(1)
    try:
        entry = Entry(lane, ToolJob("a", "A", _noop_body, bound=1.0))
        armed = tool_lane_module._ArmOnStart(lane, entry, _noop_body)
        assert pickle.loads(pickle.dumps(armed)) is _noop_body
    finally:
        lane.close()


def _noop_body(cancel: CancelToken) -> list[ToolResult]:
    return []


def test_a_job_given_up_as_it_steps_off_the_lane_is_counted_once(make_lane, monkeypatch):
    # `park` looks at `parked` without the lock; a give-up landing before its `_step_off`
    # took the lock parked the job twice (busy -1, parked 2: two jobs ran on one permit).
    lane = make_lane(1)
    entries: dict[str, Entry] = {}
    step_off = lane._step_off

    def give_up_first(entry: Entry) -> list[Entry]:
        give_up_now(entry)  # the deadline's thread got there first
        return step_off(entry)

    monkeypatch.setattr(lane, "_step_off", give_up_first)
    release = threading.Event()

    def a(cancel: CancelToken) -> list[ToolResult]:
        with off_lane():
            assert release.wait(WAIT)
        return result("A")

    lane.submit(ToolJob("a", "A", running_entry(entries, "A")(a), bound=60))
    wait_until(lambda: lane.stats().parks == 1, "A to step off")
    s = lane.stats()
    assert (s.busy, s.parked, s.parks) == (0, 1, 1), s
    check_balance(s)
    release.set()
    wait_until(lambda: lane.stats().in_flight == 0, "A to end")
    s = lane.stats()
    assert (s.busy, s.parked, s.dropped) == (0, 0, 1), s


def test_a_batch_given_up_starts_no_further_call(make_lane, monkeypatch):
    # The agent has its error results at the give-up: a call after the deaf one must not
    # run as well (it could delete a file the agent was told was never deleted).
    monkeypatch.setattr(tool_lane_module, "GIVE_UP_GRACE_SECS", 0.0)
    outcomes, ran = Outcomes(), []
    release = threading.Event()
    tools = ToolRegistry()

    @tools.tool(timeout=0.05)
    def deaf(args, ctx):
        release.wait(WAIT)  # ignores ctx.cancel
        return "late"

    @tools.tool(timeout=0.05)
    def delete_file(args, ctx):
        ran.append("delete_file")
        return "deleted"

    calls = (ToolCall("c1", "deaf"), ToolCall("c2", "delete_file"))
    lane = make_lane(1, on_outcome=outcomes)

    def batch(cancel: CancelToken) -> list[ToolResult]:
        return tools.run_batch(calls, agent_id="a", cancel=cancel)

    lane.submit(ToolJob("a", "A", batch, calls, bound=tools.time_bound(calls)))
    [given_up] = outcomes.take()
    assert all("ignored its timeout" in r.error for r in given_up.results)
    release.set()
    wait_until(lambda: lane.stats().in_flight == 0, "A to end")
    assert ran == [] and lane.stats().dropped == 1 and outcomes.none_left()


def test_a_give_up_that_cannot_start_the_next_job_fails_it_and_the_timer_lives_on(
    make_lane, monkeypatch
):
    from runtime.lane import deadlines

    monkeypatch.setattr(tool_lane_module, "GIVE_UP_GRACE_SECS", 0.0)
    outcomes = Outcomes()
    lane = make_lane(1, on_outcome=outcomes)
    started, release = threading.Event(), threading.Event()
    lane.submit(ToolJob("a", "A", blocker(started, release, "A"), bound=0.1))
    assert started.wait(WAIT)
    spawn = lane._spawn

    def no_thread_on_the_timer(entries: list[Entry]) -> None:
        if threading.current_thread().name == "tickwork-deadlines":
            raise RuntimeError("can't start new thread")
        spawn(entries)

    monkeypatch.setattr(lane, "_spawn", no_thread_on_the_timer)
    lane.submit(ToolJob("b", "B", lambda c: result("B"), (ToolCall("b1", "t"),)))  # queued
    given_up, failed = outcomes.take(2)
    assert (given_up.batch_id, failed.batch_id) == ("A", "B")
    assert "no thread to run job 'B'" in failed.error
    token = CancelToken()
    deadlines.schedule(0.01, token, "still ticking")  # the one timer thread lives on
    assert token.wait(WAIT)
    release.set()
    wait_until(lambda: lane.stats().in_flight == 0, "A to end")
    check_balance(lane.stats())


def test_relieve_widens_the_lane_and_starts_what_waited(make_lane):
    lane = make_lane(1, on_outcome=Outcomes())
    together = threading.Barrier(3, timeout=WAIT)

    def run(cancel: CancelToken) -> list[ToolResult]:
        together.wait()  # passes only once all three run at once
        return result("x")

    for i in range(3):
        lane.submit(ToolJob("a", f"b{i}", run))
    wait_until(lambda: lane.stats().queued == 2, "two to queue")
    assert lane.relieve(2) == 3
    wait_until(lambda: lane.stats().in_flight == 0, "all three")
    s = lane.stats()
    assert (s.capacity, s.peak_busy, s.failed) == (3, 3, 0)
    with pytest.raises(ConfigError, match="`n` must be >= 0, got -1"):
        lane.relieve(-1)


def test_narrow_reclaims_idle_permits_and_never_busy_ones(make_lane):
    lane = make_lane(4, on_outcome=Outcomes())
    release = threading.Event()
    starts = [threading.Event(), threading.Event()]
    for i in range(2):
        lane.submit(ToolJob("a", f"b{i}", blocker(starts[i], release, "x")))
    assert all(e.wait(WAIT) for e in starts)
    assert lane.narrow(10) == 2  # two idle permits; the two busy ones stay
    assert lane.capacity == 2 and lane.stats().busy == 2
    assert lane.narrow(1) == 0
    release.set()
    wait_until(lambda: lane.stats().in_flight == 0, "both to end")
    assert lane.narrow(5) == 1  # never below one
    assert lane.capacity == 1
    with pytest.raises(ConfigError, match="-2"):
        lane.narrow(-2)


def test_a_shell_tool_cancelled_mid_run_kills_its_process_group(make_lane, tmp_path):
    outcomes = Outcomes()
    lane = make_lane(1, on_outcome=outcomes)
    pidfile = tmp_path / "grandchild.pid"
    tools = ToolRegistry()
    tools.add(ShellTool("spawn", ["sh", "-c", "sleep 30 & echo $! > {pidfile}; wait"]))
    calls = (ToolCall("c1", "spawn", {"pidfile": str(pidfile)}),)
    job = ToolJob("a", "A", lambda c: tools.run_batch(calls, agent_id="a", cancel=c), calls)
    lane.submit(job)
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip() != "", "the grandchild")
    grandchild = int(pidfile.read_text())
    assert _alive(grandchild)
    job.cancel.cancel("interrupted")
    wait_until(lambda: lane.stats().in_flight == 0, "the job to end")
    wait_until(lambda: not _alive(grandchild), "the grandchild to die")
    assert not _process_group_alive(grandchild)
    assert lane.stats().dropped == 1 and outcomes.none_left()


def test_the_lane_survives_an_on_outcome_that_raises(make_lane, caplog):
    delivered: list[str] = []

    def on_outcome(outcome: ToolOutcome) -> None:
        if outcome.batch_id == "bad":
            raise RuntimeError("inbox is broken")
        delivered.append(outcome.batch_id)

    wake = Wake()
    lane = make_lane(1, on_outcome=on_outcome, wake=wake)
    with caplog.at_level(logging.ERROR, logger="runtime.lane"):
        lane.submit(ToolJob("a", "bad", lambda c: result("bad")))
        lane.submit(ToolJob("a", "good", lambda c: result("good")))
        wait_until(lambda: lane.stats().in_flight == 0, "both jobs")
    assert delivered == ["good"]
    assert "inbox is broken" in caplog.text
    assert wake.notifies == 2 and lane.stats().finished == 2


def test_a_job_that_raises_becomes_one_error_result_per_call(make_lane, caplog):
    outcomes = Outcomes()
    lane = make_lane(1, on_outcome=outcomes)
    calls = (ToolCall("c1", "t"), ToolCall("c2", "t"))

    def run(cancel: CancelToken) -> Sequence[ToolResult]:
        raise ValueError("disk full")

    with caplog.at_level(logging.ERROR, logger="runtime.lane"):
        lane.submit(ToolJob("a", "A", run, calls))
        (outcome,) = outcomes.take()
    assert outcome.results == (
        ToolResult("c1", error="ValueError: disk full"),
        ToolResult("c2", error="ValueError: disk full"),
    )
    lane.submit(ToolJob("a", "B", lambda c: result("B")))  # the worker lives on
    assert outcomes.take()[0].batch_id == "B"
    wait_until(lambda: lane.stats().in_flight == 0, "the lane to drain")
    assert (lane.stats().failed, lane.stats().finished) == (1, 1)


def test_close_abandons_queued_jobs_refuses_new_ones_and_is_idempotent(make_lane):
    outcomes = Outcomes()
    lane = make_lane(1, on_outcome=outcomes)
    started, release = threading.Event(), threading.Event()
    lane.submit(ToolJob("a", "A", blocker(started, release, "A")))
    lane.submit(ToolJob("a", "B", lambda c: result("B")))
    assert started.wait(WAIT)
    closer = threading.Thread(target=lane.close, kwargs={"timeout": WAIT})
    closer.start()
    wait_until(lambda: lane.stats().abandoned == 1, "B to be abandoned")
    with pytest.raises(LaneClosedError, match="'tools' is closed"):
        lane.submit(ToolJob("a", "C", lambda c: result("C")))
    release.set()
    closer.join(WAIT)
    assert not closer.is_alive()
    assert [o.batch_id for o in outcomes.take()] == ["A"]
    lane.close()
    s = lane.stats()
    assert (s.enqueued, s.finished, s.abandoned, s.in_flight) == (2, 1, 1, 0)
    wait_until(lambda: lane.stats().threads == 0, "the workers to exit")


def test_workers_are_named_grow_on_demand_and_exit_when_idle(make_lane):
    lane = make_lane(2, name="io", on_outcome=Outcomes(), idle_timeout=0.05)
    names: list[str] = []
    together = threading.Barrier(2, timeout=WAIT)

    def run(cancel: CancelToken) -> list[ToolResult]:
        names.append(threading.current_thread().name)
        together.wait()
        return result("x")

    lane.submit(ToolJob("a", "b1", run))
    lane.submit(ToolJob("a", "b2", run))
    wait_until(lambda: lane.stats().finished == 2, "both jobs")
    assert sorted(names) == ["tickwork-io-1", "tickwork-io-2"]
    wait_until(lambda: lane.stats().threads == 0, "idle workers to exit")
    assert all(not t.name.startswith("tickwork-io-") for t in threading.enumerate())
    with pytest.raises(ConfigError, match="`idle_timeout` must be > 0, got 0"):
        ToolLane(1, idle_timeout=0)


def test_submit_all_starts_one_thread_and_each_new_worker_starts_the_next(make_lane, monkeypatch):
    # A tick handing a lane growing its threads many jobs at once must not wait for every
    # thread start (`Thread.start` blocks until the thread runs): it starts one, and each
    # worker starts the next before running its own job, so all of them still run at once.
    jobs = 6
    lane = make_lane(jobs, name="io", on_outcome=Outcomes())
    submitter = threading.get_ident()
    starts: list[int] = []
    real_start = threading.Thread.start

    def start(self: threading.Thread) -> None:
        starts.append(threading.get_ident())
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    together = threading.Barrier(jobs + 1, timeout=WAIT)
    ran_on: dict[str, str] = {}

    def job(batch_id: str) -> ToolJob:
        def run(cancel: CancelToken) -> list[ToolResult]:
            ran_on[threading.current_thread().name] = batch_id
            together.wait()  # every job at once: each needs a thread of its own
            return result(batch_id)

        return ToolJob("a1", batch_id, run)

    lane.submit_all([job(f"b{i}") for i in range(jobs)])
    assert starts.count(submitter) == 1
    together.wait()
    wait_until(lambda: lane.stats().finished == jobs, "every job")
    assert len(starts) == jobs and lane.stats().threads == jobs
    # The first thread runs the first job, the thread it starts the second, and so on
    # (which of them gets to run first is the scheduler's: under load, any).
    assert ran_on == {f"tickwork-io-{i + 1}": f"b{i}" for i in range(jobs)}
    check_balance(lane.stats())


def test_a_worker_that_cannot_start_the_next_thread_runs_those_jobs_itself(
    make_lane, monkeypatch, caplog
):
    outcomes = Outcomes()
    lane = make_lane(4, name="io", on_outcome=outcomes)
    real_start = threading.Thread.start
    submitter = threading.get_ident()

    def start(self: threading.Thread) -> None:
        if threading.get_ident() != submitter:
            raise RuntimeError("can't start new thread")
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    order: list[str] = []

    def job(batch_id: str) -> ToolJob:
        def run(cancel: CancelToken) -> list[ToolResult]:
            order.append(batch_id)
            return result(batch_id)

        return ToolJob("a1", batch_id, run)

    with caplog.at_level(logging.ERROR, logger="runtime.lane.tool_lane"):
        lane.submit_all([job(f"b{i}") for i in range(4)])
        assert sorted(o.batch_id for o in outcomes.take(4)) == ["b0", "b1", "b2", "b3"]
    assert order == ["b0", "b1", "b2", "b3"]  # one worker, in the order handed in
    assert "could not start a worker thread" in caplog.text
    wait_until(lambda: lane.stats().in_flight == 0, "the lane to drain")
    s = lane.stats()
    assert s.threads == 1 and s.finished == 4
    check_balance(s)


class NoThreads:
    """``threading.Thread.start`` refusing the lane's worker threads while switched on, as
    a process out of threads does (``RuntimeError: can't start new thread``); with
    ``failures`` set, only that many starts fail (a passing shortage)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.on = False
        self.failures: int | None = None
        real_start = threading.Thread.start

        def start(thread: threading.Thread) -> None:
            if self.on and thread.name.startswith("tickwork-io-"):
                if self.failures is None:
                    raise RuntimeError("can't start new thread")
                if self.failures > 0:
                    self.failures -= 1
                    raise RuntimeError("can't start new thread")
            real_start(thread)

        monkeypatch.setattr(threading.Thread, "start", start)


def test_a_submit_that_cannot_start_a_thread_fails_its_job_and_the_lane_goes_on(
    make_lane, monkeypatch, caplog
):
    outcomes = Outcomes()
    lane = make_lane(2, name="io", on_outcome=outcomes)
    threads = NoThreads(monkeypatch)
    threads.on = True
    calls = (ToolCall("c1", "t"), ToolCall("c2", "t"))
    with caplog.at_level(logging.ERROR, logger="runtime.lane.tool_lane"):
        lane.submit(ToolJob("a", "A", lambda c: result("A"), calls))  # does not raise
        lane.submit_all([ToolJob("b", "B", lambda c: result("B")), ToolJob("c", "C", lambda c: [])])
    failed = {o.batch_id: o for o in outcomes.take(3)}
    assert sorted(failed) == ["A", "B", "C"]
    assert "no thread to run job 'A'" in failed["A"].error
    assert [r.call_id for r in failed["A"].results] == ["c1", "c2"]
    assert all("can't start new thread" in r.error for r in failed["A"].results)
    assert "could not start a worker thread" in caplog.text
    s = lane.stats()
    assert (s.failed, s.in_flight, s.threads) == (3, 0, 0)
    check_balance(s)
    threads.on = False  # threads to be had again: the lane runs jobs as before
    lane.submit(ToolJob("d", "D", lambda c: result("D")))
    [done] = outcomes.take()
    assert (done.batch_id, done.error) == ("D", None)


def test_relieve_that_cannot_start_a_thread_fails_what_it_let_start(make_lane, monkeypatch):
    outcomes = Outcomes()
    lane = make_lane(1, name="io", on_outcome=outcomes)
    started, release = threading.Event(), threading.Event()
    lane.submit(ToolJob("a", "A", blocker(started, release, "A")))
    assert started.wait(WAIT)
    lane.submit(ToolJob("b", "B", lambda c: result("B"), (ToolCall("b1", "t"),)))  # queued
    threads = NoThreads(monkeypatch)
    threads.on = True
    assert lane.relieve(1) == 2
    [failed] = outcomes.take()
    assert failed.batch_id == "B" and "no thread to run job 'B'" in failed.error
    release.set()
    [done] = outcomes.take()
    assert (done.batch_id, done.error) == ("A", None)
    wait_until(lambda: lane.stats().in_flight == 0, "A to end")
    check_balance(lane.stats())


def test_one_thread_that_cannot_start_fails_its_job_alone_not_the_queue(make_lane, monkeypatch):
    # The permit of the failed job went to the next queued one, which was failed too
    # without a thread being tried for it, and so on: one failed start failed every job.
    outcomes = Outcomes()
    lane = make_lane(1, name="io", on_outcome=outcomes)
    started, release = threading.Event(), threading.Event()
    lane.submit(ToolJob("a", "A", blocker(started, release, "A")))
    assert started.wait(WAIT)
    for i in range(5):
        lane.submit(ToolJob("b", f"B{i}", lambda c, i=i: result(f"B{i}")))  # queued
    threads = NoThreads(monkeypatch)
    threads.on, threads.failures = True, 1  # the next start fails, later ones do not
    lane.relieve(1)
    release.set()
    ended = {o.batch_id: o.error for o in outcomes.take(6)}
    assert "no thread to run job 'B0'" in (ended.pop("B0") or "")
    assert ended == {"A": None, "B1": None, "B2": None, "B3": None, "B4": None}
    wait_until(lambda: lane.stats().in_flight == 0, "the lane to drain")
    s = lane.stats()
    assert (s.failed, s.finished) == (1, 5)
    check_balance(s)
    wait_until(lambda: lane.stats().threads == len(lane._idlers), "threads all counted")


def test_a_job_stepping_off_the_lane_with_no_thread_for_the_next_fails_it_and_goes_on(
    make_lane, monkeypatch
):
    outcomes = Outcomes()
    lane = make_lane(1, name="io", on_outcome=outcomes)
    threads = NoThreads(monkeypatch)
    started, release = threading.Event(), threading.Event()

    def steps_off(cancel: CancelToken) -> list[ToolResult]:
        started.set()
        assert release.wait(WAIT), "never released"
        with off_lane():  # its permit goes to B, whose thread cannot start
            pass
        return result("A")

    lane.submit(ToolJob("a", "A", steps_off))
    assert started.wait(WAIT)
    lane.submit(ToolJob("b", "B", lambda c: result("B"), (ToolCall("b1", "t"),)))  # queued
    threads.on = True
    release.set()
    failed, done = outcomes.take(2)
    assert failed.batch_id == "B" and "no thread to run job 'B'" in failed.error
    assert (done.batch_id, done.error) == ("A", None)  # A took a permit back and finished
    wait_until(lambda: lane.stats().in_flight == 0, "A to end")
    check_balance(lane.stats())


def test_a_hand_off_racing_an_idle_timeout_is_not_lost(make_lane):
    # White-box, to force the race: the idle worker's wait times out while the test holds
    # the lane's lock and hands it a job, so the worker wakes "timed out" with work waiting.
    outcomes = Outcomes()
    lane = make_lane(1, on_outcome=outcomes, idle_timeout=0.05)
    lane.submit(ToolJob("a", "first", lambda c: result("first")))
    outcomes.take()
    wait_until(lambda: len(lane._idlers) == 1, "the worker to wait idle")
    entry = Entry(lane, ToolJob("a", "raced", lambda c: result("raced")))
    with lane._lock:
        threading.Event().wait(0.2)  # past the idle timeout, lock held: the worker must wait
        lane._enqueued += 1
        lane._start(entry)
        assert lane._hand_off(entry) is False  # given to the (timed-out) idle worker
    assert [o.batch_id for o in outcomes.take()] == ["raced"]


def test_the_worker_idle_last_takes_the_next_job(make_lane):
    # Its stack and caches are the warmest; the others stay parked and time out in turn.
    outcomes = Outcomes()
    lane = make_lane(2, on_outcome=outcomes)
    both = threading.Barrier(2, timeout=WAIT)
    release = {name: threading.Event() for name in ("first", "second")}
    ran_on: dict[str, str] = {}

    def job(name: str) -> Callable[[CancelToken], list[ToolResult]]:
        def run(cancel: CancelToken) -> list[ToolResult]:
            ran_on[name] = threading.current_thread().name
            if name in release:
                both.wait()  # two threads, one job each
                assert release[name].wait(WAIT)
            return result(name)

        return run

    lane.submit(ToolJob("a", "first", job("first")))
    lane.submit(ToolJob("a", "second", job("second")))
    release["first"].set()
    assert [o.batch_id for o in outcomes.take()] == ["first"]
    wait_until(lambda: len(lane._idlers) == 1, "the first worker to wait idle")
    release["second"].set()
    assert [o.batch_id for o in outcomes.take()] == ["second"]
    wait_until(lambda: len(lane._idlers) == 2, "both workers to wait idle")
    lane.submit(ToolJob("a", "next", job("next")))
    assert [o.batch_id for o in outcomes.take()] == ["next"]
    assert ran_on["first"] != ran_on["second"]
    assert ran_on["next"] == ran_on["second"]


def test_an_executor_runs_the_jobs_while_the_lane_keeps_the_cap(make_lane):
    outcomes = Outcomes()
    with ThreadPoolExecutor(8, thread_name_prefix="pool") as pool:
        lane = make_lane(2, executor=pool, on_outcome=outcomes)
        three = threading.Barrier(3, timeout=0.5)
        names: list[str] = []

        def run(cancel: CancelToken) -> list[ToolResult]:
            names.append(threading.current_thread().name)
            with off_lane():  # not a lane thread: the job keeps its permit
                parked = lane.stats().parked
            try:
                three.wait()
            except threading.BrokenBarrierError:
                return result("x", ("broke", parked))
            return result("x", ("met", parked))

        for i in range(3):
            lane.submit(ToolJob("a", f"b{i}", run))
        got = [o.results[0].output for o in outcomes.take(3)]
        assert ("met", 0) not in got and ("broke", 0) in got  # never three at once
        assert all(name.startswith("pool") for name in names)
        wait_until(lambda: lane.stats().in_flight == 0, "the lane to drain")
        s = lane.stats()
        assert (s.peak_busy, s.parks, s.threads, s.finished) == (2, 0, 0, 3)

        started = threading.Event()
        job = ToolJob("a", "slow", lambda c: (started.set(), c.wait(WAIT)) and result("s"))
        queued = ToolJob("a", "queued", lambda c: result("q"))
        lane.submit(job)
        release = threading.Event()
        lane.submit(ToolJob("a", "fast", blocker(None, release, "f")))
        lane.submit(queued)
        assert started.wait(WAIT)
        queued.cancel.cancel()
        job.cancel.cancel("interrupted")
        release.set()
        wait_until(lambda: lane.stats().in_flight == 0, "the lane to drain")
        assert [o.batch_id for o in outcomes.take()] == ["fast"]
        s = lane.stats()
        assert (s.dropped, s.abandoned) == (1, 1)
        assert outcomes.none_left()


def test_an_executor_lane_turns_a_raising_job_into_error_results(make_lane):
    outcomes = Outcomes()
    with ThreadPoolExecutor(2) as pool:
        lane = make_lane(2, executor=pool, on_outcome=outcomes)

        def run(cancel: CancelToken) -> list[ToolResult]:
            raise OSError("no route")

        lane.submit(ToolJob("a", "A", run, (ToolCall("c1", "t"),)))
        (outcome,) = outcomes.take()
    assert outcome.results == (ToolResult("c1", error="OSError: no route"),)
    assert lane.stats().failed == 1


class FirstCallWaits(Executor):
    """Holds its first job until ``run_first``; runs every later job inline in ``submit``.

    Every done callback after the first then runs inline, inside ``add_done_callback``.
    """

    def __init__(self) -> None:
        self.first: tuple[Future[object], Callable[..., object], tuple[object, ...]] | None = None

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        future: Future[object] = Future()
        if self.first is None:
            self.first = (future, fn, args)
        else:
            future.set_result(fn(*args))
        return future

    def run_first(self) -> None:
        assert self.first is not None
        future, fn, args = self.first
        future.set_result(fn(*args))


def test_executor_jobs_finishing_inline_do_not_recurse(make_lane):
    outcomes = Outcomes()
    executor = FirstCallWaits()
    lane = make_lane(1, executor=executor, on_outcome=outcomes)
    for i in range(3000):  # deeper than the recursion limit if each launch nested
        lane.submit(ToolJob("a", f"b{i}", lambda c: ()))
    assert lane.stats().queued == 2999
    executor.run_first()
    assert len(outcomes.take(3000)) == 3000
    assert lane.stats().finished == 3000


def test_twenty_thousand_tiny_jobs_from_four_threads_each_report_exactly_once(make_lane):
    n_threads, per_thread = 4, 5000
    seen: list[str] = []
    snapshots: list[LaneStats] = []  # taken under load, not only at rest

    def on_outcome(outcome: ToolOutcome) -> None:
        seen.append(outcome.batch_id)
        if len(seen) % 500 == 0:
            snapshots.append(lane.stats())

    wake = Wake()
    lane = make_lane(8, on_outcome=on_outcome, wake=wake)
    start = threading.Barrier(n_threads + 1, timeout=WAIT)

    def submitter(t: int) -> None:
        start.wait()
        for i in range(per_thread):
            lane.submit(ToolJob(f"a{t}", f"{t}-{i}", lambda c: ()))
            if i % 500 == 0:
                snapshots.append(lane.stats())

    threads = [threading.Thread(target=submitter, args=(t,)) for t in range(n_threads)]
    for thread in threads:
        thread.start()
    start.wait()
    for thread in threads:
        thread.join(30)
    deadline = time.monotonic() + 30
    while lane.stats().in_flight and time.monotonic() < deadline:
        wake.wait(1.0)
    s = lane.stats()
    assert s.in_flight == 0, s
    counts = collections.Counter(seen)
    assert len(counts) == n_threads * per_thread and set(counts.values()) == {1}
    assert (s.enqueued, s.started, s.finished) == (20_000, 20_000, 20_000)
    assert (s.queued, s.busy, s.parked, s.abandoned, s.dropped, s.failed) == (0,) * 6
    assert s.peak_busy <= 8
    assert len(snapshots) >= 40
    for snap in snapshots:
        check_balance(snap)


class Controlled:
    """A job the test steers: it runs only the commands posted to it, and says so."""

    def __init__(self, index: int) -> None:
        self.cond = threading.Condition()
        self.commands: collections.deque[str] = collections.deque()
        self.token = CancelToken()
        self.token.add_callback(lambda _t: self._poke())
        call = ToolCall(f"c{index}", "t")
        self.job = ToolJob("a", f"j{index}", self.run, (call,), self.token)

    def _poke(self) -> None:
        with self.cond:
            self.cond.notify_all()

    def post(self, command: str) -> None:
        with self.cond:
            self.commands.append(command)
            self.cond.notify_all()

    def _next(self) -> str | None:
        """The next command, or None once the token fires."""
        with self.cond:
            ok = self.cond.wait_for(lambda: self.commands or self.token.cancelled, timeout=WAIT)
            assert ok, f"{self.job.batch_id} was never told what to do"
            return None if self.token.cancelled else self.commands.popleft()

    def run(self, cancel: CancelToken) -> list[ToolResult]:
        while True:
            command = self._next()
            if command is None or command == "finish":
                return result(self.job.batch_id)
            if command == "fail":
                raise RuntimeError("told to fail")
            assert command == "park", command
            with off_lane():
                self._next()  # "resume", or None when cancelled: leaving then raises


class LaneMachine(RuleBasedStateMachine):
    """Controllable jobs through a real lane, against a model of who holds which permit.

    After each step the test waits (bounded) until the lane's counters equal the model's,
    and every snapshot on the way must be non-negative and balanced.
    """

    def __init__(self) -> None:
        super().__init__()
        self.lane = ToolLane(2, name="machine", on_outcome=lambda o: None, idle_timeout=0.5)
        self.jobs: list[Controlled] = []
        self.cap = 2
        self.queue: list[int] = []  # FIFO, not started
        self.busy: set[int] = set()
        self.parked: set[int] = set()  # off the lane, not asking to come back
        self.resumers: list[int] = []  # off the lane, waiting for a permit, FIFO
        self.totals = collections.Counter[str]()

    def _grant(self) -> None:
        while len(self.busy) < self.cap and (self.resumers or self.queue):
            if self.resumers:
                self.busy.add(self.resumers.pop(0))
                self.totals["resumes"] += 1
            else:
                self.busy.add(self.queue.pop(0))
                self.totals["started"] += 1

    def _expected(self) -> dict[str, int]:
        expected = {k: self.totals[k] for k in ("enqueued", "started", "finished", "failed")}
        expected.update({k: self.totals[k] for k in ("dropped", "abandoned", "parks", "resumes")})
        expected.update(
            capacity=self.cap,
            queued=len(self.queue),
            busy=len(self.busy),
            parked=len(self.parked) + len(self.resumers),
        )
        return expected

    def _settle(self) -> None:
        expected = self._expected()
        deadline = time.monotonic() + WAIT
        while True:
            s = self.lane.stats()
            check_balance(s)
            actual = {k: getattr(s, k) for k in expected}
            if actual == expected and len(self.lane._resumers) == len(self.resumers):
                return
            assert time.monotonic() < deadline, f"lane {actual} != model {expected}"
            time.sleep(0.0005)

    @initialize()
    def start_with_more_jobs_than_permits(self) -> None:
        for _ in range(3):
            self.submit()

    @precondition(lambda self: len(self.queue) + len(self.busy) + len(self.parked) < 6)
    @rule()
    def submit(self) -> None:
        index = len(self.jobs)
        self.jobs.append(Controlled(index))
        self.totals["enqueued"] += 1
        self.queue.append(index)
        self._grant()
        self.lane.submit(self.jobs[index].job)
        self._settle()

    @precondition(lambda self: self.busy)
    @rule(data=st.data(), command=st.sampled_from(["finish", "fail", "park"]))
    def step_a_running_job(self, data: st.DataObject, command: str) -> None:
        index = data.draw(st.sampled_from(sorted(self.busy)))
        self.busy.remove(index)
        if command == "park":
            self.parked.add(index)
            self.totals["parks"] += 1
        else:
            self.totals["finished" if command == "finish" else "failed"] += 1
        self._grant()
        self.jobs[index].post(command)
        self._settle()

    @precondition(lambda self: self.parked)
    @rule(data=st.data())
    def resume(self, data: st.DataObject) -> None:
        index = data.draw(st.sampled_from(sorted(self.parked)))
        self.parked.remove(index)
        self.resumers.append(index)
        self._grant()
        self.jobs[index].post("resume")
        self._settle()

    @precondition(lambda self: self.queue or self.busy or self.parked or self.resumers)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        live = sorted([*self.queue, *self.busy, *self.parked, *self.resumers])
        index = data.draw(st.sampled_from(live))
        if index in self.queue:
            self.queue.remove(index)
            self.totals["abandoned"] += 1
        else:
            self.totals["dropped"] += 1
            if index in self.busy:
                self.busy.remove(index)
                self._grant()
            elif index in self.parked:
                self.parked.remove(index)
            else:
                self.resumers.remove(index)
        self.jobs[index].token.cancel("cancelled by the test")
        self._settle()

    @precondition(lambda self: self.cap < 4)
    @rule()
    def relieve(self) -> None:
        self.cap += 1
        self._grant()
        assert self.lane.relieve(1) == self.cap
        self._settle()

    @rule()
    def narrow(self) -> None:
        taken = max(0, min(1, self.cap - len(self.busy), self.cap - 1))
        self.cap -= taken
        assert self.lane.narrow(1) == taken
        self._settle()

    @invariant()
    def counters_never_go_negative_and_always_balance(self) -> None:
        check_balance(self.lane.stats())

    def teardown(self) -> None:
        for job in self.jobs:
            job.token.cancel("teardown")
        self.lane.close(timeout=WAIT)
        s = self.lane.stats()
        check_balance(s)
        assert s.in_flight == 0, s


TestLaneMachine = LaneMachine.TestCase
TestLaneMachine.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)


def test_a_huge_idle_timeout_keeps_the_worker_waiting_without_overflowing(make_lane):
    outcomes = Outcomes()
    lane = make_lane(1, on_outcome=outcomes, idle_timeout=1e300)
    names: list[str] = []

    def run(cancel: CancelToken) -> list[ToolResult]:
        names.append(threading.current_thread().name)
        return result("A")

    lane.submit(ToolJob("a", "A", run))
    outcomes.take()
    wait_until(lambda: lane.stats().in_flight == 0, "the first job to end")
    lane.submit(ToolJob("a", "B", run))
    outcomes.take()
    assert names[0] == names[1]  # the same worker waited idle, then took the next job
    assert lane.stats().threads == 1


def test_a_lane_that_did_not_move_hands_back_its_last_snapshot_and_any_change_a_new_one(
    make_lane,
):
    # The tick mirrors both lanes every tick: a lane that did not move costs one version
    # compared, and every kind of change (admit, cancel while queued, widen, narrow, start,
    # finish, close) shows in the next snapshot, from `stats()` and `gauge()` alike.
    lane = make_lane(1, on_outcome=Outcomes())
    first = lane.stats()
    assert lane.stats() is first and lane.gauge() is first
    started, release = threading.Event(), threading.Event()
    lane.submit(ToolJob("a", "b1", blocker(started, release, "b1"), (), CancelToken()))
    assert started.wait(WAIT)
    running = lane.stats()
    assert (running.busy, running.started) == (1, 1) and lane.gauge() is running
    token = CancelToken()
    lane.submit(ToolJob("a", "b2", blocker(None, release, "b2"), (), token))
    assert lane.gauge().queued == 1
    token.cancel()
    assert (lane.stats().queued, lane.stats().abandoned) == (0, 1)
    assert lane.relieve(1) == 2 and lane.gauge().capacity == 2
    assert lane.narrow(1) == 1 and lane.stats().capacity == 1
    release.set()
    wait_until(lambda: lane.stats().finished == 1, "the job to finish")
    lane.close(timeout=WAIT)
    done = lane.stats()
    assert (done.busy, done.finished, done.abandoned) == (0, 1, 1)
    assert lane.gauge() is done


def test_reading_a_lane_waits_behind_its_lock_only_when_a_change_is_under_way(make_lane):
    lane = make_lane(2, on_outcome=Outcomes())
    before = lane.stats()
    holding, change, changed, release = (threading.Event() for _ in range(4))

    def writer() -> None:  # a worker inside a transition, as `_admit` would be
        with lane._lock:
            holding.set()
            assert change.wait(WAIT)
            lane._version += 1
            lane._capacity += 1
            changed.set()
            assert release.wait(WAIT)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert holding.wait(WAIT)
        # Nothing changed yet: both reads hand back the last snapshot without the lock.
        assert lane.stats() is before and lane.gauge() is before
        change.set()
        assert changed.wait(WAIT)
        # Mid-change: the gauge never waits (a torn read, not kept); stats() waits for it.
        assert lane.gauge().capacity == 3
        after: list[LaneStats] = []
        reader = threading.Thread(target=lambda: after.append(lane.stats()))
        reader.start()
        reader.join(0.05)
        assert reader.is_alive() and not after
    finally:
        change.set()
        release.set()
        thread.join(WAIT)
    reader.join(WAIT)
    assert after[0].capacity == 3 and lane.gauge() is after[0]


def test_a_deadline_timer_whose_thread_cannot_start_starts_one_at_the_next_schedule():
    # The unstarted thread was kept as the timer's: no deadline fired again in the process.
    # In a process of its own: the timer's thread, once started, lives as long as it.
    script = """
import threading
from runtime import CancelToken
from runtime.lane import deadlines

start = threading.Thread.start
def refuse(thread):
    if thread.name == "tickwork-deadlines":
        raise RuntimeError("can't start new thread")
    start(thread)

refused = CancelToken()
threading.Thread.start = refuse
try:
    deadlines.schedule(0.0, refused, "refused")
except RuntimeError as exc:
    assert "can't start new thread" in str(exc)
else:
    raise AssertionError("the schedule was not refused")
threading.Thread.start = start
token = CancelToken()
deadlines.schedule(0.01, token, "fires")
assert token.wait(5.0), "no deadline fired"
assert not refused.cancelled, "the refused deadline fired"
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
