"""Values that cannot round-trip never reach the world; odd waits wait and nothing overflows."""

from __future__ import annotations

import enum
import math
import threading

import pytest

from runtime import (
    Ask,
    CallTools,
    CancelToken,
    ConfigError,
    InteractionHub,
    InteractionRequest,
    InteractionResponse,
    Journal,
    ManualClock,
    ModelError,
    ModelReply,
    MonotonicClock,
    Phase,
    Sleep,
    Spawn,
    StatusKind,
    Think,
    ToolCall,
    ToolRegistry,
    Usage,
    Wake,
    World,
    replay,
)
from runtime.lane.values import INT_HIGH, INT_LOW, MAX_INT_DIGITS, NotJSON, json_value
from systems.lifecycle.history import as_text
from tests.conftest import wait_for

HUGE = 10**5000


def _odd_tools() -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool()
    def pair(args, ctx):
        return (1, (2, 3))

    @tools.tool()
    def int_keys(args, ctx):
        return {1: "a"}

    @tools.tool()
    def huge(args, ctx):
        return HUGE

    return tools


@pytest.mark.parametrize("sign", [1, -1], ids=["positive", "negative"])
def test_ints_cross_up_to_str_s_limit_whichever_their_sign(sign):
    # The largest integer str() writes has MAX_INT_DIGITS digits: it crosses the lane and
    # becomes history text; one more digit is refused, whichever its sign.
    widest = sign * (10**MAX_INT_DIGITS - 1)
    assert INT_LOW < widest < INT_HIGH
    assert json_value(widest) == widest
    assert as_text(widest) == str(widest)
    too_wide = sign * 10**MAX_INT_DIGITS
    with pytest.raises(NotJSON, match="more than 4300 digits"):
        json_value(too_wide)
    assert as_text(too_wide) == f"<int of {too_wide.bit_length()} bits>"


def seer(turn):
    results = yield CallTools(
        ToolCall("c1", "pair"), ToolCall("c2", "int_keys"), ToolCall("c3", "huge")
    )
    first = results[0].output
    return [type(first).__name__, first, results[1].error, results[2].error]


def test_a_tool_output_is_settled_at_the_boundary_so_live_and_replay_see_the_same(tmp_path):
    path = tmp_path / "run.db"
    world = World(seed=1, clock=ManualClock(), tools=_odd_tools(), journal=Journal.create(path))
    try:
        agent = world.spawn(seer, "x")
        world.run_until_idle(max_ticks=20, timeout=10)
        kind, first, keys_error, huge_error = world.result(agent)
    finally:
        world.close()
    assert (kind, first) == ("list", [1, [2, 3]])  # what a replay reads back from JSON
    assert "key 1 is not a string" in keys_error
    assert "more than 4300 digits" in huge_error
    assert replay(path, behaviors={"tests.world.test_values:seer": seer}).ticks > 0


@pytest.mark.parametrize(
    "reply",
    [
        math.nan,
        {1, 2},
        object(),
        HUGE,
        ModelReply("ok", (ToolCall("t1", "x", {"n": math.inf}),)),
        # A usage of a tuple raised AttributeError on the lane (a traceback logged); a
        # negative one was metered, giving the agent's budget back; a finish reason of 5
        # came back from the journal as "5".
        ModelReply("ok", usage=(1, 2)),  # type: ignore[arg-type]
        ModelReply("ok", usage=Usage(-5, 3)),
        ModelReply("ok", finish_reason=5),  # type: ignore[arg-type]
    ],
    ids=[
        "nan",
        "set",
        "object",
        "huge-int",
        "nan-in-tool-args",
        "usage-tuple",
        "usage-negative",
        "finish-int",
    ],
)
def test_a_model_reply_that_is_not_json_is_the_agents_error_not_the_ticks(tmp_path, reply):
    class OddModel:
        def complete(self, request, cancel):
            return reply

    caught = []

    def thinker(turn):
        try:
            yield Think("go")
        except ModelError as exc:
            caught.append(str(exc))
        return "went on"

    world = World(
        seed=1,
        clock=ManualClock(),
        models={"default": OddModel()},
        journal=Journal.create(tmp_path / "run.db"),
        behaviors={"thinker": thinker},
    )
    try:
        agent = world.spawn("thinker", "x")
        world.run_until_idle(max_ticks=20, timeout=10)  # raises nothing out of the tick
        assert world.result(agent) == "went on"
    finally:
        world.close()
    [message] = caught
    assert "model 'default'" in message and "not a JSON value" in message
    assert world.token_usage() == {}  # nothing a refused reply says it spent was counted


def test_a_behaviour_result_json_cannot_hold_never_fails_a_journaled_tick(tmp_path):
    def odd(turn):
        yield Sleep(0)
        return {"huge": HUGE, "set": {3, 1}}

    path = tmp_path / "run.db"
    world = World(seed=1, clock=ManualClock(), journal=Journal.create(path), behaviors={"odd": odd})
    try:
        agent = world.spawn("odd", "x")
        world.run_until_idle(max_ticks=10)
        assert world.status(agent).kind is StatusKind.COMPLETE
    finally:
        world.close()
    assert replay(path, behaviors={"odd": odd}).ticks > 0


def test_a_message_is_settled_like_an_output_when_a_journal_records(tmp_path):
    seen = []

    def echo(turn):
        seen.append(turn.message)
        yield Sleep(0)

    world = World(
        clock=ManualClock(), journal=Journal.create(tmp_path / "j.db"), behaviors={"echo": echo}
    )
    try:
        world.spawn("echo", (1, 2))
        world.run_until_idle(max_ticks=5)
        assert seen == [[1, 2]]
        with pytest.raises(ConfigError, match=r"`message` must be a JSON value.*set"):
            world.spawn("echo", {1, 2})
        with pytest.raises(ConfigError, match="more than 4300 digits"):
            world.spawn("echo", [HUGE])
    finally:
        world.close()


