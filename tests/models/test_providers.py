"""OpenAIChat and AnthropicMessages against stub servers: streams, tools, usage, errors."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest

from runtime import (
    AnthropicMessages,
    Budget,
    CancelToken,
    ConfigError,
    Journal,
    ModelReply,
    MonotonicClock,
    OpenAIChat,
    ProviderError,
    RateLimit,
    StatusKind,
    Think,
    ToolCall,
    Usage,
    World,
    replay,
)
from runtime.models import Backoff, ModelRequest

from ..conftest import wait_for
from .stub_server import (
    Reply,
    anthropic_event,
    anthropic_text,
    anthropic_tool_use,
    error,
    openai_text,
    openai_tool_call,
)

KEY = "sk-test-0123456789abcdef"
MARKER = "[interrupted by user]"


def thinker(turn):
    reply = yield Think(f"answer {turn.message}")
    return reply.text


def two_thinks(turn):
    first = yield Think("one")
    second = yield Think("two")
    return [first.text, second.text]


def run(world: World, *agents: str, timeout: float = 10.0) -> None:
    def settled() -> bool:
        return all(world.status(a).kind.is_terminal for a in agents)

    world.start()
    wait_for(settled, timeout, "agents to finish")
    world.stop()


@pytest.fixture
def live_world():
    worlds: list[World] = []

    def make(**kwargs) -> World:
        world = World(clock=MonotonicClock(), **kwargs)
        worlds.append(world)
        return world

    yield make
    for world in worlds:
        world.close()


# -- streaming ------------------------------------------------------------------------


def test_deltas_reach_on_stream_while_the_reply_is_still_arriving(openai_server, live_world):
    first_seen = threading.Event()
    openai_server.script(openai_text("Hel", first_seen, "lo"))  # holds until the hook saw "Hel"
    model = OpenAIChat("m", base_url=openai_server.url)
    world = live_world(models={"default": model})
    seen: list[tuple[str, str, str]] = []

    def hook(agent_id: str, delta: str) -> None:
        seen.append((agent_id, delta, threading.current_thread().name))
        if delta == "Hel":
            first_seen.set()

    world.on_stream(hook)
    agent = world.spawn(thinker, "x")
    run(world, agent)
    assert world.result(agent) == "Hello"
    assert [(a, d) for a, d, _ in seen] == [(agent, "Hel"), (agent, "lo")]
    assert all(name.startswith("tickwork-inference") for _, _, name in seen)
    assert world.streams.latest_lines()[agent] == "Hello"


def test_a_reply_carries_usage_and_finish_reason(openai_server):
    openai_server.script(openai_text("hi", usage=(12, 2)))
    model = OpenAIChat("m", base_url=openai_server.url)
    reply = model.complete(ModelRequest("a1", "hello"), CancelToken())
    assert reply == ModelReply("hi", (), Usage(12, 2), "stop")
    body = openai_server.requests[0]["body"]
    assert body["stream"] is True and body["messages"][-1] == {"role": "user", "content": "hello"}


def test_openai_tool_calls_become_tool_calls_with_ids_and_parsed_args(openai_server):
    openai_server.script(openai_tool_call("call_abc", "search", '{"q": "ducks", "n": 3}'))
    tools = [{"name": "search", "description": "find", "parameters": {"type": "object"}}]
    model = OpenAIChat("m", base_url=openai_server.url, tools=tools)
    reply = model.complete(ModelRequest("a1", "look"), CancelToken())
    assert reply.tool_calls == (ToolCall("call_abc", "search", {"q": "ducks", "n": 3}),)
    assert reply.finish_reason == "tool_calls" and reply.usage == Usage(11, 5)
    sent = openai_server.requests[0]["body"]["tools"]
    assert sent == [{"type": "function", "function": {**tools[0]}}]


def test_anthropic_streams_text_tool_use_and_usage(anthropic_server):
    anthropic_server.script(
        anthropic_text("Bon", "jour"), anthropic_tool_use("toolu_1", "search", '{"q": "x"}')
    )
    model = AnthropicMessages("claude-x", base_url=anthropic_server.url, api_key=KEY)
    first = model.complete(ModelRequest("a1", "hi"), CancelToken())
    assert first == ModelReply("Bonjour", (), Usage(9, 4), "end_turn")
    second = model.complete(ModelRequest("a1", "hi"), CancelToken())
    assert second.text == "Let me look."
    assert second.tool_calls == (ToolCall("toolu_1", "search", {"q": "x"}),)
    assert second.usage == Usage(20, 12) and second.finish_reason == "tool_use"
    request = anthropic_server.requests[0]
    assert request["path"] == "/v1/messages"
    assert request["headers"]["x-api-key"] == KEY
    assert request["body"]["max_tokens"] == 1024


def test_anthropic_joins_roles_so_messages_alternate(anthropic_server):
    from components import Entry

    anthropic_server.script(anthropic_text("ok"))
    model = AnthropicMessages("c", base_url=anthropic_server.url)
    history = (Entry("user", "a"), Entry("assistant", "b"), Entry("system", MARKER))
    model.complete(ModelRequest("a1", "c", history=history), CancelToken())
    messages = anthropic_server.requests[0]["body"]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[2]["content"] == f"[system] {MARKER}\n\nc"


# -- interrupts -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_an_interrupt_closes_a_slow_stream_at_once_and_keeps_the_partial_text(
    kind, openai_server, anthropic_server, live_world
):
    server = openai_server if kind == "openai" else anthropic_server
    stall = threading.Event()  # never set: after five deltas the stream stalls
    pieces = [f"w{i} " for i in range(5)] + [stall] + [f"w{i} " for i in range(5, 200)]
    frames = openai_text(*pieces) if kind == "openai" else anthropic_text(*pieces)
    server.script(Reply(frames=frames, interval=0.01))
    cls = OpenAIChat if kind == "openai" else AnthropicMessages
    world = live_world(models={"default": cls("m", base_url=server.url)})
    seen: list[str] = []
    world.on_stream(lambda _agent, delta: seen.append(delta))
    agent = world.spawn(thinker, "x")
    world.start()
    wait_for(lambda: len(seen) >= 5, 10, "five deltas")
    started = time.monotonic()
    world.interrupt(agent)
    wait_for(lambda: world.history(agent)[-1].content == MARKER, 5, "the marker")
    took = time.monotonic() - started
    assert took < 0.2, f"the Think took {took:.3f}s to end after the interrupt"
    # the stream is stalled: only closing the response from our side ends the connection
    assert server.closed.wait(1), "the server never saw the connection closed"
    history = world.history(agent)
    assert history[-2].role == "assistant"
    partial = history[-2].content
    assert partial == "w0 w1 w2 w3 w4 " == "".join(seen)
    assert world.status(agent).kind is StatusKind.IDLE
    assert world.result(agent) is None


class _EndsWhenStopped:
    """A model that streams a delta, then ends its call (``how``) once its stream is stopped:
    returning its reply, raising a provider's error, or raising anything else."""

    def __init__(self, how: str) -> None:
        self.how = how
        self.ended = threading.Event()

    def complete(self, request, cancel):
        stopped = threading.Event()
        request.stream.on_stop(stopped.set)
        request.stream.delta("part ")
        try:
            assert stopped.wait(10), "the stream was never stopped"
            if self.how == "returns":
                return ModelReply("the whole reply")
            if self.how == "raises ProviderError":
                raise ProviderError("the connection closed")
            raise OSError("the connection closed")
        finally:
            self.ended.set()


