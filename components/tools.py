"""Tool data: a call an agent asks for and the result it gets back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._frozen import fast_frozen_init

__all__ = ["ToolCall", "ToolResult"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call of the tool ``name`` with ``args`` (JSON values); ``id`` is the caller's."""

    id: str
    name: str
    args: Mapping[str, Any] = field(default_factory=dict)


@fast_frozen_init  # one per tool call, on the lane's thread
@dataclass(frozen=True, slots=True)
class ToolResult:
    """What one call produced: ``output`` (a JSON value) or an ``error`` message."""

    call_id: str
    output: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the call succeeded."""
        return self.error is None