def test_json_value_gives_back_the_exact_types_a_journal_reads_back():
    # A subclass's value crosses as its base type (JSON keeps no subclass), at the top and
    # inside containers; the exact types pass as they are.
    class Name(str):
        pass

    class Count(enum.IntEnum):
        ONE = 1

    class Ratio(float):
        pass

    value = json_value({"n": Name("x"), "c": [Count.ONE, Ratio(0.5), 2, 2.5], "t": (True, None)})
    assert value == {"n": "x", "c": [1, 0.5, 2, 2.5], "t": [True, None]}
    assert [type(v) for v in (value["n"], *value["c"])] == [str, int, float, int, float]
    assert type(json_value(Count.ONE)) is int
    assert type(json_value(Name("y"))) is str
    assert type(json_value(Ratio(1.5))) is float


def test_json_value_turns_tuples_into_lists_and_names_where_a_value_is_bad():
    assert json_value({"a": (1, [2.5, None, True])}) == {"a": [1, [2.5, None, True]]}
    with pytest.raises(NotJSON, match=r"value\['a'\]\[1\]: nan is not a JSON number"):
        json_value({"a": [1, math.nan]})


def sleeps(turn):
    yield Sleep(turn.message)
    return "woke"


def test_sleep_nan_is_the_agents_error_and_other_sleepers_go_on(make_world):
    world = make_world()
    bad = world.spawn(sleeps, math.nan)
    good = world.spawn(sleeps, 5)
    world.run_until_idle(max_ticks=20)
    assert world.status(bad).kind is StatusKind.ERROR
    assert "NaN" in world.status(bad).message
    assert world.result(good) == "woke"
    assert world.now == 5


@pytest.mark.parametrize("clock", [ManualClock, MonotonicClock])
def test_sleep_inf_sleeps_until_interrupted_and_run_until_idle_returns(make_world, clock):
    world = make_world(clock=clock())
    agent = world.spawn(sleeps, math.inf, interactive=True)
    other = world.spawn(sleeps, 1e6 if clock is ManualClock else 0)
    world.run_until_idle(max_ticks=20, timeout=10)
    assert world.status(agent).kind is StatusKind.ACTIVE
    assert world.result(other) == "woke"
    world.interrupt(agent)
    world.run_until_idle(max_ticks=20, timeout=10)
    assert world.status(agent).kind is StatusKind.IDLE


def test_a_huge_real_sleep_waits_without_overflowing_until_interrupted(make_world):
    world = make_world(clock=MonotonicClock())
    agent = world.spawn(sleeps, 1e10, interactive=True)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            world.run_until_idle(max_ticks=1000)
        except BaseException as exc:
            errors.append(exc)

    world.tick()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_for(lambda: world._state.records[agent].turn.phase is Phase.SLEEPING, what="the sleep")
    thread.join(0.3)
    assert thread.is_alive() and errors == []  # it waits ...
    world.interrupt(agent)  # ... until interrupted
    thread.join(10)
    assert not thread.is_alive() and errors == []
    assert world.status(agent).kind is StatusKind.IDLE


def test_a_hub_with_a_huge_timeout_waits_without_overflowing():
    hub = InteractionHub(clock=MonotonicClock(), timeout_secs=1e300)
    answers: list[object] = []
    thread = threading.Thread(
        target=lambda: answers.append(hub.ask("a", InteractionRequest.free_text("q", "?"))),
        daemon=True,
    )
    thread.start()
    wait_for(lambda: hub.pending() != [], what="the prompt")
    hub.answer(InteractionResponse.text("q", "yes"))
    thread.join(10)
    assert [a.value for a in answers] == ["yes"]


def test_a_huge_wait_on_a_token_or_a_wake_does_not_overflow():
    token = CancelToken()
    threading.Timer(0.05, token.cancel).start()
    assert token.wait(1e300) is True
    wake = Wake()
    wake.notify()
    assert wake.wait(1e300) is True


def test_a_host_cannot_choose_an_id_kept_for_children(make_world):
    world = make_world()
    with pytest.raises(ConfigError, match=r"'\.<number>'.*'p\.1'"):
        world.spawn(sleeps, 0, agent_id="p.1")

    def parent(turn):
        return (yield Spawn(sleeps, 0))

    world.behaviors.update({"parent": parent})
    world.spawn("parent", agent_id="p")
    world.spawn(sleeps, 0, agent_id="p.x")  # not a child's form: fine
    world.run_until_idle(max_ticks=10)
    assert world.result("p") == "p.1"
    assert world.status("p.1").kind is StatusKind.COMPLETE


def test_a_prompt_payload_json_cannot_hold_never_fails_a_journaled_tick(tmp_path):
    def asker(turn):
        request = InteractionRequest.free_text("", "go?")
        request = type(request)(request.id, request.kind, request.prompt, payload={3, 1})
        answer = yield Ask(request)
        return answer.value

    path = tmp_path / "run.db"
    world = World(
        clock=ManualClock(),
        journal=Journal.create(path),
        behaviors={"asker": asker},
        interaction_timeout_secs=0,
    )
    try:
        agent = world.spawn("asker", "x")
        world.run_until_idle(max_ticks=10)
        [(_owner, request)] = world.hub.pending()
        world.hub.answer(InteractionResponse.text(request.id, "yes"))
        world.run_until_idle(max_ticks=10)
        assert world.result(agent) == "yes"
    finally:
        world.close()
    assert replay(path, behaviors={"asker": asker}).ticks > 0
