"""OpenTelemetry spans of what agents wait on, through ``opentelemetry-api`` alone.

`Tracing` is a world probe (`runtime.world.probe`): it starts and ends spans from the tick
thread's view of events, so a span lasts as long as the agent waited:

- ``tickwork.turn``: a turn, from its start to its end (a root span, or a child of the
  parent agent's turn for a spawned agent's first turn). A turn already under way when
  the probe first hears of it (a resumed world's: replays call no probe; a world
  instrumented mid-turn) gets its span then, marked ``tickwork.turn_joined``;
- ``tickwork.think``: a model call, from dispatch to the applied reply;
- ``tickwork.tool``: one per tool call, from the ``CallTools`` dispatch (approval wait
  included) to the applied batch outcome;
- ``tickwork.prompt``: a prompt, from its opening to its settlement (an approval's prompt
  is a child of its tool call's span). A prompt the turn did not open itself (the
  host's, a tool's) is a child of the turn open then, and may outlive it: its span ends
  at its settlement.

Every span carries ``tickwork.agent_id`` and ends with ``tickwork.outcome``: ``ok`` or
``error`` (the span's status is then ERROR with the message), ``denied`` for a tool call
refused by a person, ``answered``/``cancelled``/``expired`` for a prompt, and
``interrupted``/``cancelled`` for anything open when its turn was interrupted or its agent
cancelled. Model calls add ``tickwork.model`` and the reply's token usage
(``gen_ai.usage.input_tokens``/``output_tokens``, when the reply has ``usage``).

tickwork configures no provider and no exporter: spans go wherever the host's tracer
provider sends them, and nowhere (at a no-op tracer's cost) when it has set none.
"""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode, Tracer, TracerProvider

from components import Phase, PromptOpened, PromptSettled, response_approved
from runtime._version import __version__
from runtime.lane.jobs import ToolOutcome
from runtime.world.actions import Action, Ask, CallTools, Think
from runtime.world.inputs import EffectFailed
from runtime.world.probe import ignore_ticks
from runtime.world.state import AgentRecord, PendingBatch

__all__ = ["PROMPT", "THINK", "TOOL", "TURN", "Tracing"]

log = logging.getLogger("tickwork.telemetry")

TURN = "tickwork.turn"
THINK = "tickwork.think"
TOOL = "tickwork.tool"
PROMPT = "tickwork.prompt"

_ROOT = Context()  # turns are roots: never children of whatever a host has current
_DONE = Phase.DONE


class _Turn:
    """The open spans of one agent's turn (tick thread only)."""

    __slots__ = ("adopted", "approvals", "context", "prompts", "span", "thinks", "tools")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.context = trace.set_span_in_context(span, _ROOT)
        self.thinks: dict[str, Span] = {}  # model call id -> span
        self.tools: dict[str, dict[str, Span]] = {}  # batch id -> call id -> span
        self.prompts: dict[str, Span] = {}  # request id -> span
        self.approvals: dict[str, tuple[str, str]] = {}  # approval request -> (batch, call)
        # Prompts in `prompts` the turn did not open (the host's, a tool's): they may
        # outlive it, and their spans end at their settlement, not with the turn.
        self.adopted: set[str] = set()

    def children(self) -> list[Span]:
        spans = [*self.thinks.values(), *self.prompts.values()]
        for calls in self.tools.values():
            spans.extend(calls.values())
        return spans