@pytest.mark.parametrize("how", ["returns", "raises ProviderError", "raises OSError"])
def test_a_call_whose_stream_an_interrupt_stopped_is_dropped_before_the_interrupt_lands(
    how, live_world, caplog
):
    # world.interrupt stops the stream first and sends its command after; the call may end
    # in between. Here it ends, and its lane job is over, before the command is sent: the
    # job must be dropped, not fail, or the agent ends in error before the interrupt lands.
    model = _EndsWhenStopped(how)
    world = live_world(models={"default": model})
    agent = world.spawn(thinker, "x")
    world.start()
    wait_for(lambda: world.streams.latest_lines().get(agent) == "part", 10, "the delta")
    stopped = world.streams.stop(agent)  # the first half of world.interrupt
    assert stopped is not None and stopped[1] == "part "
    assert model.ended.wait(10)
    wait_for(lambda: world.inference_lane.stats().busy == 0, 10, "the job to end")
    stats = world.inference_lane.stats()
    assert (stats.dropped, stats.failed) == (1, 0)
    assert "raised Cancelled" not in caplog.text
    world.interrupt(agent)  # its second half: the command
    wait_for(lambda: world.history(agent)[-1].content == MARKER, 10, "the marker")
    assert world.status(agent).kind is StatusKind.IDLE


def test_a_late_chunk_after_the_stop_is_never_applied():
    from runtime.models import StreamHub

    hub = StreamHub()
    seen: list[str] = []
    hub.add_hook(lambda _a, d: seen.append(d))
    stream = hub.open("a1", "m1")
    closed: list[bool] = []
    stream.on_stop(lambda: closed.append(True))
    assert stream.delta("part ")
    assert hub.stop("a1") == ("m1", "part ")
    assert closed == [True]
    assert not stream.delta("late")
    assert stream.text == "part " and seen == ["part "]
    assert not stream.finish()  # its call's reply is dropped
    assert hub.stop("a1") is None


def test_a_stream_that_finished_cannot_be_stopped_any_more():
    from runtime.models import StreamHub

    hub = StreamHub()
    stream = hub.open("a1", "m1")
    stream.delta("all")
    assert stream.finish()
    assert stream.stop() is None
    assert stream.delta("more") and stream.text == "allmore"  # finished streams are not policed


def test_cancel_closes_the_stream_and_the_agent_ends_cancelled(openai_server, live_world):
    openai_server.script(Reply(frames=openai_text("a", "b")[:3], hold=True))  # no [DONE]
    world = live_world(models={"default": OpenAIChat("m", base_url=openai_server.url)})
    seen: list[str] = []
    world.on_stream(lambda _a, d: seen.append(d))
    agent = world.spawn(thinker, "x")
    world.start()
    wait_for(lambda: "b" in seen, 10, "the deltas")
    world.cancel(agent)
    assert openai_server.closed.wait(5), "the server never saw the connection closed"
    wait_for(lambda: world.inference_lane.stats().busy == 0, 5, "the lane to free up")
    assert world.status(agent).kind is StatusKind.CANCELLED


