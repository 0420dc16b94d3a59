"""Tool data: a call an agent asks for and the result it gets back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from ._frozen import fast_frozen_init, frozen_builder

__all__ = ["ToolCall", "ToolResult"]


class _NewDict:
    """The default of `ToolCall`'s ``args``: a new empty dict for each call (as the field's
    ``default_factory`` says), shown as ``{}`` in its signature."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "{}"


_NO_ARGS: Any = _NewDict()


@dataclass(frozen=True, slots=True, init=False)
class ToolCall:
    """One call of the tool ``name`` with ``args`` (JSON values); ``id`` is the caller's.

    Raises:
        TypeError: ``id`` or ``name`` is not a string, or ``args`` is not a mapping.
    """

    id: str
    name: str
    args: Mapping[str, Any] = field(default_factory=dict)

    # Written out rather than generated: the generated frozen ``__init__`` sets each field
    # through ``object.__setattr__`` (~460 ns a call here); the slots' own setters, with
    # the checks, ~320 ns. Every `Think` builds one, every `CallTools` batch its own.
    def __init__(self, id: str, name: str, args: Mapping[str, Any] = _NO_ARGS) -> None:
        ident: object = id  # typed callers are right; untyped ones are checked
        tool: object = name
        given: object = args
        if ident.__class__ is not str and not isinstance(ident, str):
            _refuse("id", ident, "a string")
        if tool.__class__ is not str and not isinstance(tool, str):
            _refuse("name", tool, "a string")
        if given is _NO_ARGS:
            args = {}
        elif given.__class__ is not dict and not isinstance(given, Mapping):
            _refuse("args", given, "a mapping")
        _set_id(self, id)
        _set_name(self, name)
        _set_args(self, args)


def _refuse(field_name: str, value: object, want: str) -> NoReturn:
    raise TypeError(f"ToolCall: `{field_name}` must be {want}, got {value!r}")


_set_id = ToolCall.__dict__["id"].__set__
_set_name = ToolCall.__dict__["name"].__set__
_set_args = ToolCall.__dict__["args"].__set__


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


# A lane thread builds one result per call and per model reply: every field, positionally,
# quicker than the class itself (see `frozen_builder`). For the runtime's own use; not
# exported.
build_result = frozen_builder(ToolResult)