class Tracing:
    """The probe that turns a live world's events into spans (see the module docstring).

    Attach with ``world.add_probe(Tracing())`` or, simpler, ``runtime.telemetry.instrument``.
    ``close()`` ends every span still open (outcome ``closed``); the world calls it as
    it closes.
    """

    guarded = True  # it guards every hook itself: the tick calls it without a wrapper

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self.tracer_provider = tracer_provider  # None: the global one (`instrument` matches)
        self._tracer: Tracer = trace.get_tracer(
            "tickwork", __version__, tracer_provider=tracer_provider
        )
        self._turns: dict[str, _Turn] = {}  # agent id -> its open turn
        self._loose: dict[str, Span] = {}  # prompts of agents with no turn open (host's)
        self._failed = False

    # -- the probe -----------------------------------------------------------------------

    def applied(self, inputs: list[tuple[int, object]]) -> None:
        for _seq, item in inputs:  # each alone: one failure leaves the others' spans
            try:
                cls = type(item)
                if cls is ToolOutcome:
                    self._outcome(item)  # type: ignore[arg-type]
                elif cls is PromptSettled:
                    self._settled(item)  # type: ignore[arg-type]
                elif cls is PromptOpened:
                    self._opened(item)  # type: ignore[arg-type]
                elif cls is EffectFailed:
                    self._effect_failed(item)  # type: ignore[arg-type]
            except Exception:
                self._log()

    def turn_started(self, rec: AgentRecord) -> None:
        try:
            old = self._turns.pop(rec.id, None)
            if old is not None:
                self._let_prompts_outlive(old)
                _end_turn(old, "abandoned", "")
            self._start_turn(rec, joined=False)
        except Exception:
            self._log()

    def turn_ended(self, rec: AgentRecord, outcome: str, message: str) -> None:
        try:
            turn = self._turns.pop(rec.id, None) or self._join(rec)
            if turn is None:
                return
            self._let_prompts_outlive(turn)
            _end_turn(turn, outcome, message)
        except Exception:
            self._log()

    def dispatched(self, rec: AgentRecord, action: Action) -> None:
        try:
            turn = self._turns.get(rec.id) or self._join(rec)
            if turn is None:
                return
            cls = type(action)
            inflight = rec.turn.inflight
            if cls is Think and inflight is not None:
                assert isinstance(action, Think)
                attributes = {
                    "tickwork.agent_id": rec.id,
                    "tickwork.model": action.model,
                    "tickwork.call_id": inflight,
                }
                turn.thinks[inflight] = self._child(THINK, turn.context, attributes)
            elif cls is CallTools and isinstance(rec.turn.pending, PendingBatch):
                self._tools(rec, turn, rec.turn.pending)
            elif cls is Ask and inflight is not None:
                assert isinstance(action, Ask)
                request = action.request
                turn.prompts[inflight] = self._prompt(
                    rec.id, inflight, request.kind.value, request.stage, turn.context
                )
        except Exception:
            self._log()

    ticked = ignore_ticks  # spans need no tick durations: the tick skips the call

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """End every span still open with outcome ``closed`` (the world is going away)."""
        turns, self._turns = self._turns, {}
        loose, self._loose = self._loose, {}
        for turn in turns.values():
            _end_turn(turn, "closed", "")
        for span in loose.values():
            _end(span, "closed")

    def open_spans(self) -> int:
        """How many spans are open now (turns and their children)."""
        turns = list(self._turns.values())
        return len(self._loose) + sum(1 + len(t.children()) for t in turns)

    # -- helpers -------------------------------------------------------------------------

    def _start_turn(self, rec: AgentRecord, *, joined: bool) -> _Turn:
        parent = self._turns.get(rec.agent.parent) if rec.agent.parent else None
        attributes: dict[str, Any] = {
            "tickwork.agent_id": rec.id,
            "tickwork.turn": rec.turn.generation,
            "tickwork.behavior": rec.spec.behavior,
        }
        if rec.agent.name:
            attributes["tickwork.agent_name"] = rec.agent.name
        if joined:
            attributes["tickwork.turn_joined"] = True
        span = self._tracer.start_span(
            TURN, _ROOT if parent is None else parent.context, attributes=attributes
        )
        turn = self._turns[rec.id] = _Turn(span)
        return turn

    def _join(self, rec: AgentRecord) -> _Turn | None:
        """A span for a turn under way that this probe did not see start: the turn of a
        resumed world (its start was replayed, and replays call no probe) or of a world
        instrumented mid-turn. It starts now, marked ``tickwork.turn_joined``; None for
        an agent with no turn under way."""
        if rec.turn.phase is _DONE:
            return None
        return self._start_turn(rec, joined=True)

    def _child(self, name: str, context: Context, attributes: dict[str, Any]) -> Span:
        return self._tracer.start_span(name, context, attributes=attributes)

    def _prompt(self, agent_id: str, request_id: str, kind: str, stage: str, ctx: Context) -> Span:
        attributes = {
            "tickwork.agent_id": agent_id,
            "tickwork.prompt_id": request_id,
            "tickwork.prompt_kind": kind,
        }
        if stage:
            attributes["tickwork.stage"] = stage
        return self._child(PROMPT, ctx, attributes)

    def _tools(self, rec: AgentRecord, turn: _Turn, pending: PendingBatch) -> None:
        calls: dict[str, Span] = {}
        for call in pending.calls:
            attributes = {
                "tickwork.agent_id": rec.id,
                "tickwork.tool": call.name,
                "tickwork.call_id": call.id,
            }
            calls[call.id] = self._child(TOOL, turn.context, attributes)
        turn.tools[pending.ref] = calls
        for request_id, call_id in pending.approvals.items():
            turn.approvals[request_id] = (pending.ref, call_id)
            ctx = trace.set_span_in_context(calls[call_id], _ROOT)
            turn.prompts[request_id] = self._prompt(rec.id, request_id, "tool_approval", "", ctx)

    def _let_prompts_outlive(self, turn: _Turn) -> None:
        """Move the ending ``turn``'s prompts that it did not open itself and that are
        still open (the host's, a tool's) to the loose prompts: each span ends at its
        settlement with how it settled (a host's prompt answered after the turn ended
        was reported ``abandoned`` with the turn, and its answer then found no span)."""
        for request_id in turn.adopted:
            span = turn.prompts.pop(request_id, None)
            if span is not None:
                self._loose[request_id] = span

    def _outcome(self, outcome: ToolOutcome) -> None:
        turn = self._turns.get(outcome.agent_id)
        if turn is None:
            return  # stale: its turn already ended (and its spans with it)
        think = turn.thinks.pop(outcome.batch_id, None)
        if think is not None:
            result = outcome.results[0] if outcome.results else None
            if result is None or not result.ok:
                _end(think, "error", (result.error if result is not None else None) or "no reply")
                return
            _usage(think, result.output)
            _end(think, "ok")
            return
        calls = turn.tools.pop(outcome.batch_id, None)
        if calls is None:
            return
        for result in outcome.results:
            span = calls.pop(result.call_id, None)
            if span is None:
                continue
            if result.ok:
                _end(span, "ok")
            else:
                _end(span, "error", result.error or "")
        for span in calls.values():
            _end(span, "error", "no result was reported for this call")

    def _opened(self, opened: PromptOpened) -> None:
        request = opened.request
        turn = self._turns.get(opened.agent_id)
        if turn is not None and request.id in turn.prompts:
            return  # dispatched by the turn: its span started then
        # Opened by a tool inside a lane job (AskUserTool), or by the host for the agent.
        span = self._prompt(
            opened.agent_id,
            request.id,
            request.kind.value,
            request.stage,
            turn.context if turn is not None else _ROOT,
        )
        if turn is None:
            self._loose[request.id] = span
        else:
            turn.prompts[request.id] = span
            turn.adopted.add(request.id)

    def _settled(self, settled: PromptSettled) -> None:
        request_id = settled.request_id
        turn = self._turns.get(settled.agent_id)
        if turn is None:
            span = self._loose.pop(request_id, None)
            if span is not None:
                _end(span, settled.how.value)
            return
        # Or opened with no turn open (the host's) and answered once a turn started: it
        # stayed in `_loose` for good, its span never ended.
        span = turn.prompts.pop(request_id, None) or self._loose.pop(request_id, None)
        turn.adopted.discard(request_id)
        if span is not None:
            _end(span, settled.how.value)
        approval = turn.approvals.pop(request_id, None)
        if approval is not None and not response_approved(settled.response):
            batch, call_id = approval
            call = turn.tools.get(batch, {}).pop(call_id, None)
            if call is not None:
                _end(call, "denied")

    def _effect_failed(self, failed: EffectFailed) -> None:
        turn = self._turns.get(failed.agent_id)
        if turn is None:
            return
        span = turn.prompts.pop(failed.ref, None) or turn.thinks.pop(failed.ref, None)
        if span is not None:
            _end(span, "error", failed.error)

    def _log(self) -> None:
        # Telemetry must never fail an agent or the tick: log the first failure, then hush.
        if not self._failed:
            self._failed = True
            log.exception("tickwork tracing failed; spans may be missing from here on")


def _end(span: Span, outcome: str, error: str = "") -> None:
    # Guarded: a span processor whose `on_end` raises (the SDK calls it in `end`) must not
    # leave the other spans of a turn, or of a `close`, open.
    try:
        span.set_attribute("tickwork.outcome", outcome)
        if outcome == "error":
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()
    except Exception:
        log.debug("a span could not be ended", exc_info=True)


def _end_turn(turn: _Turn, outcome: str, message: str) -> None:
    for span in turn.children():
        _end(span, outcome if outcome != "ok" else "abandoned")
    _end(turn.span, outcome, message)


def _usage(span: Span, reply: object) -> None:
    usage = getattr(reply, "usage", None)
    if usage is None:
        return
    for attr in ("input_tokens", "output_tokens"):
        value = getattr(usage, attr, None)
        if isinstance(value, int) and not isinstance(value, bool):
            span.set_attribute(f"gen_ai.usage.{attr}", value)
    finish_reason = getattr(reply, "finish_reason", None)
    if isinstance(finish_reason, str):
        span.set_attribute("gen_ai.response.finish_reasons", (finish_reason,))
