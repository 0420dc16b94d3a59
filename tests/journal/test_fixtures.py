"""Journals recorded by an older tickwork replay with today's: ``fixtures/*.db``.

Each fixture is the run in `tests.journal.fixture_run`, recorded by the tickwork of the
commit its name gives and committed as it was written. A replay recomputes every tick's
digest with today's code and compares it with the recorded one, so this fails when a change
alters what a tick records or how a state is digested without versioning the journal.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from runtime import JournalError, ReplayDivergence, StatusKind, World
from runtime.journal import Journal, JournalReader, replay, resume
from runtime.journal.store import FORMAT_VERSION
from tests.journal import fixture_lifecycle, fixture_resources, fixture_twins

_ALL = sorted((Path(__file__).parent / "fixtures").glob("*.db"))
RESOURCE_FIXTURES = [path for path in _ALL if "-resources-" in path.name]
LIFECYCLE_FIXTURES = [path for path in _ALL if "-lifecycle-" in path.name]
TWINS_FIXTURES = [path for path in _ALL if "-twins-" in path.name]
FIXTURES = [
    path for path in _ALL if path not in RESOURCE_FIXTURES + LIFECYCLE_FIXTURES + TWINS_FIXTURES
]


def _copied(fixture: Path, tmp_path: Path) -> tuple[Path, int, int]:
    """``fixture`` copied where nothing else reads it (the fixture stays as it was), with
    its format and tick count."""
    path = tmp_path / fixture.name
    shutil.copyfile(fixture, path)
    with JournalReader(path) as reader:
        return path, reader.format, reader.tick_count()


def test_there_are_fixtures():
    assert FIXTURES, "tests/journal/fixtures holds no journal"
    assert RESOURCE_FIXTURES, "tests/journal/fixtures holds no journal of resource visits"
    assert LIFECYCLE_FIXTURES, "tests/journal/fixtures holds no journal of agent trees"
    assert TWINS_FIXTURES, "tests/journal/fixtures holds no journal of same-named components"


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_a_journal_recorded_by_an_older_tickwork_replays_tick_for_tick(fixture, tmp_path):
    path = tmp_path / fixture.name
    shutil.copyfile(fixture, path)  # read where nothing else is: the fixture stays as it was
    with JournalReader(path) as reader:
        recorded = reader.tick_count()
        kinds = {
            type(item).__name__ for tick in reader.ticks(states=False) for _, item in tick.inputs
        }
    report = replay(path)
    assert report.ticks == report.recorded_ticks == recorded > 0
    assert report.agents >= 4
    # The run is the one `fixture_run` describes: every kind of input it makes is there.
    assert kinds >= {"SpawnAgent", "ToolOutcome", "PromptOpened", "PromptSettled", "SendMessage"}


@pytest.mark.parametrize("fixture", RESOURCE_FIXTURES, ids=lambda p: p.name)
def test_resource_visits_recorded_by_an_older_tickwork_replay_tick_for_tick(fixture, tmp_path):
    path = tmp_path / fixture.name
    shutil.copyfile(fixture, path)
    with JournalReader(path) as reader:
        recorded = reader.tick_count()
        kinds = {
            type(item).__name__ for tick in reader.ticks(states=False) for _, item in tick.inputs
        }
    report = replay(path, setup=fixture_resources.desks)
    assert report.ticks == report.recorded_ticks == recorded > 0
    assert report.agents == 8
    assert kinds >= {"SpawnAgent", "PauseAgent", "ResumeAgent", "CancelAgent", "InterruptAgent"}


@pytest.mark.parametrize("fixture", RESOURCE_FIXTURES, ids=lambda p: p.name)
def test_an_older_journal_forked_mid_run_goes_on_by_its_own_format(fixture, tmp_path):
    # A resume keeps to the rules the journal's ticks followed, and so does its fork
    # (the prefix and the world that goes on from it): the fork replays.
    path = tmp_path / fixture.name
    shutil.copyfile(fixture, path)
    with JournalReader(path) as reader:
        old = reader.format
    assert old < FORMAT_VERSION
    fork = tmp_path / "fork.db"
    with resume(
        path, setup=fixture_resources.desks, at_tick=12, journal=Journal.create(fork)
    ) as world:
        world.run_until_idle(timeout=60)
        ticks = world.tick_count
    with JournalReader(fork) as reader:
        assert reader.format == old
    report = replay(fork, setup=fixture_resources.desks)
    assert report.ticks == ticks > 12


def test_a_journal_written_now_is_of_the_newest_format(tmp_path):
    path = tmp_path / "run.db"
    with World(journal=Journal.create(path)) as world:
        world.tick()
    with JournalReader(path) as reader:
        assert reader.format == FORMAT_VERSION == 4


@pytest.mark.parametrize("fixture", LIFECYCLE_FIXTURES, ids=lambda p: p.name)
def test_agent_trees_recorded_in_format_2_replay_by_its_rules(fixture, tmp_path):
    # Format 3 cancels through a finished child, resumes a finished parent's subtree and
    # writes a set in history sorted: a format-2 journal replays by the rules it was
    # recorded by, tick for tick (every digest checked), and so does a fork of it.
    path, journal_format, recorded = _copied(fixture, tmp_path)
    assert journal_format == 2
    report = replay(path)
    assert report.ticks == report.recorded_ticks == recorded > 0
    assert report.agents == 7
    fork = tmp_path / "fork.db"
    with resume(path, at_tick=5, journal=Journal.create(fork)) as world:
        # Tick 5 applied the cancel of root and the pause of boss: what follows is
        # format 2's, the leaf under the finished mid sleeping on, the worker paused.
        world.resume("a2")
        world.run_until_idle(timeout=60)
        assert world.result("a1.1.1") == "leaf done"
        assert world.status("a2.1").kind is StatusKind.PAUSED
        assert [e.content for e in world.history("a3.1")] == ['"{200, 4097, 10, 3}"']
        ticks = world.tick_count
    with JournalReader(fork) as reader:
        assert reader.format == 2
    assert replay(fork).ticks == ticks


def test_the_agent_tree_run_recorded_now_follows_format_3(tmp_path):
    # The fixture's run, recorded by today's tickwork: the cancel of root reaches the leaf
    # under its finished child, the resume of the finished boss resumes its worker, and
    # the set is written sorted.
    path = tmp_path / "now.db"
    ticks, _digest = fixture_lifecycle.record(str(path))
    with JournalReader(path) as reader:
        assert reader.format == FORMAT_VERSION >= 3
    assert replay(path).ticks == ticks
    with resume(path) as world:
        leaf = world.status("a1.1.1")
        assert (leaf.kind, leaf.message) == (StatusKind.CANCELLED, "ancestor a1 cancelled")
        assert world.result("a2.1") == "worked"
        assert [e.content for e in world.history("a3.1")] == ["[3, 10, 200, 4097]"]


def _tampered(fixture: Path, tmp_path: Path) -> list[tuple[str, Path]]:
    """Copies of ``fixture``, each with one input's field set to a value of the wrong kind:
    every top-level field of the first input of each kind, and every field one level in."""
    with contextlib.closing(sqlite3.connect(fixture)) as db, db:
        rows = db.execute("SELECT tick, seq, kind, payload FROM inputs ORDER BY tick, seq")
        first = {kind: (tick, seq, payload) for tick, seq, kind, payload in reversed(list(rows))}
    out = []
    for kind, (tick, seq, payload) in sorted(first.items()):
        data = json.loads(payload)
        paths = [(key,) for key in data] + [
            (key, inner)
            for key, value in data.items()
            if isinstance(value, dict)
            for inner in value
        ]
        for where in paths:
            for bad in (5, [1], True):
                changed = json.loads(payload)
                target = changed
                for key in where[:-1]:
                    target = target[key]
                if target[where[-1]] == bad or isinstance(target[where[-1]], dict | list):
                    continue  # the same value, or a container whose own fields are tried
                target[where[-1]] = bad
                path = tmp_path / f"{kind}-{'.'.join(where)}-{type(bad).__name__}.db"
                shutil.copyfile(fixture, path)
                with contextlib.closing(sqlite3.connect(path)) as db, db:
                    db.execute(
                        "UPDATE inputs SET payload = ? WHERE tick = ? AND seq = ?",
                        (json.dumps(changed), tick, seq),
                    )
                out.append((f"{kind}.{'.'.join(where)}={bad!r}", path))
    return out


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_a_journal_with_an_input_of_the_wrong_shape_is_refused_naming_it(fixture, tmp_path):
    # An agent id of 5 or [1] decoded without complaint and failed the replay deep inside
    # ("internal error: TypeError: '<' not supported between 'int' and 'str'"). Whatever a
    # damaged or hand-made journal holds, a replay now matches, diverges or says what is
    # wrong with which input: never another error.
    tampered = _tampered(fixture, tmp_path)
    assert len(tampered) > 60
    errors: dict[str, str] = {}
    for what, path in tampered:
        try:
            replay(path)
        except JournalError as exc:
            errors[what] = str(exc)
        except ReplayDivergence:
            pass  # a value of the right kind but another meaning (a bool where 5 was)
    assert len(errors) > len(tampered) // 2
    assert all(message.startswith("tick ") for message in errors.values()), errors
    assert errors["spawn.agent_id=5"].endswith(
        "malformed spawn input: `agent_id` must be a string, got 5"
    )


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (5, "not an object, got 5"),
        ({"seed": "7"}, "`seed` is '7'"),
        ({"tools": None}, "`tools` is None"),
        ({"models": [5]}, "`models` is [5]"),
        ({"scenario": "x"}, "`scenario` is 'x'"),
        ({"lockstep": "yes"}, "`lockstep` is 'yes'"),
    ],
    ids=["not-an-object", "seed", "tools-null", "models-numbers", "scenario-text", "lockstep"],
)
def test_a_journal_whose_header_holds_the_wrong_kind_is_refused_naming_the_key(
    tmp_path, header, message
):
    # Each failed a replay or resume with "internal error: AttributeError: 'int' object has
    # no attribute 'get'" (or "'NoneType' object is not iterable").
    path = tmp_path / "run.db"
    shutil.copyfile(FIXTURES[0], path)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        (stored,) = db.execute("SELECT value FROM meta WHERE key = 'header'").fetchone()
        value = {**json.loads(stored), **header} if isinstance(header, dict) else header
        db.execute("UPDATE meta SET value = ? WHERE key = 'header'", (json.dumps(value),))
    with pytest.raises(JournalError) as caught:
        replay(path)
    assert str(caught.value) == f"{str(path)!r} has a damaged header: {message}"


@pytest.mark.parametrize("fields", ["5", "[1]", "garbage"])
def test_a_divergence_explained_from_damaged_agent_states_names_the_row(tmp_path, fields):
    # A replay that diverges reads the recorded agent states to explain it; a damaged row
    # failed that with "internal error: TypeError: 'int' object is not iterable".
    path = tmp_path / "run.db"
    shutil.copyfile(FIXTURES[0], path)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE ticks SET digest = '00' WHERE tick = 3")
        db.execute("UPDATE agent_states SET fields = ?", (fields,))
        (tick, agent) = db.execute(
            "SELECT tick, agent FROM agent_states ORDER BY tick, agent LIMIT 1"
        ).fetchone()
    with pytest.raises(
        JournalError, match=rf"^tick {tick}: the recorded state of agent '{agent}' is damaged"
    ):
        replay(path)


@pytest.mark.parametrize("fixture", TWINS_FIXTURES, ids=lambda p: p.name)
def test_same_named_component_types_recorded_in_format_3_replay_by_its_rules(fixture, tmp_path):
    # Format 4 names an entity's two `Position` types apart in its digest fields; a
    # format-3 journal, whose digests merged them, replays by its own rules, and so does a
    # fork of it.
    path, journal_format, recorded = _copied(fixture, tmp_path)
    assert journal_format == 3
    report = replay(path, setup=fixture_twins.setup)
    assert report.ticks == report.recorded_ticks == recorded == 5
    fork = tmp_path / "fork.db"
    with resume(path, setup=fixture_twins.setup, at_tick=3, journal=Journal.create(fork)) as world:
        for _ in range(3):
            world.tick()
        fields = world._host.entity_fields(world.query(fixture_twins.Position)[0][0])
        assert fields is not None and "Position.x" in fields
    with JournalReader(fork) as reader:
        assert reader.format == 3
    assert replay(fork, setup=fixture_twins.setup).ticks == 6


def test_the_same_named_components_run_recorded_now_follows_format_4(tmp_path):
    path = tmp_path / "now.db"
    ticks, _digest = fixture_twins.record(str(path))
    with JournalReader(path) as reader:
        assert reader.format == FORMAT_VERSION >= 4
    assert replay(path, setup=fixture_twins.setup).ticks == ticks
    with resume(path, setup=fixture_twins.setup) as world:
        (twins, _), (alone, _) = world.query(fixture_twins.Position)
        assert world._host.entity_fields(twins) == {
            "entity": twins,
            "tests.journal.fixture_twins:Position.x": 5,
            "tests.journal.fixture_twins:Position.y": 0,
            "tests.journal.twin_position:Position.x": 10,
            "tests.journal.twin_position:Position.y": 15,
        }
        assert world._host.entity_fields(alone) == {
            "entity": alone,
            "Position.x": 5,  # not one of a pair: `drift` leaves it
            "Position.y": 5,
        }
