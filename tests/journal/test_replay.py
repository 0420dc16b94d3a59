"""Record and replay: every tick's digest matches, no tool runs, divergences are pinpointed."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import InitVar, dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import (
    Ask,
    BehaviorNotFound,
    CallTools,
    ConfigError,
    InteractionRequest,
    InteractionResponse,
    Join,
    Journal,
    JournalError,
    ManualClock,
    MonotonicClock,
    ReplayDivergence,
    ScriptedModel,
    Sleep,
    Spawn,
    StatusKind,
    Think,
    ToolCall,
    ToolRegistry,
    World,
)
from runtime.journal import JournalReader, replay, resume
from tests import journal_behaviors as jb
from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]


def test_a_threaded_run_with_answers_interrupts_pauses_and_cancels_replays_exactly(tmp_path):
    path = tmp_path / "run.db"
    world = World(
        seed=5,
        clock=MonotonicClock(),
        tools=jb.make_tools(),
        models=jb.scripted_models(),
        journal=Journal.create(path),
        interaction_timeout_secs=0,
    )
    stop = threading.Event()
    answerer = threading.Thread(target=jb.random_answers, args=(world, stop, 1))
    try:
        agents = [world.spawn(jb.worker, f"task {i}") for i in range(12)]
        world.start()
        # Each agent's turn takes several ticks (think, tools, ask): these land mid-turn.
        world.interrupt(agents[0])
        world.cancel(agents[2])
        world.pause(agents[1])
        answerer.start()
        time.sleep(0.05)
        world.resume(agents[1])

        def settled() -> bool:
            kinds = [world.status(a).kind for a in agents]
            return all(k.is_terminal or k is StatusKind.IDLE for k in kinds)

        wait_for(settled, timeout=30, what="every agent to finish")
        world.stop()
    finally:
        stop.set()
        answerer.join(timeout=10)
        world.close()
    assert world.status(agents[2]).kind is StatusKind.CANCELLED
    assert sum(world.status(a).kind is StatusKind.COMPLETE for a in agents) >= 9
    tool_calls_recorded = jb.CALLS["tools"]
    assert tool_calls_recorded > 0

    report = replay(path)
    assert report.ticks == world.tick_count
    assert report.inputs > 0
    assert jb.CALLS["tools"] == tool_calls_recorded  # replay ran no tool
    assert report.effects.get("run_tools", 0) > 0  # ...though the agents asked for them


def _record(path: Path, script: list[tuple[str, int]], seed: int, agents: int) -> World:
    """A virtual-time run driven by a script of (command, agent index) per tick."""
    world = World(
        seed=seed,
        clock=ManualClock(),
        tools=jb.make_tools(),
        models=jb.scripted_models(),
        journal=Journal.create(path),
    )
    ids = [world.spawn(jb.worker, f"t{i}") for i in range(agents)]
    for command, index in script:
        agent = ids[index % len(ids)]
        if command == "answer":
            for _owner, request in world.hub.pending():
                world.hub.answer(InteractionResponse.text(request.id, "yes"))
                break
        elif command == "interrupt":
            world.interrupt(agent)
        elif command == "send":
            world.send(agent, "more")
        elif command == "pause":
            world.pause(agent)
        elif command == "resume":
            world.resume(agent)
        elif command == "cancel":
            world.cancel(agent)
        world.tick()
        # Let lane work land before the next tick, so the script alone decides the run.
        wait_for(
            lambda: (
                world.lane.stats().in_flight == 0 and world.inference_lane.stats().in_flight == 0
            )
        )
        world.clock.advance(0.01)  # type: ignore[attr-defined]
    world.close()
    return world


commands = st.sampled_from(
    ["tick", "answer", "answer", "interrupt", "send", "pause", "resume", "cancel"]
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    script=st.lists(st.tuples(commands, st.integers(0, 5)), min_size=1, max_size=40),
    seed=st.integers(0, 3),
    agents=st.integers(1, 4),
)
def test_replay_of_any_recorded_script_matches_tick_for_tick(
    tmp_path_factory, script, seed, agents
):
    path = tmp_path_factory.mktemp("rec") / "run.db"
    world = _record(path, script, seed, agents)
    report = replay(path)
    assert report.ticks == world.tick_count


def test_a_run_holding_half_a_surrogate_pair_is_journaled_and_replays(tmp_path):
    # Its digest text and history hash it through `surrogatepass`, SQLite stores its state
    # as bytes: the tick failed with UnicodeEncodeError, journal or digest tracked.
    path = tmp_path / "pair.db"
    world = World(
        clock=ManualClock(),
        tools=jb.make_tools(),
        journal=Journal.create(path),
        interaction_timeout_secs=0,
    )
    try:
        agent = world.spawn(jb.splits_a_pair)
        world.run_until_idle(timeout=10.0)
        (request,) = [r for _a, r in world.hub.pending()]
        world.hub.answer(InteractionResponse.text(request.id, "\ude00 other"))
        world.run_until_idle(timeout=10.0)
        assert world.result(agent) == ["half \ud83d", "\ude00 other"]
        ticks = world.tick_count
    finally:
        world.close()
    report = replay(path)  # every tick's digest compared with the recording's
    assert report.ticks == report.recorded_ticks == ticks
    with JournalReader(path) as reader:
        last, _at = reader.states_until(ticks)
    assert last[agent]["result"] == ["half \ud83d", "\ude00 other"]


def _recorded_and_replayed_elsewhere(path: Path, record: str) -> int:
    """Run ``record`` (Python code, ``sys.argv[1]`` the journal) in a process with one hash
    seed, then replay the journal in a process with another; returns the ticks replayed."""
    check = "import sys; from runtime import replay; print(replay(sys.argv[1]).ticks)"
    for code, hash_seed in ((record, "1"), (check, "987654")):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run(  # noqa: PLW1510 - the return code is asserted below
            [sys.executable, "-c", code, str(path)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def test_digests_do_not_depend_on_the_hash_seed(tmp_path):
    path = tmp_path / "run.db"
    script = [("tick", 0), ("answer", 0), ("interrupt", 1), ("send", 1)] * 5
    record = (
        "import sys; from pathlib import Path; from tests.journal.test_replay import _record;"
        f"_record(Path(sys.argv[1]), {script!r}, 3, 3)"
    )
    assert _recorded_and_replayed_elsewhere(path, record) == len(script)


class _Opaque:
    """An object with no text of its own: Python's names its address."""


