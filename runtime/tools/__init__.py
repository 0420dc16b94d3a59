"""The tools room: the `Tool` protocol, the `ToolRegistry`, and the built-in tools."""

from runtime.tools.base import SupportsAsk, Tool, ToolContext
from runtime.tools.builtin import AskUserTool, ShellTool, SleepTool
from runtime.tools.registry import ToolRegistry

__all__ = [
    "AskUserTool",
    "ShellTool",
    "SleepTool",
    "SupportsAsk",
    "Tool",
    "ToolContext",
    "ToolRegistry",
]
