"""The ECS, open to the host: components, entities, systems and actions of the host's own."""

from __future__ import annotations

import enum
import threading
from dataclasses import InitVar, dataclass, field
from pathlib import Path

import esper
import pytest

from components import Status
from runtime import (
    PENDING,
    ConfigError,
    Journal,
    JournalError,
    ManualClock,
    ReplayDivergence,
    Sleep,
    StatusKind,
    SystemContext,
    World,
    replay,
    resume,
)
from runtime.world.host import HOST_IDS_START
from tests.conftest import wait_for
from tests.journal import fixture_twins, twin_position


@dataclass(slots=True)
class Position:
    x: int
    y: int


@dataclass(slots=True)
class Door:
    open: bool


@dataclass(frozen=True, slots=True)
class MoveTo:
    x: int
    y: int


@dataclass(frozen=True, slots=True)
class Wait:
    label: str


LOG: list[tuple[int, str]] = []


def wanderer(turn):
    here = turn.get(Position)
    result = yield MoveTo(here.x + 1, here.y)
    return [result, turn.get(Position).x]


def waiter(turn):
    value = yield Wait("go")
    return value


def sleeper(turn):
    for _ in range(3):
        yield Sleep(1)
    return "rested"


def move(ctx: SystemContext, agent_id: str, action: MoveTo) -> object:
    ctx.set(ctx.entity(agent_id), Position(action.x, action.y))
    return "arrived"


def test_components_given_at_spawn_are_seen_by_turn_get_systems_and_world_query(make_world):
    world = make_world()
    seen = []
    world.add_system(lambda ctx: seen.extend(ctx.query(Position)), before="apply_inputs")
    world.add_action(MoveTo, move)
    agent = world.spawn(wanderer, "go", components=[Position(2, 5)])
    assert world.query(Position) == []  # the spawn is an input: applied at the next tick
    world.run_until_idle()
    assert world.result(agent) == ["arrived", 3]  # turn.get read (2, 5), then (3, 5)
    entity = world.query(Position)[0][0]
    assert world.query(Position) == [(entity, (Position(3, 5),))]
    assert seen[0] == (entity, (Position(3, 5),))  # tick 2's system saw the moved agent
    copy = world.query(Position)[0][1][0]
    copy.x = 99  # a copy: the world is untouched
    assert world.query(Position)[0][1][0] == Position(3, 5)


def test_an_entity_added_from_another_thread_appears_the_next_tick_with_its_minted_id(
    make_world,
):
    world = make_world()
    log: list[tuple[int, int, bool]] = []
    world.add_system(lambda ctx: log.extend((ctx.tick, e, d.open) for e, (d,) in ctx.query(Door)))
    world.tick()
    minted: list[int] = []
    done = threading.Event()

    def host() -> None:
        minted.append(world.add_entity(Door(open=True)))
        done.set()

    threading.Thread(target=host).start()
    assert done.wait(timeout=10)
    assert world.query(Door) == [] and log == []
    world.tick()
    assert log == [(2, minted[0], True)]
    assert world.query(Door) == [(minted[0], (Door(open=True),))]


def test_host_systems_run_at_their_places_in_the_pipeline_in_the_order_added(make_world):
    world = make_world()
    log: list[tuple[int, str]] = []

    def named(label: str):
        return lambda ctx: log.append((ctx.tick, label))

    def stepping(turn):
        while True:
            log.append((-1, "behaviour"))
            yield Sleep(0)

    world.add_system(named("last"), after="mirror_lane_stats")
    world.add_system(named("a"), after="step_behaviors")
    world.add_system(named("first"), before="apply_inputs")
    world.add_system(named("b"), after="step_behaviors")
    world.add_system(named("c"), before="dispatch_work")  # the same place: after a and b
    world.add_system(named("d"))  # no place named: right after step_behaviors
    world.spawn(stepping)
    for _ in range(2):
        world.tick()
    order = ["first", "behaviour", "a", "b", "c", "d", "last"]
    assert [label for _, label in log] == order * 2
    assert [tick for tick, label in log if label != "behaviour"] == [1] * 6 + [2] * 6


