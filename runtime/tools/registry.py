"""The tool registry: what an agent may call, and how one call is run.

A tool is any callable ``tool(args, ctx) -> JSON value`` (the `Tool` protocol of
`runtime.tools.base`). `ToolRegistry.run_call`
turns every way a call can go wrong into an error result for that call alone: an unknown
name, a tool that raises, a value that is not JSON, a call past its timeout. Timeouts are
cooperative: at the deadline the call's token fires (one shared timer thread for the whole
process); a tool that ignores its token overruns but is still reported as timed out.

The built-in tools (`ShellTool`, `AskUserTool`, `SleepTool`) live in `runtime.tools.builtin`.
Registries and tools hold no locks or threads, so they pickle (a later
step ships a registry to Dask workers); `AskUserTool` is ``local_only``: it needs this
process's hub.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, overload

from components import ToolCall, ToolResult
from components._frozen import frozen_builder
from components.tools import build_result
from runtime.cancel import Cancelled, CancelToken
from runtime.errors import ConfigError
from runtime.lane.deadlines import schedule
from runtime.lane.parking import given_up, held
from runtime.lane.values import NotJSON, json_value
from runtime.tools.base import (
    SupportsAsk,
    Tool,
    ToolBase,
    ToolContext,
    ToolFunction,
    check_timeout,
    check_virtual_duration,
)

__all__ = ["ToolRegistry"]

_GIVEN_UP = "given up: a call before ignored its timeout"

F = TypeVar("F", bound=ToolFunction)


class _FunctionTool(ToolBase):
    """A Python function registered with `ToolRegistry.tool`."""

    __slots__ = ("fn",)

    def __init__(
        self,
        name: str,
        fn: ToolFunction,
        timeout: float | None,
        requires_approval: bool,
        idempotent: bool = False,
        virtual_duration: float = 0.0,
    ) -> None:
        super().__init__(
            name,
            timeout,
            requires_approval,
            local_only=False,
            idempotent=idempotent,
            virtual_duration=virtual_duration,
        )
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
        idempotent: bool = False,
        virtual_duration: float = 0.0,
    ) -> Callable[[F], F]: ...
    def tool(
        self,
        name: str | F | None = None,
        *,
        timeout: float | None = None,
        requires_approval: bool = False,
        idempotent: bool = False,
        virtual_duration: float = 0.0,
    ) -> F | Callable[[F], F]:
        """Register a function ``fn(args, ctx) -> JSON value`` as a tool; a decorator.

        The tool's name defaults to the function's name; the function is returned unchanged
        (so a module-level tool function still pickles by reference). ``idempotent=True``
        declares that running a call twice does no harm: a call cut short by a crash is
        run again on resume instead of getting the restart error. ``virtual_duration``
        is the world time a call takes in a lockstep world (see `World`'s ``lockstep``).

        Raises:
            ConfigError: the name is taken or empty, ``timeout`` is not positive,
                ``virtual_duration`` is not a finite number >= 0, or what it decorates is
                not callable.
        """
        if callable(name):  # used bare: @registry.tool
            self.add(_FunctionTool(name.__name__, name, timeout, requires_approval))
            return name
        tool_name = name
        if tool_name is not None and (not isinstance(tool_name, str) or not tool_name):
            # An empty name fell back to the function's own (a lambda's: "<lambda>").
            raise ConfigError(f"a tool's `name` must be a non-empty string, got {tool_name!r}")
        check_virtual_duration(virtual_duration)  # at the call, not when it decorates

        def register(fn: F) -> F:
            if not callable(fn):
                raise ConfigError(f"a tool must be a function `fn(args, ctx)`, got {fn!r}")
            tool = _FunctionTool(
                tool_name or fn.__name__,
                fn,
                timeout,
                requires_approval,
                idempotent,
                virtual_duration,
            )
            self.add(tool)
            return fn

        return register

    def add(self, tool: Tool) -> Tool:
        """Register ``tool`` under its name and return it.

        Raises:
            ConfigError: another tool has that name, or the name is empty; its ``timeout``
                is not a number > 0 or None, or its ``virtual_duration`` (if it has one)
                not a finite number >= 0.
        """
        if not isinstance(tool.name, str) or not tool.name:
            raise ConfigError(f"a tool's `name` must be a non-empty string, got {tool.name!r}")
        if tool.name in self._tools:
            raise ConfigError(f"tool {tool.name!r} is already registered")
        check_timeout(tool.timeout)
        # A tool made by hand, not through ToolBase, is checked here (a NaN made every
        # lockstep batch of it due at NaN: never released, the world ticking on for ever).
        check_virtual_duration(getattr(tool, "virtual_duration", 0.0))
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

    def is_idempotent(self, name: str) -> bool:
        """Whether a call of ``name`` may run again after a restart (False if unknown)."""
        tool = self._tools.get(name)
        return tool is not None and bool(getattr(tool, "idempotent", False))

    def lockstep_bounds(self, calls: Sequence[ToolCall]) -> tuple[float, float | None]:
        """The world time a batch of ``calls`` takes in lockstep (the sum of its tools'
        ``virtual_duration``) and the real time it may run (the sum of their timeouts; None
        when one has none). An unknown tool takes no time: its call fails at once."""
        duration = 0.0
        for call in calls:
            tool = self._tools.get(call.name)
            if tool is not None:
                duration += getattr(tool, "virtual_duration", 0.0)
        return duration, self.time_bound(calls)

    def time_bound(self, calls: Sequence[ToolCall]) -> float | None:
        """The real time a batch of ``calls`` may run: the sum of their tools' timeouts, or
        None when one has none (`ToolJob.bound`, and the second of ``lockstep_bounds``). An
        unknown tool takes no time: its call fails at once."""
        bound = 0.0
        tools = self._tools
        for call in calls:
            tool = tools.get(call.name)
            if tool is None:
                continue
            timeout = tool.timeout
            if timeout is None:
                return None
            bound += timeout
        return bound

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
        batch_id: str = "",
    ) -> ToolResult:
        """Run one call and return its result; every failure is an error result.

        ``batch_id`` (the world's id of the batch the call is part of) names the prompts
        the tool asks through its context (see `ToolContext.ask`).

        A tool with a timeout gets a child of ``cancel`` that also fires at the timeout; one
        without runs on ``cancel`` itself (a child token and its link per call cost a lock
        round trip each on the hot path, and nothing but a timeout could fire it alone).

        Raises:
            Cancelled: ``cancel`` fired and the tool stopped because of it.
        """
        tool = self._tools.get(call.name)
        if tool is None:
            return ToolResult(call.id, error=f"unknown tool {call.name!r}")
        timeout = tool.timeout
        if timeout is None:
            result = _invoke(
                _body(tool),
                tool.name,
                call,
                _context(agent_id, call.id, cancel, hub, batch_id, [0], held()),
            )
            if result is None:
                raise Cancelled(cancel.reason or "cancelled")
            return result
        if given_up():  # its lane gave the batch up (an earlier call ignored its timeout):
            raise Cancelled(_GIVEN_UP)  # its agent has its results; nothing more may run
        token = CancelToken()

        def follow(parent: CancelToken) -> None:
            token.cancel(parent.reason or "cancelled")

        cancel.add_callback(follow)  # not `cancel.child()`: this link must be undone after
        message = f"tool timed out after {timeout:g}s"
        try:
            deadline = schedule(timeout, token, message)
        except BaseException:  # no timer thread to be had: the link goes with the call
            cancel.remove_callback(follow)
            raise
        try:
            result = _invoke(
                _body(tool),
                tool.name,
                call,
                _context(agent_id, call.id, token, hub, batch_id, [0], held()),
            )
        finally:
            cancel.remove_callback(follow)
            overran = deadline.cancel()
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
        batch_id: str = "",
    ) -> list[ToolResult]:
        """Run ``calls`` one after another; one result per call, in call order.

        Raises:
            Cancelled: ``cancel`` fired; no further call is started.
        """
        results = []
        tools = self._tools
        slot = held()
        for call in calls:
            cancel.raise_if_cancelled()
            tool = tools.get(call.name)
            if tool is None or tool.timeout is not None:  # the rare cases, as run_call has them
                result = self.run_call(
                    call, agent_id=agent_id, cancel=cancel, hub=hub, batch_id=batch_id
                )
            else:
                # `run_call` of a tool without a timeout, inlined: a lane thread runs every
                # call of every batch through here (one keyword call fewer per call).
                context = _context(agent_id, call.id, cancel, hub, batch_id, [0], slot)
                done = _invoke(_body(tool), tool.name, call, context)
                if done is None:
                    raise Cancelled(cancel.reason or "cancelled")
                result = done
            results.append(result)
        return results


def _body(tool: Tool) -> ToolFunction:
    """What to call for ``tool``: a registered function itself, without the wrapper's
    frame (`_FunctionTool.__call__` only passes its arguments on), else the tool."""
    return tool.fn if tool.__class__ is _FunctionTool else tool


def _invoke(fn: ToolFunction, name: str, call: ToolCall, ctx: ToolContext) -> ToolResult | None:
    """Run ``fn`` (tool ``name``'s body, `_body`) and make its result; None when it stopped
    because its token fired."""
    try:
        output = fn(call.args, ctx)
    except Cancelled as exc:
        if ctx.cancel.cancelled:
            return None
        return ToolResult(call.id, error=f"Cancelled: {exc.reason}")  # not ours: an error
    except BaseException as exc:  # SystemExit, GeneratorExit...: this call's error alone
        # (it failed the whole batch: calls that had done their work read as failed too)
        return ToolResult(call.id, error=f"{type(exc).__name__}: {exc}")
    try:
        # Settled here, on the lane: the world and a replay of its journal then see the same
        # value (a tuple comes back a list in both), and what JSON cannot hold is refused.
        output = json_value(output)
    except NotJSON as exc:
        return ToolResult(call.id, error=f"tool {name!r} returned a non-JSON value: {exc}")
    except Exception as exc:  # an output whose own iteration raised
        error = f"tool {name!r} returned a value that raised {type(exc).__name__}: {exc}"
        return ToolResult(call.id, error=error)
    return build_result(call.id, output, None)


# A call's context, built through its slots (`frozen_builder`): a lane thread builds one
# per call (and its result with `build_result`), in the GIL's time every thread shares.
_context = frozen_builder(ToolContext)
