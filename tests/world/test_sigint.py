"""Abandoning a tick on Ctrl-C (`runtime.world.sigint`, opt-in): raised at once, nothing of
the tick journaled, none of its held lane jobs started; by default the tick finishes first."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time

import pytest

from runtime import CallTools, Journal, JournalReader, ManualClock, Sleep, ToolCall, ToolRegistry
from runtime.world import World, sigint

pytestmark = pytest.mark.usefixtures("python_sigint")  # each test sends itself Ctrl-C


class _PressesCtrlC:
    """A journal that gets Ctrl-C while it writes the first tick (the commit of a big tick
    takes a while): the tick's lane jobs are held at that moment."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.pressed = False

    def begin(self, settings):
        self.journal.begin(settings)

    def record_tick(self, *args):
        if not self.pressed:
            self.pressed = True
            signal.raise_signal(signal.SIGINT)
        self.journal.record_tick(*args)

    def close(self):
        self.journal.close()


def _worker(turn):
    yield CallTools(ToolCall("c1", "work", {}))
    return "worked"


def _world(tmp_path, ran: list[str]) -> tuple[World, str]:
    tools = ToolRegistry()

    @tools.tool()
    def work(args, ctx):
        ran.append("work")
        return "done"

    journal = _PressesCtrlC(Journal.create(tmp_path / "run.db"))
    world = World(clock=ManualClock(), tools=tools, journal=journal)
    return world, world.spawn(_worker, "go")


def test_an_abandoned_tick_is_not_journaled_and_starts_none_of_its_lane_jobs(tmp_path):
    ran: list[str] = []
    world, _ = _world(tmp_path, ran)
    try:
        with pytest.raises(KeyboardInterrupt), sigint.abandoning():
            world.tick()
        assert not sigint.abandoned()  # over with the tick
    finally:
        world.close()
    assert ran == []
    assert world.lane.stats().enqueued == 0  # dropped, never submitted
    with JournalReader(tmp_path / "run.db") as reader:
        assert reader.tick_count() == 0  # the journal ends at the last committed tick


def test_by_default_the_tick_finishes_its_jobs_start_then_ctrl_c_is_raised(tmp_path):
    ran: list[str] = []
    world, agent = _world(tmp_path, ran)
    try:
        with pytest.raises(KeyboardInterrupt):
            world.tick()
        world.run_until_idle(max_ticks=10, timeout=10)  # the world is whole: it ticks on
        assert world.result(agent) == "worked"
    finally:
        world.close()
    assert ran == ["work"]
    with JournalReader(tmp_path / "run.db") as reader:
        assert reader.tick_count() == world.tick_count


def test_ctrl_c_in_a_behaviour_abandons_the_tick_rather_than_failing_the_agent(tmp_path):
    def presses(turn):
        signal.raise_signal(signal.SIGINT)
        yield Sleep(1)

    stepped: list[str] = []

    def after(turn):
        stepped.append(turn.agent_id)
        yield Sleep(1)

    journal = Journal.create(tmp_path / "run.db")
    world = World(clock=ManualClock(), journal=journal)
    world.spawn(presses, "x")
    world.spawn(after, "y")
    try:
        with pytest.raises(KeyboardInterrupt), sigint.abandoning():
            world.tick()
        assert stepped == []  # the tick stopped where Ctrl-C landed
    finally:
        world.close()
    with JournalReader(tmp_path / "run.db") as reader:
        assert reader.tick_count() == 0  # no tick with the agent "failed by Ctrl-C"


def test_abandoning_is_for_the_main_thread_only():
    seen: list[object] = []

    def elsewhere():
        with sigint.abandoning():
            sigint.interrupt_now()  # returns: signals never reach this thread
            seen.append(sigint.abandoned())

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join(timeout=10)
    assert seen == [False]
    sigint.interrupt_now()  # outside the block: returns
    with pytest.raises(KeyboardInterrupt), sigint.abandoning():
        sigint.interrupt_now()