def test_a_place_that_names_no_stage_is_refused(make_world):
    world = make_world()
    with pytest.raises(ConfigError, match="`after` must be one of apply_inputs"):
        world.add_system(lambda ctx: None, after="step_behaviours")
    with pytest.raises(ConfigError, match="two different places"):
        world.add_system(lambda ctx: None, after="apply_inputs", before="step_behaviors")


def test_a_custom_action_returning_a_value_resumes_the_behaviour_next_step(make_world):
    world = make_world()
    log: list[tuple[int, str]] = []

    def handler(ctx: SystemContext, agent_id: str, action: Wait) -> object:
        log.append((ctx.tick, f"handled {action.label}"))
        return f"done {action.label}"

    world.add_action(Wait, handler)
    agent = world.spawn(waiter)
    world.tick()
    assert log == [(1, "handled go")] and world.status(agent).kind is StatusKind.ACTIVE
    world.tick()
    assert world.status(agent).kind is StatusKind.COMPLETE
    assert world.result(agent) == "done go"


def test_a_pending_action_waits_until_a_system_completes_it(make_world):
    world = make_world()
    waiting: list[str] = []
    completed: list[tuple[int, bool]] = []
    world.add_action(Wait, lambda ctx, agent_id, action: waiting.append(agent_id) or PENDING)

    def finisher(ctx: SystemContext) -> None:
        if ctx.tick == 4:
            completed.extend((ctx.tick, ctx.complete(a, "opened")) for a in waiting)

    world.add_system(finisher, after="dispatch_work")
    agent = world.spawn(waiter)
    for _ in range(4):
        world.tick()
        assert world.status(agent).kind is StatusKind.ACTIVE
    assert completed == [(4, True)]
    world.tick()
    assert world.status(agent).kind is StatusKind.COMPLETE
    assert world.result(agent) == "opened"


def test_an_interrupt_while_a_pending_action_waits_abandons_it(make_world):
    world = make_world()
    outcomes: list[bool] = []
    world.add_action(Wait, lambda ctx, agent_id, action: PENDING)
    agent = world.spawn(waiter, interactive=True, message="start")
    world.tick()
    world.interrupt(agent)
    world.tick()
    assert world.status(agent).kind is StatusKind.IDLE
    assert world.history(agent)[-1].content == "[interrupted by user]"
    world.add_system(lambda ctx: outcomes.append(ctx.complete(agent, "late")))
    world.tick()
    assert outcomes == [False]  # nothing awaits it any more
    assert world.result(agent) is None and world.status(agent).kind is StatusKind.IDLE


def test_the_digest_changes_when_a_host_component_changes_and_only_then(make_world):
    world = make_world()
    door = world.add_entity(Door(open=False), Position(0, 0))

    def opener(ctx: SystemContext) -> None:
        pos = ctx.get(door, Position)
        ctx.set(door, pos)  # marked changed, same value: same digest
        if ctx.tick == 3:
            pos.x = 4
            ctx.set(door, pos)

    world.add_system(opener)
    digests = []
    for _ in range(4):
        world.tick()
        digests.append(world.digest())
    assert digests[0] == digests[1]
    assert digests[2] != digests[1]
    assert digests[3] == digests[2]


def test_an_in_place_change_to_a_queried_component_is_in_the_digest_without_set(make_world):
    world = make_world(track_digests=True)
    world.add_entity(Position(0, 0))
    world.add_entity(Door(open=False))  # never handed to the system: never looked at again

    def nudge(ctx: SystemContext) -> None:
        for _entity, (pos,) in ctx.query(Position):
            if ctx.tick == 3:
                pos.x += 1  # no ctx.set: the loop is not told, the digest still sees it

    world.add_system(nudge)
    reports = [world.tick() for _ in range(4)]
    assert reports[0].digest == reports[1].digest
    assert reports[2].digest != reports[1].digest
    assert reports[3].digest == reports[2].digest
    assert world.query(Position)[0][1] == (Position(1, 0),)