@dataclass(frozen=True)
class _Labels:
    """A dataclass whose own text prints its set in hash order."""

    names: frozenset[str]
    mood: StatusKind


class _NoText:
    """An object whose text raises."""

    def __str__(self) -> str:
        raise RuntimeError("no text")


@dataclass
class _Sized:
    """A dataclass with an InitVar: no attribute of that name, though a dataclass field."""

    size: int
    scale: InitVar[int] = 1

    def __post_init__(self, scale: int) -> None:
        self.size *= scale


def _echo(turn):
    yield Sleep(0)
    return "echoed"


def _spawns_a_set(turn):
    tags = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta"}
    labels = _Labels(frozenset({"x", "y", "z", "w"}), StatusKind.ACTIVE)
    mixed = {_Labels(frozenset({"b", "a"}), StatusKind.IDLE), ("t", 1), 2.5}
    message = {
        "tags": tags,
        "handle": _Opaque(),
        "labels": labels,
        "mixed": mixed,
        "no_text": _NoText(),
        "sized": _Sized(3, 2),
    }
    # Keys JSON cannot sort: the encoder refuses the whole, which is written by the
    # same rules another way (frozensets inside sorted too).
    refused = {1: 0, "a": {frozenset({"x", "y"}), frozenset({"x", "z"}), frozenset({"y", "z"})}}
    yield Spawn(_echo, refused)
    # Keys whose texts meet, in a set's order: every entry kept, in the order of its text.
    meeting = {key: type(key).__name__ for key in set((1, "1", None, "null"))}
    yield Spawn(_echo, {"s": {10, 2}, "m": meeting})
    child = yield Spawn(_echo, message)
    yield Join(child)
    return "spawned"


def _record_a_set(path: str) -> None:
    world = World(seed=1, clock=ManualClock(), journal=Journal.create(path))
    try:
        world.spawn(_spawns_a_set)
        world.run_until_idle()
    finally:
        world.close()


