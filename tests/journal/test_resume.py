"""Resume: a killed run carries on from its journal; a fork goes its own way from any tick."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from runtime import (
    RESTART_ERROR,
    Ask,
    BehaviorNotFound,
    CallTools,
    ConfigError,
    InteractionRequest,
    InteractionResponse,
    Journal,
    JournalError,
    ManualClock,
    ModelReply,
    MonotonicClock,
    ScriptedModel,
    ShellTool,
    Sleep,
    StatusKind,
    Think,
    ToolCall,
    ToolRegistry,
    World,
    replay,
    resume,
)
from runtime.journal import JournalReader
from runtime.scenario import build_models, build_tools, load_scenario, parse_scenario
from tests.conftest import CountingBackend, wait_for
from tests.journal import crash_run

ROOT = Path(__file__).resolve().parents[2]
KILLS_IDEMPOTENT = 10
KILLS_NOT_IDEMPOTENT = 10  # 20 kill -9 points in all


def asker(turn: Any) -> Any:
    """Asks one question and returns the answer."""
    answer = yield Ask(InteractionRequest.free_text("", f"go with {turn.message}?"))
    return answer.value


def sleeper(turn: Any) -> Any:
    """Sleeps three times 20 ms of world time; returns the times it woke at."""
    woke = []
    for _ in range(3):
        yield Sleep(0.02)
        woke.append(turn.now)
    return woke


def caller(turn: Any) -> Any:
    """One batch of two calls: ``again`` (idempotent) and ``once`` (not)."""
    results = yield CallTools(ToolCall("c1", "again", {}), ToolCall("c2", "once", {}))
    return [[r.output, r.error] for r in results]


def thinker(turn: Any) -> Any:
    """Thinks twice; returns both replies."""
    first = yield Think("one")
    second = yield Think("two")
    return [first.text, second.text]


# -- kill -9 a scenario run at random points, resume it, and compare ----------------------


def _ticks(journal: Path) -> int:
    try:
        with JournalReader(journal) as reader:
            return reader.tick_count()
    except (JournalError, sqlite3.Error):
        return 0


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def _kill_at(scenario: Path, journal: Path, kind: str, at: int) -> int:
    """Run the scenario in a subprocess; kill -9 it once it reached ``at`` ticks recorded
    (``kind == "tick"``) or ``at`` tool calls started (``"call"``); its exit status."""
    started = scenario.parent / "effects.log.started"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.journal.crash_run", str(scenario), str(journal)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def reached() -> bool:
            if proc.poll() is not None:
                return True
            if kind == "tick":
                return _ticks(journal) >= at
            return len(_lines(started)) >= at

        wait_for(reached, timeout=60, what=f"{kind} {at} of the run")
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    return proc.returncode


def _resume_to_the_end(scenario_path: Path, journal: Path) -> World:
    scenario = load_scenario(scenario_path)  # names the scenario: its tools may be imported
    world = resume(
        journal,
        tools=build_tools(scenario),
        models=build_models(scenario),
        behaviors=scenario.behaviors,
    )
    crash_run.operate(world, scenario)
    crash_run.drive(world)
    return world


def _reference(tmp: Path, *, idempotent: bool) -> dict[str, Any]:
    world = crash_run.record(crash_run.write_scenario(tmp / "ref", idempotent=idempotent), None)
    try:
        return crash_run.outcome(world), world.tick_count
    finally:
        world.close()


def _kill_points(rng: random.Random, count: int, ticks: int, calls: int) -> list[tuple[str, int]]:
    kinds = ["tick", "call"] * count
    return [
        (kind, rng.randint(1, ticks - 1) if kind == "tick" else rng.randint(1, calls))
        for kind in kinds[:count]
    ]


def test_a_run_killed_at_random_points_and_resumed_ends_as_if_never_killed(tmp_path):
    expected, ticks = _reference(tmp_path, idempotent=True)
    rng = random.Random(18)
    killed = 0
    reran = 0
    for n, (kind, at) in enumerate(_kill_points(rng, KILLS_IDEMPOTENT, ticks, 15)):
        where = tmp_path / f"kill{n}"
        scenario = crash_run.write_scenario(where, idempotent=True)
        journal = where / "run.db"
        killed += _kill_at(scenario, journal, kind, at) == -signal.SIGKILL
        world = _resume_to_the_end(scenario, journal)
        try:
            got = crash_run.outcome(world)
            resumed_ticks = world.tick_count
        finally:
            world.close()
        assert got == expected, f"kill {n} at {kind} {at}"
        assert replay(journal).ticks == resumed_ticks  # the resumed journal replays whole
        started = Counter(_lines(where / "effects.log.started"))
        reran += sum(1 for count in started.values() if count > 1)
    assert killed >= KILLS_IDEMPOTENT // 2, f"only {killed} runs were killed before they ended"
    assert reran > 0  # some call was cut short and, its tool being idempotent, ran again


def test_no_call_of_a_tool_that_is_not_idempotent_runs_twice_across_a_kill(tmp_path):
    _, ticks = _reference(tmp_path, idempotent=False)
    rng = random.Random(81)
    interrupted = 0
    for n, (kind, at) in enumerate(_kill_points(rng, KILLS_NOT_IDEMPOTENT, ticks, 15)):
        where = tmp_path / f"kill{n}"
        scenario = crash_run.write_scenario(where, idempotent=False)
        journal = where / "run.db"
        _kill_at(scenario, journal, kind, at)
        world = _resume_to_the_end(scenario, journal)
        try:
            histories = {agent: world.history(agent) for agent in world.agents()}
            kinds = {world.status(agent).kind for agent in world.agents()}
        finally:
            world.close()
        assert kinds == {StatusKind.COMPLETE}
        started = Counter(_lines(where / "effects.log.started"))
        done = Counter(_lines(where / "effects.log"))
        assert max(started.values()) == 1, f"kill {n}: a call ran twice: {started}"
        tool_lines = [e.content for h in histories.values() for e in h if e.role == "tool"]
        assert len(tool_lines) == 15  # every call got exactly one result
        for line in tool_lines:
            if line.endswith(f"error: {RESTART_ERROR}"):
                interrupted += 1  # it may or may not have done its work before the kill
            else:
                key = line.rsplit("appended ", 1)[1]
                assert done[key] == 1, f"kill {n}: {key} reported done but ran {done[key]}"
        assert replay(journal).ticks > 0
    assert interrupted > 0  # the points hit calls in flight, and those got the restart error


def test_a_journal_whose_last_tick_was_cut_mid_write_resumes_from_the_last_whole_tick(tmp_path):
    expected, ticks = _reference(tmp_path, idempotent=True)
    where = tmp_path / "cut"
    scenario = crash_run.write_scenario(where, idempotent=True)
    journal = where / "run.db"
    assert _kill_at(scenario, journal, "tick", ticks // 2) == -signal.SIGKILL
    whole = _ticks(journal)
    cut = where / "cut.db"  # the files as a crash mid-commit leaves them: no index of the log
    shutil.copy(journal, cut)
    Path(f"{cut}-wal").write_bytes(_cut_the_last_commit(Path(f"{journal}-wal").read_bytes()))
    assert _ticks(cut) == whole - 1
    journal = cut
    world = _resume_to_the_end(scenario, journal)
    try:
        assert crash_run.outcome(world) == expected
        assert replay(journal).ticks == world.tick_count
    finally:
        world.close()


def _cut_the_last_commit(data: bytes) -> bytes:
    """A write-ahead log cut in the middle of its last commit frame (a tick cut mid-write)."""
    assert len(data) > 32, "nothing in the write-ahead log"
    size = 24 + int.from_bytes(data[8:12], "big")  # frame header + page
    salt = data[16:24]
    commits = [
        i
        for i in range((len(data) - 32) // size)
        if int.from_bytes(data[32 + i * size + 4 : 32 + i * size + 8], "big")
        and data[32 + i * size + 8 : 32 + i * size + 16] == salt
    ]
    return data[: 32 + commits[-1] * size + size // 2]


# -- prompts, clocks, tools and models at the restart --------------------------------------


def _record_a_prompt(path: Path) -> tuple[str, float, float]:
    world = World(
        seed=1, clock=ManualClock(100.0), interaction_timeout_secs=50, journal=Journal.create(path)
    )
    agent = world.spawn(asker, "plan a")
    world.tick()
    world.tick()  # applies the prompt's opening
    ((_, request),) = world.hub.pending()
    world.clock.advance(10.0)  # type: ignore[attr-defined]
    world.tick()
    world.close()  # the process ends without an answer
    assert world.status(agent).kind is StatusKind.WAITING
    return request.id, 100.0, 150.0


def test_a_prompt_open_at_the_crash_is_open_again_with_its_id_and_remaining_deadline(tmp_path):
    path = tmp_path / "run.db"
    request_id, opened_at, deadline = _record_a_prompt(path)
    world = resume(path)
    try:
        assert [r.id for _, r in world.hub.pending()] == [request_id]
        assert world.hub.next_deadline() == deadline  # 40 s left of its 50, not a fresh 50
        assert world.now == 110.0
        assert [(o.at, o.deadline) for o in world.hub.opened()] == [(opened_at, deadline)]
        assert world.hub.answer(InteractionResponse.text(request_id, "go"))
        world.run_until_idle()
        assert world.result("a1") == "go"
    finally:
        world.close()
    with JournalReader(path) as reader:
        kinds = [type(i).__name__ for t in reader.ticks() for _, i in t.inputs]
    assert kinds.count("PromptOpened") == 1  # no second opening event
    assert replay(path).ticks == world.tick_count


def test_an_open_prompt_expires_at_its_first_deadline_after_resume(tmp_path):
    path = tmp_path / "run.db"
    _record_a_prompt(path)
    world = resume(path)
    try:
        world.run_until_idle()  # virtual time skips to the deadline: the prompt expires
        assert world.now == 150.0
        assert world.result("a1") == ""
    finally:
        world.close()


def test_a_prompt_whose_opening_never_reached_the_journal_is_opened_afresh(tmp_path):
    path = tmp_path / "run.db"
    world = World(seed=1, clock=ManualClock(), journal=Journal.create(path))
    world.spawn(asker, "plan b")
    world.tick()  # the prompt is opened in the hub; its opening is an input of tick 2
    world.close()
    resumed = resume(path)
    try:
        ((agent, request),) = resumed.hub.pending()
        assert (agent, request.id) == ("a1", "a1/t1/p1")
        resumed.tick()
        resumed.hub.answer(InteractionResponse.text(request.id, "fine"))
        resumed.run_until_idle()
        assert resumed.result("a1") == "fine"
    finally:
        resumed.close()
    assert replay(path).ticks == resumed.tick_count


def _consulting_tools() -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool(idempotent=True)
    def consult(args: Any, ctx: Any) -> Any:
        return ctx.ask(InteractionRequest.free_text("", "which way?")).value

    return tools


def consulter(turn: Any) -> Any:
    """One call of a tool that asks a person; returns its output."""
    (result,) = yield CallTools(ToolCall("c1", "consult", {}))
    return result.output


def test_a_prompt_a_tool_had_open_at_the_crash_is_asked_again_once_under_its_id(tmp_path):
    path = tmp_path / "run.db"
    world = World(
        seed=1, clock=ManualClock(), tools=_consulting_tools(), journal=Journal.create(path)
    )
    world.spawn(consulter)
    world.tick()  # the batch is dispatched; its tool opens the prompt on the lane
    wait_for(lambda: bool(world.hub.pending()), what="the tool's prompt")
    world.tick()  # the opening is journaled; the process "dies" with the prompt open
    ((_, asked),) = world.hub.pending()
    assert asked.id == "a1/t1/b1/c1"
    world.close()
    resumed = resume(path, tools=_consulting_tools())
    try:
        # The tool runs again (it is idempotent) and asks again, under the same id: the
        # cancellation of the old prompt reaches the world before the new opening, so the
        # agent waits on the prompt that is open, and on it alone.
        wait_for(lambda: bool(resumed.hub.pending()), what="the prompt asked again")
        ((_, again),) = resumed.hub.pending()
        assert again.id == asked.id
        resumed.tick()
        assert resumed._state.records["a1"].prompt_ids() == [asked.id]
        assert resumed.hub.answer(InteractionResponse.text(asked.id, "left"))
        resumed.run_until_idle(timeout=10)
        assert resumed.result("a1") == "left"
    finally:
        resumed.close()
    assert replay(path).ticks == resumed.tick_count


def test_resuming_a_real_clock_journal_keeps_world_time_monotonic(tmp_path):
    path = tmp_path / "run.db"
    world = World(seed=2, clock=MonotonicClock(1000.0), journal=Journal.create(path))
    world.spawn(sleeper)
    for _ in range(3):
        world.tick()
    last = world.now
    world.close()
    resumed = resume(path)
    try:
        assert resumed.now == last
        resumed.run_until_idle(timeout=10)  # sleeps keep their deadlines in world time
        woke = resumed.result("a1")
        assert woke is not None and len(woke) == 3 and min(woke) >= last
        assert resumed.clock.now() >= last
    finally:
        resumed.close()
    with JournalReader(path) as reader:
        times = [t.now for t in reader.ticks()]
    assert times == sorted(times) and times[0] >= 1000.0
    assert replay(path).ticks == len(times)


def test_cut_calls_of_idempotent_tools_run_again_and_the_others_get_the_restart_error(tmp_path):
    path = tmp_path / "run.db"
    release = threading.Event()
    ran: Counter[str] = Counter()

    def registry(block: bool) -> ToolRegistry:
        tools = ToolRegistry()

        @tools.tool(idempotent=True)
        def again(args: Any, ctx: Any) -> Any:
            ran["again"] += 1
            if block:
                release.wait(10)
            return "again ran"

        @tools.tool()
        def once(args: Any, ctx: Any) -> Any:
            ran["once"] += 1
            return "once ran"

        return tools

    world = World(seed=3, clock=ManualClock(), tools=registry(True), journal=Journal.create(path))
    world.spawn(caller)
    world.tick()  # the batch is dispatched and blocks on the lane: the process "dies" here
    wait_for(lambda: ran["again"] == 1, what="the batch to start")
    release.set()
    world._journal.close()  # type: ignore[union-attr]  # nothing more reaches the journal
    world._journal = None
    world.close()
    ran.clear()
    resumed = resume(path, tools=registry(False))
    try:
        resumed.run_until_idle(timeout=10)
        assert resumed.result("a1") == [["again ran", None], [None, RESTART_ERROR]]
        assert ran == {"again": 1}  # `once` may have run before the crash: never again
    finally:
        resumed.close()
    assert replay(path).ticks == resumed.tick_count


def test_a_model_call_in_flight_is_issued_again_and_reads_on_where_the_run_was(tmp_path):
    path = tmp_path / "run.db"
    release = threading.Event()

    def stuck(request: Any) -> ModelReply:
        release.wait(10)
        return ModelReply("never recorded")

    models = {"default": ScriptedModel(["first", stuck])}
    # As soon as possible: in lockstep the third tick would wait for the stuck call.
    world = World(
        seed=4, clock=ManualClock(), models=models, journal=Journal.create(path), lockstep=False
    )
    world.spawn(thinker)
    world.tick()
    wait_for(lambda: world.lane is not None and world.inference_lane.stats().in_flight == 0)
    world.tick()
    world.tick()  # the first reply landed; the second call is in flight
    world._journal.close()  # type: ignore[union-attr]
    world._journal = None
    release.set()
    world.close()
    resumed = resume(path, models={"default": ScriptedModel(["first", "second"])})
    try:
        resumed.run_until_idle(timeout=10)
        assert resumed.result("a1") == ["first", "second"]
    finally:
        resumed.close()


def test_idempotence_is_declared_by_decorator_scenario_and_built_in_tools():
    tools = ToolRegistry()
    tools.tool("look_up", idempotent=True)(lambda args, ctx: 1)
    tools.add(ShellTool("ls", ["ls"], idempotent=True))
    tools.add(ShellTool("rm", ["rm", "{path}"]))
    assert [tools.is_idempotent(n) for n in ("look_up", "ls", "rm", "nope")] == [
        True,
        True,
        False,
        False,
    ]
    text = (
        '[tools.look]\nshell = ["ls"]\nidempotent = true\n[tools.cut]\nshell = ["rm"]\n'
        '[[agents]]\nsteps = [{ finish = "x" }]\n'
    )
    built = build_tools(parse_scenario(text))
    assert (built.is_idempotent("look"), built.is_idempotent("cut")) == (True, False)


# -- forks -------------------------------------------------------------------------------


def test_a_fork_at_a_tick_with_another_answer_goes_its_own_way(tmp_path):
    path = tmp_path / "run.db"
    world = World(seed=6, clock=ManualClock(), journal=Journal.create(path))
    world.spawn(asker, "the plan")
    world.tick()
    world.tick()
    open_after = world.tick_count
    ((_, request),) = world.hub.pending()
    world.hub.answer(InteractionResponse.text(request.id, "yes"))
    world.run_until_idle()
    assert world.result("a1") == "yes"
    world.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()

    other = tmp_path / "fork.db"
    fork = resume(path, at_tick=open_after, journal=Journal.create(other))
    try:
        assert fork.tick_count == open_after
        assert [r.id for _, r in fork.hub.pending()] == [request.id]
        fork.hub.answer(InteractionResponse.text(request.id, "no"))
        fork.run_until_idle()
        assert fork.result("a1") == "no"
    finally:
        fork.close()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before  # the original: untouched
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0
    assert replay(path).ticks == world.tick_count
    assert replay(other).ticks == fork.tick_count  # the fork replays on its own
    with JournalReader(path) as a, JournalReader(other) as b:
        ours = [(t.tick, t.digest) for t in a.ticks()]
        theirs = [(t.tick, t.digest) for t in b.ticks()]
    assert theirs[:open_after] == ours[:open_after] and theirs[open_after:] != ours[open_after:]


# -- journals that cannot be resumed ------------------------------------------------------


def test_a_fork_needs_a_new_journal_and_a_tick_the_journal_has(tmp_path):
    path = tmp_path / "run.db"
    _record_a_prompt(path)
    with pytest.raises(ConfigError, match="`at_tick` forks the run into a new journal"):
        resume(path, at_tick=1)
    with pytest.raises(JournalError, match=r"`at_tick` must be a tick of .* \(0 to 3\), got 9"):
        resume(path, at_tick=9, journal=Journal.create(tmp_path / "f.db"))


def test_a_journal_whose_behaviour_is_gone_is_refused_by_name(tmp_path):
    path = tmp_path / "run.db"
    world = World(seed=1, clock=ManualClock(), journal=Journal.create(path))
    world.spawn(lambda turn: (yield Sleep(1)))
    world.tick()
    world.close()
    with pytest.raises(BehaviorNotFound, match="the journal's"):
        resume(path)


def test_a_journal_from_a_newer_tickwork_is_refused(tmp_path):
    path = tmp_path / "run.db"
    _record_a_prompt(path)
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'format'")
    with pytest.raises(JournalError, match="journal format 99, newer than this tickwork"):
        resume(path)


def test_changed_settings_are_refused_naming_what_changed(tmp_path):
    path = tmp_path / "run.db"
    tools = ToolRegistry()
    tools.add(ShellTool("echo", ["echo", "hi"], requires_approval=True))
    world = World(seed=1, clock=ManualClock(), tools=tools, journal=Journal.create(path))
    world.spawn(asker, "x")
    world.tick()
    world.close()
    with pytest.raises(JournalError, match="the run had tool 'echo', which was not given"):
        resume(path)
    lax = ToolRegistry()
    lax.add(ShellTool("echo", ["echo", "hi"]))
    with pytest.raises(JournalError, match="tool 'echo' needed approval in the run"):
        resume(path, tools=lax)
    with pytest.raises(JournalError, match="the run had a virtual clock, `clock` is not"):
        resume(path, tools=tools, clock=MonotonicClock())


def test_setup_registers_host_code_before_the_prefix_is_replayed(tmp_path):
    path = tmp_path / "run.db"
    _record_a_prompt(path)
    seen: list[int] = []
    world = resume(path, setup=lambda w: seen.append(w.tick_count))
    try:
        assert seen == [0] and world.tick_count == 3
    finally:
        world.close()
    assert replay(path, setup=lambda w: seen.append(w.tick_count)).ticks == 3
    assert seen == [0, 0]


def test_a_journal_is_never_forked_into_itself(tmp_path):
    path = tmp_path / "run.db"
    _record_a_prompt(path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(JournalError, match=r"cannot fork .* into itself"):
        resume(path, at_tick=1, journal=Journal.append(path))
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_a_journal_that_a_running_world_still_writes_is_not_resumed(tmp_path):
    path = tmp_path / "run.db"
    world = World(seed=1, clock=ManualClock(), journal=Journal.create(path))
    try:
        world.spawn(asker, "x")
        world.tick()
        with pytest.raises(JournalError, match="is being written by a running tickwork"):
            resume(path)
    finally:
        world.close()
    resume(path).close()  # the writer is gone: now it resumes


def test_a_backend_handed_to_resume_is_closed_with_its_world_or_when_the_resume_fails(tmp_path):
    path = tmp_path / "run.db"
    world = World(seed=1, clock=ManualClock(), journal=Journal.create(path))
    world.spawn(sleeper)
    world.tick()
    world.close()
    missing = CountingBackend()
    with pytest.raises(JournalError):
        resume(tmp_path / "nowhere.db", tool_executor=missing)
    assert missing.closed == 1
    out_of_range = CountingBackend()
    with pytest.raises(JournalError, match="at_tick"):
        resume(
            path, at_tick=9, journal=Journal.create(tmp_path / "f.db"), tool_executor=out_of_range
        )
    assert out_of_range.closed == 1
    taken = CountingBackend()
    resumed = resume(path, tool_executor=taken)
    assert resumed.backend_info().kind == "executor" and taken.closed == 0
    resumed.close()
    assert taken.closed == 1


def test_the_journal_a_resume_would_record_into_is_closed_when_the_resume_fails(
    tmp_path, monkeypatch
):
    # A fork handed over, or the journal opened to append, kept its writer's lock when the
    # resume failed (a bare descriptor no collector closes): the next `resume(path)` or
    # `Journal.create(fork, overwrite=True)` said a running tickwork was writing it.
    path = tmp_path / "run.db"
    world = World(seed=1, clock=ManualClock(), journal=Journal.create(path))
    world.spawn(sleeper)
    world.tick()
    world.close()
    fork = tmp_path / "fork.db"
    module = importlib.import_module("runtime.journal.resume")

    def fail(*args: Any) -> None:
        raise JournalError("disk full")

    # Each journal is kept referenced (a variable, the exception's frames), so that what
    # closes it must be the resume, not its being freed.
    gc.disable()
    try:
        early = Journal.create(fork)
        with pytest.raises(JournalError, match="at_tick"):  # before the world is rebuilt
            resume(path, at_tick=9, journal=early)
        rebuilt = Journal.create(fork, overwrite=True)
        with pytest.raises(JournalError, match="disk full"):  # the world cannot be rebuilt
            resume(path, at_tick=1, journal=rebuilt, setup=fail)
        late = Journal.create(fork, overwrite=True)
        with monkeypatch.context() as patched:  # the fork's prefix cannot be written
            patched.setattr(Journal, "write_prefix", fail)
            with pytest.raises(JournalError, match="disk full"):
                resume(path, at_tick=1, journal=late)
        Journal.create(fork, overwrite=True).close()
        with monkeypatch.context() as patched:  # after the journal was opened to append
            patched.setattr(module, "_charge_budgets", fail)
            with pytest.raises(JournalError, match="disk full") as caught:
                resume(path)
        resume(path).close()
        del early, rebuilt, late, caught
    finally:
        gc.enable()


def _three_sleeps(turn):
    for _ in range(3):
        yield Sleep(1)
    return "rested"


def _rest_then_work(turn):
    yield Sleep(0)
    (result,) = yield CallTools(ToolCall("c1", "mark", {}))
    return result.output


def test_the_lane_jobs_of_a_tick_the_journal_cannot_record_never_start(tmp_path):
    # Write-ahead: a journaled tick's jobs start once it is committed. One that could not
    # be committed never happened for a resume, so its jobs must not run either (they did:
    # the hold was released as for any tick that failed, and the job started).
    runs: list[str] = []
    tools = ToolRegistry()

    @tools.tool(idempotent=False)
    def mark(args: dict[str, Any], ctx: Any) -> str:
        runs.append(ctx.call_id)
        return "marked"

    path = tmp_path / "run.db"
    journal = Journal.create(path)
    world = World(seed=5, clock=ManualClock(), journal=journal, tools=tools)
    try:
        world.spawn(_rest_then_work)
        world.tick()  # spawned, stepped: resting
        journal._conn.execute("PRAGMA query_only = ON")
        with pytest.raises(JournalError, match="readonly"):
            world.tick()  # steps to the CallTools: its job is dispatched, held, then dropped
        assert world.lane.stats().enqueued == 0
    finally:
        world.close()
    assert runs == []


def test_a_tick_the_journal_cannot_record_stops_the_world_and_resume_carries_on(tmp_path):
    # A write that fails (disk full, I/O error; here SQLite's query_only) used to raise for
    # that tick only: the next ticks were recorded after a gap no replay gets past.
    path = tmp_path / "run.db"
    journal = Journal.create(path)
    world = World(seed=4, clock=ManualClock(), journal=journal)
    try:
        agent = world.spawn(_three_sleeps)
        world.tick()
        journal._conn.execute("PRAGMA query_only = ON")  # every later write fails
        with pytest.raises(JournalError, match="readonly"):
            world.tick()
        with pytest.raises(
            JournalError, match="cannot tick on: its journal failed to record tick 2"
        ):
            world.tick()
        with pytest.raises(JournalError, match="tick 2"):
            world.run_until_idle()
    finally:
        world.close()
    with JournalReader(path) as reader:
        assert reader.tick_count() == 1  # whole up to the tick before, no gap
    resumed = resume(path, behaviors={"tests.journal.test_resume:_three_sleeps": _three_sleeps})
    try:
        resumed.run_until_idle()
        assert resumed.status(agent).kind is StatusKind.COMPLETE
        assert resumed.result(agent) == "rested"
    finally:
        resumed.close()
    assert replay(path).ticks > 1
