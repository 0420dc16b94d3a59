"""Reading a journal: its header and its recorded ticks, never writing it.

Journals are data. Opening a missing, empty, corrupt, truncated, foreign or newer file
fails with a ``JournalError`` that says which, never a traceback from sqlite. A journal
closed cleanly is opened ``immutable``, so reading it leaves no ``-wal``/``-shm`` beside it.
"""

from __future__ import annotations

import json
import sqlite3
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime._version import __version__
from runtime.errors import JournalError
from runtime.journal.codec import decode_input
from runtime.lane.values import shown
from runtime.world.state import JOURNAL_FORMAT

__all__ = ["FORMAT_VERSION", "MAGIC", "JournalReader", "RecordedTick", "read_only_uri"]

FORMAT_VERSION = JOURNAL_FORMAT
"""The format new journals are written in. 2: a resource's actions are taken in the step
(a ``Use``'s hold is a sleep); 1: as host actions in dispatch. Both replay and resume,
each by its own rules (`runtime.world.state.JOURNAL_FORMAT`)."""
MAGIC = "tickwork-journal"


@dataclass(frozen=True, slots=True)
class RecordedTick:
    """One recorded tick: its time, digest, inputs in order, and changed agents' fields."""

    tick: int
    now: float
    digest: str
    inputs: list[tuple[int, object]]
    agents: dict[str, dict[str, Any]]


def read_only_uri(path: Path) -> str:
    """An SQLite URI that reads ``path`` and leaves no ``-wal``/``-shm`` beside it (the
    one rule for every reader of a journal: `JournalReader`, `Journal.create`'s check).

    A journal closed cleanly has no ``-wal``: opened ``immutable``, SQLite creates none. A
    killed run's ``-wal`` holds its last ticks, so then it is read (and left) as it is.
    """
    uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"
    if not Path(f"{path}-wal").exists():
        uri += "&immutable=1"
    return uri


# What each header key holds, as the world and the scenario write it. A journal is data
# from outside: a header of 5, or a `tools` of null, failed a replay or resume deep inside
# ("internal error: AttributeError: 'int' object has no attribute 'get'"). Absent keys
# are fine (older journals lack some; readers default them).
_NUMBER = (int, float)
_HEADER: dict[str, tuple[type, ...]] = {
    "format": (int,),
    "seed": (int,),
    "clock": (str,),
    "lockstep": (bool, type(None)),
    "start": _NUMBER,
    "tool_capacity": (int,),
    "inference_capacity": (int,),
    "interaction_timeout_secs": _NUMBER,
    "keep_finished": (int, type(None)),
    "tools": (list,),
    "approval_required": (list,),
    "models": (list,),
    "scenario": (dict, type(None)),
    "setup": (str, type(None)),
    "versions": (dict,),
}


def _check_header(where: str, header: object) -> None:
    """Refuse a header that is not an object, or whose known keys hold the wrong kind.

    Raises:
        JournalError: naming the key and the value.
    """
    if not isinstance(header, dict):
        raise JournalError(f"{where!r} has a damaged header: not an object, got {shown(header)}")
    for key, kinds in _HEADER.items():
        if key not in header:
            continue
        value = header[key]
        bad = value.__class__ not in kinds or (
            isinstance(value, list) and not all(isinstance(name, str) for name in value)
        )
        if bad:
            raise JournalError(f"{where!r} has a damaged header: `{key}` is {shown(value)}")


def _agent_fields(tick: object, agent: object, text: object) -> dict[str, Any]:
    """An ``agent_states`` row's fields, refused unless they are a JSON object of an agent
    (a damaged row failed the explanation of a divergence with an internal error).

    Raises:
        JournalError: naming the tick and the agent.
    """
    try:
        fields = json.loads(text) if isinstance(text, str | bytes) else None
    except ValueError:
        fields = None
    if not isinstance(agent, str) or not isinstance(fields, dict):
        raise JournalError(
            f"tick {tick}: the recorded state of agent {shown(agent)} is damaged: {shown(text)}"
        )
    return fields


def _read_meta(conn: sqlite3.Connection, where: str) -> tuple[dict[str, Any], int]:
    """A journal's header and format, read through ``conn`` with every check a reader
    makes (the ticks table readable too).

    Raises:
        JournalError: no tickwork journal, a damaged header, or a format too new.
    """
    try:
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.DatabaseError as exc:
        raise JournalError(f"{where!r} is not a readable tickwork journal: {exc}") from exc
    if meta.get("magic") != MAGIC:
        raise JournalError(f"{where!r} is an SQLite file but not a tickwork journal")
    try:
        version = int(meta["format"])
        header: dict[str, Any] = json.loads(meta["header"])
    except (KeyError, ValueError) as exc:
        raise JournalError(f"{where!r} has a damaged header: {exc}") from exc
    if version < 1:
        raise JournalError(f"{where!r} has a damaged header: format {version}")
    _check_header(where, header)
    if version > FORMAT_VERSION:
        raise JournalError(
            f"{where!r} is journal format {version}, newer than this tickwork"
            f" ({__version__}) reads (format {FORMAT_VERSION}): upgrade tickwork"
        )
    try:
        conn.execute("SELECT count(*) FROM ticks").fetchone()
    except sqlite3.DatabaseError as exc:
        raise JournalError(f"{where!r} is damaged: {exc}") from exc
    return header, version  # the rules its ticks followed (`FORMAT_VERSION`)