def test_a_message_json_cannot_hold_is_written_the_same_in_every_process(tmp_path):
    # A set of strings went into the child's history in hash order, an object with its
    # address: a journal recorded in one process diverged when replayed in another.
    path = tmp_path / "run.db"
    record = (
        "import sys; from tests.journal.test_replay import _record_a_set;"
        " _record_a_set(sys.argv[1])"
    )
    assert _recorded_and_replayed_elsewhere(path, record) > 0
    with JournalReader(path) as reader:
        last, _at = reader.states_until(reader.tick_count())
    assert last["a1"]["result"] == "spawned"
    with resume(path) as world:
        [refused] = world.history("a1.1")
        [meeting] = world.history("a1.2")
        [entry] = world.history("a1.3")
    assert json.loads(refused.content) == {"1": 0, "a": [["x", "y"], ["x", "z"], ["y", "z"]]}
    assert json.loads(meeting.content) == {
        "m": [["1", "int"], ["1", "str"], ["null", "NoneType"], ["null", "str"]],
        "s": [2, 10],
    }
    assert json.loads(entry.content) == {
        "handle": "<_Opaque>",
        "labels": {"mood": "active", "names": ["w", "x", "y", "z"]},
        "mixed": [2.5, ["t", 1], {"mood": "idle", "names": ["a", "b"]}],
        "no_text": "<_NoText>",
        "sized": {"size": 6},
        "tags": ["alpha", "beta", "delta", "epsilon", "gamma", "zeta"],
    }


_PRESS_CTRL_C: list[bool] = []  # holds True while the behaviour below is to press Ctrl-C


def _presses_ctrl_c(turn):
    yield Sleep(1)
    if _PRESS_CTRL_C:
        _PRESS_CTRL_C.clear()
        signal.raise_signal(signal.SIGINT)  # its handler runs here, inside the behaviour
    yield Sleep(1)
    return "done"


def test_ctrl_c_in_a_replayed_tick_is_raised_after_it_not_taken_for_a_divergence(
    tmp_path, python_sigint
):
    # The replay's ticks did not hold Ctrl-C as live ticks do: it landed in the behaviour,
    # whose catch-all failed the agent with it, and the replay reported a divergence.
    path = tmp_path / "run.db"
    world = World(clock=ManualClock(), journal=Journal.create(path))
    try:
        world.spawn(_presses_ctrl_c)
        world.run_until_idle()
    finally:
        world.close()
    _PRESS_CTRL_C.append(True)
    with pytest.raises(KeyboardInterrupt):
        replay(path)
    assert not _PRESS_CTRL_C  # it was pressed, in the replay
    assert replay(path).ticks > 0  # and the journal replays as ever


def _tamper(path: Path, sql: str, *args: object) -> None:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(sql, args)
    conn.close()


def _recorded_run(path: Path) -> World:
    return _record(path, [("tick", 0)] * 3 + [("answer", 0)] * 4 + [("tick", 0)] * 4, 2, 3)


def test_a_tampered_input_makes_replay_diverge_at_its_tick_naming_the_agent(tmp_path):
    path = tmp_path / "run.db"
    _recorded_run(path)
    conn = sqlite3.connect(path)
    tick, seq, payload = conn.execute(
        "SELECT tick, seq, payload FROM inputs WHERE kind = 'prompt_settled' ORDER BY tick LIMIT 1"
    ).fetchone()
    conn.close()
    data = json.loads(payload)
    data["response"]["value"] = "tampered"
    _tamper(
        path,
        "UPDATE inputs SET payload = ? WHERE tick = ? AND seq = ?",
        json.dumps(data),
        tick,
        seq,
    )
    with pytest.raises(ReplayDivergence) as caught:
        replay(path)
    err = caught.value
    assert err.tick == tick
    assert list(err.agents) == [data["agent_id"]]
    assert any(line.startswith("history:") for line in err.agents[data["agent_id"]])
    assert f"tick {tick}" in str(err)


def steady(turn):
    yield Sleep(1)
    yield Sleep(1)
    return "steady"


