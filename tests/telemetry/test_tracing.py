"""OpenTelemetry spans of a live world: turns, model calls, tool calls and prompts.

The SDK's in-memory exporter stands in for the host's exporter; each test passes its own
provider, so no global OpenTelemetry state leaks between tests.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import runtime.world.tick as tick_module
from runtime import (
    Ask,
    AskUserTool,
    CallTools,
    InteractionRequest,
    InteractionResponse,
    Join,
    Journal,
    ManualClock,
    ModelReply,
    ScriptedModel,
    Sleep,
    Spawn,
    Think,
    ToolCall,
    ToolRegistry,
    World,
    replay,
    resume,
)
from runtime.telemetry import instrument
from tests.conftest import wait_for


@dataclass(frozen=True, slots=True)
class _Usage:
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class _ReplyWithUsage(ModelReply):
    # ModelReply gains `usage` with the model providers; until then a subclass carries it.
    usage: object = None


class _CountingModel:
    def complete(self, request, cancel):
        return _ReplyWithUsage(f"plan: {request.prompt}", usage=_Usage(11, 4))


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def _tools() -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool()
    def word_count(args, ctx):
        return len(str(args["text"]).split())

    @tools.tool()
    def broken(args, ctx):
        raise RuntimeError("disk full")

    @tools.tool(requires_approval=True)
    def publish(args, ctx):
        return f"published {args['title']}"

    return tools


def researcher(turn):
    reply = yield Think(f"research {turn.message}")
    yield CallTools(
        ToolCall("c1", "word_count", {"text": reply.text}),
        ToolCall("c2", "broken", {}),
    )
    yield Sleep(0.5)
    (published,) = yield CallTools(ToolCall("c3", "publish", {"title": turn.message}))
    return published.output


def helper(turn):
    reply = yield Think(f"check {turn.message}")
    return reply.text


def reviewer(turn):
    yield Think(f"plan {turn.message}")
    first = yield Spawn(helper, "part 1")
    second = yield Spawn(helper, "part 2")
    yield Join(first, second)
    answer = yield Ask(InteractionRequest.choice("", "Merge the review?", ["merge", "hold"]))
    return answer.value


def _answer_everything(world: World) -> None:
    for _agent, request in world.hub.pending():
        if request.kind.value == "tool_approval":
            world.hub.answer(InteractionResponse(request.id, approved=True))
        else:
            world.hub.answer(InteractionResponse(request.id, value="merge", choice=0))


def _run_quickstart_like(world: World) -> tuple[str, str]:
    res = world.spawn(researcher, "topic 0", name="researcher-0")
    rev = world.spawn(reviewer, "the topics", name="reviewer")
    for _ in range(50):
        world.run_until_idle(timeout=10)
        if not world.hub.pending():
            break
        _answer_everything(world)
    world.run_until_idle(timeout=10)
    return res, rev


def _by_name(finished: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in finished if s.name == name]


def test_a_quickstart_like_world_yields_turn_think_tool_and_prompt_spans_with_parents(
    make_world, spans
):
    provider, exporter = spans
    world = make_world(
        tools=_tools(), models={"default": _CountingModel()}, interaction_timeout_secs=0
    )
    telemetry = instrument(world, tracer_provider=provider)
    res, rev = _run_quickstart_like(world)
    assert world.result(res) == "published topic 0"
    assert world.result(rev) == "merge"
    finished = exporter.get_finished_spans()

    turns = {s.attributes["tickwork.agent_id"]: s for s in _by_name(finished, "tickwork.turn")}
    assert set(turns) == {res, rev, f"{rev}.1", f"{rev}.2"}
    for turn in turns.values():
        assert turn.attributes["tickwork.outcome"] == "ok"
    # Turns are roots, except a spawned agent's, which is a child of its parent's turn.
    assert turns[res].parent is None and turns[rev].parent is None
    for child in (f"{rev}.1", f"{rev}.2"):
        assert turns[child].parent.span_id == turns[rev].context.span_id
        assert turns[child].context.trace_id == turns[rev].context.trace_id

    def children(agent: str, name: str) -> list[ReadableSpan]:
        turn = turns[agent]
        return [
            s
            for s in _by_name(finished, name)
            if s.parent is not None and s.parent.span_id == turn.context.span_id
        ]

    (think,) = children(res, "tickwork.think")
    assert think.attributes["tickwork.agent_id"] == res
    assert think.attributes["tickwork.model"] == "default"
    assert think.attributes["tickwork.outcome"] == "ok"
    assert think.attributes["gen_ai.usage.input_tokens"] == 11
    assert think.attributes["gen_ai.usage.output_tokens"] == 4

    tools = {s.attributes["tickwork.tool"]: s for s in children(res, "tickwork.tool")}
    assert set(tools) == {"word_count", "broken", "publish"}
    assert tools["word_count"].attributes["tickwork.outcome"] == "ok"
    assert tools["broken"].attributes["tickwork.outcome"] == "error"
    assert tools["broken"].status.status_code is StatusCode.ERROR
    assert "disk full" in tools["broken"].status.description
    assert tools["publish"].attributes["tickwork.outcome"] == "ok"
    # Both calls of one batch start together and end when the batch's outcome lands.
    assert tools["word_count"].start_time == pytest.approx(tools["broken"].start_time, abs=5e6)
    # The approval prompt is a child of its tool call's span, and the call waited for it.
    approvals = [
        s
        for s in _by_name(finished, "tickwork.prompt")
        if s.parent.span_id == tools["publish"].context.span_id
    ]
    assert len(approvals) == 1
    assert approvals[0].attributes["tickwork.prompt_kind"] == "tool_approval"
    assert approvals[0].attributes["tickwork.outcome"] == "answered"
    assert tools["publish"].start_time <= approvals[0].start_time
    assert approvals[0].end_time <= tools["publish"].end_time

    (question,) = children(rev, "tickwork.prompt")
    assert question.attributes["tickwork.agent_id"] == rev
    assert question.attributes["tickwork.prompt_kind"] == "choice"
    assert question.attributes["tickwork.outcome"] == "answered"
    assert len(children(rev, "tickwork.think")) == 1
    assert len(children(f"{rev}.1", "tickwork.think")) == 1
    # Every child lies within its turn.
    for span in finished:
        if span.name != "tickwork.turn" and span.parent is not None:
            parent = next(s for s in finished if s.context.span_id == span.parent.span_id)
            assert parent.start_time <= span.start_time <= span.end_time <= parent.end_time
    assert telemetry.tracing is not None and telemetry.tracing.open_spans() == 0


def slow_tools(turn):
    yield CallTools(ToolCall("c1", "hang", {}), ToolCall("c2", "hang", {}))
    return "never"


def test_an_interrupted_tool_call_span_says_it_was_interrupted(make_world, spans):
    provider, exporter = spans
    tools = ToolRegistry()
    started = threading.Event()

    @tools.tool()
    def hang(args, ctx):
        started.set()
        ctx.cancel.wait(30)
        return "woke"

    world = make_world(tools=tools, lockstep=False)  # in lockstep a tick waits for `hang`
    instrument(world, tracer_provider=provider)
    agent = world.spawn(slow_tools, "go", interactive=True)
    world.tick()
    world.tick()
    assert started.wait(10)
    world.interrupt(agent)
    world.tick()
    world.run_until_idle(timeout=10)
    finished = exporter.get_finished_spans()
    calls = _by_name(finished, "tickwork.tool")
    assert [s.attributes["tickwork.outcome"] for s in calls] == ["interrupted", "interrupted"]
    assert all(s.status.status_code is not StatusCode.ERROR for s in calls)
    (turn,) = _by_name(finished, "tickwork.turn")
    assert turn.attributes["tickwork.outcome"] == "interrupted"
    assert all(s.parent.span_id == turn.context.span_id for s in calls)


def waits_for_a_person(turn):
    answer = yield Ask(InteractionRequest.free_text("", "go?"))
    return answer.value


def test_a_cancelled_agent_ends_its_prompt_span_and_turn_as_cancelled(make_world, spans):
    provider, exporter = spans
    world = make_world(interaction_timeout_secs=0)
    instrument(world, tracer_provider=provider)
    agent = world.spawn(waits_for_a_person)
    world.run_until_idle()
    assert exporter.get_finished_spans() == ()  # the turn and its prompt are still open
    world.cancel(agent)
    world.run_until_idle()
    finished = exporter.get_finished_spans()
    assert {s.name: s.attributes["tickwork.outcome"] for s in finished} == {
        "tickwork.prompt": "cancelled",
        "tickwork.turn": "cancelled",
    }


def failing(turn):
    yield Think("x", model="nope")
    return "unreachable"


def test_a_failed_model_call_and_its_failed_turn_are_error_spans(make_world, spans):
    provider, exporter = spans
    world = make_world(models={"default": ScriptedModel(["x"])})
    instrument(world, tracer_provider=provider)
    world.spawn(failing)
    world.run_until_idle()
    finished = exporter.get_finished_spans()
    (think,) = _by_name(finished, "tickwork.think")
    assert think.attributes["tickwork.outcome"] == "error"
    assert "unknown model 'nope'" in think.status.description
    (turn,) = _by_name(finished, "tickwork.turn")
    assert turn.attributes["tickwork.outcome"] == "error"
    assert turn.status.status_code is StatusCode.ERROR
    assert "ModelError" in turn.status.description


def test_a_replay_emits_no_spans_even_of_an_instrumented_world(tmp_path, spans):
    provider, exporter = spans
    path = tmp_path / "run.db"
    world = World(
        seed=3,
        clock=ManualClock(),
        tools=_tools(),
        models={"default": _CountingModel()},
        journal=Journal.create(path),
        interaction_timeout_secs=0,
    )
    instrument(world, tracer_provider=provider)
    _run_quickstart_like(world)
    world.close()
    recorded = len(exporter.get_finished_spans())
    assert recorded > 10
    exporter.clear()

    # Even asked to through the replay's setup, a replay stays dark.
    report = replay(path, setup=lambda replayed: instrument(replayed, tracer_provider=provider))
    assert report.ticks > 0
    assert exporter.get_finished_spans() == ()


def test_a_world_without_telemetry_or_without_a_provider_traces_nothing(make_world, spans):
    _provider, exporter = spans
    plain = make_world(
        tools=_tools(), models={"default": _CountingModel()}, interaction_timeout_secs=0
    )
    _run_quickstart_like(plain)
    assert exporter.get_finished_spans() == ()
    # Instrumented, but with no provider set by the host: the global no-op tracer.
    world = make_world(
        tools=_tools(), models={"default": _CountingModel()}, interaction_timeout_secs=0
    )
    telemetry = instrument(world)
    res, _rev = _run_quickstart_like(world)
    assert world.result(res) == "published topic 0"
    assert exporter.get_finished_spans() == ()
    telemetry.close()


def test_closing_the_telemetry_ends_open_spans_and_detaches(make_world, spans):
    provider, exporter = spans
    world = make_world(interaction_timeout_secs=0)
    telemetry = instrument(world, tracer_provider=provider)
    world.spawn(waits_for_a_person)
    world.run_until_idle()
    telemetry.close()
    outcomes = {s.name: s.attributes["tickwork.outcome"] for s in exporter.get_finished_spans()}
    assert outcomes == {"tickwork.prompt": "closed", "tickwork.turn": "closed"}
    world.spawn(waits_for_a_person)
    world.run_until_idle()
    assert len(exporter.get_finished_spans()) == 2


def publisher(turn):
    (result,) = yield CallTools(ToolCall("c1", "publish", {"title": "x"}))
    return result.error


def asks_through_a_tool(turn):
    (result,) = yield CallTools(ToolCall("c1", "ask_user", {"prompt": "name?"}))
    return result.output


def test_a_denied_call_an_expired_approval_and_a_prompt_a_tool_opened(make_world, spans):
    provider, exporter = spans
    tools = _tools()
    tools.add(AskUserTool())
    world = make_world(tools=tools, interaction_timeout_secs=30)
    instrument(world, tracer_provider=provider)
    denied = world.spawn(publisher, name="denied")
    expired = world.spawn(publisher, name="expired")
    asker = world.spawn(asks_through_a_tool, name="asker")
    # The asker's tool job waits on a person on its lane thread: tick, never idle-wait.
    wait_for(lambda: world.tick() and len(world.hub.pending()) == 3, what="three prompts")
    for agent_id, request in world.hub.pending():
        if agent_id == denied:
            world.hub.answer(InteractionResponse(request.id, approved=False))
        elif agent_id == asker:
            world.hub.answer(InteractionResponse.text(request.id, "ada"))
    wait_for(lambda: world.tick() and world.result(asker) is not None, what="the asker's answer")
    world.clock.advance(31)  # past the last approval's deadline: it expires
    world.run_until_idle(timeout=10)
    assert world.result(asker) == "ada"
    finished = exporter.get_finished_spans()
    turns = {s.attributes["tickwork.agent_id"]: s for s in _by_name(finished, "tickwork.turn")}

    def under(agent: str, name: str) -> list[ReadableSpan]:
        ids = {turns[agent].context.span_id}
        found = []
        for span in sorted(finished, key=lambda s: s.start_time):
            if span.parent is not None and span.parent.span_id in ids:
                ids.add(span.context.span_id)
                if span.name == name:
                    found.append(span)
        return found

    outcomes = {
        agent: [s.attributes["tickwork.outcome"] for s in under(agent, "tickwork.tool")]
        for agent in (denied, expired)
    }
    assert outcomes == {denied: ["denied"], expired: ["denied"]}
    assert [s.attributes["tickwork.outcome"] for s in under(expired, "tickwork.prompt")] == [
        "expired"
    ]
    (tool_prompt,) = under(asker, "tickwork.prompt")
    assert tool_prompt.parent.span_id == turns[asker].context.span_id
    assert tool_prompt.attributes["tickwork.outcome"] == "answered"
    (ask_call,) = under(asker, "tickwork.tool")
    assert ask_call.attributes["tickwork.outcome"] == "ok"


_GLOBAL_PROVIDER_RUN = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import ManualClock, ScriptedModel, Think, World

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
if SET_PROVIDER:
    trace.set_tracer_provider(provider)

def worker(turn):
    reply = yield Think("plan")
    return reply.text

from runtime.telemetry import instrument

with World(clock=ManualClock(), models={"default": ScriptedModel(["ok"])}) as world:
    instrument(world)  # a second, explicit call must not trace every span twice
    world.spawn(worker, "go")
    world.run_until_idle(timeout=30)
print(sorted(span.name for span in exporter.get_finished_spans()))
"""


