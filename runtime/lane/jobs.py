"""The lane's units of work: a `ToolJob` submitted, and the `ToolOutcome` it delivers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from components import ToolCall, ToolResult
from components._frozen import fast_frozen_init, frozen_builder
from runtime.cancel import CancelToken

__all__ = ["ToolJob", "ToolOutcome", "build_job", "build_outcome"]


@dataclass(frozen=True, slots=True)
class ToolJob:
    """A batch of tool work for the lane: ``run(cancel)`` returns one result per call.

    ``calls`` lets the lane answer every call with an error result if ``run`` raises.
    ``cancel`` is the job's own token: cancelling it abandons a queued job and drops the
    outcome of a running one. ``bound`` is how long the job may run, in seconds (a tool
    batch's: the sum of its tools' timeouts), or None: once it has run that long plus
    `runtime.lane.GIVE_UP_GRACE_SECS`, the lane gives it up (see `ToolLane`).
    """

    agent_id: str
    batch_id: str
    run: Callable[[CancelToken], Sequence[ToolResult]]
    calls: tuple[ToolCall, ...] = ()
    cancel: CancelToken = field(default_factory=CancelToken)
    bound: float | None = None


@fast_frozen_init  # one per finished job, on the lane's thread
@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What a finished job delivers: its results and how long it ran, in seconds.

    ``error`` is set when the job failed as a whole (its ``run`` raised, or it ended without
    a real outcome): the message names the lane and the job. Every call in ``job.calls``
    then also has an error result; a job without ``calls`` has only ``error`` to say so.
    """

    agent_id: str
    batch_id: str
    results: tuple[ToolResult, ...]
    elapsed: float
    error: str | None = None


def _fast_job_init(cls: type[ToolJob]) -> type[ToolJob]:
    """Give `ToolJob` the ``__init__`` of `fast_frozen_init` (its fields set through their
    slots), which that decorator cannot make for ``cancel``'s ``default_factory``: one job
    is made per dispatched batch on the tick thread (two in lockstep)."""
    set_agent, set_batch, set_run, set_calls, set_cancel, set_bound = (
        cls.__dict__[name].__set__
        for name in ("agent_id", "batch_id", "run", "calls", "cancel", "bound")
    )

    def __init__(
        self: ToolJob,
        agent_id: str,
        batch_id: str,
        run: Callable[[CancelToken], Sequence[ToolResult]],
        calls: tuple[ToolCall, ...] = (),
        cancel: CancelToken | None = None,
        bound: float | None = None,
    ) -> None:
        set_agent(self, agent_id)
        set_batch(self, batch_id)
        set_run(self, run)
        set_calls(self, calls)
        set_cancel(self, CancelToken() if cancel is None else cancel)
        set_bound(self, bound)

    __init__.__qualname__ = "ToolJob.__init__"
    cls.__init__ = __init__  # type: ignore[method-assign]
    return cls


_fast_job_init(ToolJob)


# The job a world submits and the outcome a lane delivers, from all their fields,
# positionally (`frozen_builder`): one of each per batch, on the tick thread and on a lane
# thread, in the time the GIL lends every thread in turn. Not exported from the package.
build_job = frozen_builder(ToolJob)
build_outcome = frozen_builder(ToolOutcome)
