"""Finished agents let go: keep_finished, world.forget, and nothing live left on a finished one."""

from __future__ import annotations

import gc
import weakref

import esper
import pytest

from runtime import (
    ConfigError,
    Join,
    Journal,
    ManualClock,
    ScriptedModel,
    Sleep,
    Spawn,
    StatusKind,
    Think,
    UnknownAgentError,
    World,
    replay,
    resume,
)


def short(turn):
    yield Sleep(turn.message or 0)
    return f"done {turn.message}"


def test_keep_finished_keeps_the_newest_whole_and_releases_older_ones_entirely(make_world):
    world = make_world(keep_finished=2)
    ids = [world.spawn(short, i) for i in range(1, 6)]  # they finish in spawn order
    world.run_until_idle(max_ticks=50)
    for released in ids[:3]:
        with pytest.raises(UnknownAgentError):
            world.status(released)
    assert [world.result(a) for a in ids[3:]] == ["done 4", "done 5"]
    assert list(world.agents()) == ids[3:]
    assert len(world._state.records) == 2
    with world._lock, world._in_esper():
        esper.clear_dead_entities()
        assert len(esper.get_component(type(world._state.records[ids[3]].agent))) == 2


def test_a_finished_child_is_kept_until_its_parent_has_finished(make_world):
    joined = []

    def parent(turn):
        children = []
        for _ in range(3):
            children.append((yield Spawn(short, 0)))
        yield Sleep(5)  # the children finish (and would be released) long before the Join
        joined.append((yield Join(*children)))

    world = make_world(keep_finished=0)
    world.spawn(parent)
    world.run_until_idle(max_ticks=50)
    # The parent read its children's results; then everyone was released.
    assert joined == [["done 0", "done 0", "done 0"]]
    assert list(world.agents()) == []
    assert world._state.records == {}


def test_a_run_with_keep_finished_replays_releasing_the_same_agents(tmp_path):
    path = tmp_path / "run.db"
    world = World(seed=3, clock=ManualClock(), journal=Journal.create(path), keep_finished=1)
    try:
        for i in range(4):
            world.spawn("tests.world.test_forget:short", i)
        world.run_until_idle(max_ticks=50)
        kept = list(world.agents())
    finally:
        world.close()
    assert len(kept) == 1
    assert replay(path).agents == 1


def test_forget_releases_a_finished_agent_now_and_refuses_a_live_one(tmp_path):
    path = tmp_path / "run.db"
    world = World(clock=ManualClock(), journal=Journal.create(path))
    try:
        done = world.spawn("tests.world.test_forget:short", 0)
        live = world.spawn("tests.world.test_forget:short", 100)
        world.tick()
        world.tick()
        assert world.status(done).kind is StatusKind.COMPLETE
        with pytest.raises(ConfigError, match="only a finished one"):
            world.forget(live)
        before = world.digest()
        world.forget(done)
        with pytest.raises(UnknownAgentError):
            world.status(done)
        assert world.digest() != before
        with pytest.raises(UnknownAgentError):
            world.forget(done)
        world.run_until_idle(max_ticks=50)
    finally:
        world.close()
    assert replay(path).agents == 1


def test_forget_during_a_tick_releases_at_the_next_tick_as_the_replay_does(tmp_path):
    # From a host timer (or system, or action handler) the release happened in the middle
    # of the tick, so the live tick's digest left the agent out and the replay's, which
    # releases it at the next tick's start, kept it: the replay diverged.
    path = tmp_path / "run.db"
    world = World(clock=ManualClock(), journal=Journal.create(path))
    seen: list[bool] = []

    def forget_done() -> None:
        world.forget(done)
        seen.append(done in world.agents())  # still there: released at the next tick

    try:
        done = world.spawn("tests.world.test_forget:short", 0)
        world.spawn("tests.world.test_forget:short", 5)
        world.call_at(1.0, forget_done)
        world.run_until_idle(max_ticks=50)
        assert seen == [True]
        assert done not in list(world.agents())
        with pytest.raises(UnknownAgentError):
            world.status(done)
    finally:
        world.close()
    assert replay(path).agents == 1


def test_a_finished_agent_keeps_no_generator_rng_handle_or_token(make_world):
    frames = []

    class Probe:
        pass

    def worker(turn):
        turn.rng.random()
        probe = Probe()  # lives in the generator's frame
        frames.append(weakref.ref(probe))
        yield Think("x")
        yield Sleep(1)
        return "ok"

    world = make_world(models={"default": ScriptedModel(["r"])})
    agent = world.spawn(worker, "x")
    world.tick()
    rec = world._state.records[agent]
    token = weakref.ref(rec.token)
    world.run_until_idle(max_ticks=50, timeout=10)
    assert world.status(agent).kind is StatusKind.COMPLETE
    assert (rec.turn.behavior, rec.rng, rec.token, rec.mailbox) == (None, None, None, None)
    gc.collect()
    assert token() is None
    assert frames[0]() is None  # the generator's frame is gone


def test_keep_finished_must_be_a_count(make_world):
    with pytest.raises(ConfigError, match="keep_finished"):
        make_world(keep_finished=-1)
    with pytest.raises(ConfigError, match="keep_finished"):
        make_world(keep_finished=1.5)