@pytest.mark.parametrize("journal_format", [3, 4])
@pytest.mark.parametrize("moved", ["first", "second"])
def test_a_change_to_either_of_two_same_named_component_types_is_in_the_digest(
    make_world, journal_format, moved
):
    # Two `Position` types (two modules) on one entity, the first added first: format 3
    # named both `Position.x`, and the second's fields overwrote the first's, so a change
    # to the first went into no digest; format 4 names the pair in full.
    world = make_world()
    world._state.journal_format = journal_format
    entity = world.add_entity(fixture_twins.Position(0, 0), twin_position.Position(0, 0))
    world.tick()

    def move(ctx: SystemContext) -> None:
        kind = fixture_twins.Position if moved == "first" else twin_position.Position
        pos = ctx.get(entity, kind)
        pos.x += 1
        ctx.set(entity, pos)

    before = world.digest()
    world.add_system(move)
    world.tick()
    seen = world.digest() != before
    assert seen is (journal_format >= 4 or moved == "second")


def test_a_replay_names_the_field_of_one_of_two_same_named_component_types(tmp_path):
    path = tmp_path / "run.db"
    fixture_twins.record(str(path))

    def changed_setup(world: World) -> None:
        world.add_system(fixture_twins.drift_by(2))  # the first type moves further

    with pytest.raises(ReplayDivergence) as caught:
        replay(path, setup=changed_setup)
    assert caught.value.tick == 1
    assert "tests.journal.fixture_twins:Position.x: expected 1, got 2" in str(caught.value)


def setup_village(world: World) -> None:
    world.add_action(MoveTo, move)
    world.add_system(drift, after="step_behaviors")


def drift(ctx: SystemContext) -> None:
    for entity, (pos,) in ctx.query(Position):
        if ctx.agent_id(entity) is None:
            pos.x += 1
            ctx.set(entity, pos)


def drift_faster(ctx: SystemContext) -> None:
    for entity, (pos,) in ctx.query(Position):
        if ctx.agent_id(entity) is None:
            pos.x += 2
            ctx.set(entity, pos)


def _record(path: Path) -> None:
    with World(seed=3, clock=ManualClock(), journal=Journal.create(path)) as world:
        setup_village(world)
        world.spawn(wanderer, "go", components=[Position(0, 0)])
        world.add_entity(Position(2, 2))
        for _ in range(4):
            world.tick()


def test_a_replay_with_setup_matches_the_recording(tmp_path):
    path = tmp_path / "run.db"
    _record(path)
    report = replay(path, setup=setup_village)
    assert report.ticks == 4 and report.inputs == 2


def test_a_replay_whose_host_system_changed_names_the_component_field(tmp_path):
    path = tmp_path / "run.db"
    _record(path)

    def changed_setup(world: World) -> None:
        world.add_action(MoveTo, move)
        world.add_system(drift_faster, after="step_behaviors")

    with pytest.raises(ReplayDivergence) as caught:
        replay(path, setup=changed_setup)
    assert caught.value.tick == 1
    assert "Position.x: expected 3, got 4" in str(caught.value)