@pytest.mark.parametrize("set_provider", [True, False])
def test_a_world_made_after_the_host_set_a_tracer_provider_emits_spans_unasked(set_provider):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", f"SET_PROVIDER = {set_provider}\n{_GLOBAL_PROVIDER_RUN}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    spans = done.stdout.strip()
    # With the host's provider set: one turn and one think span, however often instrumented;
    # without it, the explicit instrument() traces to the no-op global provider.
    assert spans == ("['tickwork.think', 'tickwork.turn']" if set_provider else "[]")


def test_tracing_alone_reads_no_clock_for_tick_durations(make_world, spans, monkeypatch):
    # Spans need no tick durations: a world traced without metrics times no tick.
    provider, _exporter = spans
    reads: list[None] = []

    def counting_timer() -> float:
        reads.append(None)
        return 0.0

    world = make_world(interaction_timeout_secs=0)
    instrument(world, metrics=False, tracer_provider=provider)
    world.spawn(waits_for_a_person)
    monkeypatch.setattr(tick_module, "perf_counter", counting_timer)
    for _ in range(3):
        world.tick()
    assert reads == []
    assert world.hub.pending()  # the turn ran and its prompt is open: the probe saw it
    assert world.probes()[0].open_spans() == 2  # type: ignore[attr-defined]


