"""What crosses into a world from a lane: JSON values that survive a round trip unchanged.

A tool's output and a model's reply reach the world as a job's outcome; a journal stores
them as JSON and a replay reads them back. A value that JSON changes on the way (a tuple
comes back a list, ``{1: "a"}`` comes back ``{"1": "a"}``) would make the live run and its
replay see different values, and one JSON cannot hold at all (NaN, a set, an object, an
integer of more than 4,300 digits) would fail the journal on the tick thread. So such values
are settled at the boundary, on the lane's thread: `json_value` turns tuples into lists and
refuses the rest with an error that names where in the value it is.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["INT_HIGH", "INT_LOW", "MAX_INT_DIGITS", "NotJSON", "json_value"]

MAX_INT_DIGITS = 4300
"""The most digits an integer may have: CPython's default limit for ``int`` <-> ``str``."""

INT_HIGH = 10**MAX_INT_DIGITS
INT_LOW = -INT_HIGH
"""An int ``v`` has a text form (``str``, JSON) exactly when ``INT_LOW < v < INT_HIGH``.

Both are constants: a bound negated in the comparison itself (``-bound < v``) builds a
1.8 KB integer at every call, ~60 ns of `json_value(1)`'s ~150 here, on hot paths (each
tool call's output on its lane, each history entry on the tick thread).
"""
_MAX_DEPTH = 200  # deeper than any real reply; far below the interpreter's recursion limit


class NotJSON(ValueError):
    """A value that does not survive a JSON round trip; the message says where and why."""


def json_value(value: Any) -> Any:
    """``value`` as the JSON value a journal gives back: tuples become lists.

    Raises:
        NotJSON: part of ``value`` cannot be JSON (NaN or an infinity, a key that is not a
            string, an integer beyond 4,300 digits, a set, an object, nesting past 200).
    """
    kind = type(value)
    if value is None or kind is str or kind is bool:
        return value
    if kind is int and INT_LOW < value < INT_HIGH:
        return value
    try:
        return _walk(value, 0)
    except _Bad as bad:
        where = "value" + "".join(reversed(bad.path))
        raise NotJSON(f"{where}: {bad.reason}") from None


class _Bad(Exception):
    # The path is built only on the way out of a failure: a big valid value pays nothing.
    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.path: list[str] = []


def _walk(value: Any, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise _Bad(f"nested deeper than {_MAX_DEPTH} levels")
    kind = value.__class__
    # Scalars of the exact types come back as they are (bool has no subclasses); the
    # checks below convert subclasses and refuse what is out of range.
    if kind is str or value is None or kind is bool:
        return value
    if kind is int and INT_LOW < value < INT_HIGH:
        return value
    if kind is float and math.isfinite(value):
        return value
    if isinstance(value, str):
        return str.__str__(value)  # a str subclass comes back a plain str
    if isinstance(value, int):
        if not INT_LOW < value < INT_HIGH:
            raise _Bad(f"an integer of more than {MAX_INT_DIGITS} digits")
        return int.__index__(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Bad(f"{value!r} is not a JSON number")
        return float(value)
    if isinstance(value, list | tuple):
        items = []
        for index, item in enumerate(value):
            try:
                items.append(_walk(item, depth + 1))
            except _Bad as bad:
                bad.path.append(f"[{index}]")
                raise
        return items
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Bad(f"key {shown(key)} is not a string")
            try:
                out[key if key.__class__ is str else str.__str__(key)] = _walk(item, depth + 1)
            except _Bad as bad:
                bad.path.append(f"[{key!r}]")
                raise
        return out
    raise _Bad(f"a {type(value).__name__} is not a JSON value")


def shown(value: Any, width: int = 40) -> str:
    """``value``'s repr for an error message, cut to ``width`` characters; never raises (an
    int past str()'s 4,300-digit limit, or anything whose repr fails, by its type)."""
    if isinstance(value, int) and not INT_LOW < value < INT_HIGH:
        return f"<int of {value.bit_length()} bits>"  # its repr would raise
    try:
        text = repr(value)
    except Exception:  # a key's own __repr__ may fail; the type still says enough
        return f"<{type(value).__name__}>"
    return text if len(text) <= width else text[: width - 3] + "..."
