"""tickwork's machinery and public API."""

from components import (
    InteractionKind,
    InteractionRequest,
    InteractionResponse,
    LaneStats,
    Status,
    StatusKind,
    ToolCall,
    ToolResult,
    WaitReason,
    response_approved,
)

from ._version import __version__
from .cancel import Cancelled, CancelToken, InterruptHandle
from .clock import Clock, ManualClock, MonotonicClock
from .errors import (
    BehaviorNotFound,
    ConfigError,
    ControlError,
    DuplicateRequestError,
    JournalError,
    LaneClosedError,
    ReplayDivergence,
    ScenarioError,
    TickLimitError,
    TickworkError,
    UnknownAgentError,
    WorldClosedError,
)
from .process import ProcessEnd, ProcessResult, run_process
from .wake import Wake

__all__ = [
    "BehaviorNotFound",
    "CancelToken",
    "Cancelled",
    "Clock",
    "ConfigError",
    "ControlError",
    "DuplicateRequestError",
    "InteractionKind",
    "InteractionRequest",
    "InteractionResponse",
    "InterruptHandle",
    "JournalError",
    "LaneClosedError",
    "LaneStats",
    "ManualClock",
    "MonotonicClock",
    "ProcessEnd",
    "ProcessResult",
    "ReplayDivergence",
    "ScenarioError",
    "Status",
    "StatusKind",
    "TickLimitError",
    "TickworkError",
    "ToolCall",
    "ToolResult",
    "UnknownAgentError",
    "WaitReason",
    "Wake",
    "WorldClosedError",
    "__version__",
    "response_approved",
    "run_process",
]
