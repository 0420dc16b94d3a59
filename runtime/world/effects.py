"""Live effects: what the tick thread's requests for work turn into in a live world.

Tool batches travel as `ToolBatch`: plain data (the registry, the calls, the agent id and a
`HubRef`) that pickles, so the same job runs on the lane's own threads or on an executor in
another process (a Dask worker), where each call's tool is looked up by name in the shipped
registry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from components import InteractionRequest, ToolCall, ToolResult
from runtime.cancel import Cancelled, CancelToken
from runtime.errors import DuplicateRequestError, ModelError
from runtime.hub import InteractionHub
from runtime.lane.jobs import ToolJob, ToolOutcome
from runtime.lane.tool_lane import ToolLane
from runtime.models.base import Model, ModelRequest
from runtime.models.streaming import Stream, StreamHub
from runtime.models.usage import UsageMeter
from runtime.tools.base import SupportsAsk
from runtime.tools.registry import ToolRegistry
from runtime.world.inputs import EffectFailed, Inbox

__all__ = ["HubRef", "LiveEffects", "ToolBatch"]


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


# Not frozen on purpose: one is built per tool batch on the tick thread, and a frozen
# dataclass's __init__ costs 3.5x a plain one (measured: ~530 ns vs ~150 ns). Treat as
# immutable.
@dataclass(slots=True)
class ToolBatch:
    """One agent's batch of tool calls as plain, picklable data: what a tool job runs.

    Calling it with the job's token runs the calls one after another and returns one result
    per call, in call order; each call's tool is found by name in ``tools`` wherever the
    batch runs. ``hub`` is None where tools must not ask a person (an executor lane).
    """

    tools: ToolRegistry
    calls: tuple[ToolCall, ...]
    agent_id: str
    hub: HubRef | None = None

    def __call__(self, cancel: CancelToken) -> list[ToolResult]:
        """Run the batch.

        Raises:
            Cancelled: ``cancel`` fired; no further call is started.
        """
        hub = None if self.hub is None else self.hub.resolve()
        return self.tools.run_batch(self.calls, agent_id=self.agent_id, cancel=cancel, hub=hub)


class LiveEffects:
    """Model calls go to the inference lane, tool batches to the tool lane, prompts to
    the hub. Whatever comes of them (including a failure to start) comes back through
    the inbox as an input, never by touching the world from another thread.

    ``tools_can_ask`` says whether tool jobs get the hub: only when the tool lane runs jobs
    on its own threads, where a waiting ``ask`` steps off the lane. Jobs for an executor
    lane (threads that are not the lane's, or another process) get none.
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

    def think(self, agent_id: str, ref: str, request: ModelRequest, cancel: CancelToken) -> None:
        model = self._models.get(request.model)
        if model is None:
            known = ", ".join(sorted(self._models)) or "none"
            error = f"unknown model {request.model!r} (known: {known})"
            self._inbox.put(ToolOutcome(agent_id, ref, (ToolResult(ref, error=error),), 0.0))
            return
        call = ToolCall(ref, f"model:{request.model}")
        stream = self._streams.open(agent_id, ref)
        # Cancel (and an interrupt's token) closes the stream too, so a late delta is refused.
        cancel.add_callback(lambda _token: stream.stop())
        request = dataclasses.replace(request, stream=stream)
        run = partial(_complete, model, request, ref, stream, self._streams, self._usage)
        self._inference_lane.submit(ToolJob(agent_id, ref, run, (call,), cancel))

    def run_tools(
        self, agent_id: str, ref: str, calls: tuple[ToolCall, ...], cancel: CancelToken
    ) -> None:
        run = ToolBatch(self._tools, calls, agent_id, self._tool_hub)
        self._tool_lane.submit(ToolJob(agent_id, ref, run, calls, cancel))

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


def _complete(
    model: Model,
    request: ModelRequest,
    ref: str,
    stream: Stream,
    streams: StreamHub,
    usage: UsageMeter,
    cancel: CancelToken,
) -> Sequence[ToolResult]:
    try:
        try:
            reply = model.complete(request, cancel)
        except ModelError as exc:
            # Expected failures (a provider's error, a budget): the agent's error says it
            # all, so no traceback in the log, unlike a model that raised something else.
            if not stream.finish():
                raise Cancelled("interrupted by user") from None
            return [ToolResult(ref, error=str(exc))]
        except BaseException:
            if not stream.finish():
                raise Cancelled("interrupted by user") from None
            raise
        if not stream.finish():
            # Stopped by an interrupt that carries the partial text: this reply is stale.
            raise Cancelled("interrupted by user")
        usage.add(request.model, getattr(reply, "usage", None))
        return [ToolResult(ref, output=reply)]
    finally:
        streams.release(stream)
