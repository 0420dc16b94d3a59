"""tickwork's machinery and public API.

Everything a user needs is importable from here; the data types live in ``components``
and are re-exported unchanged.
"""

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

from ._tool_backend import BackendInfo
from ._version import __version__
from .actions import Action, Ask, Behavior, CallTools, Join, Sleep, Spawn, Think, Turn
from .behaviors import BehaviorRegistry, behavior, register_behavior
from .cancel import Cancelled, CancelToken, InterruptHandle
from .clock import Clock, ManualClock, MonotonicClock
from .cluster import DaskBackend
from .control import ControlClient
from .errors import (
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
from .hub import HubStats, InteractionHub
from .journal import Journal, JournalReader
from .lane import ToolJob, ToolLane, ToolOutcome, off_lane
from .models import Model, ModelReply, ModelRequest, ScriptedModel
from .process import ProcessEnd, ProcessResult, run_process
from .replay import ReplayReport, replay
from .scenario import Scenario, load_scenario
from .tools import AskUserTool, ShellTool, SleepTool, Tool, ToolContext, ToolRegistry
from .wake import Wake
from .world import TickReport, World

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
