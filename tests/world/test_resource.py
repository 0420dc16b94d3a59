"""Resource: FIFO slots in world time; its actions taken by the step (journal format 2)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from runtime import (
    Acquire,
    ConfigError,
    Journal,
    ManualClock,
    Release,
    ReplayDivergence,
    Resource,
    ResourceStats,
    Sleep,
    StatusKind,
    Use,
    World,
    replay,
)

LOG: list[tuple[float, str, str]] = []


def visitor(turn):
    """``turn.message``: (name, arrival delay, hold time); logs when it got and left."""
    name, arrive, hold = turn.message
    yield Sleep(arrive)
    waited = yield Acquire("desk")
    LOG.append((turn.now, name, f"got after {waited:g}"))
    yield Sleep(hold)
    yield Release("desk")
    LOG.append((turn.now, name, "left"))


@pytest.fixture(autouse=True)
def _fresh_log():
    LOG.clear()
    yield
    LOG.clear()


def _stats(world: World) -> ResourceStats:
    found = world.query(ResourceStats)
    assert len(found) == 1
    return found[0][1][0]


def test_slots_go_first_come_first_served_in_world_time(make_world):
    world = make_world()
    desk = Resource(world, "desk", capacity=2)
    for name, message in [("a", (0, 5)), ("b", (1, 5)), ("c", (2, 1)), ("d", (3, 1))]:
        world.spawn(visitor, (name, *message))
    world.run_until_idle()
    assert LOG == [
        (0.0, "a", "got after 0"),
        (1.0, "b", "got after 0"),
        # a's Release hands its slot to c (who came before d) at once: c steps first.
        (5.0, "c", "got after 3"),
        (5.0, "a", "left"),
        (6.0, "d", "got after 3"),  # b and c both release at 6: b, the first, serves d
        (6.0, "b", "left"),
        (6.0, "c", "left"),
        (7.0, "d", "left"),
    ]
    stats = desk.stats()
    assert stats == _stats(world)
    assert (stats.busy, stats.queued, stats.acquired, stats.released) == (0, 0, 4, 4)
    assert (stats.waited, stats.wait_time, stats.peak_busy, stats.peak_queued) == (2, 6.0, 2, 2)
    assert world.now == 7.0


def _queue_of_three(world: World) -> tuple[str, str, str]:
    Resource(world, "desk", capacity=1)
    holder = world.spawn(visitor, ("holder", 0, 10))
    first = world.spawn(visitor, ("first", 1, 1))
    second = world.spawn(visitor, ("second", 2, 1))
    _tick_until(world, lambda: world.now >= 2 and _stats(world).queued == 2)
    return holder, first, second


def _tick_until(world: World, done, limit: int = 1000) -> None:
    for _ in range(limit):
        if done():
            return
        if not world.tick().changed:
            world.clock.advance(0.5)
    raise AssertionError("never got there")


def _run_until_idle_and_check_no_slot_leaked(world: World) -> ResourceStats:
    world.run_until_idle()
    stats = _stats(world)
    assert stats.busy == 0 and stats.queued == 0, stats
    assert stats.acquired == stats.released + stats.reclaimed
    return stats


def test_an_interrupted_waiter_leaves_the_queue_and_the_next_one_is_served(make_world):
    world = make_world()
    _holder, first, _second = _queue_of_three(world)
    world.interrupt(first)
    world.tick()
    assert _stats(world).queued == 1 and _stats(world).abandoned == 1
    stats = _run_until_idle_and_check_no_slot_leaked(world)
    assert [who for _t, who, what in LOG if what.startswith("got")] == ["holder", "second"]
    assert (10.0, "second", "got after 8") in LOG
    assert stats.acquired == 2 and stats.abandoned == 1


def test_a_cancelled_waiter_leaves_the_queue(make_world):
    world = make_world()
    _holder, _first, second = _queue_of_three(world)
    world.cancel(second)
    world.tick()
    assert _stats(world).queued == 1 and _stats(world).abandoned == 1
    stats = _run_until_idle_and_check_no_slot_leaked(world)
    assert [who for _t, who, what in LOG if what.startswith("got")] == ["holder", "first"]
    assert stats.abandoned == 1 and world.status(second).kind is StatusKind.CANCELLED


def test_a_cancelled_holder_gives_its_slot_to_the_next_waiter_at_once(make_world):
    world = make_world()
    holder, _first, _second = _queue_of_three(world)
    world.cancel(holder)
    world.tick()
    assert _stats(world).reclaimed == 1 and _stats(world).busy == 1
    stats = _run_until_idle_and_check_no_slot_leaked(world)
    assert (2.0, "first", "got after 1") in LOG  # granted at the cancel, not at 10
    assert stats.acquired == 3 and stats.released == 2


def test_an_interrupted_holder_gives_its_slot_back(make_world):
    world = make_world()
    holder, _first, _second = _queue_of_three(world)
    world.interrupt(holder)
    stats = _run_until_idle_and_check_no_slot_leaked(world)
    assert (2.0, "first", "got after 1") in LOG
    assert stats.reclaimed == 1 and world.status(holder).kind is StatusKind.IDLE


def test_a_turn_that_ends_without_release_gives_its_slot_back(make_world):
    world = make_world()

    def forgetful(turn):
        yield Acquire("desk")
        yield Sleep(1)

    def patient(turn):
        waited = yield Acquire("desk")
        LOG.append((turn.now, "patient", f"got after {waited:g}"))
        yield Release("desk")

    Resource(world, "desk", capacity=1)
    world.spawn(forgetful)
    world.spawn(patient)
    stats = _run_until_idle_and_check_no_slot_leaked(world)
    assert LOG == [(1.0, "patient", "got after 1")]
    assert stats.reclaimed == 1


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([Release("desk")], "holds no slot of 'desk'"),
        ([Acquire("dock")], "unknown resource 'dock' (known: 'desk')"),
        ([Acquire("desk"), Acquire("desk")], "already holds 'desk'"),
    ],
)
def test_a_misused_resource_fails_only_that_agent_naming_it(make_world, steps, message):
    world = make_world()
    Resource(world, "desk", capacity=1)

    def misuser(turn):
        for step in steps:
            _result = yield step  # a loop, not `yield from`: a list cannot be sent to

    bad = world.spawn(misuser)
    good = world.spawn(visitor, ("good", 0, 1))
    world.run_until_idle()
    assert world.status(bad).kind is StatusKind.ERROR
    assert message in world.status(bad).message
    assert world.status(good).kind is StatusKind.COMPLETE


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (
            lambda: Use(["desk"], 1),
            TypeError,
            "Use takes the resource's name as a string, got ['desk']",
        ),
        (lambda: Use("desk", "3"), TypeError, "Use takes the seconds as a number, got '3'"),
        (lambda: Use("desk", True), TypeError, "Use takes the seconds as a number, got True"),
        (lambda: Use("desk", -1), ValueError, "Use: `seconds` must be finite and >= 0, got -1"),
        (
            lambda: Use("desk", math.inf),
            ValueError,
            "Use: `seconds` must be finite and >= 0, got inf",
        ),
        (
            lambda: Use("desk", math.nan),
            ValueError,
            "Use: `seconds` must be finite and >= 0, got nan",
        ),
        (
            lambda: Acquire(None),
            TypeError,
            "Acquire takes the resource's name as a string, got None",
        ),
        (lambda: Release(5), TypeError, "Release takes the resource's name as a string, got 5"),
    ],
    ids=[
        "use-list",
        "use-str",
        "use-bool",
        "use-negative",
        "use-inf",
        "use-nan",
        "acquire",
        "release",
    ],
)
def test_a_resource_action_of_the_wrong_kind_is_refused_where_it_is_made(
    make_world, make, error, message
):
    with pytest.raises(error) as caught:
        make()
    assert str(caught.value) == message

    # Made in a behaviour, it fails that agent with the message, and nobody else.
    world = make_world()
    Resource(world, "desk", capacity=1)

    def misuser(turn):
        yield make()

    bad = world.spawn(misuser)
    good = world.spawn(visitor, ("good", 0, 1))
    world.run_until_idle()
    assert world.status(bad).message == f"{error.__name__}: {message}"
    assert world.status(good).kind is StatusKind.COMPLETE


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "", "capacity": 1}, "`name` must be a non-empty string, got ''"),
        ({"name": "d", "capacity": 0}, "`capacity` must be an integer >= 1, got 0"),
        ({"name": "d", "capacity": True}, "`capacity` must be an integer >= 1, got True"),
        ({"name": "d", "capacity": 1.5}, "`capacity` must be an integer >= 1, got 1.5"),
    ],
)
def test_a_bad_resource_is_refused_naming_the_argument_and_value(make_world, kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Resource(make_world(), **kwargs)


def test_two_resources_cannot_share_a_name_but_can_share_a_world(make_world):
    world = make_world()
    Resource(world, "desk", capacity=1)
    Resource(world, "dock", capacity=3)
    with pytest.raises(ConfigError, match="'desk' is taken"):
        Resource(world, "desk", capacity=2)
    world.tick()
    assert sorted(s.name for _e, (s,) in world.query(ResourceStats)) == ["desk", "dock"]


def crowd(world: World) -> None:
    """The replay's setup: the same resource as the recording."""
    Resource(world, "desk", capacity=2)


