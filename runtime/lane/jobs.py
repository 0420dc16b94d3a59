"""The lane's units of work: a `ToolJob` submitted, and the `ToolOutcome` it delivers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from components import ToolCall, ToolResult
from runtime.cancel import CancelToken

__all__ = ["ToolJob", "ToolOutcome"]


@dataclass(frozen=True, slots=True)
class ToolJob:
    """A batch of tool work for the lane: ``run(cancel)`` returns one result per call.

    ``calls`` lets the lane answer every call with an error result if ``run`` raises.
    ``cancel`` is the job's own token: cancelling it abandons a queued job and drops the
    outcome of a running one.
    """

    agent_id: str
    batch_id: str
    run: Callable[[CancelToken], Sequence[ToolResult]]
    calls: tuple[ToolCall, ...] = ()
    cancel: CancelToken = field(default_factory=CancelToken)


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