def test_a_raising_host_system_does_not_kill_the_loop(make_world):
    world = make_world()
    victim = world.spawn(sleeper, components=[Position(0, 0)])
    bystander = world.spawn(sleeper)

    def blames_the_victim(ctx: SystemContext) -> None:
        if ctx.tick == 2:
            ctx.get(ctx.entity(victim), Position)
            raise ValueError("no path")

    def blames_nobody(ctx: SystemContext) -> None:
        raise RuntimeError("broken physics")

    world.add_system(blames_the_victim)
    world.add_system(blames_nobody, after="mirror_lane_stats")
    first = world.tick()
    assert first.errors == ("host system 'blames_nobody' raised RuntimeError: broken physics",)
    second = world.tick()
    assert "host system 'blames_the_victim' raised ValueError: no path (agent a1 failed)" in (
        second.errors
    )
    world.run_until_idle()
    assert world.status(victim).kind is StatusKind.ERROR
    assert "no path" in world.status(victim).message
    assert world.status(bystander).kind is StatusKind.COMPLETE


def test_a_raising_action_handler_fails_only_its_agent(make_world):
    world = make_world()

    def handler(ctx: SystemContext, agent_id: str, action: MoveTo) -> object:
        if action.x > 5:
            raise ValueError("out of the map")
        return move(ctx, agent_id, action)

    world.add_action(MoveTo, handler)
    lost = world.spawn(wanderer, components=[Position(9, 0)])
    fine = world.spawn(wanderer, components=[Position(0, 0)])
    world.run_until_idle()
    assert world.status(lost).kind is StatusKind.ERROR
    assert world.status(lost).message == "MoveTo: ValueError: out of the map"
    assert world.result(fine) == ["arrived", 1]


def test_esper_rebuilds_its_cache_at_most_once_per_system_that_changed_structure(
    make_world, monkeypatch
):
    world = make_world()
    made: list[int] = []

    def builder(ctx: SystemContext) -> None:
        for i in range(50):
            ctx.query(Position)  # would rebuild after every create without batching
            made.append(ctx.create(Position(i, 0)))

    def painter(ctx: SystemContext) -> None:
        for entity, (_pos,) in ctx.query(Position):
            ctx.set(entity, Door(open=False))
            ctx.query(Position, Door)

    world.add_system(builder, before="step_behaviors")
    world.add_system(painter, after="step_behaviors")
    world.tick()  # the first tick's queries fill the cache
    rebuilds = 0
    real = esper._clear_cache_now

    def counting() -> None:
        nonlocal rebuilds
        rebuilds += 1
        real()

    monkeypatch.setattr(esper, "_clear_cache_now", counting)
    world.tick()
    assert rebuilds <= 2  # one after builder's batch, one after painter's
    assert len(world.query(Position, Door)) == 100


def test_host_components_must_be_dataclasses_and_not_the_worlds_own(make_world):
    from components import Status

    world = make_world()
    with pytest.raises(ConfigError, match=r"`components\[0\]` must be a dataclass instance"):
        world.add_entity(3)
    with pytest.raises(ConfigError, match="built-in component"):
        world.spawn(sleeper, components=[Status()])


def test_a_host_system_raising_a_base_exception_is_contained_in_a_running_loop(make_world):
    world = make_world()
    ticks: list[int] = []
    seen_three = threading.Event()

    def exits(ctx: SystemContext) -> None:
        ticks.append(ctx.tick)
        if ctx.tick >= 3:
            seen_three.set()
        raise SystemExit("game over?")

    world.add_system(exits, before="apply_inputs")
    agent = world.spawn(sleeper)
    world.start()
    try:
        assert seen_three.wait(timeout=10)
        wait_for(lambda: world.status(agent).kind is StatusKind.COMPLETE, what="the sleeper")
    finally:
        world.stop()
    assert world.status(agent).kind is StatusKind.COMPLETE  # the loop went on
    assert ticks[:3] == [1, 2, 3]