def _run_crowd(world: World) -> tuple[list[tuple[float, str, str]], list[str | None]]:
    crowd(world)
    rng_visits = [(f"v{i}", i % 3, 1 + (i * 7) % 4) for i in range(12)]
    ids = [world.spawn(visitor, visit) for visit in rng_visits]
    digests = []
    while True:
        report = world.tick()
        digests.append(report.digest)
        if not report.changed and world.now >= 20:
            break
        if not report.changed:
            world.clock.advance(0.5)
    world.cancel(ids[-1])
    return list(LOG), digests


def test_the_same_run_grants_in_the_same_order_with_the_same_digests():
    runs = []
    for _ in range(2):
        LOG.clear()
        with World(seed=5, clock=ManualClock(), track_digests=True) as world:
            runs.append(_run_crowd(world))
    assert runs[0] == runs[1]
    assert all(d is not None for d in runs[0][1])


def test_a_recorded_run_replays_with_the_resource_in_its_setup(tmp_path):
    path = tmp_path / "run.db"
    with World(seed=5, clock=ManualClock(), journal=Journal.create(path)) as world:
        Resource(world, "desk", capacity=1)
        holder = world.spawn(visitor, ("holder", 0, 4))
        waiter = world.spawn(visitor, ("waiter", 1, 1))
        world.spawn(visitor, ("last", 2, 1))
        _tick_until(world, lambda: world.now >= 2 and _stats(world).queued == 2)
        world.cancel(waiter)
        world.interrupt(holder)
        world.run_until_idle()
        recorded = _stats(world)
    assert (recorded.reclaimed, recorded.abandoned, recorded.acquired) == (1, 1, 2)
    report = replay(path, setup=crowd_of_one)
    assert report.ticks > 0


