"""State digests: a canonical encoding of every agent's state, hashed with blake2b.

The world digest is the sum, modulo 2**128, of per-agent blake2b digests. A sum does not
depend on order (esper's, a set's, or the order agents changed in) and can be updated
incrementally: when an agent changes, subtract its old digest and add its new one, so a
digest costs O(agents changed since the last one), not O(agents). Nothing here uses
``hash()``, so digests are the same under every ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

from components import Entry
from runtime.lane.values import INT_HIGH, INT_LOW
from runtime.world.host_data import flatten
from runtime.world.state import AgentRecord

__all__ = [
    "agent_digest",
    "agent_fields",
    "agent_text",
    "canonical",
    "chain_history",
    "combine",
    "history_hash",
    "text_digest",
]

_MOD = 1 << 128


def canonical(value: Any) -> str:
    """The canonical JSON text of ``value`` (sorted keys, no spaces, stable floats).

    Whatever ``value`` holds, this never raises: a behaviour may return anything and a host
    component may hold anything, and a digest must not fail the tick. What JSON cannot
    write as it is goes through `_encodable` (an integer beyond CPython's 4,300-digit
    limit in hex, nesting past the recursion limit by its type, a dict whose keys JSON
    cannot sort or write by their canonical text); what it can keeps the text it always
    had, so digests journals hold still match.
    """
    try:
        text = "".join(_encode(value, 0))
        if len(text) > 2 * _MAX_DEPTH + 2 and _too_deep(text, _MAX_DEPTH + 1):
            # Deeper than the fallback goes: written by it, as when the encoder runs out
            # of stack (see `_too_deep`).
            raise RecursionError("deeper than the digest's fallback goes")
        return text
    except Exception:  # also what a host's __repr__ or property raises
        try:
            return "".join(_encode(_encodable(value, 0, [_FALLBACK_BUDGET]), 0))
        except Exception:  # the budget ran out, or host code raised again
            return encode_basestring(f"<{type(value).__qualname__}: not encodable>")


_MAX_DEPTH = 100
# The text of a value's strings, so that `_too_deep` counts only brackets of its structure.
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')


def _too_deep(text: str, levels: int) -> bool:
    """Whether the JSON ``text`` nests more than ``levels`` brackets deep.

    The C encoder writes a value nested a few hundred levels deep when the Python stack
    it runs on has room and raises RecursionError when it has not, so its text, and the
    digest, would depend on how deep the caller was (a replay called from a deeper frame
    diverged from its recording). Values deeper than the fallback goes (`_MAX_DEPTH`)
    are written by the fallback wherever they are encoded. Only a text long enough, with
    brackets enough, is scanned (a value ``levels`` deep is ``2 * levels`` characters at
    least): an agent's few hundred characters cost two length tests.
    """
    if len(text) <= 2 * levels or text.count("[") + text.count("{") <= levels:
        return False
    depth = 0
    for ch in _STRINGS.sub("", text):
        if ch in "[{":
            depth += 1
            if depth > levels:
                return True
        elif ch in "]}":
            depth -= 1
    return False


# How many values the fallback visits before it gives up on the whole: a value that holds
# itself twice over (`a = []; a += [a, a]`) would otherwise unfold into 2**100 of them.
_FALLBACK_BUDGET = 1_000_000


class _TooLarge(Exception):
    """The fallback's budget ran out (`canonical` then writes the value's type alone)."""


def _encodable(value: Any, depth: int, budget: list[int]) -> Any:
    """``value`` as plain JSON values that the encoder writes without raising, and exactly
    as it writes ``value`` itself whenever it can: the checks follow the C encoder's own
    order, dataclasses, enums and sets are taken as `_fallback` takes them, and only what
    the encoder refuses is changed.

    Raises:
        _TooLarge: more than ``budget[0]`` values visited.
    """
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooLarge
    if depth > _MAX_DEPTH:
        return f"<{type(value).__qualname__}>"
    if value is None or value is True or value is False or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value if INT_LOW < value < INT_HIGH else f"<int {value:#x}>"
    if isinstance(value, float):
        return value
    if isinstance(value, list | tuple):
        return [_encodable(item, depth + 1, budget) for item in value]
    if isinstance(value, dict):
        return _encodable_dict(value, depth, budget)
    fields = getattr(value, "__dataclass_fields__", None)
    if fields is not None:
        return {name: _encodable(getattr(value, name), depth + 1, budget) for name in fields}
    enum_value = getattr(value, "value", None)
    if enum_value is not None and type(value).__module__ != "builtins":
        return _encodable(enum_value, depth + 1, budget)
    if isinstance(value, set | frozenset):
        try:
            items = sorted(value, key=repr)  # `_fallback`'s order
        except Exception:  # a repr that cannot be written (a 5,000-digit int)
            items = sorted(value, key=canonical)
        return [_encodable(item, depth + 1, budget) for item in items]
    return f"<{type(value).__qualname__}>"


def _encodable_dict(value: dict[Any, Any], depth: int, budget: list[int]) -> dict[str, Any]:
    """A dict as `_encodable` wants it: its own keys when the encoder can sort and write
    them (all strings, or all numbers, or a single scalar), else each key's JSON text
    (``"1"``, ``"null"``, ``"[1,2]"`` for a tuple), sorted by text, then type name; of keys
    with one text the first keeps it and the others add their type's name (``1`` and
    ``"1"`` give ``"1"`` and ``"1<str>"``)."""
    keys = list(value)
    if _sortable_keys(keys):
        return {key: _encodable(value[key], depth + 1, budget) for key in keys}
    out: dict[str, Any] = {}
    texts = sorted(((_key_text(key), type(key).__qualname__, key) for key in keys), key=_first2)
    for text, type_name, key in texts:
        name = f"{text}<{type_name}>" if text in out else text
        out[name] = _encodable(value[key], depth + 1, budget)
    return out


def _first2(item: tuple[str, str, Any]) -> tuple[str, str]:
    return item[0], item[1]


def _sortable_keys(keys: list[Any]) -> bool:
    """Whether the C encoder sorts and writes these dict keys without raising."""
    if all(isinstance(key, str) for key in keys):
        return True
    numbers = all(
        isinstance(key, float) or (isinstance(key, int) and INT_LOW < key < INT_HIGH)
        for key in keys
    )
    return numbers or (len(keys) == 1 and keys[0] is None)


def _key_text(key: Any) -> str:
    """The text a dict key is written as: JSON's own for a scalar, else its canonical text."""
    if isinstance(key, str):
        return key
    if key is None or key is True or key is False:
        return "null" if key is None else ("true" if key else "false")
    if isinstance(key, int | float) and (isinstance(key, float) or INT_LOW < key < INT_HIGH):
        return _CANONICAL.encode({key: 0})[2:-4]  # as the encoder writes a key: '{"1":0}'
    return canonical(key)


