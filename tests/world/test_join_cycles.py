"""A ``Join`` that would wait for ever is refused at the join, with the loop named."""

from __future__ import annotations

import pytest

from runtime import Join, JoinCycleError, ManualClock, Sleep, Spawn, StatusKind, World
from runtime.journal import Journal, replay


def caught(turn):
    """Join ``turn.message`` (an id, or a list of ids); return what the join raised."""
    targets = turn.message if isinstance(turn.message, list) else [turn.message]
    try:
        results = yield Join(*targets)
    except JoinCycleError as exc:
        return {"error": str(exc), "cycle": list(exc.cycle)}
    return {"results": results}


def test_an_agent_that_joins_itself_gets_the_error_at_once(make_world):
    world = make_world()
    me = world.spawn(caught, "a1")
    world.run_until_idle(max_ticks=10)
    assert world.result(me) == {"error": "agent 'a1' cannot join itself", "cycle": ["a1"]}


def test_the_join_that_closes_a_loop_of_three_is_refused_and_the_loop_named(make_world):
    # a1 joins a2 and a2 joins a3 (both wait: a3 is asleep); a3 then joins a1.
    world = make_world()

    def late(turn):
        yield Sleep(5)
        return (yield from caught(turn))

    a1 = world.spawn(caught, "a2")
    a2 = world.spawn(caught, "a3")
    a3 = world.spawn(late, "a1")
    world.run_until_idle(max_ticks=100)
    assert world.result(a3) == {
        "error": "agent 'a3' cannot join 'a1': the join would wait for ever"
        " (a3 -> a1 -> a2 -> a3, each waiting for the next)",
        "cycle": ["a3", "a1", "a2"],
    }
    # The refused agent ended; the two that waited on it get its result in turn.
    assert world.result(a2) == {"results": [world.result(a3)]}
    assert world.result(a1) == {"results": [world.result(a2)]}
    assert {world.status(a).kind for a in (a1, a2, a3)} == {StatusKind.COMPLETE}


def test_a_parent_and_child_joining_each_other_fail_at_the_second_join(make_world):
    def child(turn):
        yield Join(turn.message)  # waits for its parent, which is asleep
        return "child"

    def parent(turn):
        kid = yield Spawn(child, turn.agent_id)
        yield Sleep(1)
        return (yield Join(kid))

    world = make_world()
    agent = world.spawn(parent)
    world.run_until_idle(max_ticks=100)
    status = world.status(agent)
    assert status.kind is StatusKind.ERROR
    assert "JoinCycleError" in status.message and "a1 -> a1.1 -> a1" in status.message
    assert world.status(f"{agent}.1").kind is StatusKind.COMPLETE  # its join ended


@pytest.mark.parametrize("order", ["b first", "c first"])
def test_joins_that_share_an_agent_without_a_loop_wait_as_before(make_world, order):
    # a diamond: a joins b and c, b joins c; nobody waits for a.
    world = make_world()

    def finisher(turn):
        yield Sleep(3)
        return "c"

    c = world.spawn(finisher, agent_id="c")
    first, second = (("b", ["c"]), ("a", ["b", "c"]))
    if order == "c first":
        first, second = second, first
    world.spawn(caught, first[1], agent_id=first[0])
    world.spawn(caught, second[1], agent_id=second[0])
    world.run_until_idle(max_ticks=100)
    assert world.result("b") == {"results": ["c"]}
    assert world.result("a") == {"results": [{"results": ["c"]}, "c"]}
    assert world.status(c).kind is StatusKind.COMPLETE


def test_a_refused_join_replays_to_the_same_digests(tmp_path):
    path = tmp_path / "cycle.db"
    world = World(clock=ManualClock(), journal=Journal.create(path))
    try:
        world.spawn(caught, "a1")
        world.run_until_idle(max_ticks=10)
    finally:
        world.close()
    report = replay(path)  # raises ReplayDivergence at a tick whose digest differs
    assert report.ticks == report.recorded_ticks >= 2
