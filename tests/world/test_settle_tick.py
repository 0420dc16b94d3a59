"""The settlement's tick: one outcome applied and its agent stepped, without the pipeline.

``TickMachine._settle_tick`` takes a tick whose only input is one outcome (a prompt settled,
a lane job done) with nothing else queued, and runs the stages that can have work in one
frame, the common answer applied by ``systems.collect_outcomes.collect_one``. Each test
here runs the same script on two worlds, one with the settlement's tick and one without
(``_settling`` off: the lean tick, which `test_lean_tick` compares with the whole
pipeline), and asks for the same report, agent state, index sets and digest after every
tick. Lane work is scripted (the effects below queue it and the script delivers it), so
both worlds see the same inputs at the same ticks.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components import InteractionKind, InteractionRequest, ToolCall, ToolResult
from runtime import (
    Ask,
    CallTools,
    InteractionResponse,
    ManualClock,
    ModelReply,
    Sleep,
    Think,
    TickReport,
    World,
)
from runtime.hub import InteractionHub
from runtime.lane.jobs import ToolOutcome
from runtime.world.digest import agent_fields
from runtime.world.state import PendingBatch

# One op per letter: a ask, z Sleep(0), s Sleep(1), m think, t two tools, r a tool that
# needs approval and one that does not, x raise, p ask twice (the answer after the first),
# v ask a question of the approval kind itself (its answer is not history).
_OPS = "azsmtrxpv"


def scripted(turn: Any) -> Generator[Any, Any, str]:
    """Run the ops of ``turn.message`` in order; return what the last answer said."""
    said = ""
    for op in str(turn.message):
        if op in {"a", "p"}:
            answer = yield Ask(InteractionRequest.free_text("", f"q{op}?"))
            said = answer.value
        elif op == "z":
            yield Sleep(0)
        elif op == "s":
            yield Sleep(1.0)
        elif op == "m":
            reply = yield Think("plan")
            said = reply.text
        elif op == "t":
            yield CallTools(ToolCall("c1", "echo", {"x": 1}), ToolCall("c2", "echo", {"x": 2}))
        elif op == "r":
            yield CallTools(ToolCall("c1", "risky", {"x": 1}), ToolCall("c2", "echo", {"x": 2}))
        elif op == "v":
            answer = yield Ask(InteractionRequest.tool_approval("", "deploy", {"x": 1}))
            said = str(answer.approved)
        elif op == "x":
            raise RuntimeError("scripted failure")
    return said


class ScriptedEffects:
    """Prompts go to the world's hub; model and tool jobs wait here for the script."""

    def __init__(self) -> None:
        self.hub: InteractionHub | None = None
        self.jobs: list[tuple[str, str, str, tuple[ToolCall, ...]]] = []

    def think(self, agent_id: str, ref: str, request: Any, cancel: Any) -> None:
        self.jobs.append(("m", agent_id, ref, ()))

    def run_tools(self, agent_id: str, ref: str, calls: tuple[ToolCall, ...], cancel: Any) -> None:
        self.jobs.append(("t", agent_id, ref, calls))

    def open_prompt(self, agent_id: str, request: InteractionRequest) -> None:
        assert self.hub is not None
        self.hub.open(agent_id, request)

    def cancel_prompt(self, request_id: str) -> None:
        assert self.hub is not None
        self.hub.cancel(request_id)

    def cancel_prompts_of(self, agent_id: str) -> None:
        assert self.hub is not None
        self.hub.cancel_for_agent(agent_id)

    def expire_prompts(self, now: float) -> None:
        assert self.hub is not None
        self.hub.expire_due(now)

    def requires_approval(self, tool: str) -> bool:
        return tool == "risky"


def _outcome(job: tuple[str, str, str, tuple[ToolCall, ...]], failed: bool) -> ToolOutcome:
    kind, agent_id, ref, calls = job
    if kind == "m":
        result = ToolResult("", error="down") if failed else ToolResult("", ModelReply("plan"))
        return ToolOutcome(agent_id, ref, (result,), 0.0)
    if failed:
        return ToolOutcome(agent_id, ref, (), 0.0, error="the job failed")
    return ToolOutcome(agent_id, ref, tuple(ToolResult(c.id, c.args["x"]) for c in calls), 0.0)