def test_created_removed_and_deleted_entities_show_in_queries_and_the_digest(make_world):
    world = make_world()
    made: list[int] = []

    def builder(ctx: SystemContext) -> None:
        if ctx.tick == 1:
            made.append(ctx.create(Position(1, 1), Door(open=True)))
            made.append(ctx.create(Position(2, 2)))
        elif ctx.tick == 2:
            ctx.remove(made[0], Door)
            ctx.delete(made[1])
            assert ctx.get(made[0], Door) == Door(open=True)  # applied when it returns

    world.add_system(builder)
    world.tick()
    first = world.digest()
    assert world.query(Position) == [(made[0], (Position(1, 1),)), (made[1], (Position(2, 2),))]
    assert world.query(Door) == [(made[0], (Door(open=True),))]
    world.tick()
    assert world.query(Position) == [(made[0], (Position(1, 1),))]
    assert world.query(Door) == []
    assert world.digest() != first


@dataclass(frozen=True, slots=True)
class Bag:
    owner: str
    items: list[str]


def test_world_query_hands_out_deep_enough_copies_of_frozen_and_nested_components(make_world):
    world = make_world()
    bag = world.add_entity(Bag("ann", ["apple"]))
    world.tick()
    [(entity, (copy,))] = world.query(Bag)
    copy.items.append("pear")  # a nested list is copied too, a frozen class still copies
    assert entity == bag and world.query(Bag)[0][1] == (Bag("ann", ["apple"]),)


def test_run_if_runs_a_system_only_in_the_ticks_its_condition_allows(make_world):
    world = make_world()
    asked: list[int] = []
    ran: list[int] = []

    def even(ctx: SystemContext) -> bool:
        asked.append(ctx.tick)
        return ctx.tick % 2 == 0

    world.add_system(lambda ctx: ran.append(ctx.tick), run_if=even)
    for _ in range(6):
        world.tick()
    assert asked == [1, 2, 3, 4, 5, 6]  # once a tick, at the system's turn
    assert ran == [2, 4, 6]


def test_a_raising_run_if_counts_as_its_system_failing(make_world):
    world = make_world()
    ran: list[int] = []

    def broken(ctx: SystemContext) -> bool:
        raise LookupError("no map")

    world.add_system(lambda ctx: ran.append(ctx.tick), name="mover", run_if=broken)
    report = world.tick()
    assert report.errors == ("host system 'mover' raised LookupError: no map",)
    assert ran == []


def test_run_if_must_be_callable(make_world):
    world = make_world()
    with pytest.raises(ConfigError, match=r"`run_if` must be callable or None, got 3"):
        world.add_system(lambda ctx: None, run_if=3)  # type: ignore[arg-type]


@dataclass(slots=True)
class Ledger:
    entries: dict


def test_a_host_component_holding_what_json_refuses_is_in_the_digest(make_world, tmp_path):
    # Keys JSON cannot sort or write, and an int past str()'s limit: the tick that folds
    # the component into the digest and journals it must not fail on them.
    def digest_with(value: dict) -> str:
        world = make_world()
        world.add_entity(Ledger(value))
        world.tick()
        return world.digest()

    odd = {(1, 2): 10**5000, 3: "three", "x": None}
    assert digest_with(odd) == digest_with(dict(odd))
    assert digest_with(odd) != digest_with({**odd, (5, 6): 0})
    # A journaled world refuses such a component at the call, naming the field.
    journaled = make_world(journal=Journal.create(tmp_path / "run.db"))
    with pytest.raises(ConfigError, match=r"Ledger.*value\['entries'\]: key \(1, 2\)"):
        journaled.add_entity(Ledger(odd))