def test_closing_the_world_ends_the_spans_still_open(spans):
    # Nothing told the probes the world was going: a waiting agent's turn and prompt
    # never reached the exporter.
    provider, exporter = spans
    with World(clock=ManualClock(), interaction_timeout_secs=0) as world:
        instrument(world, tracer_provider=provider)
        world.spawn(waits_for_a_person)
        world.run_until_idle()
        assert exporter.get_finished_spans() == ()
    assert {s.name: s.attributes["tickwork.outcome"] for s in exporter.get_finished_spans()} == {
        "tickwork.prompt": "closed",
        "tickwork.turn": "closed",
    }


@pytest.mark.parametrize("hook", ["applied", "turn_started", "turn_ended", "dispatched", "ticked"])
def test_a_host_probe_that_raises_is_logged_and_the_tick_goes_on(make_world, hook, caplog):
    # Unguarded, a probe raising in `applied` ended the tick with its inputs taken and
    # never applied (the agents it spawned never came), and one raising in `dispatched`
    # failed the agent.
    class Raising:
        def applied(self, inputs):
            pass

        def turn_started(self, rec):
            pass

        def turn_ended(self, rec, outcome, message):
            pass

        def dispatched(self, rec, action):
            pass

        def ticked(self, report, seconds):
            pass

    def raise_(*args):
        raise RuntimeError(f"probe bug in {hook}")

    probe = Raising()
    setattr(probe, hook, raise_)
    world = make_world(models={"default": ScriptedModel(["ok"])})
    world.add_probe(probe)
    agents = [world.spawn(helper, str(n)) for n in range(3)]
    world.run_until_idle()
    assert [world.result(a) for a in agents] == ["ok", "ok", "ok"]
    assert f"probe bug in {hook}" in caplog.text
    assert world.probes() == (probe,)


