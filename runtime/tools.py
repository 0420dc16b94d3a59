"""Tools: the registry of what an agent may call, and the built-in tools.

A tool is any callable ``tool(args, ctx) -> JSON value`` with a ``name``, an optional
``timeout`` and a ``requires_approval`` flag (the `Tool` protocol). `ToolRegistry.run_call`
turns every way a call can go wrong into an error result for that call alone: an unknown
name, a tool that raises, a value that is not JSON, a call past its timeout. Timeouts are
cooperative: at the deadline the call's token fires (one shared timer thread for the whole
process); a tool that ignores its token overruns but is still reported as timed out.

The built-in tools (`ShellTool`, `AskUserTool`, `SleepTool`) live in `runtime._lane_tools` and
are exported from here. Registries and tools hold no locks or threads, so they pickle (a later
step ships a registry to Dask workers); `AskUserTool` is ``local_only``: it needs this
process's hub.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar, overload

from components import InteractionRequest, InteractionResponse, ToolCall, ToolResult

from ._lane_deadlines import schedule
from ._lane_tools import AskUserTool, ShellTool, SleepTool, ToolBase, check_timeout
from .cancel import Cancelled, CancelToken
from .errors import ConfigError

__all__ = [
    "AskUserTool",
    "ShellTool",
    "SleepTool",
    "SupportsAsk",
    "Tool",
    "ToolContext",
    "ToolRegistry",
]


class SupportsAsk(Protocol):
    """What a tool needs of an interaction hub (`runtime.InteractionHub` has it)."""

    def ask(self, agent_id: str, request: InteractionRequest) -> InteractionResponse:
        """Open ``request`` for ``agent_id`` and block until it is settled."""
        ...

    def cancel(self, request_id: str) -> bool:
        """Settle an open request with the neutral response."""
        ...


class Tool(Protocol):
    """Something an agent can call: ``tool(args, ctx)`` returns a JSON value or raises."""

    name: str
    timeout: float | None
    requires_approval: bool
    local_only: bool  # True when it needs this process (e.g. the hub); never ship it away

    def __call__(self, args: Mapping[str, Any], ctx: ToolContext) -> Any:
        """Run the tool once; watch ``ctx.cancel`` if it may take a while."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class ToolContext:
    """What one tool call knows about where it runs: who, which call, its token, the hub."""

    agent_id: str
    call_id: str
    cancel: CancelToken
    hub: SupportsAsk | None = None

    def ask(self, request: InteractionRequest) -> InteractionResponse:
        """Ask a person through the hub and wait (off the lane) for the answer.

        The prompt is cancelled if the call's token fires (a timeout or a cancelled batch),
        so a call that gives up leaves no orphaned prompt.

        Raises:
            ConfigError: the call was run without a hub.
            Cancelled: the call's token fired before or while waiting.
        """
        hub = self.hub
        if hub is None:
            raise ConfigError(
                f"call {self.call_id!r} of agent {self.agent_id!r} cannot ask a person: "
                "no interaction hub was given"
            )
        if not request.id:  # named here, not by the hub, so that a cancel can find it
            request = request.with_id(f"{self.call_id}-{uuid.uuid4().hex[:12]}")
        request_id = request.id

        def withdraw(_token: CancelToken) -> None:
            hub.cancel(request_id)

        self.cancel.add_callback(withdraw)
        try:
            # A cancel landing between this check and the hub opening the prompt is not
            # seen until the hub's own timeout; the window is a few instructions wide.
            self.cancel.raise_if_cancelled()
            response = hub.ask(self.agent_id, request)
        finally:
            self.cancel.remove_callback(withdraw)
        self.cancel.raise_if_cancelled()
        return response


ToolFunction = Callable[[Mapping[str, Any], ToolContext], Any]
F = TypeVar("F", bound=ToolFunction)


class _FunctionTool(ToolBase):
    """A Python function registered with `ToolRegistry.tool`."""

    __slots__ = ("fn",)

    def __init__(
        self, name: str, fn: ToolFunction, timeout: float | None, requires_approval: bool
    ) -> None:
        super().__init__(name, timeout, requires_approval, local_only=False)
        self.fn = fn

    def __call__(self, args: Mapping[str, Any], ctx: ToolContext) -> Any:
        return self.fn(args, ctx)