def test_a_journal_of_a_streamed_and_interrupted_run_replays_with_no_provider(
    openai_server, live_world, tmp_path
):
    path = tmp_path / "run.db"
    openai_server.script(
        openai_text("fine"),
        Reply(frames=openai_text(*[f"t{i} " for i in range(200)]), interval=0.02),
    )
    world = live_world(
        models={"default": OpenAIChat("m", base_url=openai_server.url)},
        journal=Journal.create(path),
    )
    seen: list[str] = []
    world.on_stream(lambda _a, d: seen.append(d))
    done = world.spawn(thinker, "one")
    world.start()
    wait_for(lambda: world.status(done).kind is StatusKind.COMPLETE, 10, "the first agent")
    stopped = world.spawn(thinker, "two")  # after: the stub hands out replies in order
    wait_for(lambda: len(seen) >= 4, 10, "the slow stream")
    world.interrupt(stopped)
    wait_for(lambda: world.history(stopped)[-1].content == MARKER, 5, "the marker")
    world.close()
    openai_server.__exit__()  # no provider reachable from here on
    report = replay(path)
    assert report.agents == 2 and report.effects.get("think") == 2


# -- retries and errors -----------------------------------------------------------------


def test_a_429_is_retried_after_the_wait_it_asked_for(openai_server, virtual_sleep):
    openai_server.script(error(429, "slow down", retry_after="7"), openai_text("ok"))
    model = OpenAIChat("m", base_url=openai_server.url, sleep=virtual_sleep)
    reply = model.complete(ModelRequest("a1", "hi"), CancelToken())
    assert reply.text == "ok"
    assert virtual_sleep.waits == [7.0]
    assert len(openai_server.requests) == 2


def test_5xx_and_dropped_connections_are_retried_with_jittered_backoff(
    openai_server, virtual_sleep
):
    openai_server.script(
        error(500, "boom"), Reply(drop=True), error(503, "busy"), openai_text("at last")
    )
    model = OpenAIChat("m", base_url=openai_server.url, sleep=virtual_sleep)
    assert model.complete(ModelRequest("a1", "hi"), CancelToken()).text == "at last"
    assert len(virtual_sleep.waits) == 3
    for attempt, wait in enumerate(virtual_sleep.waits):
        assert 0 <= wait <= 0.5 * 2**attempt  # full jitter under the exponential cap


@pytest.mark.parametrize("status", [408, 409])
def test_408_and_409_are_retried(openai_server, virtual_sleep, status):
    openai_server.script(error(status, "again"), openai_text("ok"))
    model = OpenAIChat("m", base_url=openai_server.url, sleep=virtual_sleep)
    assert model.complete(ModelRequest("a1", "hi"), CancelToken()).text == "ok"


def test_retries_give_up_after_max_retries(openai_server, virtual_sleep):
    openai_server.script(*[error(500, f"boom {i}") for i in range(3)])
    model = OpenAIChat("m", base_url=openai_server.url, sleep=virtual_sleep, max_retries=2)
    with pytest.raises(ProviderError, match=r"openai HTTP 500: boom 2"):
        model.complete(ModelRequest("a1", "hi"), CancelToken())
    assert len(openai_server.requests) == 3


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_other_4xx_are_not_retried(openai_server, virtual_sleep, status):
    openai_server.script(error(status, "nope"), openai_text("never"))
    model = OpenAIChat("m", base_url=openai_server.url, sleep=virtual_sleep)
    with pytest.raises(ProviderError) as caught:
        model.complete(ModelRequest("a1", "hi"), CancelToken())
    assert caught.value.status == status and virtual_sleep.waits == []
    assert len(openai_server.requests) == 1


def test_a_401_fails_the_agent_naming_provider_status_and_message_never_the_key(
    openai_server, live_world, monkeypatch, caplog, tmp_path
):
    monkeypatch.setenv("STUB_KEY", KEY)
    openai_server.script(error(401, f"Incorrect API key provided: {KEY}"))
    model = OpenAIChat("m", base_url=openai_server.url, api_key_env="STUB_KEY")
    path = tmp_path / "run.db"
    world = live_world(models={"default": model}, journal=Journal.create(path))
    caplog.set_level(logging.DEBUG)
    agent = world.spawn(thinker, "x")
    run(world, agent)
    status = world.status(agent)
    assert status.kind is StatusKind.ERROR
    assert "openai HTTP 401: Incorrect API key provided: [redacted]" in status.message
    assert len(openai_server.requests) == 1  # not retried
    assert openai_server.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"
    world.close()
    assert KEY not in status.message and KEY not in repr(model)
    assert KEY not in caplog.text
    assert KEY.encode() not in path.read_bytes()


def test_the_key_comes_from_the_environment_variable_at_each_call(openai_server, monkeypatch):
    openai_server.script(openai_text("a"), openai_text("b"))
    model = OpenAIChat("m", base_url=openai_server.url, api_key_env="STUB_KEY")
    monkeypatch.delenv("STUB_KEY", raising=False)
    model.complete(ModelRequest("a1", "hi"), CancelToken())
    monkeypatch.setenv("STUB_KEY", "k2")
    model.complete(ModelRequest("a1", "hi"), CancelToken())
    auth = [r["headers"].get("authorization") for r in openai_server.requests]
    assert auth == [None, "Bearer k2"]


def test_a_malformed_chunk_fails_the_call_naming_the_provider(openai_server, virtual_sleep):
    openai_server.script(("data: {not json\n\n",))
    model = OpenAIChat("m", base_url=openai_server.url, sleep=virtual_sleep)
    with pytest.raises(ProviderError, match=r"openai: malformed chunk in the stream"):
        model.complete(ModelRequest("a1", "hi"), CancelToken())
    assert virtual_sleep.waits == []