def child_sleeping(turn):
    yield Sleep(turn.message)
    return f"c{turn.message}"


joined_results: list[object] = []


def joins_two(turn):
    first = yield Spawn(child_sleeping, 1)
    second = yield Spawn(child_sleeping, 10)
    joined_results.append((yield Join(first, second)))
    return "joined"


@pytest.mark.parametrize("driver", ["tick", "run_until_idle"])
def test_a_join_of_an_agent_released_meanwhile_ends_with_no_result_for_it(make_world, driver):
    # Its record was looked up and raised: driven by `tick()` the joiner waited for good
    # (the KeyError failed the finished child instead), and `run_until_idle`'s skip let
    # the KeyError out to the host.
    joined_results.clear()
    clock = ManualClock()
    world = make_world(clock=clock)
    world.spawn(joins_two, agent_id="p")
    for _ in range(4):
        world.tick()
    clock.advance(2)
    for _ in range(3):
        world.tick()
    assert world.status("p.1").kind is StatusKind.COMPLETE
    world.forget("p.1")
    if driver == "tick":
        clock.advance(20)
        for _ in range(10):
            world.tick()
    else:
        world.run_until_idle()
    assert world.result("p") == "joined"
    assert joined_results == [[None, "c10"]]


def test_a_resumed_world_mints_spawn_ids_on_from_the_run_not_released_ones_again(tmp_path):
    # The counter started at 0 again: the next `spawn()` gave "a1", an id the run had
    # given out and released, so the resumed run went another way than the uncut one.
    path = tmp_path / "run.db"
    with World(clock=ManualClock(), journal=Journal.create(path), keep_finished=1) as world:
        assert [world.spawn(short, 1), world.spawn(short, 2)] == ["a1", "a2"]
        world.spawn(short, 3, agent_id="a7")  # the host's own choice: no auto id
        world.run_until_idle(max_ticks=20)
        assert list(world.agents()) == ["a7"]
    resumed = resume(path)
    try:
        assert resumed.spawn(short, 4) == "a3"
    finally:
        resumed.close()


def test_cancel_takes_a_string_reason_and_commands_take_string_ids(make_world):
    # A reason JSON cannot hold failed the journal's write of the tick (and every tick
    # after); a list id raised a bare "unhashable type".
    world = make_world()
    agent = world.spawn(short, 1)
    with pytest.raises(ConfigError, match=r"`reason` must be a string, got \['x'\]"):
        world.cancel(agent, ["x"])
    with pytest.raises(UnknownAgentError, match=r"unknown agent \['a1'\]: an agent id is a string"):
        world.pause(["a1"])


def done_at_once(turn):
    return "c"
    yield


def joins_late(turn):
    child = yield Spawn(done_at_once)
    yield Sleep(3)
    try:
        result = yield Join(child)
    except UnknownAgentError as exc:
        result = f"unknown: {exc}"
    return result


def test_a_forget_between_ticks_replays_where_the_live_run_released_the_agent(tmp_path):
    # Live, a `forget` between two ticks releases at the call; its replay released at the
    # end of the next tick, so a Join in that tick found the child in the replay only
    # ("unknown" live), and the journal did not replay.
    path = tmp_path / "run.db"
    clock = ManualClock()
    with World(clock=clock, journal=Journal.create(path)) as world:
        world.spawn(joins_late, agent_id="p")
        for _ in range(4):
            clock.advance(1)
            world.tick()
        world.forget("p.1")  # between ticks 4 and 5
        for _ in range(3):
            clock.advance(1)
            world.tick()
        live = world.result("p")
    assert live.startswith("unknown: cannot join unknown agents ['p.1']")
    assert replay(path).ticks == 7


def test_a_forget_from_another_thread_never_lands_between_a_ticks_drain_and_body(
    tmp_path, monkeypatch
):
    # The tick drained its inputs before it took the world's lock: a `forget` in between
    # released the agent in that tick while its input went to the next, and the journal's
    # digest of that tick could not be replayed.
    import threading

    from runtime.world.inputs import Inbox

    path = tmp_path / "run.db"
    world = World(clock=ManualClock(), journal=Journal.create(path))
    try:
        agent = world.spawn(short, 0)
        world.run_until_idle(max_ticks=20)
        drained, release = threading.Event(), threading.Event()
        real_drain = Inbox.drain
        gate = [world._inbox]

        def slow_drain(self, limit=None):
            items = real_drain(self, limit)
            if gate and self is gate[0]:
                gate.clear()  # once: the tick below
                drained.set()
                assert release.wait(10)
            return items

        monkeypatch.setattr(Inbox, "drain", slow_drain)
        ticker = threading.Thread(target=world.tick)
        ticker.start()
        assert drained.wait(10)
        forgetter = threading.Thread(target=world.forget, args=(agent,))
        forgetter.start()
        forgetter.join(0.2)  # it waits for the tick's lock now
        release.set()
        ticker.join(10)
        forgetter.join(10)
        world.tick()
    finally:
        world.close()
    assert replay(path).ticks == world.tick_count