class ToolRegistry:
    """The tools an agent may call, by name, and the code that runs calls safely."""

    __slots__ = ("_tools",)

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    @overload
    def tool(self, name: F, /) -> F: ...
    @overload
    def tool(
        self,
        name: str | None = None,
        *,
        timeout: float | None = None,
        requires_approval: bool = False,
    ) -> Callable[[F], F]: ...
    def tool(
        self,
        name: str | F | None = None,
        *,
        timeout: float | None = None,
        requires_approval: bool = False,
    ) -> F | Callable[[F], F]:
        """Register a function ``fn(args, ctx) -> JSON value`` as a tool; a decorator.

        The tool's name defaults to the function's name; the function is returned unchanged
        (so a module-level tool function still pickles by reference).

        Raises:
            ConfigError: the name is taken or empty, or ``timeout`` is not positive.
        """
        if callable(name):  # used bare: @registry.tool
            self.add(_FunctionTool(name.__name__, name, timeout, requires_approval))
            return name
        tool_name = name

        def register(fn: F) -> F:
            self.add(_FunctionTool(tool_name or fn.__name__, fn, timeout, requires_approval))
            return fn

        return register

    def add(self, tool: Tool) -> Tool:
        """Register ``tool`` under its name and return it.

        Raises:
            ConfigError: another tool has that name, or the name is empty.
        """
        if not isinstance(tool.name, str) or not tool.name:
            raise ConfigError(f"a tool's `name` must be a non-empty string, got {tool.name!r}")
        if tool.name in self._tools:
            raise ConfigError(f"tool {tool.name!r} is already registered")
        check_timeout(tool.timeout)
        self._tools[tool.name] = tool
        return tool

    def try_get(self, name: str) -> Tool | None:
        """The tool called ``name``, or None."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """The registered tool names, sorted."""
        return sorted(self._tools)

    def requires_approval(self, name: str) -> bool:
        """Whether calling ``name`` needs a person's approval first (False if unknown)."""
        tool = self._tools.get(name)
        return tool is not None and tool.requires_approval

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"<ToolRegistry {self.names()!r}>"

    def run_call(
        self,
        call: ToolCall,
        *,
        agent_id: str,
        cancel: CancelToken,
        hub: SupportsAsk | None = None,
    ) -> ToolResult:
        """Run one call and return its result; every failure is an error result.

        The tool gets a child of ``cancel`` that also fires at the tool's timeout.

        Raises:
            Cancelled: ``cancel`` fired and the tool stopped because of it.
        """
        tool = self._tools.get(call.name)
        if tool is None:
            return ToolResult(call.id, error=f"unknown tool {call.name!r}")
        token = CancelToken()

        def follow(parent: CancelToken) -> None:
            token.cancel(parent.reason or "cancelled")

        cancel.add_callback(follow)  # not `cancel.child()`: this link must be undone after
        timeout = tool.timeout
        message = f"tool timed out after {timeout:g}s" if timeout is not None else ""
        deadline = None if timeout is None else schedule(timeout, token, message)
        try:
            result = _invoke(tool, call, ToolContext(agent_id, call.id, token, hub))
        finally:
            cancel.remove_callback(follow)
            overran = deadline is not None and deadline.cancel()
        if overran:
            return ToolResult(call.id, error=message)
        if result is None:
            raise Cancelled(token.reason or "cancelled")
        return result

    def run_batch(
        self,
        calls: Sequence[ToolCall],
        *,
        agent_id: str,
        cancel: CancelToken,
        hub: SupportsAsk | None = None,
    ) -> list[ToolResult]:
        """Run ``calls`` one after another; one result per call, in call order.

        Raises:
            Cancelled: ``cancel`` fired; no further call is started.
        """
        results = []
        for call in calls:
            cancel.raise_if_cancelled()
            results.append(self.run_call(call, agent_id=agent_id, cancel=cancel, hub=hub))
        return results


# Output types that are JSON whatever their value (floats are not: NaN and infinity aren't).
_PLAIN_JSON = frozenset({str, int, bool})


def _invoke(tool: Tool, call: ToolCall, ctx: ToolContext) -> ToolResult | None:
    """Call ``tool`` and make its result; None when it stopped because its token fired."""
    try:
        output = tool(call.args, ctx)
    except Cancelled as exc:
        if ctx.cancel.cancelled:
            return None
        return ToolResult(call.id, error=f"Cancelled: {exc.reason}")  # not ours: an error
    except Exception as exc:
        return ToolResult(call.id, error=f"{type(exc).__name__}: {exc}")
    if output is None or type(output) in _PLAIN_JSON:
        return ToolResult(call.id, output=output)  # JSON as it is: no encoder pass needed
    try:
        json.dumps(output, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return ToolResult(call.id, error=f"tool {tool.name!r} returned a non-JSON value: {exc}")
    return ToolResult(call.id, output=output)
