"""tickwork's machinery and public API.

Everything a user needs is importable from here; the data types live in ``components``
and are re-exported unchanged.
"""

import runtime.telemetry  # noqa: F401  (registers tracing for worlds a host instruments)
from components import (
    Entry,
    InteractionKind,
    InteractionRequest,
    InteractionResponse,
    LaneStats,
    Phase,
    PromptOpened,
    PromptSettled,
    Settlement,
    Status,
    StatusKind,
    ToolCall,
    ToolResult,
    WaitReason,
    response_approved,
)
from runtime._version import __version__
from runtime.cancel import Cancelled, CancelToken, InterruptHandle
from runtime.clock import Clock, ManualClock, MonotonicClock
from runtime.cluster import DaskBackend
from runtime.control import ControlClient
from runtime.errors import (
    BehaviorNotFound,
    ConfigError,
    ControlError,
    DuplicateRequestError,
    JournalError,
    LaneClosedError,
    ModelError,
    ReplayDivergence,
    ScenarioError,
    TickLimitError,
    TickworkError,
    UnknownAgentError,
    WorldClosedError,
)
from runtime.hub import HubStats, InteractionHub
from runtime.journal import Journal, JournalReader, ReplayReport, replay
from runtime.lane import BackendInfo, ToolJob, ToolLane, ToolOutcome, off_lane
from runtime.models import Model, ModelReply, ModelRequest, ScriptedModel
from runtime.process import ProcessEnd, ProcessResult, run_process
from runtime.scenario import Scenario, load_scenario
from runtime.tools import AskUserTool, ShellTool, SleepTool, Tool, ToolContext, ToolRegistry
from runtime.wake import Wake
from runtime.world import (
    Action,
    Ask,
    Behavior,
    BehaviorRegistry,
    CallTools,
    Join,
    Sleep,
    Spawn,
    Think,
    TickReport,
    Turn,
    World,
    behavior,
    register_behavior,
)

__all__ = [
    "Action",
    "Ask",
    "AskUserTool",
    "BackendInfo",
    "Behavior",
    "BehaviorNotFound",
    "BehaviorRegistry",
    "CallTools",
    "CancelToken",
    "Cancelled",
    "Clock",
    "ConfigError",
    "ControlClient",
    "ControlError",
    "DaskBackend",
    "DuplicateRequestError",
    "Entry",
    "HubStats",
    "InteractionHub",
    "InteractionKind",
    "InteractionRequest",
    "InteractionResponse",
    "InterruptHandle",
    "Join",
    "Journal",
    "JournalError",
    "JournalReader",
    "LaneClosedError",
    "LaneStats",
    "ManualClock",
    "Model",
    "ModelError",
    "ModelReply",
    "ModelRequest",
    "MonotonicClock",
    "Phase",
    "ProcessEnd",
    "ProcessResult",
    "PromptOpened",
    "PromptSettled",
    "ReplayDivergence",
    "ReplayReport",
    "Scenario",
    "ScenarioError",
    "ScriptedModel",
    "Settlement",
    "ShellTool",
    "Sleep",
    "SleepTool",
    "Spawn",
    "Status",
    "StatusKind",
    "Think",
    "TickLimitError",
    "TickReport",
    "TickworkError",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolJob",
    "ToolLane",
    "ToolOutcome",
    "ToolRegistry",
    "ToolResult",
    "Turn",
    "UnknownAgentError",
    "WaitReason",
    "Wake",
    "World",
    "WorldClosedError",
    "__version__",
    "behavior",
    "load_scenario",
    "off_lane",
    "register_behavior",
    "replay",
    "response_approved",
    "run_process",
]