class Run:
    """One world running the script, with or without the settlement's tick."""

    def __init__(self, settling: bool, keep_finished: int | None, track: bool) -> None:
        self.clock = ManualClock()
        self.effects = ScriptedEffects()
        self.world = World(
            clock=self.clock,
            lockstep=False,
            effects=self.effects,
            interaction_timeout_secs=3.0,
            keep_finished=keep_finished,
            track_digests=track,
        )
        self.effects.hub = self.world.hub
        self.world._settling = settling
        self.settled = 0  # ticks the settlement's tick took
        self.reports: list[TickReport] = []
        self.world.observe(lambda report, inputs: self.reports.append(report))
        if settling:
            take = self.world._settle_tick

            def counted(inputs: list[tuple[int, object]]) -> TickReport | None:
                report = take(inputs)
                self.settled += report is not None
                return report

            self.world._settle_tick = counted  # type: ignore[method-assign]

    def do(self, event: tuple[str, int]) -> None:
        what, k = event
        world = self.world
        ids = [rec_id for rec_id in world._state.records]
        if what == "answer":
            pending = world.hub.pending()
            if pending:
                request = pending[k % len(pending)][1]
                if request.kind is InteractionKind.TOOL_APPROVAL:
                    world.hub.answer(InteractionResponse.approval(request.id, k % 2 == 0))
                else:
                    world.hub.answer(InteractionResponse.text(request.id, f"yes {k}"))
        elif what in ("deliver", "fail"):
            jobs = self.effects.jobs
            if jobs:
                job = jobs.pop(k % len(jobs))
                world.inbox.put(_outcome(job, what == "fail"))
        elif what == "advance":
            self.clock.advance(0.5 * (k % 4))
        elif ids:
            agent_id = ids[k % len(ids)]
            if world.status(agent_id).kind.is_terminal:
                return
            getattr(world, what)(agent_id)

    def snapshot(self) -> tuple[Any, ...]:
        world = self.world
        state = world._state
        report = self.reports[-1]
        agents = []
        for rec in state.records.values():
            turn = rec.turn
            agents.append(
                (
                    agent_fields(rec, state.journal_format),
                    repr(turn.send_value),
                    _pending(turn.pending),
                    rec.sleep_seq,
                    [(e.role, e.content) for e in rec.history.entries],
                    repr(rec.holding),
                )
            )
        return (
            (report.tick, report.now, report.inputs, report.stepped, report.changed),
            report.digest,
            agents,
            list(state.ready),
            list(state.held),
            list(state.lane_waiting),
            list(state.prompt_changed),
            [rec.id for rec in state.to_abort],
            list(state.dirty),
            sorted(state.sleepers),
            state.stale_dropped,
            [(agent, request.id) for agent, request in world.hub.pending()],
            list(self.effects.jobs),
            len(world.inbox),
        )


def _pending(pending: Any) -> Any:
    if isinstance(pending, PendingBatch):
        return (pending.ref, pending.calls, pending.approvals, pending.results)
    return repr(pending)


_EVENTS = st.tuples(
    st.sampled_from(
        ["answer"] * 6
        + ["deliver"] * 6
        + ["fail", "advance", "advance", "pause", "resume", "cancel", "interrupt"]
    ),
    st.integers(0, 7),
)


def _compare(
    scripts: list[str],
    steps: list[list[tuple[str, int]]],
    keep_finished: int | None,
    track: bool,
    digest_each_tick: bool,
) -> Run:
    runs = [Run(True, keep_finished, track), Run(False, keep_finished, track)]
    try:
        for run in runs:
            for script in scripts:
                run.world.spawn(scripted, script)
        for events in steps:
            for run in runs:
                for event in events:
                    run.do(event)
                run.world.tick()
            fast, whole = (run.snapshot() for run in runs)
            assert fast == whole
            if digest_each_tick:
                assert runs[0].world.digest() == runs[1].world.digest()
        assert runs[0].world.digest() == runs[1].world.digest()
        assert runs[1].settled == 0
        return runs[0]
    finally:
        for run in runs:
            run.world.close()