class JournalReader:
    """A journal opened for reading (never written). ``header`` is its header dict.

    Raises:
        JournalError: the file is missing, not a tickwork journal, corrupt or too new.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        where = str(self.path)
        if not self.path.is_file():
            raise JournalError(f"no journal at {where!r}")
        if self.path.stat().st_size == 0:
            raise JournalError(f"{where!r} is empty, not a tickwork journal")
        try:
            self._conn = sqlite3.connect(read_only_uri(self.path), uri=True)
        except sqlite3.DatabaseError as exc:
            raise JournalError(f"{where!r} is not a readable tickwork journal: {exc}") from exc
        # A file that fails a check must not keep its connection open until the collector
        # finds it (the exception's traceback holds it in a cycle): besides the descriptor,
        # SQLite shares one WAL index per file within a process, and a reader opened while
        # it lingers trusts that index instead of rebuilding it from the log, so it missed
        # the last ticks a killed run had written.
        try:
            self.header, self.format = _read_meta(self._conn, where)
        except BaseException:
            self._conn.close()
            raise

    def tick_count(self) -> int:
        """How many complete ticks the journal holds."""
        return int(self._query("SELECT count(*) FROM ticks")[0][0])

    def ticks(
        self, until_tick: int | None = None, *, states: bool = True
    ) -> Iterator[RecordedTick]:
        """The recorded ticks in order (up to ``until_tick`` inclusive).

        ``states=False`` leaves out the changed agents' fields (``agents`` is empty): a
        replay needs them only to explain a divergence (``states_until``), and decoding
        them costs a third of a replay.

        Raises:
            JournalError: the file is damaged or holds an input that does not decode.
        """
        limit = until_tick if until_tick is not None else 2**62
        ticks = self._query(
            "SELECT tick, now, digest FROM ticks WHERE tick <= ? ORDER BY tick", limit
        )
        inputs: dict[int, list[tuple[int, object]]] = {}
        for tick, seq, kind, payload in self._query(
            "SELECT tick, seq, kind, payload FROM inputs WHERE tick <= ? ORDER BY tick, seq", limit
        ):
            try:
                item = decode_input(kind, payload)
            except JournalError as exc:  # where it is, for a reader of the damaged file
                raise JournalError(f"tick {tick}, input {seq}: {exc}") from exc
            inputs.setdefault(tick, []).append((seq, item))
        by_tick: dict[int, dict[str, dict[str, Any]]] = {}
        if states:
            for tick, agent, fields in self._query(
                "SELECT tick, agent, fields FROM agent_states WHERE tick <= ?", limit
            ):
                by_tick.setdefault(tick, {})[agent] = _agent_fields(tick, agent, fields)
        for tick, now, digest in ticks:
            yield RecordedTick(tick, now, digest, inputs.get(tick, []), by_tick.get(tick, {}))

    def states_until(
        self, tick: int
    ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        """Each agent's last recorded fields up to ``tick``, and those recorded at ``tick``.

        Raises:
            JournalError: the file is damaged.
        """
        last: dict[str, dict[str, Any]] = {}
        at: dict[str, dict[str, Any]] = {}
        for when, agent, fields in self._query(
            "SELECT tick, agent, fields FROM agent_states WHERE tick <= ? ORDER BY tick", tick
        ):
            last[agent] = _agent_fields(when, agent, fields)
            if when == tick:
                at[agent] = last[agent]
        return last, at

    def rows(self, table: str, until_tick: int) -> Iterator[tuple[Any, ...]]:
        """The raw rows of ``table`` (ticks, inputs, agent_states) up to ``until_tick``.

        Raises:
            JournalError: the file is damaged.
        """
        if table not in ("ticks", "inputs", "agent_states"):
            raise ValueError(f"`table` must be a journal table, got {table!r}")
        try:
            cursor = self._conn.execute(
                f"SELECT * FROM {table} WHERE tick <= ? ORDER BY rowid", (until_tick,)
            )
            while batch := cursor.fetchmany(4096):
                yield from batch
        except sqlite3.DatabaseError as exc:
            raise JournalError(f"{str(self.path)!r} is damaged: {exc}") from exc

    def _query(self, sql: str, *args: Any) -> list[Any]:
        try:
            return self._conn.execute(sql, args).fetchall()
        except sqlite3.DatabaseError as exc:
            raise JournalError(f"{str(self.path)!r} is damaged: {exc}") from exc

    def close(self) -> None:
        """Close the file."""
        self._conn.close()

    def __enter__(self) -> JournalReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