def _data(payload: object) -> str:
    return "data: " + json.dumps(payload) + "\n\n"


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        (_data({"choices": [{"index": 0, "delta": "hi"}]}), "AttributeError"),
        (_data({"choices": [], "usage": {"prompt_tokens": "many"}}), "got 'many'"),
        ('data: {"choices": [], "usage": {"prompt_tokens": Infinity}}\n\n', "got inf"),
        (_data({"choices": [], "usage": {"prompt_tokens": -500}}), "got -500"),
        (
            _data({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": None}]}}]}),
            "TypeError",
        ),
        (
            _data({"choices": [{"index": 0, "delta": {"tool_calls": [{"function": "f"}]}}]}),
            "AttributeError",
        ),
    ],
    ids=["delta-text", "usage-text", "usage-infinite", "usage-negative", "index-null", "fn-text"],
)
def test_an_openai_chunk_of_the_wrong_shape_fails_the_call_naming_the_provider(
    openai_server, virtual_sleep, frame, why
):
    # Each raised a bare AttributeError/ValueError/OverflowError out of the reader (the
    # agent's status named neither the provider nor the stream); a negative usage was
    # taken, giving the agent's budget back.
    openai_server.script(Reply(frames=(frame, *openai_text("late"))))
    model = OpenAIChat("m", base_url=openai_server.url, sleep=virtual_sleep, api_key=KEY)
    with pytest.raises(ProviderError) as caught:
        model.complete(ModelRequest("a1", "hi"), CancelToken())
    message = str(caught.value)
    assert message.startswith("openai: malformed event in the stream (") and why in message
    assert not caught.value.retryable and virtual_sleep.waits == []


@pytest.mark.parametrize(
    "payload",
    [
        {"type": "message_start", "message": {"usage": {"input_tokens": -3}}},
        {"type": "content_block_delta", "index": 0, "delta": ["text_delta"]},
        {"type": "message_delta", "delta": {}, "usage": {"output_tokens": "lots"}},
        {"type": "content_block_start", "index": "first", "content_block": {"type": "tool_use"}},
    ],
    ids=["usage-negative", "delta-list", "usage-text", "index-text"],
)
def test_an_anthropic_event_of_the_wrong_shape_fails_the_call_naming_the_provider(
    anthropic_server, virtual_sleep, payload
):
    anthropic_server.script(
        Reply(frames=(anthropic_event(str(payload["type"]), payload), *anthropic_text("late")))
    )
    model = AnthropicMessages("m", base_url=anthropic_server.url, sleep=virtual_sleep)
    with pytest.raises(ProviderError, match=r"^anthropic: malformed event in the stream \("):
        model.complete(ModelRequest("a1", "hi"), CancelToken())
    assert virtual_sleep.waits == []


def test_a_connection_dropped_mid_reply_is_an_error_not_a_restart(openai_server, virtual_sleep):
    frames = openai_text("half", "way")[:2]
    openai_server.script(Reply(frames=frames, drop=True), openai_text("whole"))
    model = OpenAIChat("m", base_url=openai_server.url, sleep=virtual_sleep)
    with pytest.raises(ProviderError, match=r"openai: connection failed"):
        model.complete(ModelRequest("a1", "hi"), CancelToken())
    assert len(openai_server.requests) == 1


def test_an_error_event_in_an_anthropic_stream_names_its_type(anthropic_server, virtual_sleep):
    overloaded = anthropic_event(
        "error", {"error": {"type": "overloaded_error", "message": "busy"}}
    )
    invalid = anthropic_event(
        "error", {"error": {"type": "invalid_request_error", "message": "bad"}}
    )
    anthropic_server.script((overloaded,), anthropic_text("ok"), (invalid,))
    model = AnthropicMessages("c", base_url=anthropic_server.url, sleep=virtual_sleep)
    assert model.complete(ModelRequest("a1", "hi"), CancelToken()).text == "ok"  # retried
    with pytest.raises(ProviderError, match=r"anthropic: invalid_request_error: bad"):
        model.complete(ModelRequest("a1", "hi"), CancelToken())


def test_the_retry_wait_is_cancellable(openai_server):
    openai_server.script(error(429, "wait a while", retry_after="55"))
    model = OpenAIChat("m", base_url=openai_server.url)
    token = CancelToken()
    ended = threading.Event()
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            model.complete(ModelRequest("a1", "hi"), token)
        except BaseException as exc:
            outcome.append(exc)
        ended.set()

    threading.Thread(target=call, daemon=True).start()
    openai_server.wait_requests(1)
    token.cancel("stop")
    assert ended.wait(2), "the retry wait did not end when the token fired"
    assert type(outcome[0]).__name__ == "Cancelled"


@pytest.mark.parametrize(
    ("headers", "asked"),
    [({"retry_after": "3600"}, "3600"), ({"retry_after_ms": "1e303"}, "1e+300")],
    ids=["an-hour", "past-what-a-wait-can-hold"],
)
def test_a_retry_after_longer_than_max_retry_after_fails_at_once_saying_so(
    openai_server, virtual_sleep, headers, asked
):
    # It was waited for: an hour holding a lane permit; 1e300 s raised OverflowError
    # ("timestamp out of range") from the wait itself, not a ProviderError.
    openai_server.script(error(429, "quota used up", **headers), openai_text("never"))
    model = OpenAIChat("m", base_url=openai_server.url, sleep=virtual_sleep)
    with pytest.raises(ProviderError) as caught:
        model.complete(ModelRequest("a1", "hi"), CancelToken())
    assert str(caught.value) == (
        f"openai HTTP 429: quota used up (the provider asked to retry after {asked} s,"
        " more than max_retry_after=60 s)"
    )
    assert caught.value.status == 429 and not caught.value.retryable
    assert virtual_sleep.waits == [] and len(openai_server.requests) == 1