def crowd_of_one(world: World) -> None:
    Resource(world, "desk", capacity=1)


def test_a_replay_without_the_resource_diverges(tmp_path):
    path = tmp_path / "run.db"
    with World(seed=5, clock=ManualClock(), journal=Journal.create(path)) as world:
        crowd_of_one(world)
        world.spawn(visitor, ("only", 0, 1))
        world.run_until_idle()
    with pytest.raises(ReplayDivergence, match=r"ResourceStats\.capacity: expected 1, got 2"):
        replay(path, setup=crowd)


def user(turn):
    """``turn.message``: (name, arrival delay, hold time), as `visitor`, in one ``Use``."""
    name, arrive, hold = turn.message
    yield Sleep(arrive)
    waited = yield Use("desk", hold)
    LOG.append((turn.now, name, f"left after waiting {waited:g}"))


def test_use_holds_a_slot_for_its_seconds_in_fifo_order(make_world):
    world = make_world()
    desk = Resource(world, "desk", capacity=2)
    for name, arrive, hold in [("a", 0, 5), ("b", 1, 5), ("c", 2, 1), ("d", 3, 1)]:
        world.spawn(user, (name, arrive, hold))
    world.run_until_idle()
    assert LOG == [
        (5.0, "a", "left after waiting 0"),
        (6.0, "b", "left after waiting 0"),
        (6.0, "c", "left after waiting 3"),  # granted at 5 when a left, held 1
        (7.0, "d", "left after waiting 3"),  # granted at 6 when b left
    ]
    assert world.now == 7.0
    stats = desk.stats()
    assert (stats.acquired, stats.released, stats.waited, stats.busy) == (4, 4, 2, 0)