def test_instrumenting_twice_traces_once_and_a_scoped_instrument_leaves_others_probes(
    make_world, spans
):
    # Twice for one provider attached two probes (every span twice); and a `with
    # instrument(world):` handed back a probe already there, then took it away at its end.
    from runtime import WorldClosedError

    provider, exporter = spans
    world = make_world(models={"default": ScriptedModel(["ok"])})
    first = instrument(world, tracer_provider=provider)
    with instrument(world, tracer_provider=provider) as again:
        assert again.tracing is first.tracing
    assert world.probes() == (first.tracing,)  # the scoped one took nothing away
    world.spawn(helper, "x")
    world.run_until_idle()
    assert sorted(s.name for s in exporter.get_finished_spans()) == [
        "tickwork.think",
        "tickwork.turn",
    ]
    first.close()
    assert world.probes() == ()
    world.close()
    with pytest.raises(WorldClosedError):
        instrument(world, tracer_provider=provider)
    with pytest.raises(TypeError, match="instrument takes a World, got 'not a world'"):
        instrument("not a world")  # type: ignore[arg-type]


def test_a_span_processor_that_raises_on_end_leaves_no_other_span_open(make_world):
    # One failure in `applied` abandoned the rest of that tick's inputs (other agents'
    # spans never ended), and `close()` raised, leaving its other spans open.
    from opentelemetry.sdk.trace import SpanProcessor

    ended: list[str] = []

    class Raising(SpanProcessor):
        def on_end(self, span):
            ended.append(span.name)
            raise RuntimeError("processor bug")

    provider = TracerProvider()
    provider.add_span_processor(Raising())
    world = make_world(models={"default": ScriptedModel(["a", "b", "c"])})
    telemetry = instrument(world, tracer_provider=provider)
    for n in range(3):
        world.spawn(helper, str(n))
    world.run_until_idle()
    assert sorted(ended) == ["tickwork.think"] * 3 + ["tickwork.turn"] * 3
    assert telemetry.tracing is not None and telemetry.tracing.open_spans() == 0
    telemetry.close()  # does not raise
    provider.shutdown()