class _SwallowsCtrlC:
    def __del__(self):
        # Ctrl-C lands in a `__del__`, whose exceptions Python ignores (as in a gc
        # callback, or a generator finalized mid-tick): the KeyboardInterrupt is lost.
        signal.raise_signal(signal.SIGINT)


def test_a_ctrl_c_swallowed_inside_the_tick_is_raised_again_until_the_tick_is_left(tmp_path):
    never = threading.Event()
    stepped: list[str] = []

    def swallows(turn):
        _SwallowsCtrlC()  # dropped at once: its __del__ runs here
        never.wait(timeout=30)  # the rest of a long tick; the SIGINT sent again lands here
        yield Sleep(1)

    def after(turn):
        stepped.append(turn.agent_id)
        yield Sleep(1)

    world = World(clock=ManualClock(), journal=Journal.create(tmp_path / "run.db"))
    world.spawn(swallows, "x")
    world.spawn(after, "y")
    unraisable = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        with pytest.raises(KeyboardInterrupt), sigint.abandoning():
            world.tick()
    finally:
        sys.unraisablehook = hook
        world.close()
    assert [type(u.exc_value) for u in unraisable] == [KeyboardInterrupt]  # the lost one
    assert stepped == []  # raised again long before the 30 s were out
    with JournalReader(tmp_path / "run.db") as reader:
        assert reader.tick_count() == 0


def _rekick_lands() -> str:
    sigint.flags().kicked = True  # the world's own SIGINT, sent again
    try:
        return "ignored" if sigint.rekicked() else "not ours"
    except KeyboardInterrupt:
        return "raised"


def test_a_rekick_stops_a_tick_that_lost_the_interrupt_but_not_its_unwinding():
    # Ctrl-C abandons a tick; the interrupt is then either propagating (an `except` or
    # `finally` of the tick runs: a journal rolling back, which may take longer than the
    # 50 ms between re-kicks on a busy machine) or was swallowed (a gc callback ate it).
    # A re-kick must stop only the second, and leave the first's clean-up alone.
    outcomes: list[str] = []
    with sigint.abandoning():
        assert sigint.enter()
        try:
            try:
                sigint.interrupt_now()  # the user's Ctrl-C: the tick is abandoned
            except KeyboardInterrupt:
                outcomes.append(_rekick_lands())  # in the interrupt's handler
                try:
                    raise LookupError("a clean-up's own, handled")
                except LookupError:
                    outcomes.append(_rekick_lands())  # in a handler within it
            outcomes.append(_rekick_lands())  # the interrupt is gone: the tick went on
        finally:
            with pytest.raises(KeyboardInterrupt):  # the abandoned tick is left
                sigint.leave()
    assert outcomes == ["ignored", "ignored", "raised"]
    assert not sigint.flags().abandoned and not sigint.flags().kicked


def test_a_rekick_thread_never_kicks_a_later_abandon(monkeypatch):
    # A re-kick thread sleeps between kicks, so it may outlive the tick it was for; the
    # next abandon has a thread of its own, and the old one must leave it alone.
    monkeypatch.setattr(sigint, "_REKICK_SECS", 60.0)  # the threads started here stay asleep
    kicks: list[str] = []
    with sigint.abandoning():
        for tick in ("first", "second"):  # two ticks abandoned in turn
            assert sigint.enter()
            with contextlib.suppress(KeyboardInterrupt):
                sigint.interrupt_now()
            if tick == "first":
                with pytest.raises(KeyboardInterrupt):
                    sigint.leave()
        try:  # the second is in progress
            for abandon in (sigint.ticks_abandoned() - 1, sigint.ticks_abandoned()):
                try:
                    kicks.append("kicked" if sigint._kick(abandon) else "left alone")
                    time.sleep(0)  # a handler runs here at the latest
                except KeyboardInterrupt:
                    kicks.append("interrupted")
        finally:
            with pytest.raises(KeyboardInterrupt):
                sigint.leave()
    # The first abandon's thread left the second alone; the second's own kick reached the
    # handler, which raised (where exactly Python runs it, after the kill, may vary).
    assert kicks[0] == "left alone"
    assert kicks[-1] == "interrupted"