def test_a_longer_max_retry_after_waits_what_the_provider_asked(openai_server, virtual_sleep):
    openai_server.script(error(503, "maintenance", retry_after="600"), openai_text("back"))
    model = OpenAIChat(
        "m",
        base_url=openai_server.url,
        sleep=virtual_sleep,
        backoff=Backoff(max_retry_after=900),
    )
    assert model.complete(ModelRequest("a1", "hi"), CancelToken()).text == "back"
    assert virtual_sleep.waits == [600.0]


@pytest.mark.parametrize("value", ["inf", "nan", "-inf", "soon"])
def test_a_retry_after_that_is_no_wait_is_taken_as_absent(openai_server, virtual_sleep, value):
    openai_server.script(error(429, "slow down", retry_after=value), openai_text("ok"))
    model = OpenAIChat("m", base_url=openai_server.url, sleep=virtual_sleep)
    assert model.complete(ModelRequest("a1", "hi"), CancelToken()).text == "ok"
    (wait,) = virtual_sleep.waits
    assert 0 <= wait <= 0.5  # the first retry's jittered backoff


def test_a_retry_after_date_without_a_zone_is_read_as_utc(monkeypatch):
    import email.utils

    import httpx

    from runtime.models.http import _retry_after

    # Read as local time, the wait was off by the machine's offset from UTC (here 5 hours).
    monkeypatch.setenv("TZ", "EST+05")
    time.tzset()
    try:
        later = email.utils.formatdate(time.time() + 30, usegmt=True).replace("GMT", "-0000")
        wait = _retry_after(httpx.Headers({"retry-after": later}))
    finally:
        monkeypatch.undo()
        time.tzset()
    assert wait is not None and 25 <= wait <= 31


@pytest.mark.parametrize(
    ("field", "value"),
    [("base", -1), ("cap", float("nan")), ("max_retry_after", 1e300), ("base", "1")],
)
def test_backoff_refuses_a_wait_it_cannot_take_naming_it(field, value):
    with pytest.raises(ConfigError, match=rf"`Backoff\.{field}` must be a number of seconds"):
        Backoff(**{field: value})


# -- rate limits and budgets ------------------------------------------------------------


def test_120_requests_a_minute_space_five_agents_calls_half_a_second_apart(
    openai_server, live_world, virtual_sleep
):
    from runtime import ManualClock

    openai_server.script(*[openai_text(f"r{i}") for i in range(5)])
    limit = RateLimit(requests_per_minute=120, clock=ManualClock(), sleep=virtual_sleep)
    world = live_world(
        models={"default": OpenAIChat("m", base_url=openai_server.url, rate_limit=limit)}
    )
    agents = [world.spawn(thinker, str(i)) for i in range(5)]
    run(world, *agents)
    assert all(world.status(a).kind is StatusKind.COMPLETE for a in agents)
    # the first goes at once; each other agent waited for its own slot, 0.5 s after the last
    assert sorted(virtual_sleep.waits) == [0.5, 1.0, 1.5, 2.0]


def test_a_token_rate_holds_requests_until_the_minute_has_room():
    from runtime import ManualClock

    clock = ManualClock()
    waits: list[float] = []

    def sleep(seconds, cancel):
        waits.append(seconds)
        clock.advance(seconds)

    limit = RateLimit(tokens_per_minute=100, clock=clock, sleep=sleep)
    limit.acquire(CancelToken())
    limit.record(Usage(60, 50))  # 110 tokens at t=0: over the minute's 100
    clock.advance(10)
    limit.acquire(CancelToken())
    assert waits == [50.0] and clock.now() == 60.0


def test_a_rate_limit_rejects_bad_rates():
    from runtime import ConfigError

    with pytest.raises(ConfigError, match=r"`requests_per_minute` must be a number > 0, got 0"):
        RateLimit(requests_per_minute=0)
    with pytest.raises(ConfigError, match=r"`tokens_per_minute` must be a number > 0, got nan"):
        RateLimit(tokens_per_minute=float("nan"))


def test_a_budget_stops_the_agent_that_passes_it_and_no_other(openai_server, live_world):
    # each reply costs 7 + 3 = 10 tokens; the budget is 15 tokens per agent
    openai_server.script(*[openai_text(f"r{i}") for i in range(6)])
    model = OpenAIChat("m", base_url=openai_server.url, budget=Budget(tokens=15))
    world = live_world(models={"default": model})
    spender = world.spawn(lambda turn: (yield from _think_times(3)), "x")
    thrifty = world.spawn(thinker, "y")
    run(world, spender, thrifty)
    assert world.status(thrifty).kind is StatusKind.COMPLETE
    status = world.status(spender)
    assert status.kind is StatusKind.ERROR
    assert (
        f"agent {spender!r} has used its token budget for model 'm': 20 of 15 tokens"
        in status.message
    )
    assert len(openai_server.requests) == 3  # two for the spender, one for the other