def test_a_system_query_of_no_class_is_refused_naming_it(make_world):
    refused: list[str] = []

    def asks_badly(ctx: SystemContext) -> None:
        for types in ((5,), (), (Position, "Door")):
            with pytest.raises(ConfigError, match="`types` must be one or more classes") as info:
                ctx.query(*types)
            refused.append(str(info.value))

    world = make_world()
    world.add_system(asks_badly)
    report = world.tick()
    assert report.errors == ()  # refused at the call, inside the system that asked
    assert refused[0].endswith("got (5,)") and refused[1].endswith("got ()")
    assert len(refused) == 3


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_system_added_by_a_system_runs_from_the_next_tick_and_once_a_tick(make_world, where):
    # esper re-sorts the list it is walking when a processor is added: a system adding one
    # during the pipeline made esper run systems again (and, adding each time, for ever).
    world = make_world()
    ran: list[tuple[int, str]] = []
    added = False

    def named(name):
        def system(ctx: SystemContext) -> None:
            ran.append((ctx.tick, name))

        system.__name__ = name
        return system

    def adder(ctx: SystemContext) -> None:
        nonlocal added
        ran.append((ctx.tick, "adder"))
        if not added:
            added = True
            place = (
                {"before": "apply_inputs"} if where == "before" else {"after": "mirror_lane_stats"}
            )
            world.add_system(named("late"), **place)

    world.add_system(adder)
    world.add_system(named("other"))
    for _ in range(3):
        world.tick()
    late = [(tick, "late") for tick in (2, 3)]
    rest = [[(tick, "adder"), (tick, "other")] for tick in (1, 2, 3)]
    if where == "before":
        expected = rest[0] + [late[0], *rest[1], late[1], *rest[2]]
    else:
        expected = rest[0] + [*rest[1], late[0], *rest[2], late[1]]
    assert ran == expected


@dataclass
class Rock:
    weight: int


class Mood(enum.StrEnum):
    CALM = "calm"


def echo(turn):
    return turn.message
    yield


def poke_setup(world: World) -> None:
    def poke(ctx: SystemContext) -> None:
        if ctx.tick == 2:
            world.send("e", "poke")  # a command from host code inside a tick

    world.add_system(poke)


def test_a_resumed_world_mints_entity_ids_past_the_runs_and_applies_its_posts_once(tmp_path):
    # A resume replays the prefix with the host's systems again: what they posted then is
    # in the journal already (a second copy was applied once live: a message twice), and
    # the ids `add_entity` minted outside the ticks, which no replay mints again, are
    # taken (the resumed world minted the first one again and its tick failed whole).
    path = tmp_path / "run.db"

    with World(seed=1, clock=ManualClock(), journal=Journal.create(path)) as world:
        poke_setup(world)
        world.spawn(echo, "hello", agent_id="e", interactive=True)
        first = world.add_entity(Rock(1))
        world.run_until_idle()
        live = [e.content for e in world.history("e")]
    assert live == ["hello", "poke"]

    resumed = resume(path, setup=poke_setup)
    try:
        second = resumed.add_entity(Rock(2))
        resumed.send("e", "again")
        resumed.run_until_idle()
        assert second == first + 1
        assert resumed.query(Rock) == [(first, (Rock(1),)), (second, (Rock(2),))]
        assert [e.content for e in resumed.history("e")] == ["hello", "poke", "again"]
    finally:
        resumed.close()
    assert replay(path, setup=poke_setup).ticks == resumed.tick_count


def test_a_system_posting_in_the_last_recorded_tick_has_its_post_applied_after_resume(
    tmp_path,
):
    # The post of the journal's last tick never reached a journaled tick (the process
    # died): the resumed world applies it, as the run would have gone on without the crash.
    path = tmp_path / "run.db"

    with World(seed=1, clock=ManualClock(), journal=Journal.create(path)) as world:
        poke_setup(world)
        world.spawn(echo, "hello", agent_id="e", interactive=True)
        world.tick()
        world.tick()  # the poke is posted here; the process "dies" before tick 3
    resumed = resume(path, setup=poke_setup)
    try:
        resumed.run_until_idle()
        assert [e.content for e in resumed.history("e")] == ["hello", "poke"]
    finally:
        resumed.close()


@dataclass
class Counted:
    start: int
    hits: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.hits = self.start * 10


@dataclass
class Scaled:
    value: int
    scale: InitVar[int]

    def __post_init__(self, scale: int) -> None:
        self.value *= scale