def _fallback(value: Any) -> Any:
    # Dataclasses and enums (ModelReply, ToolResult, StatusKind) encode as their fields;
    # anything else by type name only: a repr may hold a memory address, which would make
    # two identical runs differ.
    fields = getattr(value, "__dataclass_fields__", None)
    if fields is not None:
        return {name: getattr(value, name) for name in fields}
    enum_value = getattr(value, "value", None)
    if enum_value is not None and type(value).__module__ != "builtins":
        return enum_value
    if isinstance(value, (tuple, set, frozenset)):
        return list(value) if isinstance(value, tuple) else sorted(value, key=repr)
    return f"<{type(value).__qualname__}>"


# One encoder for every call: `json.dumps` with any non-default argument builds a new
# JSONEncoder each time, which cost as much as encoding a small agent's fields. The text is
# the same (dumps passes these very arguments to the encoder it makes); `encode` keeps no
# state between calls, so sharing it across threads is safe.
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_fallback
)


def _encode_python(value: Any, _indent_level: int) -> list[str]:
    return [_CANONICAL.encode(value)]


# The C encoder `_CANONICAL.encode` builds on every call, built once with its very
# arguments (3.11's `JSONEncoder.iterencode`), less its circular-reference check: a cycle
# then raises RecursionError rather than ValueError, which `canonical` meets alike. It
# saves a third of a small encode (an agent's fields, a history entry), twice per agent
# per tick of a digest. Python without the C accelerator uses the encoder itself.
_encode: Callable[[Any, int], Sequence[str]] = (
    _encode_python
    if c_make_encoder is None
    else c_make_encoder(None, _fallback, encode_basestring, None, ":", ",", True, False, True)
)


