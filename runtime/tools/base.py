"""What a tool is: the `Tool` protocol, the `ToolContext` a call runs with, and `ToolBase`.

A tool is any callable ``tool(args, ctx) -> JSON value`` with a ``name``, an optional
``timeout``, a ``requires_approval`` flag, a ``local_only`` flag and an ``idempotent`` flag
(safe to run again after a restart cut a call short; see `runtime.resume`). The registry
(`runtime.tools.registry`) and the built-in tools (`runtime.tools.builtin`) build on these.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from components import InteractionRequest, InteractionResponse
from components._frozen import fast_frozen_init
from runtime.cancel import CancelToken
from runtime.errors import ConfigError
from runtime.lane.parking import Slot, joined, off_lane
from runtime.lane.values import shown

__all__ = [
    "SupportsAsk",
    "Tool",
    "ToolBase",
    "ToolContext",
    "ToolFunction",
    "check_timeout",
    "check_virtual_duration",
]


class SupportsAsk(Protocol):
    """What a tool needs of an interaction hub (`runtime.InteractionHub` has it)."""

    def ask(
        self, agent_id: str, request: InteractionRequest, *, cancel: CancelToken | None = None
    ) -> InteractionResponse:
        """Open ``request`` for ``agent_id`` and block until it is settled; ``cancel``
        firing at any moment withdraws it."""
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
    # True when running a call twice does no harm: a call in flight when the process died is
    # then run again by `runtime.resume`, instead of getting the restart error.
    idempotent: bool

    def __call__(self, args: Mapping[str, Any], ctx: ToolContext) -> Any:
        """Run the tool once; watch ``ctx.cancel`` if it may take a while."""
        ...


@fast_frozen_init  # one per tool call, on the lane's thread
@dataclasses.dataclass(frozen=True, slots=True)
class ToolContext:
    """What one tool call knows about where it runs: who, which call, its token, the hub,
    and the id of the batch it is part of (``""`` outside a world)."""

    agent_id: str
    call_id: str
    cancel: CancelToken
    hub: SupportsAsk | None = None
    batch_id: str = ""
    # How many prompts the call has named so far (see `ask`), in a cell that a copy
    # (`dataclasses.replace`, `copy.copy`) shares, so no two of them name one prompt twice.
    _prompts: list[int] = dataclasses.field(
        default_factory=lambda: [0], kw_only=True, repr=False, compare=False
    )
    # The lane slot of the job running the call, when a lane thread runs it: a thread the
    # tool starts, or a copy, waits for an answer without holding the job's permit.
    _slot: Slot | None = dataclasses.field(default=None, kw_only=True, repr=False, compare=False)

    def ask(self, request: InteractionRequest) -> InteractionResponse:
        """Ask a person through the hub and wait (off the lane) for the answer.

        A request without an id is named by the run: ``<batch id>/<call id>`` for the
        call's first prompt, then ``#2``, ``#3``... for the next ones. The same run names
        its prompts the same way every time (a lockstep run's digests hold the ids of
        open prompts), whichever lane thread asks first. Outside a world (no batch id)
        the hub names it. The prompt is cancelled if the call's token fires (a timeout or
        a cancelled batch), so a call that gives up leaves no orphaned prompt.

        The call's lane job holds no lane permit while it waits, whichever thread asks:
        the one running the call or one the tool started (`runtime.off_lane`). A copy of
        the context (``dataclasses.replace(ctx, cancel=...)``) is the same call: it asks
        off the lane too, and goes on numbering the call's prompts (a copy with another
        ``call_id`` shares the count, so its first prompt may be ``#2``).

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
        if not request.id and self.batch_id:
            count = self._prompts
            with _numbering:  # threads the tool started may ask at once: no number twice
                asked = count[0] = count[0] + 1
            name = f"{self.batch_id}/{self.call_id}"
            request = request.with_id(name if asked == 1 else f"{name}#{asked}")
        # The hub withdraws the prompt when the token fires, whenever it fires: before the
        # prompt opens, while it is open, or in between (no window for an orphan).
        with joined(self._slot):
            response = hub.ask(self.agent_id, request, cancel=self.cancel)
        self.cancel.raise_if_cancelled()
        return response

    @contextlib.contextmanager
    def off_lane(self) -> Iterator[None]:
        """Run the block without holding the call's lane permit, from whichever thread:
        the one running the call, one the tool started, or a worker of another lane the
        tool handed work to (`runtime.lane.parking.joined`). For a wait on something only
        other work can end (another agent, a queue another job fills); the call takes a
        place again once the last of its threads is back. Outside a lane, it just runs
        the block (`runtime.off_lane` is the same for the thread running the call alone).
        The block is the thread's: not for coroutines that await inside it while others
        of the same thread enter theirs. In lockstep the ticks wait for the call all the
        same (only a prompt lets them go on), so a wait for another agent's work that
        needs a later tick ends at the tool's timeout (without one, it never ends).
        """
        with joined(self._slot), off_lane():
            yield

    def __copy__(self) -> ToolContext:
        # A copy is the same call, as `dataclasses.replace`'s is: its slot and its count.
        return dataclasses.replace(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> ToolContext:
        # So is a deep one: the token, the hub and the slot are the call's, not data.
        return dataclasses.replace(self)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled, a context leaves its lane slot behind (it holds the lane's locks, and
        # means nothing in another process), as a token leaves its links; it takes its
        # count, in a cell of its own there.
        given = {
            field.name: getattr(self, field.name)
            for field in dataclasses.fields(self)
            if field.init and field.name not in ("_slot", "_prompts")
        }
        return (_rebuild_context, (type(self), given, self._prompts[0]))


_numbering = threading.Lock()  # `ask`'s numbering of a call's prompts


def _rebuild_context(cls: type[ToolContext], given: dict[str, Any], asked: int) -> ToolContext:
    return cls(**given, _prompts=[asked])


ToolFunction = Callable[[Mapping[str, Any], ToolContext], Any]
"""The shape of a Python function registered as a tool."""


def check_timeout(timeout: float | None) -> float | None:
    """Return ``timeout`` if it is None or a positive number.

    Raises:
        ConfigError: it is not.
    """
    if timeout is not None and (
        isinstance(timeout, bool)  # True was a 1 s timeout
        or not isinstance(timeout, int | float)
        or not timeout > 0  # NaN too
        or timeout > sys.float_info.max  # an int no float holds: every call failed on it
    ):
        raise ConfigError(f"`timeout` must be > 0 or None, got {shown(timeout)}")
    return timeout


def check_virtual_duration(value: float) -> float:
    """Return ``value`` as a float if it is a finite number >= 0.

    Raises:
        ConfigError: it is not.
    """
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not (0 <= value < float("inf")):
        raise ConfigError(f"`virtual_duration` must be a finite number >= 0, got {value!r}")
    return float(value)


class ToolBase:
    """The attributes every built-in tool has (plain slots: picklable, no locks)."""

    __slots__ = (
        "idempotent",
        "local_only",
        "name",
        "requires_approval",
        "timeout",
        "virtual_duration",
    )

    def __init__(
        self,
        name: str,
        timeout: float | None,
        requires_approval: bool,
        local_only: bool,
        idempotent: bool = False,
        virtual_duration: float = 0.0,
    ) -> None:
        self.name = name
        self.timeout = check_timeout(timeout)
        self.requires_approval = requires_approval
        self.local_only = local_only
        self.idempotent = idempotent
        # World seconds a call takes in a lockstep world (real run time takes none).
        self.virtual_duration = check_virtual_duration(virtual_duration)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