def test_components_with_init_false_fields_or_initvars_replay_as_they_were(tmp_path):
    # A journal's component is rebuilt from its fields without `__init__`: `cls(**fields)`
    # refused a field with init=False, missed an InitVar and ran `__post_init__` again.
    path = tmp_path / "run.db"
    with World(seed=1, clock=ManualClock(), journal=Journal.create(path)) as world:
        world.add_entity(Counted(3), Scaled(2, 10))
        world.tick()
        world.tick()
        assert world.query(Counted, Scaled) == [(HOST_IDS_START, (Counted(3), Scaled(20, 1)))]
    assert replay(path).ticks == 2


def test_a_component_type_whose_fields_changed_since_the_run_is_named(tmp_path):
    path = tmp_path / "run.db"
    with World(seed=1, clock=ManualClock(), journal=Journal.create(path)) as world:
        world.add_entity(Rock(1))
        world.tick()

    @dataclass
    class Rock2:
        weight: int
        colour: str = "grey"

    def renamed(world: World) -> None:
        world._host.types[f"{__name__}:Rock"] = Rock2

    with pytest.raises(
        JournalError, match=r"fields \['weight'\], the type has \['weight', 'colour'\]"
    ):
        replay(path, setup=renamed)


def test_an_entity_that_cannot_be_added_loses_no_other_input_of_its_tick(make_world, caplog):
    # No agent to fail: the add is logged and dropped, and the tick's other inputs apply
    # (it raised out of the tick, which lost them all and left the journal a gap).
    from runtime.world.inputs import AddEntity

    world = make_world()
    world.spawn(echo, "hello", agent_id="e", interactive=True)
    world.tick()
    entity = world.add_entity(Rock(1))
    world._inbox.put(AddEntity(entity, (Rock(2),)))  # the same id again
    world.send("e", "after")
    world.tick()
    assert world.query(Rock) == [(entity, (Rock(1),))]
    assert [e.content for e in world.history("e")] == ["hello", "after"]
    assert f"host entity {entity} was not added" in caplog.text


def test_a_host_system_raising_keyboard_interrupt_has_it_raised_after_its_tick_is_journaled(
    tmp_path,
):
    # Raised through the middle of the tick, it left the tick's inputs applied and the
    # tick unjournaled: "journal skips from tick 1 to 3" at every replay after.
    path = tmp_path / "run.db"
    raised: list[int] = []

    def interrupts(ctx: SystemContext) -> None:
        if ctx.tick == 2 and not raised:
            raised.append(ctx.tick)
            raise KeyboardInterrupt("from host code")

    with World(seed=1, clock=ManualClock(), journal=Journal.create(path)) as world:
        world.add_system(interrupts)
        world.spawn(echo, "hello", agent_id="e", interactive=True)
        world.tick()
        world.send("e", "two")
        with pytest.raises(KeyboardInterrupt):
            world.tick()  # on the main thread: raised again once the tick is over
        world.tick()
        assert world.tick_count == 3
        assert [e.content for e in world.history("e")] == ["hello", "two"]
    assert replay(path).ticks == 3


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (("a", "x"), "value['items'] is a tuple, which a journal gives back as a list"),
        ([1, (2,)], "value['items'][1] is a tuple"),
        ({"k": Mood.CALM}, "value['items']['k'] is a Mood (<Mood.CALM: 'calm'>), which a journal"),
    ],
    ids=["tuple", "nested-tuple", "str-enum"],
)
def test_a_component_field_a_journal_would_give_back_changed_is_refused(tmp_path, value, why):
    # A replay rebuilds the component from the journal's JSON: a tuple came back a list
    # and an enum its plain value, so a correct run diverged in its replay only.
    @dataclass
    class Bag:
        items: object

    with World(seed=1, clock=ManualClock(), journal=Journal.create(tmp_path / "run.db")) as world:
        with pytest.raises(ConfigError) as caught:
            world.add_entity(Bag(value))
        assert why in str(caught.value)
        assert world.add_entity(Bag(["a", "x"])) == HOST_IDS_START  # a list is kept as is