def chain_history(previous: bytes, entry: Entry) -> bytes:
    """The history hash after ``entry`` is appended to a history hashed ``previous``."""
    h = hashlib.blake2b(previous, digest_size=16)
    role, content = entry.role, entry.content
    if type(role) is str and type(content) is str:  # canonical([role, content]), inlined
        text = "[" + encode_basestring(role) + "," + encode_basestring(content) + "]"
    else:
        text = canonical([role, content])
    try:
        h.update(text.encode())
    except UnicodeEncodeError:  # see `text_digest`
        h.update(text.encode("utf-8", "surrogatepass"))
    return h.digest()


def history_hash(rec: AgentRecord) -> bytes:
    """The chained hash of the agent's whole history, folding in entries added since the
    last call (histories only grow, so the hash of a prefix stays valid)."""
    entries = rec.history.entries
    done = rec.hist_hashed
    if done < len(entries):
        value = rec.hist_hash
        for index in range(done, len(entries)):
            value = chain_history(value, entries[index])
        rec.hist_hash = value
        rec.hist_hashed = len(entries)
    return rec.hist_hash


def agent_fields(rec: AgentRecord, journal_format: int) -> dict[str, Any]:
    """The agent's state that a digest covers, as canonical JSON values, field by field.

    An agent with host components has their fields too (``"Position.x": 3``, named by the
    rules of ``journal_format``: `flatten`); one without has exactly the fields it always
    had, so older journals still replay.
    """
    status, turn = rec.status, rec.turn
    # In the order `canonical` sorts them (its sort then only confirms the order), and enum
    # values read as `_value_` (`.value` is a property): a digest is made of every changed
    # agent on every tick of a tracking world, a replay's and its recording's alike.
    fields = {
        "behavior": rec.spec.behavior,
        "children": list(rec.children) if rec.children else [],
        "counter": turn.counter,
        "deadline": turn.deadline,
        "generation": turn.generation,
        "history": [len(rec.history.entries), history_hash(rec).hex()],
        "id": rec.id,
        "inflight": turn.inflight,
        "interactive": rec.spec.interactive,
        "mailbox": list(rec.mailbox) if rec.mailbox else [],
        "message": status.message,
        "name": rec.agent.name,
        "parent": rec.agent.parent,
        "paused_from": None if rec.paused_from is None else rec.paused_from._value_,
        "phase": turn.phase._value_,
        "prompts": sorted(rec.prompt_ids()),
        "reason": None if status.reason is None else status.reason._value_,
        "result": rec.result,
        "status": status.kind._value_,
    }
    if rec.components is not None:  # host components, as "Position.x" fields
        fields.update(flatten(rec.components, journal_format))
    return fields