def _prompt_tokens(request: dict) -> int:
    # What the OpenAI reader estimates for a prompt whose usage never came: 4 chars a token.
    chars = sum(len(m["content"]) for m in request["body"]["messages"])
    return -(-chars // 4)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_an_interrupted_call_charges_what_it_spent_to_the_budget(
    kind, openai_server, anthropic_server, live_world
):
    # Stopped mid-reply, the call raised before its usage was charged: an agent
    # interrupted every time spent tokens its budget never saw.
    server = openai_server if kind == "openai" else anthropic_server
    stall = threading.Event()  # never set: after three deltas the stream stalls
    pieces = ["w0 ", "w1 ", "w2 ", stall, "w3 "]
    frames = openai_text(*pieces) if kind == "openai" else anthropic_text(*pieces)
    server.script(Reply(frames=frames, interval=0.01))
    cls = OpenAIChat if kind == "openai" else AnthropicMessages
    model = cls("m", base_url=server.url, budget=Budget(tokens=1_000))
    world = live_world(models={"default": model})
    seen: list[str] = []
    world.on_stream(lambda _agent, delta: seen.append(delta))
    agent = world.spawn(thinker, "x")
    world.start()
    wait_for(lambda: len(seen) >= 3, 10, "three deltas")
    world.interrupt(agent)
    wait_for(lambda: world.inference_lane.stats().in_flight == 0, 10, "the call to end")
    # OpenAI streams usage only at the end: the prompt estimated, a token a delta.
    # Anthropic gave the prompt's count in `message_start` (9 in the stub's frames).
    prompt = _prompt_tokens(server.requests[0]) if kind == "openai" else 9
    assert model.budget is not None and model.budget.used(agent) == prompt + 3


def test_a_reply_cut_off_mid_stream_charges_what_it_spent(openai_server, virtual_sleep):
    frames = openai_text("half", "way")[:2]
    openai_server.script(Reply(frames=frames, drop=True))
    budget = Budget(tokens=1_000)
    model = OpenAIChat("m", base_url=openai_server.url, sleep=virtual_sleep, budget=budget)
    with pytest.raises(ProviderError, match=r"openai: connection failed"):
        model.complete(ModelRequest("a1", "hi"), CancelToken())
    # The role chunk and "half" came: the prompt estimated, one token for the one delta.
    assert budget.used("a1") == _prompt_tokens(openai_server.requests[0]) + 1


def test_a_call_the_server_refused_charges_nothing(openai_server, anthropic_server, virtual_sleep):
    # Refused before any reply began (retried 500s, then a 400; or an error as the
    # stream's first event): nothing was spent.
    refused = Reply(frames=(_data({"error": {"message": "upstream overloaded"}}),))
    openai_server.script(refused)
    budget = Budget(tokens=1_000)
    model = OpenAIChat("m", base_url=openai_server.url, sleep=virtual_sleep, budget=budget)
    with pytest.raises(ProviderError, match="upstream overloaded"):
        model.complete(ModelRequest("a1", "hi"), CancelToken())
    assert budget.used("a1") == 0
    for server, cls in ((openai_server, OpenAIChat), (anthropic_server, AnthropicMessages)):
        server.script(error(500, "busy"), error(400, "bad request"))
        budget = Budget(tokens=1_000)
        model = cls("m", base_url=server.url, sleep=virtual_sleep, budget=budget)
        with pytest.raises(ProviderError):
            model.complete(ModelRequest("a1", "hi"), CancelToken())
        assert budget.used("a1") == 0


def _think_times(n):
    for i in range(n):
        yield Think(f"step {i}")


def three_thinks(turn):
    yield from _think_times(3)


def test_a_resumed_run_keeps_each_agents_spent_tokens_against_its_budget(openai_server, tmp_path):
    from runtime import ManualClock, resume

    # Each reply costs 10 tokens and the budget is 15: the third Think of a run never
    # killed is refused. Killed with the second call in flight, the resumed run issues that
    # call again (10 + 10 tokens) and must refuse the third just the same.
    path = tmp_path / "run.db"
    stall = threading.Event()
    openai_server.script(openai_text("r0"), openai_text("r1", stall))
    model = OpenAIChat("m", base_url=openai_server.url, budget=Budget(tokens=15))
    world = World(
        clock=ManualClock(),
        models={"default": model},
        journal=Journal.create(path),
        lockstep=False,
    )
    try:
        spender = world.spawn(three_thinks, "x")
        world.tick()
        wait_for(lambda: world.inference_lane.stats().finished == 1, 10, "the first reply")
        world.tick()  # the first reply lands; the second call starts
        openai_server.wait_requests(2)
        world._journal.close()  # the process dies here: nothing after reaches the journal
        world._journal = None
    finally:
        stall.set()
        world.close()
    openai_server.script(openai_text("r1 again"), openai_text("r2"))
    again = OpenAIChat("m", base_url=openai_server.url, budget=Budget(tokens=15))
    resumed = resume(path, models={"default": again})
    try:
        resumed.run_until_idle(timeout=10)
        status = resumed.status(spender)
        assert status.kind is StatusKind.ERROR, status
        assert "has used its token budget for model 'm': 20 of 15 tokens" in status.message
        assert again.budget.used(spender) == 20
    finally:
        resumed.close()
    assert len(openai_server.requests) == 3  # the call in flight again, never the third


def test_usage_of_a_run_is_in_its_outcomes(openai_server, live_world):
    openai_server.script(openai_text("a", usage=(5, 1)), openai_text("b", usage=(6, 2)))
    world = live_world(models={"default": OpenAIChat("m", base_url=openai_server.url)})
    replies: list[ModelReply] = []

    def worker(turn):
        replies.append((yield Think("one")))
        replies.append((yield Think("two")))

    agent = world.spawn(worker, "x")
    run(world, agent)
    assert [r.usage for r in replies] == [Usage(5, 1), Usage(6, 2)]


