"""Cassettes: model calls recorded once, replayed by request, and misses named."""

from __future__ import annotations

import json

import pytest

from runtime import (
    CancelToken,
    Cassette,
    CassetteMiss,
    ConfigError,
    ManualClock,
    OpenAIChat,
    ScriptedModel,
    StatusKind,
    Think,
    Usage,
    World,
)
from runtime.models import ModelRequest

from .stub_server import openai_text


def test_a_recorded_call_replays_with_no_provider_reachable(openai_server, tmp_path):
    path = tmp_path / "calls.json"
    openai_server.script(openai_text("recorded", usage=(3, 1)))
    model = OpenAIChat("m", base_url=openai_server.url)
    recorder = Cassette(path, record=True).wrap(model)
    first = recorder.complete(ModelRequest("a1", "hello"), CancelToken())
    openai_server.__exit__()
    player = Cassette(path).wrap(model)
    again = player.complete(ModelRequest("other-agent", "hello"), CancelToken())
    assert again == first
    assert again.text == "recorded" and again.usage == Usage(3, 1)
    stored = json.loads(path.read_text())
    (entry,) = stored["recordings"].values()
    assert entry["request"]["messages"] == [{"role": "user", "content": "hello"}]


def test_a_request_with_no_recording_is_named(tmp_path):
    path = tmp_path / "calls.json"
    Cassette(path, record=True).wrap(ScriptedModel(["a"])).complete(
        ModelRequest("a1", "plan the day"), CancelToken()
    )
    player = Cassette(path).wrap(ScriptedModel(["never"]))
    with pytest.raises(CassetteMiss) as caught:
        player.complete(ModelRequest("a1", "plan the night"), CancelToken())
    message = str(caught.value)
    assert "has no recording for the request" in message
    assert "the last 'plan the night'" in message and "record=True" in message


def test_a_world_agent_whose_request_changed_fails_naming_the_miss(tmp_path):
    path = tmp_path / "calls.json"
    cassette = Cassette(path, record=True)
    cassette.wrap(ScriptedModel(["ok"])).complete(ModelRequest("a1", "step 0"), CancelToken())

    def worker(turn):
        first = yield Think("step 0")
        second = yield Think("step 1")  # never recorded
        return [first.text, second.text]

    with World(
        clock=ManualClock(), models={"default": Cassette(path).wrap(ScriptedModel(["x"]))}
    ) as world:
        agent = world.spawn(worker, None)
        world.run_until_idle(timeout=10)
        status = world.status(agent)
    assert status.kind is StatusKind.ERROR
    assert "CassetteMiss" in status.message or "no recording" in status.message


def test_a_file_that_is_not_a_cassette_is_refused(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"something": "else"}')
    with pytest.raises(ConfigError, match=r"is not a tickwork cassette"):
        Cassette(path)


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ({"request": {}}, "KeyError: 'reply'"),
        ({"reply": "hi"}, "TypeError"),
        ({"reply": {"text": "t", "tool_calls": [], "usage": [1]}}, "must be [input, output]"),
        ([1], "TypeError"),
        ({"reply": {"text": "t", "tool_calls": [], "usage": [-5, 2]}}, "got -5"),
        ({"reply": {"text": "t", "tool_calls": [], "usage": [1.7, 2]}}, "got 1.7"),
        ({"reply": {"text": None, "tool_calls": []}}, "a reply's text must be a string"),
        (
            {"reply": {"text": "t", "tool_calls": [{"id": 1, "name": "n", "args": {}}]}},
            "a tool call's id must be a string, got 1",
        ),
    ],
    ids=[
        "no-reply",
        "reply-text",
        "usage-short",
        "entry-list",
        "usage-negative",
        "usage-fraction",
        "text-null",
        "call-id",
    ],
)
def test_a_recording_without_a_readable_reply_is_refused_at_opening_naming_it(tmp_path, entry, why):
    # A hand-edited cassette opened, then failed the agent's Think mid-run with a bare
    # KeyError or IndexError that named neither the file nor the recording.
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"version": 1, "recordings": {"d1": entry}}))
    with pytest.raises(ConfigError) as caught:
        Cassette(path)
    assert str(caught.value).startswith(f"`path` {str(path)!r}: recording 'd1' has no readable")
    assert why in str(caught.value)


def test_a_played_back_reply_goes_through_the_models_budget_as_a_live_call(openai_server, tmp_path):
    # Played back, a reply skipped the provider's `Budget`: a test on a cassette answered
    # past a spent budget where the live run raised BudgetExceeded.
    from runtime import Budget, BudgetExceeded

    path = tmp_path / "calls.json"
    openai_server.script(openai_text("recorded", usage=(5, 2)))
    recorder = Cassette(path, record=True).wrap(OpenAIChat("m", base_url=openai_server.url))
    recorder.complete(ModelRequest("a1", "hello"), CancelToken())
    openai_server.__exit__()
    budget = Budget(tokens=10)
    player = Cassette(path).wrap(OpenAIChat("m", base_url=openai_server.url, budget=budget))
    player.complete(ModelRequest("a1", "hello"), CancelToken())
    assert budget.used("a1") == 7
    player.complete(ModelRequest("a1", "hello"), CancelToken())  # 7 < 10: allowed, now 14
    with pytest.raises(BudgetExceeded, match="14 of 10 tokens"):
        player.complete(ModelRequest("a1", "hello"), CancelToken())