def sleeps_five(turn):
    yield Sleep(5)
    return "done"


def test_a_prompt_the_host_opened_while_idle_ends_when_answered_during_a_turn(spans):
    # Opened with no turn open, its span waited in the tracing's loose prompts; answered
    # once a turn had started, the settlement was looked for in the turn alone: the span
    # never ended, and the loose map grew by one per such prompt.
    from runtime import InteractionRequest

    provider, exporter = spans
    with World(clock=ManualClock(), interaction_timeout_secs=0) as world:
        telemetry = instrument(world, tracer_provider=provider)
        agent = world.spawn(sleeps_five, None, interactive=True)
        world.run_until_idle(timeout=10)
        request_id = world.hub.open(agent, InteractionRequest.free_text("", "while idle?"))
        world.tick()
        world.send(agent, "start a turn")
        world.tick()
        world.hub.answer(InteractionResponse.text(request_id, "yes"))
        world.run_until_idle(timeout=10)
        assert telemetry.tracing is not None and telemetry.tracing.open_spans() == 0
        prompts = [s for s in exporter.get_finished_spans() if s.name == "tickwork.prompt"]
        assert [s.attributes["tickwork.outcome"] for s in prompts] == ["answered"]


def test_a_prompt_the_host_opened_during_a_turn_ends_when_answered_after_it(spans):
    # Opened while a turn was open, its span was one of the turn's children and ended
    # "abandoned" with the turn, though the prompt was still open; its answer, after the
    # turn, found no span.
    provider, exporter = spans
    with World(clock=ManualClock(), interaction_timeout_secs=0) as world:
        telemetry = instrument(world, tracer_provider=provider)
        agent = world.spawn(sleeps_five, "go", interactive=True)
        world.tick()  # the turn starts and sleeps
        request_id = world.hub.open(agent, InteractionRequest.free_text("", "mid-turn?"))
        world.run_until_idle(timeout=10)  # the turn ends (the agent idle), the prompt open
        assert [s.name for s in exporter.get_finished_spans()] == ["tickwork.turn"]
        world.hub.answer(InteractionResponse.text(request_id, "yes"))
        world.tick()
        assert telemetry.tracing is not None and telemetry.tracing.open_spans() == 0
    finished = exporter.get_finished_spans()
    [turn] = [s for s in finished if s.name == "tickwork.turn"]
    [prompt] = [s for s in finished if s.name == "tickwork.prompt"]
    assert prompt.attributes["tickwork.outcome"] == "answered"
    assert prompt.parent is not None and prompt.parent.span_id == turn.context.span_id
    assert prompt.end_time > turn.end_time