def test_a_changed_behaviour_makes_replay_diverge_naming_the_agent_and_field(tmp_path, monkeypatch):
    path = tmp_path / "run.db"
    world = World(seed=1, clock=ManualClock(), journal=Journal.create(path))
    agent = world.spawn(steady)
    world.run_until_idle()
    world.close()

    def changed(turn):
        yield Sleep(1)
        yield Sleep(2)  # was 1
        return "steady"

    monkeypatch.setattr(sys.modules[__name__], "steady", changed)
    with pytest.raises(ReplayDivergence) as caught:
        replay(path)
    assert caught.value.tick == 3
    assert caught.value.agents[agent] == ["deadline: expected 2.0, got 3.0"]


def test_a_journal_whose_behaviour_is_gone_names_it(tmp_path):
    path = tmp_path / "run.db"

    def local_only(turn):
        yield Sleep(1)

    world = World(seed=1, clock=ManualClock(), journal=Journal.create(path))
    world.spawn(local_only)
    world.run_until_idle()
    world.close()
    with pytest.raises(BehaviorNotFound, match="local_only"):
        replay(path)
    assert (
        replay(
            path,
            behaviors={
                "tests.journal.test_replay:test_a_journal_whose_behaviour_is_gone_names_it.<locals>.local_only": local_only
            },
        ).ticks
        == world.tick_count
    )


def test_a_journal_killed_mid_run_opens_and_its_prefix_replays(tmp_path):
    path = tmp_path / "killed.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.journal_behaviors", str(path)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:

        def enough_ticks() -> bool:
            try:
                with JournalReader(path) as reader:
                    return reader.tick_count() > 200
            except JournalError:
                return False

        wait_for(enough_ticks, timeout=60, what="200 recorded ticks")
    finally:
        proc.send_signal(signal.SIGKILL)
        _out, err = proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGKILL, err
    with JournalReader(path) as reader:
        recorded = reader.tick_count()
    assert recorded > 200
    report = replay(path)
    assert report.ticks == recorded
    assert report.agents == 22


def _valid_journal(path: Path) -> None:
    world = World(seed=1, clock=ManualClock(), journal=Journal.create(path))
    for _ in range(50):
        world.spawn(steady)
    world.run_until_idle()
    world.close()


def test_an_empty_file_is_a_clear_journal_error(tmp_path):
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    with pytest.raises(JournalError, match="empty"):
        replay(path)


def test_random_bytes_are_a_clear_journal_error(tmp_path):
    path = tmp_path / "noise.db"
    path.write_bytes(os.urandom(8192))
    with pytest.raises(JournalError, match="not a readable tickwork journal"):
        replay(path)