def _made_position() -> type:
    """A class made anew at each call, all named alike (a factory's, a reloaded module's)."""

    @dataclass
    class Spot:
        x: int

    return Spot


def test_a_second_class_of_a_recorded_components_name_is_refused(tmp_path, make_world):
    # A journal names a component type by `module:qualname`: the second class was taken
    # and its components recorded under the first's name, so the replay rebuilt them as
    # the first class (the world's registry kept the first and ignored the second).
    first, second = _made_position(), _made_position()
    assert first.__qualname__ == second.__qualname__ and first is not second
    with World(seed=1, clock=ManualClock(), journal=Journal.create(tmp_path / "run.db")) as world:
        with pytest.raises(ConfigError, match="must have JSON fields"):
            world.add_entity(second({1, 2}))  # refused: its class is not taken as known
        with pytest.raises(ConfigError, match=r"`components\[1\]` is a class named"):
            world.add_entity(first(1), second(2))  # two of one name in one call
        world.add_entity(first(1))
        world.add_entity(first(2))  # the same class again is fine
        name = "tests.world.test_host:_made_position.<locals>.Spot"
        with pytest.raises(ConfigError, match=rf"`components\[0\]` is a class named '{name}'"):
            world.add_entity(second(3))
        with pytest.raises(ConfigError, match=rf"`components\[1\]` is a class named '{name}'"):
            world.spawn(sleeper, components=[Position(0, 0), second(3)])
        with pytest.raises(ConfigError, match=rf"`types` is a class named '{name}'"):
            world.register_component(second)
        world.register_component(first)
        world.tick()
        assert [c for _e, (c,) in world.query(first)] == [first(1), first(2)]
    # Without a journal nothing is recorded by name: two such classes live side by side.
    world = make_world()
    world.add_entity(first(1), second(2))
    world.tick()
    assert world.query(first, second)[0][1] == (first(1), second(2))


def test_the_resources_actions_are_refused_as_host_actions(make_world):
    # Accepted, a handler for `Use` was never called once a Resource existed: the step
    # takes the resources' actions first.
    from runtime import Acquire, Release, Use

    world = make_world()
    for action in (Acquire, Release, Use):
        with pytest.raises(ConfigError, match=f"{action.__name__} is a built-in action of"):
            world.add_action(action, lambda ctx, agent_id, action: None)


def test_host_api_misuse_is_a_config_error_naming_the_value(make_world):
    # Each raised something raw (TypeError, AttributeError) or was taken silently.
    world = make_world()
    with pytest.raises(ConfigError, match=r"must be a list of components, got one: \[Position"):
        world.spawn(sleeper, components=Position(1, 2))
    with pytest.raises(ConfigError, match="must be a list of components, got 5"):
        world.spawn(sleeper, components=5)

    @dataclass
    class Locked:
        lock: object

    with pytest.raises(ConfigError, match=r"`components\[0\]` \(Locked\) cannot be copied"):
        world.add_entity(Locked(threading.Lock()))
    with pytest.raises(ConfigError, match="Status is one of the world's own components"):
        world.query(Status)
    entity = world.add_entity(Position(0, 0))
    world.tick()
    seen: list[str] = []

    def misuse(ctx: SystemContext) -> None:
        for call in (
            lambda: ctx.get(entity, "Position"),
            lambda: ctx.remove(entity, "Position"),
            lambda: ctx.set(entity, Position(1, 1), Position(2, 2)),
        ):
            try:
                call()
            except ConfigError as exc:
                seen.append(str(exc))

    world.add_system(misuse)
    world.tick()
    assert seen == [
        "`component_type` must be a class, got 'Position'",
        "`component_type` must be a class, got 'Position'",
        f"`components`: two of one type for entity {entity}",
    ]
    assert world.query(Position) == [(entity, (Position(0, 0),))]