def test_settings_are_checked_by_name():
    from runtime import ConfigError

    with pytest.raises(
        ConfigError, match=r"`base_url` must be an http:// or https:// URL, got 'ftp://x'"
    ):
        OpenAIChat("m", base_url="ftp://x")
    with pytest.raises(ConfigError, match=r"`temperature` must be a number from 0 to 2, got 3"):
        AnthropicMessages("m", temperature=3)
    with pytest.raises(ConfigError, match=r"`max_retries` must be >= 0, got -1"):
        OpenAIChat("m", max_retries=-1)


def test_a_server_that_streams_no_usage_gets_it_counted(openai_server):
    openai_server.script(openai_text("a", "b", "c", usage=None))
    model = OpenAIChat("m", base_url=openai_server.url)
    reply = model.complete(ModelRequest("a1", "x" * 10), CancelToken())
    # one token per content delta; the prompt's 10 characters at four to a token
    assert reply.usage == Usage(3, 3)


@pytest.mark.parametrize(
    ("usage", "counted"),
    [
        ({}, Usage(3, 3)),
        ({"prompt_tokens": 7}, Usage(7, 3)),
        ({"completion_tokens": 9}, Usage(3, 9)),
    ],
    ids=["empty", "prompt-only", "completion-only"],
)
def test_a_count_the_server_leaves_out_of_its_usage_is_estimated(openai_server, usage, counted):
    # `usage: {}` read as 0 tokens in and out: spent tokens that no budget saw.
    frames = list(openai_text("a", "b", "c", usage=None))
    frames.insert(-1, "data: " + json.dumps({"choices": [], "usage": usage}) + "\n\n")
    openai_server.script(tuple(frames))
    model = OpenAIChat("m", base_url=openai_server.url)
    assert model.complete(ModelRequest("a1", "x" * 10), CancelToken()).usage == counted


def test_interrupting_a_retried_call_leaves_another_agents_call_streaming(openai_server):
    # A's first attempt got a 503 and its connection went back to the pool; B's call took
    # it and streamed; A's retry went out on a new one. Interrupting A ran every closer
    # A's stream held, the first attempt's too, which shut B's connection: B failed with
    # "peer closed connection" after showing "part ".
    from runtime.models import Stream

    waiting, go = threading.Event(), threading.Event()

    def gated_sleep(seconds: float, cancel: CancelToken) -> None:
        waiting.set()  # A waits to retry: B goes first
        assert go.wait(10), "never let go"

    b_hold, a_hold = threading.Event(), threading.Event()
    openai_server.script(
        error(503, "busy"),  # A, attempt 1
        openai_text("part ", b_hold, "rest"),  # B
        openai_text("late ", a_hold, "reply"),  # A, attempt 2
    )
    model = OpenAIChat(
        "m", base_url=openai_server.url, api_key=KEY, sleep=gated_sleep, max_retries=1
    )
    streams = {"A": Stream("A"), "B": Stream("B")}
    out: dict[str, str] = {}

    def call(name: str) -> None:
        try:
            request = ModelRequest(name, "hi", stream=streams[name])
            out[name] = model.complete(request, CancelToken()).text
        except BaseException as exc:  # Cancelled, the interrupted call's end, too
            out[name] = f"{type(exc).__name__}: {exc}"

    a, b = threading.Thread(target=call, args=("A",)), threading.Thread(target=call, args=("B",))
    a.start()
    try:
        assert waiting.wait(10)
        b.start()
        wait_for(lambda: streams["B"].text == "part ", what="B's first delta")
        go.set()
        wait_for(lambda: streams["A"].text == "late ", what="A's second attempt")
        assert streams["A"].stop() == "late "  # the interrupt
    finally:
        go.set()
        b_hold.set()
        a_hold.set()
        a.join(10)
        b.join(10)
    assert out["B"] == "part rest"
    assert out["A"].startswith("Cancelled")


def test_an_api_key_with_a_control_character_is_named_not_sent_or_shown(openai_server, monkeypatch):
    # A CRLF `.env` left a CR on the key: the header failed on this side, the error
    # (retried as a connection failure) quoted the key's bytes past `redact`, and so did
    # the log and the journal. The whitespace around a key is dropped; what remains must
    # be printable ASCII, or the call fails naming where the key comes from.
    monkeypatch.setenv("TW_TEST_KEY", KEY + "\r")
    openai_server.script(openai_text("ok"))
    model = OpenAIChat("m", base_url=openai_server.url, api_key_env="TW_TEST_KEY")
    assert model.complete(ModelRequest("a1", "hi"), CancelToken()).text == "ok"
    assert openai_server.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"
    monkeypatch.setenv("TW_TEST_KEY", KEY[:8] + "\x1b" + KEY[8:])
    with pytest.raises(ProviderError) as caught:
        model.complete(ModelRequest("a1", "hi"), CancelToken())
    assert "$TW_TEST_KEY holds a control or non-ASCII character" in str(caught.value)
    assert KEY[:8] not in str(caught.value) and len(openai_server.requests) == 1


def test_redact_blots_a_key_also_as_a_repr_writes_it():
    from runtime.models.http import redact

    key = "sk-live-0123\r"
    shown = f"Illegal header value b'Bearer {key!r}'".replace("'sk", "sk")
    assert "sk-live" not in redact(shown, [key])
    assert "sk-live" not in redact(f"header {key.encode()!r}", [key])