def test_use_serves_visits_as_acquire_sleep_release_do_in_fewer_ticks(make_world):
    visits = [(f"v{i}", (i * 5) % 7, 1 + (i * 3) % 4) for i in range(10)]
    ends, ticks = [], []
    for behaviour in (user, visitor):
        LOG.clear()
        world = make_world()
        Resource(world, "desk", capacity=3)
        for visit in visits:
            world.spawn(behaviour, visit)
        ticks.append(world.run_until_idle())
        ends.append(sorted((t, who) for t, who, what in LOG if what.startswith("left")))
    assert ends[0] == ends[1]
    assert ticks[0] < ticks[1], ticks  # no tick for a grant at once, nor for the release


def test_a_use_schedules_the_end_of_its_hold_without_waking_the_loop(make_world):
    # The tick thread adds the timer for a hold's end for itself, and looks at the timers
    # before it parks: a wake-up permit would only make a real-time loop tick once more.
    world = make_world()
    Resource(world, "desk", capacity=1)
    for visit in [("a", 0, 2), ("b", 1, 2)]:
        world.spawn(user, visit)
    world.tick()  # the spawns land
    before = world.wake.notifies
    world.run_until_idle()
    assert LOG == [(2.0, "a", "left after waiting 0"), (4.0, "b", "left after waiting 1")]
    assert world.now == 4.0  # the world ticked at each hold's end all the same
    assert world.wake.notifies == before


def test_an_interrupted_use_gives_its_slot_to_the_next_waiter_at_once(make_world):
    world = make_world()
    Resource(world, "desk", capacity=1)
    holder = world.spawn(user, ("holder", 0, 10))
    world.spawn(user, ("next", 1, 1))
    _tick_until(world, lambda: world.now >= 1 and _stats(world).queued == 1)
    world.interrupt(holder)
    stats = _run_until_idle_and_check_no_slot_leaked(world)
    assert LOG == [(2.0, "next", "left after waiting 0")]  # granted at 1, held 1
    assert stats.reclaimed == 1 and stats.released == 1


def test_a_cancelled_use_waiter_leaves_the_queue(make_world):
    world = make_world()
    Resource(world, "desk", capacity=1)
    world.spawn(user, ("holder", 0, 3))
    waiter = world.spawn(user, ("waiter", 1, 1))
    world.spawn(user, ("last", 2, 1))
    _tick_until(world, lambda: world.now >= 2 and _stats(world).queued == 2)
    world.cancel(waiter)
    world.tick()
    assert _stats(world).queued == 1
    stats = _run_until_idle_and_check_no_slot_leaked(world)
    assert LOG == [(3.0, "holder", "left after waiting 0"), (4.0, "last", "left after waiting 1")]
    assert stats.abandoned == 1


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-1, "-1"),
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        ("3", "'3'"),
        (None, "None"),
        (2**1100, "1358298529049385849277351428359266778..."),  # passed `< inf`, then overflowed
    ],
)
def test_a_use_of_a_bad_duration_fails_that_agent_naming_the_value(make_world, seconds, shown):
    world = make_world()
    Resource(world, "desk", capacity=1)

    def bad(turn):
        yield Use("desk", seconds)

    agent = world.spawn(bad)
    world.run_until_idle()
    status = world.status(agent)
    assert status.kind is StatusKind.ERROR
    # Refused where it is made (`Use`'s own check), so no slot was ever taken.
    assert "seconds" in status.message and status.message.endswith(f"got {shown}")
    assert _stats(world).busy == 0


