"""Agent history: how messages and tool results become entries, and how entries are added."""

from __future__ import annotations

import dataclasses
import json
import math
from enum import Enum
from typing import Any

from components import Entry, History, ToolResult
from components._frozen import frozen_builder
from runtime.lane.values import INT_HIGH, INT_LOW
from runtime.world.state import JOURNAL_FORMAT, AgentRecord, PendingBatch, WorldState

__all__ = ["add_history", "add_prompt", "as_text", "record_tool_results"]


def as_text(value: Any, journal_format: int = JOURNAL_FORMAT) -> str:
    """A message or output as history text: strings as they are, the rest as JSON.

    What JSON cannot hold is written by ``journal_format``'s rule (the world's: see
    `runtime.world.state.JOURNAL_FORMAT`). From format 3: a set as a list of its items
    sorted (numbers and strings by value, anything else by the text it is written as), a
    dataclass as its fields, an enum as its value, another object as its own text (its
    ``str``) or, when that text holds a memory address or raises, as ``<TypeName>``; a
    value the encoder refuses (keys that do not sort, a cycle, an integer past 4,300
    digits) by the same rules all the way down, keys as their text. So the same in every
    process, but for an object whose own text is not, and it never raises. Format 2 wrote
    Python's ``str`` of each (a set of strings in hash order, an object with its address).
    """
    if isinstance(value, str):
        return value
    # Scalars the way the JSON encoder writes them, without running it (a tool's output
    # is often a number); the encoder itself is made once (see `_TEXT`). Exact types
    # only, so `repr` is the type's own (~2.5x quicker than `int.__repr__` unbound).
    kind = type(value)
    if kind is int and INT_LOW < value < INT_HIGH:
        return repr(value)
    if kind is float and math.isfinite(value):
        return repr(value)
    if kind is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    if journal_format >= 3:
        try:
            return _TEXT.encode(value)
        except Exception:  # what the encoder refuses, or host code raising: never the agent's
            return _huge_int(value) or _steady_text(value)
    try:
        return _TEXT_2.encode(value)
    except (TypeError, ValueError, RecursionError):
        return _unencodable(value)


def _huge_int(value: Any) -> str:
    # An integer too long for str() (past 4,300 digits), by its size; else "".
    return f"<int of {value.bit_length()} bits>" if isinstance(value, int) else ""


def _unencodable(value: Any) -> str:
    # Format 2's text of what its encoder refused (a spawned agent's message, a host
    # posting raw outcomes); the text must not raise in turn (str() of a 5,000-digit int
    # does).
    if isinstance(value, int):
        return _huge_int(value)
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__}>"