def test_sse_events_without_data_are_not_handed_to_the_reader(openai_server):
    # A `retry:` or `id:` line alone makes httpx-sse yield an event with empty data, which
    # the SSE spec does not dispatch; the readers took it for a malformed chunk.
    frames = openai_text("Hello", " world")
    openai_server.script(("retry: 3000\n\n", "id: 1\n\n", *frames))
    model = OpenAIChat("m", base_url=openai_server.url, api_key=KEY)
    assert model.complete(ModelRequest("a1", "hi"), CancelToken()).text == "Hello world"


@pytest.mark.parametrize("alone", [False, True], ids=["with-the-first-event", "a-chunk-alone"])
def test_a_leading_byte_order_mark_does_not_cost_the_first_event(openai_server, alone):
    # The SSE spec decodes a stream as UTF-8, which drops a leading BOM; httpx-sse 0.4 kept
    # it, the first line's field read "\ufeffdata", and the first event was lost.
    _role, first, *rest = openai_text("Hello", " world")  # the first event holds "Hello"
    frames = ("\ufeff", first, *rest) if alone else ("\ufeff" + first, *rest)
    openai_server.script(frames)
    model = OpenAIChat("m", base_url=openai_server.url, api_key=KEY)
    assert model.complete(ModelRequest("a1", "hi"), CancelToken()).text == "Hello world"


def test_an_event_stream_is_utf_8_whatever_charset_its_headers_name(openai_server):
    # httpx decoded the text by the header's charset: "café" came through as "cafÃ©".
    frames = [  # the JSON written as servers write it: UTF-8, not \u escapes
        f.replace("PIECE1", "café").replace("PIECE2", " ☕")
        for f in openai_text("PIECE1", "PIECE2")
    ]
    openai_server.script(
        Reply(frames=tuple(frames), headers={"content_type": "text/event-stream; charset=latin-1"})
    )
    model = OpenAIChat("m", base_url=openai_server.url, api_key=KEY)
    assert model.complete(ModelRequest("a1", "hi"), CancelToken()).text == "café ☕"


def test_a_byte_order_mark_past_the_start_is_data(anthropic_server):
    # Only the stream's first character is dropped: a BOM inside an event's data is text.
    anthropic_server.script(anthropic_text("\ufeffHello", " world"))
    model = AnthropicMessages("m", base_url=anthropic_server.url, api_key=KEY)
    assert model.complete(ModelRequest("a1", "hi"), CancelToken()).text == "\ufeffHello world"


def test_a_body_its_encoding_does_not_fit_and_an_overflowing_retry_date_are_provider_errors(
    openai_server, virtual_sleep
):
    # httpx's DecodingError and the date parser's OverflowError escaped raw (a traceback
    # in the log and an error naming neither the provider nor what was wrong).
    from runtime.models.http import _retry_after

    openai_server.script(error(503, "busy", content_encoding="gzip"))
    model = OpenAIChat("m", base_url=openai_server.url, api_key=KEY, max_retries=0)
    with pytest.raises(ProviderError, match="openai: the response could not be decoded"):
        model.complete(ModelRequest("a1", "hi"), CancelToken())
    import httpx

    far = httpx.Headers({"retry-after": "Fri, 31 Dec 99999999999999999999 23:59:59 GMT"})
    assert _retry_after(far) is None


@pytest.mark.parametrize("how", ["cancel", "stop"])
def test_a_call_stopped_before_the_server_answers_ends_at_once(openai_server, how):
    # The closer came with the response: a stop while the server had not sent its
    # headers waited out the read timeout (the call's lane thread held all along, and
    # `world.close` with it).
    from runtime.models import Stream

    answer = threading.Event()
    openai_server.script(Reply(frames=openai_text("never"), before=answer))
    model = OpenAIChat("m", base_url=openai_server.url, api_key=KEY, timeout=30, max_retries=0)
    token, stream = CancelToken(), Stream("a1")
    ended: list[str] = []

    def call() -> None:
        try:
            model.complete(ModelRequest("a1", "hi", stream=stream), token)
            ended.append("replied")
        except BaseException as exc:  # Cancelled
            ended.append(type(exc).__name__)

    caller = threading.Thread(target=call)
    caller.start()
    try:
        openai_server.wait_requests(1)
        started = time.monotonic()
        token.cancel("interrupted") if how == "cancel" else stream.stop()
        caller.join(10)
        assert not caller.is_alive(), "the call waited for the server's answer"
        assert time.monotonic() - started < 10  # not the 30 s read timeout
        assert ended == ["Cancelled"]
        assert openai_server.closed.wait(10)  # and the server saw the connection go
    finally:
        answer.set()
        caller.join(10)


def test_an_error_body_that_trickles_in_ends_the_call_within_its_timeout(openai_server):
    # `response.read()` read the whole body and httpx's timeout bounds each read: a 503
    # whose body came a byte at a time never ended the call.
    trickle = error(503, "busy " * 40)
    trickle.interval = 0.05  # ~10 s for the whole body
    openai_server.script(trickle)
    model = OpenAIChat("m", base_url=openai_server.url, api_key=KEY, timeout=0.5, max_retries=0)
    started = time.monotonic()
    with pytest.raises(ProviderError, match="openai HTTP 503"):
        model.complete(ModelRequest("a1", "hi"), CancelToken())
    assert time.monotonic() - started < 5  # about the timeout, not the body's ~10 s