def agent_text(rec: AgentRecord, journal_format: int) -> str:
    """``canonical(agent_fields(rec, journal_format))``, written straight from the record.

    What a digest hashes and a journal stores of a changed agent, on every tick it changes.
    The encoder took 4 us over the 19 fields (and their dict 3.5 more); written here, the
    text costs ~2.4 us. Each field is the encoder's own text of its value: a field of a
    fixed kind (an int, an enum's value, the history hash) written as the encoder writes
    it, any other by the encoder unless it is a string or None. A value the encoder
    refuses (a list holding itself, host code that raises) sends the whole agent down
    `canonical`'s fallback, as it went before: the fallback's text depends on the value's
    depth in the whole. An agent with host components takes the encoder's path too:
    their fields sort among these.
    """
    if rec.components is not None:
        return canonical(agent_fields(rec, journal_format))
    try:
        return _agent_text(rec)
    except Exception:  # what `canonical` falls back on, for the agent as a whole
        return canonical(agent_fields(rec, journal_format))


def _agent_text(rec: AgentRecord) -> str:
    # `agent_text`'s fields, each by the encoder itself: raises where `canonical` falls back.
    status, turn, agent, spec = rec.status, rec.turn, rec.agent, rec.spec
    children, mailbox, paused, reason = rec.children, rec.mailbox, rec.paused_from, status.reason
    deadline = turn.deadline
    return (
        f'{{"behavior":{_text(spec.behavior)},'
        f'"children":{_strict(list(children)) if children else "[]"},'
        f'"counter":{int.__repr__(turn.counter)},'
        f'"deadline":{"null" if deadline is None else _strict(deadline)},'
        f'"generation":{int.__repr__(turn.generation)},'
        f'"history":[{len(rec.history.entries)},"{history_hash(rec).hex()}"],'
        f'"id":{_text(rec.id)},'
        f'"inflight":{_text(turn.inflight)},'
        f'"interactive":{"true" if spec.interactive else "false"},'
        f'"mailbox":{_strict(list(mailbox)) if mailbox else "[]"},'
        f'"message":{_text(status.message)},'
        f'"name":{_text(agent.name)},'
        f'"parent":{_text(agent.parent)},'
        f'"paused_from":{"null" if paused is None else encode_basestring(paused._value_)},'
        f'"phase":{encode_basestring(turn.phase._value_)},'
        f'"prompts":{_strict(sorted(rec.prompt_ids())) if rec.prompts else "[]"},'
        f'"reason":{"null" if reason is None else encode_basestring(reason._value_)},'
        f'"result":{_text(rec.result)},'
        f'"status":{encode_basestring(status.kind._value_)}}}'
    )


def _text(value: Any) -> str:
    # A field's canonical text: a string or None at once, anything else by the encoder.
    if value.__class__ is str:
        return encode_basestring(value)
    return "null" if value is None else _strict(value)


def _strict(value: Any) -> str:
    # The encoder's text of `value`, raising where `canonical` would fall back: a field
    # sits one level into its agent's dict, so it may nest one level less.
    text = "".join(_encode(value, 0))
    if len(text) > 2 * _MAX_DEPTH and _too_deep(text, _MAX_DEPTH):  # (the call, if long)
        raise RecursionError("deeper than the digest's fallback goes")
    return text


def text_digest(text: str) -> int:
    """The blake2b digest of a canonical text, as an integer.

    A text holding a lone surrogate (a model's streamed reply split inside a pair, a
    person's escaped answer: Python keeps each half as a code point) hashes through
    ``surrogatepass``, so the tick does not fail; any other text hashes to the bytes
    ``encode()`` gives, as it always did (the try costs nothing when nothing raises).
    """
    try:
        data = text.encode()
    except UnicodeEncodeError:
        data = text.encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=16).digest(), "big")


def agent_digest(fields: dict[str, Any]) -> int:
    """The blake2b digest of an agent's canonical fields, as an integer."""
    return text_digest(canonical(fields))


def combine(total: int, old: int, new: int) -> int:
    """The world sum after one agent's digest changed from ``old`` to ``new``."""
    return (total - old + new) % _MOD


def hexdigest(total: int) -> str:
    """The world digest as text."""
    return hashlib.blake2b(total.to_bytes(16, "big"), digest_size=16).hexdigest()