def _steady_default(value: Any) -> Any:
    """What JSON cannot hold, as something it can, the same in every process (format 3;
    see `as_text`)."""
    if isinstance(value, set | frozenset):
        kinds = {type(item) for item in value}
        if kinds in ({int}, {str}):
            return sorted(value)  # numbers by value, strings by code point
        return sorted(value, key=_TEXT.encode)  # by the text each item is written as
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # Its fields (its `str` would print a set field in hash order); not a ClassVar or
        # InitVar, and a field never set as None.
        return {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    return _own_text(value)


def _own_text(value: Any) -> str:
    """An object's own text (its ``str``), or ``<TypeName>`` when that holds a memory
    address (Python's default text of an object, a function, a generator) or raises."""
    try:
        text = str(value)
    except Exception:
        return f"<{type(value).__qualname__}>"
    return f"<{type(value).__qualname__}>" if " at 0x" in text else text


_DEPTH = 100  # how deep `_steady_text` goes; deeper is written "<...>"


def _steady_text(value: Any) -> str:
    """Format 3's text of a value its encoder refused (a dict whose keys do not sort, an
    integer past 4,300 digits, a cycle, nesting past the recursion limit, host code that
    raises): the value made plain by the same rules, then encoded. Never raises."""
    try:
        return _TEXT.encode(_plain(value, 0, set()))
    except Exception:  # a budget the rules above do not foresee: still never the agent's
        return f'"<{type(value).__qualname__}>"'


def _plain(value: Any, depth: int, path: set[int]) -> Any:
    # `_steady_default`'s rules, applied all the way down, to JSON's own kinds only.
    if value is None or isinstance(value, bool | str | float):
        return value
    if isinstance(value, Enum):
        return _plain(value.value, depth, path)
    if isinstance(value, int):
        return int(value) if INT_LOW < value < INT_HIGH else _huge_int(value)
    if depth >= _DEPTH:
        return "<...>"
    if id(value) in path:
        return "<cycle>"
    path.add(id(value))
    try:
        deeper = depth + 1
        if isinstance(value, dict):
            pairs = [(_key(k, deeper, path), _plain(v, deeper, path)) for k, v in value.items()]
            if len({key for key, _ in pairs}) == len(pairs):
                return dict(pairs)
            # Keys whose texts meet (1 and "1"): every entry kept, as [key, value] pairs,
            # in the order of their text (the dict's own order may be a set's).
            return sorted(([key, item] for key, item in pairs), key=_TEXT.encode)
        if isinstance(value, list | tuple):
            return [_plain(item, deeper, path) for item in value]
        if isinstance(value, set | frozenset):
            kinds = {type(item) for item in value}
            if kinds in ({int}, {str}):  # by value, as `_steady_default` sorts them
                return [_plain(item, deeper, path) for item in sorted(value)]
            return sorted((_plain(item, deeper, path) for item in value), key=_TEXT.encode)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {
                f.name: _plain(getattr(value, f.name, None), deeper, path)
                for f in dataclasses.fields(value)
            }
        return _own_text(value)
    finally:
        path.discard(id(value))


def _key(key: Any, depth: int, path: set[int]) -> str:
    return key if isinstance(key, str) else _TEXT.encode(_plain(key, depth, path))


# What `json.dumps(value, sort_keys=True, default=...)` uses, made once instead of per call.
_TEXT = json.JSONEncoder(sort_keys=True, default=_steady_default)
_TEXT_2 = json.JSONEncoder(sort_keys=True, default=str)  # journal formats 1 and 2


def add_history(state: WorldState, rec: AgentRecord, role: str, content: str) -> None:
    """Append an entry to the agent's history.

    The history's hash is not updated here: ``runtime.world.digest.history_hash`` folds the new
    entries in when a digest needs it. A world that tracks no digests (the default) then
    never pays for canonical JSON and blake2b per entry on the hot path.
    """
    _append(state, rec, _entry(role, content))


def add_prompt(state: WorldState, rec: AgentRecord, prompt: str) -> None:
    """Append the question an ``Ask`` puts to a person, as the agent's ``assistant`` entry.

    Agents that ask the very same string (a literal in their behaviour, as most questions
    to a person are) share one entry: entries are frozen, so one object serves them all
    (48 B an agent waiting on such a prompt). Only the latest prompt's entry is kept for
    this, so the world holds one prompt beyond what its agents hold.
    """
    entry = state.last_prompt
    if entry is None or entry.content is not prompt:
        entry = state.last_prompt = _entry("assistant", prompt)
    _append(state, rec, entry)


def _append(state: WorldState, rec: AgentRecord, entry: Entry) -> None:
    entries: list[Entry] = rec._comps[History].entries  # `rec.history`, without the call
    if len(entries) < _EXACT_UP_TO:
        # Refilled in place, sized to fit: `append` gives a list its first four slots at
        # once (32 B), though a waiting agent's history often holds one entry and a
        # finished one's two; `list.__init__` from a sized iterable allocates exactly
        # (rounded up to an even count: two slots, 16 B). The same list object (a view or
        # a host may hold it), refilled from a tuple that keeps every entry alive
        # meanwhile; from three entries on it has the four slots appending would have
        # given it, so appending takes over at four and grows it exactly as before.
        list.__init__(entries, (*entries, entry))
    else:
        entries.append(entry)
    state.dirty[rec.ordinal] = rec  # `state.touch(rec)`, inlined: six entries a turn
    state.changed_this_tick += 1


# Up to this many entries a history is kept exactly sized (see `add_history`).
_EXACT_UP_TO = 4

# An `Entry` built through a plain class's slots (`frozen_builder`): ~215 ns against the
# class's ~450 ns here, for the six entries of a model -> tools -> prompt turn.
_entry = frozen_builder(Entry)


def record_tool_results(
    state: WorldState, rec: AgentRecord, pending: PendingBatch
) -> list[ToolResult]:
    """Write one history entry per call of ``pending`` (in call order) and return the results.

    The same entries, list and counts as `add_history` once per call, in one pass: the
    batch's entries fill the exactly sized part of the list at once and are appended past
    it (so the list's size and spare slots end as they would have), and the agent is
    touched once, counted once per entry (the tick's ``changed`` is unchanged).
    """
    results = pending.final()
    new: list[Entry] = []
    try:
        for call, result in zip(pending.calls, results, strict=True):
            text = (
                as_text(result.output, state.journal_format)
                if result.error is None
                else f"error: {result.error}"
            )
            new.append(_entry("tool", f"{call.name}[{call.id}]: {text}"))
    finally:  # what was written before a failure stays written, as one by one
        if new:
            _extend(state, rec, new)
    return results


def _extend(state: WorldState, rec: AgentRecord, new: list[Entry]) -> None:
    """`add_history` of each entry of ``new`` in turn, in one pass."""
    entries: list[Entry] = rec._comps[History].entries
    room = _EXACT_UP_TO - len(entries)
    if room > 0:
        list.__init__(entries, (*entries, *new[:room]))
        for entry in new[room:]:
            entries.append(entry)
    else:
        for entry in new:
            entries.append(entry)
    state.dirty[rec.ordinal] = rec
    state.changed_this_tick += len(new)