def test_a_truncated_journal_is_a_clear_journal_error(tmp_path):
    path = tmp_path / "run.db"
    _valid_journal(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(JournalError):
        replay(path)


def test_a_foreign_sqlite_file_is_a_clear_journal_error(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (key TEXT, value TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(JournalError, match="not a tickwork journal"):
        replay(path)


def test_a_journal_of_a_newer_format_is_refused_with_advice(tmp_path):
    path = tmp_path / "run.db"
    _valid_journal(path)
    _tamper(path, "UPDATE meta SET value = '99' WHERE key = 'format'")
    with pytest.raises(JournalError, match="format 99, newer"):
        replay(path)


def test_a_missing_journal_is_a_clear_error_and_creating_twice_is_refused(tmp_path):
    with pytest.raises(JournalError, match="no journal"):
        replay(tmp_path / "nope.db")
    path = tmp_path / "run.db"
    Journal.create(path).close()
    with pytest.raises(JournalError, match="already exists"):
        Journal.create(path)


def test_an_ask_the_hub_would_refuse_fails_its_agent_alike_live_and_in_the_replay(tmp_path):
    # The hub refuses the request at opening (live only: a replay opens no prompt), so the
    # dispatch refuses it first, at the same step in both.
    path = tmp_path / "run.db"
    world = World(seed=1, clock=ManualClock(), journal=Journal.create(path))
    try:
        bad = world.spawn(jb.asks_badly)
        steady_one = world.spawn(steady)
        world.run_until_idle()
        status = world.status(bad)
        assert status.kind is StatusKind.ERROR
        assert "`kind` must be an InteractionKind, got 'free_text'" in status.message
        assert world.status(steady_one).kind is StatusKind.COMPLETE  # the ticks went on
    finally:
        world.close()
    assert replay(path).agents == 2


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("prompt", "`prompt` must be a string, got 6"),
        ("stage", "`stage` must be a string, got None"),
        ("required", "`required` must be True or False, got 'no'"),
    ],
)
def test_an_ask_with_a_field_of_the_wrong_kind_fails_alike_live_and_in_the_replay(
    tmp_path, field, message
):
    # The hub refused these live (at opening, which a replay does not do) while the dispatch
    # let them through: the replay diverged at the Ask's tick.
    path = tmp_path / "run.db"
    world = World(seed=1, clock=ManualClock(), journal=Journal.create(path))
    try:
        bad = world.spawn(jb.asks_with_a_bad_field, field)
        world.run_until_idle()
        status = world.status(bad)
        assert status.kind is StatusKind.ERROR and status.message.endswith(message)
    finally:
        world.close()
    assert replay(path).agents == 1


def test_replay_until_a_tick_stops_there(tmp_path):
    path = tmp_path / "run.db"
    _valid_journal(path)
    assert replay(path, until_tick=2).ticks == 2
    assert replay(path, until_tick=0).ticks == 0
    for bad in (-1, "3", 2.0, True):
        with pytest.raises(
            ConfigError, match=f"`until_tick` must be an integer >= 0 or None, got {bad!r}"
        ):
            replay(path, until_tick=bad)


def test_a_journal_records_the_header_and_every_input(tmp_path):
    path = tmp_path / "run.db"
    world = World(
        seed=9, clock=ManualClock(), journal=Journal.create(path), models=jb.scripted_models()
    )

    def thinker(turn):
        reply = yield Think("x")
        answer = yield Ask(InteractionRequest.free_text("", "ok?"))
        return [reply.text, answer.value]

    world.spawn(thinker)
    world.run_until_idle(timeout=10)
    world.close()
    with JournalReader(path) as reader:
        header = reader.header
        kinds = [type(item).__name__ for tick in reader.ticks() for _, item in tick.inputs]
    assert header["seed"] == 9
    assert header["models"] == ["default"]
    assert header["versions"]["python"]
    assert kinds == ["SpawnAgent", "ToolOutcome", "PromptOpened", "PromptSettled"]


def test_a_model_reply_survives_the_journal(tmp_path):
    from runtime import ModelReply, ToolCall

    path = tmp_path / "run.db"
    reply = ModelReply("use", (ToolCall("t", "x", {"a": [1, 2]}),))
    world = World(
        clock=ManualClock(),
        journal=Journal.create(path),
        models={"default": ScriptedModel([reply])},
    )

    def thinker(turn):
        got = yield Think("x")
        return [got.text, got.tool_calls[0].args]

    agent = world.spawn(thinker)
    world.run_until_idle(timeout=10)
    world.close()
    assert world.result(agent) == ["use", {"a": [1, 2]}]
    assert replay(path, behaviors={world.behaviors.name_of(thinker): thinker}).ticks > 0


def order_reader(turn):
    # Reads the key order of its message and of a tool's output, as an f-string or a loop
    # over items does: a replay must hand back the same order the live run saw.
    results = yield CallTools(ToolCall("c1", "unordered", {}))
    output = results[0].output
    yield Sleep(len(f"{turn.message}{list(output)}") / 1000)
    return [list(turn.message), list(output)]


def test_a_replay_gives_a_behaviour_its_inputs_keys_in_the_order_it_saw_them(tmp_path):
    tools = ToolRegistry()

    @tools.tool()
    def unordered(args, ctx):
        return {"zeta": 1, "alpha": {"y": 2, "b": 3}, "mid": 4}

    path = tmp_path / "run.db"
    world = World(seed=1, clock=ManualClock(), tools=tools, journal=Journal.create(path))
    agent = world.spawn(order_reader, {"z": 1, "a": 2, "m": {"q": 1, "c": 2}})
    world.run_until_idle(timeout=10)
    world.close()
    assert world.result(agent) == [["z", "a", "m"], ["zeta", "alpha", "mid"]]
    report = replay(path)  # a journal that sorted keys diverged here: the sleep differed
    assert report.ticks == world.tick_count