@settings(max_examples=60, deadline=None)
@given(
    scripts=st.lists(st.text(_OPS, min_size=1, max_size=6), min_size=1, max_size=4),
    steps=st.lists(st.lists(_EVENTS, max_size=2), min_size=1, max_size=40),
    keep_finished=st.sampled_from([None, 0, 2]),
    track=st.booleans(),
    digest_each_tick=st.booleans(),
)
def test_the_settlement_tick_gives_what_the_lean_tick_gives(
    scripts: list[str],
    steps: list[list[tuple[str, int]]],
    keep_finished: int | None,
    track: bool,
    digest_each_tick: bool,
) -> None:
    _compare(scripts, steps, keep_finished, track, digest_each_tick)


def test_answers_and_outcomes_one_at_a_time_take_the_settlement_tick() -> None:
    # Every answer and delivery alone in its tick, with ticks between for what the step
    # queued (a prompt's opening arrives as an input of its own).
    scripts = ["azamtp", "mrta", "tzsa", "aaa"]
    steps: list[list[tuple[str, int]]] = []
    for i in range(30):
        steps += [[("answer", i)], [], [], [("deliver", i)], [], []]
        if i % 7 == 3:
            steps += [[("advance", 3)], []]
    fast = _compare(scripts, steps, None, track=False, digest_each_tick=False)
    assert fast.settled >= 15
    statuses = {fast.world.status(a).kind.value for a in fast.world._state.records}
    assert statuses <= {"complete", "error"}  # the scripts ran to their ends


@pytest.mark.parametrize(
    ("scripts", "steps"),
    [
        # An agent fails in the step after its answer: its abort is queued for the next
        # tick, in which another agent's answer arrives alone. That tick is the lean one
        # (the abort is a stage the settlement's tick leaves out).
        (["ax", "a"], [[], [], [("answer", 0)], [("answer", 0)], [], []]),
        # A sleeper comes due in the tick of another agent's answer.
        (["sa", "a"], [[], [], [("advance", 2), ("answer", 0)], [], [], [("answer", 0)], []]),
        # A prompt's deadline passes in the tick of another agent's outcome.
        (["a", "m"], [[], [], [("advance", 3)], [("advance", 3), ("deliver", 0)], [], []]),
        # Agents stepping every tick (Sleep(0)) beside the answered one.
        (["zzzzzz", "azazaz", "zzzz"], [[("answer", 0)], [], [("answer", 0)]] * 4),
    ],
    ids=["abort_queued", "sleeper_due", "prompt_due", "others_ready"],
)
def test_work_beside_the_outcome_is_done_as_the_lean_tick_does_it(
    scripts: list[str], steps: list[list[tuple[str, int]]]
) -> None:
    fast = _compare(scripts, steps, None, track=True, digest_each_tick=False)
    if scripts == ["ax", "a"]:
        assert fast.settled == 1  # the first answer's tick; the second has an abort queued
    else:
        assert fast.settled > 0


def test_a_paused_agent_s_answer_is_held_alike() -> None:
    steps = [[], [], [("pause", 0)], [("answer", 0)], [], [("resume", 0)], [], [], []]
    _compare(["aa"], steps, None, track=True, digest_each_tick=True)


@pytest.mark.parametrize("watch", ["host_system", "metrics"])
def test_a_host_system_or_metrics_keep_the_whole_tick(watch: str) -> None:
    run = Run(True, None, False)
    try:
        agent = run.world.spawn(scripted, "aa")
        if watch == "host_system":
            run.world.add_system(lambda ctx: None, after="step_behaviors")
        else:
            run.world.record_metrics()
        for _ in range(3):
            run.world.tick()
        run.do(("answer", 0))
        run.world.tick()
        assert run.settled == 0
        assert [e.content for e in run.world.history(agent)][-2:] == ["yes 0", "qa?"]
    finally:
        run.world.close()
