"""Live effects: what the tick thread's requests for work turn into in a live world."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

from components import InteractionRequest, ToolCall, ToolResult

from .cancel import CancelToken
from .errors import DuplicateRequestError
from .hub import InteractionHub
from .inputs import EffectFailed, Inbox
from .lane import ToolJob, ToolLane, ToolOutcome
from .models import Model, ModelRequest
from .tools import ToolRegistry

__all__ = ["LiveEffects"]


class LiveEffects:
    """Model calls go to the inference lane, tool batches to the tool lane, prompts to
    the hub. Whatever comes of them (including a failure to start) comes back through
    the inbox as an input, never by touching the world from another thread."""

    def __init__(
        self,
        *,
        inbox: Inbox,
        hub: InteractionHub,
        tool_lane: ToolLane,
        inference_lane: ToolLane,
        tools: ToolRegistry,
        models: Mapping[str, Model],
    ) -> None:
        self._inbox = inbox
        self._hub = hub
        self._tool_lane = tool_lane
        self._inference_lane = inference_lane
        self._tools = tools
        self._models = models

    def think(self, agent_id: str, ref: str, request: ModelRequest, cancel: CancelToken) -> None:
        model = self._models.get(request.model)
        if model is None:
            known = ", ".join(sorted(self._models)) or "none"
            error = f"unknown model {request.model!r} (known: {known})"
            self._inbox.put(ToolOutcome(agent_id, ref, (ToolResult(ref, error=error),), 0.0))
            return
        call = ToolCall(ref, f"model:{request.model}")
        run = partial(_complete, model, request, ref)
        self._inference_lane.submit(ToolJob(agent_id, ref, run, (call,), cancel))

    def run_tools(
        self, agent_id: str, ref: str, calls: tuple[ToolCall, ...], cancel: CancelToken
    ) -> None:
        run = partial(_run_batch, self._tools, calls, agent_id, self._hub)
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
    model: Model, request: ModelRequest, ref: str, cancel: CancelToken
) -> Sequence[ToolResult]:
    return [ToolResult(ref, output=model.complete(request, cancel))]


def _run_batch(
    tools: ToolRegistry,
    calls: tuple[ToolCall, ...],
    agent_id: str,
    hub: InteractionHub,
    cancel: CancelToken,
) -> Sequence[ToolResult]:
    return tools.run_batch(calls, agent_id=agent_id, cancel=cancel, hub=hub)