def test_a_recorded_run_of_uses_replays(tmp_path):
    path = tmp_path / "run.db"
    with World(seed=5, clock=ManualClock(), journal=Journal.create(path)) as world:
        crowd_of_one(world)
        holder = world.spawn(user, ("holder", 0, 4))
        world.spawn(user, ("waiter", 1, 1))
        world.spawn(user, ("last", 2, 1))
        _tick_until(world, lambda: world.now >= 2 and _stats(world).queued == 2)
        world.interrupt(holder)
        world.run_until_idle()
        recorded = _stats(world)
        ticks = world.tick_count
    assert (recorded.reclaimed, recorded.released) == (1, 2)
    report = replay(path, setup=crowd_of_one)
    assert report.ticks == ticks


def test_a_run_resumed_mid_use_ends_its_holds_as_the_uninterrupted_run_does(tmp_path):
    from runtime import resume

    visits = [("a", 0, 4), ("b", 1, 2), ("c", 1, 3)]
    with World(seed=5, clock=ManualClock()) as world:
        crowd_of_one(world)
        for visit in visits:
            world.spawn(user, visit)
        world.run_until_idle()
        whole = list(LOG)
    LOG.clear()
    path = tmp_path / "run.db"
    with World(seed=5, clock=ManualClock(), journal=Journal.create(path)) as world:
        crowd_of_one(world)
        for visit in visits:
            world.spawn(user, visit)
        _tick_until(world, lambda: world.now >= 2)  # a holds, b and c wait
    assert LOG == []
    with resume(path, setup=crowd_of_one) as resumed:
        resumed.run_until_idle()
        assert whole == LOG and _stats(resumed).released == 3


def _run_desk(*, watched: bool) -> tuple[Any, ...]:
    """Visitors by `Acquire`/`Release` and by `Use` at one desk, run to the end."""
    world = World(clock=ManualClock())
    try:
        if watched:
            world.observe(lambda report, inputs: None)  # every tick: no skipping
        Resource(world, "desk", capacity=2)
        for i in range(8):
            world.spawn(visitor if i % 2 else user, (f"v{i}", (i * 5) % 7 / 2, 1 + (i * 3) % 4))
        ticks = world.run_until_idle()
        return ticks, world.tick_count, world.now, world.digest(), list(LOG)
    finally:
        LOG.clear()
        world.close()


def test_a_skipped_run_of_visits_matches_the_watched_run_tick_for_tick():
    # The resources' system says when it has work (`run_if`), so an unwatched run skips
    # the ticks where it has none; it must still give every tick, time and grant.
    fast, whole = _run_desk(watched=False), _run_desk(watched=True)
    assert fast == whole
    assert len(fast[4]) == 12  # two lines per Acquire visitor, one per Use


def _turn_during_a_hold(world: World) -> tuple[Any, ...]:
    Resource(world, "desk", capacity=1)
    agent = world.spawn(user, ("a", 0, 2.5))
    world.tick()
    world.tick()  # stepped: it yielded its Use
    turn = world._state.records[agent].turn
    return turn.phase.value, turn.inflight, turn.deadline, turn.counter


def test_under_format_2_a_use_with_a_slot_free_sleeps_until_its_hold_ends(make_world):
    # The step takes it: no host action, no id minted, a sleep to the hold's end.
    assert _turn_during_a_hold(make_world()) == ("sleeping", None, 2.5, 0)


def test_a_world_keeping_format_1_takes_use_as_the_host_action_it_was(make_world):
    world = make_world()
    world._state.journal_format = 1  # as a replay or resume of a format-1 journal sets
    assert _turn_during_a_hold(world) == ("awaiting_action", "a1/t1/h1", 0.0, 1)