def sleeps_then_thinks(turn):
    yield Sleep(5)
    reply = yield Think("plan")
    return reply.text


def _joined_turn(exporter: InMemorySpanExporter) -> tuple[ReadableSpan, list[ReadableSpan]]:
    finished = exporter.get_finished_spans()
    [turn] = [s for s in finished if s.name == "tickwork.turn"]
    return turn, [s for s in finished if s.parent is not None]


def test_a_resumed_worlds_turn_under_way_is_traced_from_the_resume_on(spans, tmp_path):
    # Its start was replayed, and replays call no probe: the tracing never saw it start,
    # so the rest of the turn (its model call, its end) had no span at all.
    provider, exporter = spans
    path = tmp_path / "run.db"
    world = World(clock=ManualClock(), journal=Journal.create(path))
    world.spawn(sleeps_then_thinks, "go")
    world.tick()  # the turn starts and sleeps
    world.close()
    resumed = resume(path, models={"default": ScriptedModel(["a plan"])})
    try:
        telemetry = instrument(resumed, tracer_provider=provider)
        resumed.run_until_idle(timeout=10)
        assert resumed.result("a1") == "a plan"
        assert telemetry.tracing is not None and telemetry.tracing.open_spans() == 0
    finally:
        resumed.close()
    turn, children = _joined_turn(exporter)
    assert turn.attributes["tickwork.turn_joined"] is True
    assert turn.attributes["tickwork.outcome"] == "ok"
    assert [(c.name, c.parent.span_id) for c in children] == [
        ("tickwork.think", turn.context.span_id)
    ]


def test_a_world_instrumented_mid_turn_traces_the_rest_of_the_turn(spans):
    provider, exporter = spans
    with World(clock=ManualClock(), models={"default": ScriptedModel(["a plan"])}) as world:
        world.spawn(sleeps_then_thinks, "go")
        world.tick()  # the turn starts and sleeps, untraced
        telemetry = instrument(world, tracer_provider=provider)
        world.run_until_idle(timeout=10)
        assert telemetry.tracing is not None and telemetry.tracing.open_spans() == 0
    turn, children = _joined_turn(exporter)
    assert turn.attributes["tickwork.turn_joined"] is True
    assert [c.name for c in children] == ["tickwork.think"]
    assert "tickwork.turn_joined" not in [k for s in children for k in (s.attributes or {})]


def test_an_agent_with_no_turn_under_way_gets_no_joined_span(spans):
    provider, exporter = spans
    with World(clock=ManualClock()) as world:
        agent = world.spawn(sleeps_five, None, interactive=True)  # idle: no turn yet
        world.run_until_idle(timeout=10)
        instrument(world, tracer_provider=provider)
        world.cancel(agent)
        world.run_until_idle(timeout=10)
    assert exporter.get_finished_spans() == ()
