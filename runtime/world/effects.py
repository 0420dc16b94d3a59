"""Live effects: what the tick thread's requests for work turn into in a live world.

Tool batches travel as `ToolBatch`: plain data (the registry, the calls, the agent id and a
`HubRef`) that pickles, so the same job runs on the lane's own threads or on an executor in
another process (a Dask worker), where each call's tool is looked up by name in the shipped
registry.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from components import InteractionRequest, ToolCall, ToolResult
from components.tools import build_result
from runtime.cancel import INTERRUPTED, Cancelled, CancelToken
from runtime.errors import DuplicateRequestError, LaneClosedError, ModelError
from runtime.hub import InteractionHub
from runtime.lane.jobs import ToolJob, ToolOutcome, build_job
from runtime.lane.tool_lane import ToolLane
from runtime.lane.values import NotJSON, json_value
from runtime.models.base import Model, ModelReply, ModelRequest
from runtime.models.streaming import Stream, StreamHub
from runtime.models.usage import Usage, UsageMeter
from runtime.tools.base import SupportsAsk
from runtime.tools.registry import ToolRegistry
from runtime.world import sigint
from runtime.world.inputs import EffectFailed, Inbox
from runtime.world.lockstep import Lockstep

__all__ = ["RESTART_ERROR", "HubRef", "LiveEffects", "ToolBatch"]

EARLY_SLICE = 16
"""Held lane jobs that go out before the release while a lane has as many free permits (a
lane narrower than that: while it is idle), in a tick no journal holds
(`LiveEffects._submit`)."""

RESTART_ERROR = "interrupted by a restart before completion; verify before retrying"
"""The result of a tool call that was in flight when the process died (see `runtime.resume`)."""


class HubRef:
    """A handle on this process's interaction hub that a tool job can carry anywhere.

    ``resolve()`` gives the hub itself. A copy made by pickling is detached and resolves to
    None, in another process (a Dask worker has no hub) and in this one alike: a job that
    crossed a pickle boundary is not running on a lane thread of this world, so it could not
    step off the lane while it waits, and a job waiting on a person must not hold lane
    capacity (DESIGN.md, the tool lane). A tool that asks then gets a clear error result.
    """

    __slots__ = ("_hub",)

    def __init__(self, hub: SupportsAsk | None) -> None:
        self._hub = hub

    def resolve(self) -> SupportsAsk | None:
        """The live hub, or None for a detached copy."""
        return self._hub

    def __reduce__(self) -> tuple[Any, ...]:
        return (HubRef, (None,))

    def __repr__(self) -> str:
        return "<HubRef live>" if self._hub is not None else "<HubRef detached>"


_NOT_INTERRUPTED: frozenset[str] = frozenset()  # a live batch's: every call runs


# Not frozen on purpose: one is built per tool batch on the tick thread, and a frozen
# dataclass's __init__ costs 3.5x a plain one (measured: ~530 ns vs ~150 ns). Treat as
# immutable.
@dataclass(slots=True)
class ToolBatch:
    """One agent's batch of tool calls as plain, picklable data: what a tool job runs.

    Calling it with the job's token runs the calls one after another and returns one result
    per call, in call order; each call's tool is found by name in ``tools`` wherever the
    batch runs. ``hub`` is None where tools must not ask a person (an executor lane).
    ``interrupted`` names calls not to run: a restart cut them short, and they get the
    ``RESTART_ERROR`` result instead (their tools are not idempotent). ``batch_id`` names
    the prompts its tools ask (`ToolContext.ask`).
    """

    tools: ToolRegistry
    calls: tuple[ToolCall, ...]
    agent_id: str
    hub: HubRef | None = None
    interrupted: frozenset[str] = frozenset()
    batch_id: str = ""

    def __call__(self, cancel: CancelToken) -> list[ToolResult]:
        """Run the batch.

        Raises:
            Cancelled: ``cancel`` fired; no further call is started.
        """
        hub = None if self.hub is None else self.hub.resolve()
        if not self.interrupted:
            return self.tools.run_batch(
                self.calls, agent_id=self.agent_id, cancel=cancel, hub=hub, batch_id=self.batch_id
            )
        results = []
        for call in self.calls:
            if call.id in self.interrupted:
                results.append(ToolResult(call.id, error=RESTART_ERROR))
                continue
            cancel.raise_if_cancelled()
            results.append(
                self.tools.run_call(
                    call, agent_id=self.agent_id, cancel=cancel, hub=hub, batch_id=self.batch_id
                )
            )
        return results


class LiveEffects:
    """Model calls go to the inference lane, tool batches to the tool lane, prompts to
    the hub. Whatever comes of them (including a failure to start) comes back through
    the inbox as an input, never by touching the world from another thread.

    ``tools_can_ask`` says whether tool jobs get the hub: only when the tool lane runs jobs
    on its own threads, where a waiting ``ask`` steps off the lane. Jobs for an executor
    lane (threads that are not the lane's, or another process) get none.

    With ``lockstep``, every job is tracked there before it is submitted, due at the tick's
    time (``now()``) plus its virtual duration: a batch takes the sum of its tools'
    ``virtual_duration``, a model call its model's (see `runtime.world.lockstep`).
    """

    def __init__(
        self,
        *,
        inbox: Inbox,
        hub: InteractionHub,
        tool_lane: ToolLane,
        inference_lane: ToolLane,
        tools: ToolRegistry,
        models: Mapping[str, Model],
        tools_can_ask: bool = True,
        lockstep: Lockstep | None = None,
        now: Callable[[], float] | None = None,
        streams: StreamHub | None = None,
        usage: UsageMeter | None = None,
    ) -> None:
        self._inbox = inbox
        self._hub = hub
        self._tool_lane = tool_lane
        self._inference_lane = inference_lane
        self._tools = tools
        self._models = models
        self._tool_hub = HubRef(hub) if tools_can_ask else None
        self._streams = streams if streams is not None else StreamHub()
        self._usage = usage if usage is not None else UsageMeter()
        self._lockstep = lockstep
        self._now = now if now is not None else _time_zero
        # Lane jobs asked for while held (`hold`), submitted at the last `release`.
        self._held: list[tuple[ToolLane, ToolJob]] | None = None
        self._holds = 0  # `hold` calls not yet released: holds nest
        self._sliced = False  # the outermost hold asked for slices

    def hold(self, *, slices: bool = False) -> None:
        """Hold lane jobs from now until the matching ``release``; holds nest.

        DispatchWork holds a tick's jobs so that each lane takes them under one lock
        (`ToolLane.submit_all`) instead of one lock round trip per job, which workers
        finishing jobs contend for. It asks for ``slices``: when its hold is the only one,
        every `EARLY_SLICE` jobs go out as they are reached, so a big dispatch (10,000
        agents thinking at once) does not leave the lanes idle to its end. A hold that does
        not ask for slices (the journal's, below) keeps every job to its release, those of
        any hold nested inside it too.

        A journaled world holds a tick's jobs until the journal has committed the tick: a
        job started earlier could do its work and then be lost with the tick if the process
        died, and the resumed run, which replays only committed ticks, would dispatch it
        again. Held, a call runs at most once whatever moment the process dies at. In
        lockstep a held job is tracked from the moment it is asked for; the next tick, which
        waits for it, starts only after the release.
        """
        self._holds += 1
        if self._held is None:
            self._held = []
            self._sliced = slices  # the outermost hold decides

    def release(self, *, drop: bool = False) -> None:
        """End a ``hold``; the last one submits the held jobs, lane by lane, each lane's in
        the order they were asked for, and stops holding.

        A tick that is never journaled drops its jobs instead, so that none of them starts
        (no job runs whose dispatch a resume would not find): one that Ctrl-C abandoned
        (`runtime.world.sigint.abandoned`), or one whose journal write failed (``drop``).
        """
        if self._holds > 1:
            self._holds -= 1
            return
        self._holds = 0
        held, self._held = self._held, None
        if not held:
            return
        if drop or sigint.abandoned():
            if self._lockstep is not None:
                for _lane, job in held:
                    self._lockstep.untrack(job)
            return
        self._submit_held(held)

    def _submit_held(self, held: list[tuple[ToolLane, ToolJob]]) -> None:
        """Submit held jobs, lane by lane, each lane's in the order they were asked for."""
        if len(held) == 1:
            self._start(*held[0])
            return
        by_lane: dict[int, tuple[ToolLane, list[ToolJob]]] = {}
        for lane, job in held:
            group = by_lane.get(id(lane))
            if group is None:
                by_lane[id(lane)] = (lane, [job])
            else:
                group[1].append(job)
        for lane, jobs in by_lane.values():
            self._start_all(lane, jobs)

    def _refuse(self, jobs: list[ToolJob], error: str) -> None:
        """A closed lane refused ``jobs``: each agent gets an outcome of ``error`` for every
        call, through the inbox (so a journal records it and a replay applies it)."""
        for job in jobs:
            if self._lockstep is not None:
                self._lockstep.untrack(job)
            results = tuple(ToolResult(call.id, error=error) for call in job.calls)
            self._inbox.put(ToolOutcome(job.agent_id, job.batch_id, results, 0.0, error))

    def think(self, agent_id: str, ref: str, request: ModelRequest, cancel: CancelToken) -> None:
        model = self._models.get(request.model)
        if model is None:
            known = ", ".join(sorted(self._models)) or "none"
            error = f"unknown model {request.model!r} (known: {known})"
            self._inbox.put(ToolOutcome(agent_id, ref, (ToolResult(ref, error=error),), 0.0))
            return
        call = ToolCall(ref, f"model:{request.model}")
        # The call's stream is opened when the call starts, on its lane thread: a call
        # that never runs (cancelled or interrupted while queued, dropped with its tick,
        # refused by a closed lane) then leaves no stream open in the world's hub, and a
        # queued call holds one object fewer for the collector.
        run = _ModelCall(model, request, agent_id, ref, self._streams, self._usage, cancel)
        # A model call has no bound of its own here: a provider bounds its own requests.
        job = build_job(agent_id, ref, run, (call,), cancel, None)
        # Its virtual duration matters in lockstep only (a `getattr` with a default that
        # misses raises and catches inside, ~1 us a call).
        duration = 0.0 if self._lockstep is None else getattr(model, "virtual_duration", 0.0)
        self._submit(self._inference_lane, job, duration)

    def run_tools(
        self, agent_id: str, ref: str, calls: tuple[ToolCall, ...], cancel: CancelToken
    ) -> None:
        run = ToolBatch(self._tools, calls, agent_id, self._tool_hub, _NOT_INTERRUPTED, ref)
        self._submit_tools(agent_id, ref, run, calls, cancel)

    def restart_tools(
        self, agent_id: str, ref: str, calls: tuple[ToolCall, ...], cancel: CancelToken
    ) -> None:
        """Finish a batch that was in flight when the process died (`runtime.resume`).

        Calls of idempotent tools run again; every other call gets ``RESTART_ERROR``, for
        it may have done its work already. One outcome carries them all, through the inbox,
        so the journal records what the restart decided.
        """
        tools = self._tools
        again = frozenset(c.id for c in calls if tools.is_idempotent(c.name))
        interrupted = frozenset(c.id for c in calls) - again
        if not again:
            results = tuple(ToolResult(c.id, error=RESTART_ERROR) for c in calls)
            self._inbox.put(ToolOutcome(agent_id, ref, results, 0.0))
            return
        run = ToolBatch(tools, calls, agent_id, self._tool_hub, interrupted, ref)
        self._submit_tools(agent_id, ref, run, calls, cancel)

    def _submit_tools(
        self,
        agent_id: str,
        ref: str,
        run: ToolBatch,
        calls: tuple[ToolCall, ...],
        cancel: CancelToken,
    ) -> None:
        """Submit a batch, bounded by its tools' timeouts (the lane gives up a batch whose
        tool ignores its timeout: `ToolJob.bound`)."""
        if self._lockstep is None:
            job = build_job(agent_id, ref, run, calls, cancel, self._tools.time_bound(calls))
            self._submit(self._tool_lane, job, 0.0)
            return
        duration, bound = self._tools.lockstep_bounds(calls)
        self._submit(self._tool_lane, build_job(agent_id, ref, run, calls, cancel, bound), duration)

    def _submit(self, lane: ToolLane, job: ToolJob, duration: float) -> None:
        """Start ``job`` on ``lane`` now, or at ``release`` while a tick holds its jobs; in
        lockstep, track it first so that the next tick waits for it."""
        lockstep = self._lockstep
        if lockstep is not None:
            lockstep.track(job, due=self._now() + duration)
        held = self._held
        if held is None:
            self._start(lane, job)
            return
        held.append((lane, job))
        if (
            len(held) >= EARLY_SLICE
            and self._sliced
            and lockstep is None
            and lane.free_permits() >= min(EARLY_SLICE, lane.capacity)
        ):
            # A big dispatch (10,000 spawns thinking at once) hands its first jobs to the
            # lanes while it goes on, rather than leaving them idle to its end; once a lane
            # is full, more jobs would only queue behind its lock, which 64 workers
            # finishing jobs contend for, so the rest wait for the release. Only a tick's
            # own hold: a journaled tick's jobs wait for its commit (see `hold`).
            self._held = []
            self._submit_held(held)

    def _start(self, lane: ToolLane, job: ToolJob) -> None:
        """Submit ``job`` to ``lane``; a closed lane refuses it as `_start_all` refuses a
        tick's jobs (it failed the agent in DispatchWork instead, where a replay, which
        starts nothing, could not fail it: one job or several, the same outcome now)."""
        try:
            lane.submit(job)
        except LaneClosedError as exc:
            self._refuse([job], str(exc))
        except BaseException:
            if self._lockstep is not None:
                self._lockstep.untrack(job)
            raise

    def _start_all(self, lane: ToolLane, jobs: list[ToolJob]) -> None:
        """Submit ``jobs`` to ``lane`` together. A closed lane refuses them all: each job's
        agent gets an outcome saying so, through the inbox, rather than a tick that raises
        for every agent whose work was held with it."""
        try:
            lane.submit_all(jobs)
        except LaneClosedError as exc:
            self._refuse(jobs, str(exc))
        except BaseException:
            if self._lockstep is not None:
                for job in jobs:
                    self._lockstep.untrack(job)
            raise

    def open_prompt(self, agent_id: str, request: InteractionRequest) -> None:
        try:
            self._hub.open(agent_id, request)
        except DuplicateRequestError as exc:
            self._inbox.put(EffectFailed(agent_id, request.id, str(exc), "DuplicateRequestError"))

    def cancel_prompt(self, request_id: str) -> None:
        self._hub.cancel(request_id)

    def cancel_prompts_of(self, agent_id: str) -> None:
        self._hub.cancel_for_agent(agent_id)

    def expire_prompts(self, now: float) -> None:
        self._hub.expire_due(now)

    def requires_approval(self, tool: str) -> bool:
        return self._tools.requires_approval(tool)


def _time_zero() -> float:
    return 0.0


_set_request_stream = ModelRequest.__dict__["stream"].__set__


class _ModelCall:
    """One model call: the body of its lane job (called with the job's token) and, as
    ``stop``, the turn token's callback that stops its stream.

    One object per call where a closure (function, cell, closure tuple), a ``partial`` and
    its argument tuples were six: every call in flight holds it, and a wave of 10,000
    agents thinking at once made the collector walk all of them (asyncio_10k).
    """

    __slots__ = ("agent_id", "model", "ref", "request", "stream", "streams", "token", "usage")

    def __init__(
        self,
        model: Model,
        request: ModelRequest,
        agent_id: str,
        ref: str,
        streams: StreamHub,
        usage: UsageMeter,
        token: CancelToken,
    ) -> None:
        self.model = model
        self.request = request
        self.agent_id = agent_id
        self.ref = ref
        self.stream: Stream | None = None  # opened as the call starts
        self.streams = streams
        self.usage = usage
        self.token = token  # the turn's token, which ``stop`` is registered on

    def __call__(self, cancel: CancelToken) -> Sequence[ToolResult]:
        # The stream is opened here, as the call starts: a call that never starts needs
        # none. Cancel (and an interrupt's token) closes the stream too, so a late delta
        # is refused. Registered as the call starts, on the lane's thread: a queued call
        # that is cancelled never runs (the lane abandons it), so it needs no stopper, and
        # the tick thread, which dispatches every call, pays no lock round trip and no
        # bound method per call (10,000 queued calls held 10,000 of them for the
        # collector). A token that fired already runs the stopper at once. The token is
        # the turn's, which outlives the call: `_complete` takes the stopper off again at
        # the end.
        stream = self.stream = self.streams.open(self.agent_id, self.ref)
        request = self.request
        if type(request) is ModelRequest and request.stream is None:
            # DispatchWork built it for this call alone and nobody else holds it: it gets
            # its stream in place (a frozen dataclass's slot, set once, before the model
            # reads it) instead of a second request built around it.
            _set_request_stream(request, stream)
        else:
            request = dataclasses.replace(request, stream=stream)
        stop = self.stop
        token = self.token
        token.add_callback(stop)
        return _complete(
            self.model,
            request,
            self.ref,
            stream,
            self.streams,
            self.usage,
            (token, stop),
            cancel,
        )

    def stop(self, _token: CancelToken) -> None:
        """The turn token fired: stop the call's stream (a later delta is refused)."""
        stream = self.stream
        if stream is not None:
            stream.stop()


def _complete(
    model: Model,
    request: ModelRequest,
    ref: str,
    stream: Stream,
    streams: StreamHub,
    usage: UsageMeter,
    registered: tuple[CancelToken, Callable[[CancelToken], None]],
    cancel: CancelToken,
) -> Sequence[ToolResult]:
    # Every way out ends the stream once: finished and forgotten by the hub in one hold
    # of its lock (`StreamHub.end`), unless an interrupt stopped it first.
    try:
        try:
            reply = model.complete(request, cancel)
        except ModelError as exc:
            # Expected failures (a provider's error, a budget): the agent's error says it
            # all, so no traceback in the log, unlike a model that raised something else.
            if not streams.end(stream):
                raise _interrupted(cancel) from None
            return [ToolResult(ref, error=str(exc))]
        except BaseException:
            if not streams.end(stream):
                raise _interrupted(cancel) from None
            raise
        if not streams.end(stream):
            # Stopped by an interrupt that carries the partial text: this reply is stale.
            raise _interrupted(cancel)
        try:
            checked = checked_reply(reply)
        except NotJSON as exc:
            # What the reply says it spent was spent, whatever else is wrong with it (unless
            # its usage is no count either: then there is nothing to meter).
            with contextlib.suppress(NotJSON):
                usage.add(request.model, checked_usage(getattr(reply, "usage", None)))
            # The agent's error (its Think raises ModelError), never the journal's on the tick.
            error = f"model {request.model!r} gave a reply that is not a JSON value: {exc}"
            return [ToolResult(ref, error=error)]
        usage.add(request.model, checked.usage)
        return [build_result(ref, checked, None)]
    finally:
        token, stop = registered  # the stream's stopper, off the turn's token again
        token.remove_callback(stop)


def _interrupted(cancel: CancelToken) -> Cancelled:
    """The end of a call whose stream ``world.interrupt`` stopped: its token is cancelled
    first, so the lane drops the job. The interrupt's command reaches the tick after the
    stop, and cancels the token there; until then the lane would take the call's end for
    a model raising `Cancelled` on its own and give the agent an error, which could reach
    the agent before the interrupt did (it did, under load)."""
    cancel.cancel(INTERRUPTED)
    return Cancelled(INTERRUPTED)


def checked_usage(usage: object) -> Usage | None:
    """A reply's ``usage`` as the `Usage` a journal gives back: None, a `Usage`, or any
    object with ``input_tokens`` and ``output_tokens`` (a model's own usage type).

    Raises:
        NotJSON: a count is not a whole number >= 0 (a negative one would give an agent's
            budget back; a tuple has none).
    """
    if usage is None:
        return None
    counts = []
    for name in ("input_tokens", "output_tokens"):
        count = getattr(usage, name, None)
        if count.__class__ is not int or count < 0:
            raise NotJSON(f"usage.{name}: must be an int >= 0, got {count!r}")
        counts.append(count)
    return usage if isinstance(usage, Usage) and usage.__class__ is Usage else Usage(*counts)


def checked_reply(reply: object) -> ModelReply:
    """A model's answer as a `ModelReply` a journal stores and gives back unchanged.

    Checked like a tool's output, on the lane: ``text`` must be a string, tool calls
    `ToolCall`s with JSON arguments (tuples become lists). A plain string is a reply without
    tool calls; any other JSON value becomes its JSON text.

    Raises:
        NotJSON: the reply, its text or a tool call's arguments cannot be JSON, its
            ``usage`` is not a `Usage` of whole numbers >= 0 (a negative count would give
            an agent's budget back) or its ``finish_reason`` is not a string.
    """
    if isinstance(reply, ModelReply):
        given: object = reply.usage  # typed models are right; others are checked
        usage = None if given is None else checked_usage(given)
        finish: object = reply.finish_reason
        if finish is not None and finish.__class__ is not str and not isinstance(finish, str):
            raise NotJSON(f"finish_reason: a {type(finish).__name__} is not a string")
        if (
            type(reply) is ModelReply
            and type(reply.text) is str
            and not reply.tool_calls
            and usage is given
        ):
            return reply  # already what a journal gives back (the common reply, per Think)
        if not isinstance(reply.text, str):
            raise NotJSON(f"text: a {type(reply.text).__name__} is not a string")
        calls = []
        for index, call in enumerate(reply.tool_calls):
            if not (isinstance(call, ToolCall) and isinstance(call.id, str)):
                raise NotJSON(f"tool_calls[{index}]: {type(call).__name__} is not a ToolCall")
            args = json_value(dict(call.args))
            calls.append(ToolCall(str(call.id), str(call.name), args))
        if type(reply) is ModelReply:  # `dataclasses.replace` costs ~4x a plain build
            return ModelReply(str.__str__(reply.text), tuple(calls), usage, reply.finish_reason)
        return dataclasses.replace(
            reply, text=str.__str__(reply.text), tool_calls=tuple(calls), usage=usage
        )
    if isinstance(reply, str):
        return ModelReply(str.__str__(reply))
    value = json_value(reply)
    return ModelReply(json.dumps(value, sort_keys=True))