def test_a_use_holder_failed_by_a_host_system_gives_its_slot_to_the_next_waiter(make_world):
    # Neither an input nor its hold's end: the lifecycle gives the place up as it clears
    # the turn, and the resources' system sweeps it in its next run.
    world = make_world()
    Resource(world, "desk", capacity=1)
    holder = world.spawn(user, ("holder", 0, 10))
    world.spawn(user, ("next", 1, 1))
    _tick_until(world, lambda: world.now >= 1 and _stats(world).queued == 1)
    victim = world._state.records[holder].ordinal

    def blame(ctx):
        if world.status(holder).kind is StatusKind.ACTIVE:
            ctx.get(victim, ResourceStats)  # the holder's entity has none: raises

    world.add_system(blame)
    stats = _run_until_idle_and_check_no_slot_leaked(world)
    assert world.status(holder).kind is StatusKind.ERROR
    assert LOG == [(2.0, "next", "left after waiting 0")]  # granted at 1, as it queued
    assert stats.reclaimed == 1


def test_a_hold_no_float_holds_is_refused_by_the_step_too_and_the_queue_goes_on(make_world):
    # A `Use` built around its check (a huge int passed `< inf`) failed, inside the step
    # of whichever agent freed the slot, that agent (or the whole skip) with an
    # OverflowError, and left the waiter behind it waiting with the slot free.
    from runtime.world.resource import _set_seconds, _set_used

    world = make_world()
    Resource(world, "desk", capacity=1)
    huge = object.__new__(Use)
    _set_used(huge, "desk")
    _set_seconds(huge, 2**1100)

    def holder(turn):
        yield Use("desk", 1)

    def big(turn):
        yield Sleep(0.5)
        yield huge

    def later(turn):
        yield Sleep(0.7)
        yield Use("desk", 1)
        return "served"

    first, second, third = world.spawn(holder), world.spawn(big), world.spawn(later)
    world.run_until_idle()
    assert world.status(first).kind is StatusKind.COMPLETE
    assert world.status(second).kind is StatusKind.ERROR
    assert "got 1358298529049385849277351428359266778..." in world.status(second).message
    assert world.result(third) == "served"
    stats = _stats(world)
    assert (stats.busy, stats.queued, stats.acquired, stats.released) == (0, 0, 2, 2)


@pytest.mark.parametrize("fmt", [1, 2])
def test_a_resource_named_by_a_string_enum_is_found_by_every_action(make_world, fmt):
    # Format 2's step looked names up only as exact `str`s: "unknown resource 'dock'
    # (known: 'dock')".
    import enum

    class Place(enum.StrEnum):
        DOCK = "dock"

    world = make_world()
    world._state.journal_format = fmt
    Resource(world, Place.DOCK, capacity=1)

    def visits(turn):
        yield Use(Place.DOCK, 1)
        yield Acquire(Place.DOCK)
        yield Release("dock")
        yield Acquire("dock")
        yield Release(Place.DOCK)
        return "done"

    agent = world.spawn(visits)
    world.run_until_idle()
    assert world.result(agent) == "done", world.status(agent).message
    assert _stats(world).name == "dock" and _stats(world).name.__class__ is str


def test_use_takes_the_real_numbers_sleep_takes_as_floats():
    from fractions import Fraction

    import numpy as np

    for seconds, held in [(np.int64(3), 3.0), (np.float32(0.5), 0.5), (Fraction(1, 4), 0.25)]:
        use = Use("dock", seconds)
        assert use.seconds == held and use.seconds.__class__ is float
    assert Use("dock", 3).seconds.__class__ is int  # a plain int is kept as it is
    with pytest.raises(TypeError, match="got True"):
        Use("dock", True)


def test_a_journaled_world_refuses_a_resource_after_its_first_tick(tmp_path):
    # Its entity came mid-run, where a replay's setup (before tick 1) cannot make it:
    # "exists in the replay only" at tick 1 of every replay and resume.
    with World(seed=1, clock=ManualClock(), journal=Journal.create(tmp_path / "run.db")) as world:
        Resource(world, "dock", capacity=1)  # before the first tick: fine
        world.tick()
        with pytest.raises(ConfigError, match="'desk' comes after tick 1 of a journaled world"):
            Resource(world, "desk", capacity=1)
    with World(seed=1, clock=ManualClock()) as plain:
        plain.tick()
        Resource(plain, "desk", capacity=1)  # no journal to replay: any time
