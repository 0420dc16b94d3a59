"""The journal: a run recorded to one SQLite file, tick by tick, for deterministic replay.

What is stored: a header (format version, seed, world settings, the scenario if any, and
the tickwork/esper/python versions), every input applied with its tick and sequence
number, each tick's time and digest, and for each tick the fields of the agents that
changed (so a divergence can be explained field by field). The tick thread writes it and
commits once per tick, in WAL mode: a process killed mid-run leaves a journal whose
committed ticks are complete and replay.

Journals are data. Opening a missing, empty, corrupt, truncated, foreign or newer file
fails with a ``JournalError`` that says which, never a traceback from sqlite.
"""

from __future__ import annotations

import contextlib
import json
import platform
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime._version import __version__
from runtime.errors import JournalError
from runtime.journal.codec import decode_input, encode_input
from runtime.world.digest import canonical

__all__ = ["FORMAT_VERSION", "Journal", "JournalReader", "RecordedTick"]

FORMAT_VERSION = 1
MAGIC = "tickwork-journal"

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ticks (tick INTEGER PRIMARY KEY, now REAL NOT NULL, digest TEXT NOT NULL);
CREATE TABLE inputs (
    tick INTEGER NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, payload TEXT NOT NULL,
    PRIMARY KEY (tick, seq)
);
CREATE TABLE agent_states (
    tick INTEGER NOT NULL, agent TEXT NOT NULL, fields TEXT NOT NULL,
    PRIMARY KEY (tick, agent)
);
"""


@dataclass(frozen=True, slots=True)
class RecordedTick:
    """One recorded tick: its time, digest, inputs in order, and changed agents' fields."""

    tick: int
    now: float
    digest: str
    inputs: list[tuple[int, object]]
    agents: dict[str, dict[str, Any]]


class Journal:
    """A journal being written. Make one with ``Journal.create(path)`` and hand it to
    ``World(journal=...)``; the world writes the header and every tick, and closes it."""

    def __init__(self, path: Path, conn: sqlite3.Connection, scenario: dict[str, Any] | None):
        self.path = path
        self._conn = conn
        self._scenario = scenario
        self._closed = False
        self.ticks = 0
        self.inputs = 0

    @classmethod
    def create(
        cls, path: str | Path, *, scenario: dict[str, Any] | None = None, overwrite: bool = False
    ) -> Journal:
        """Create a new journal file at ``path``.

        ``scenario`` (plain JSON data, e.g. ``{"path": ..., "text": ...}``) is stored in the
        header so a replay can rebuild scenario behaviours.

        Raises:
            JournalError: ``path`` exists (and ``overwrite`` is False) or cannot be written.
        """
        path = Path(path)
        if path.exists():
            if not overwrite:
                raise JournalError(f"journal {str(path)!r} already exists")
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        try:
            conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a commit survives the process being killed (it is in the
            # OS's cache); only an OS crash can lose the last commits, never corrupt them.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise JournalError(f"cannot create journal {str(path)!r}: {exc}") from exc
        return cls(path, conn, scenario)

    def begin(self, settings: dict[str, Any]) -> None:
        """Write the header: the world's ``settings``, the scenario, and the versions.

        A ``World`` calls it once with everything a replay needs to rebuild it.
        """
        import esper

        header = {
            "format": FORMAT_VERSION,
            **settings,
            "scenario": self._scenario,
            "versions": {
                "tickwork": __version__,
                "esper": getattr(esper, "__version__", "?"),
                "python": platform.python_version(),
            },
        }
        self._write_meta({"magic": MAGIC, "format": str(FORMAT_VERSION), "header": header})

    def _write_meta(self, values: dict[str, Any]) -> None:
        try:
            with self._conn:
                self._conn.execute("BEGIN")
                self._conn.executemany(
                    "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                    [(k, v if isinstance(v, str) else json.dumps(v)) for k, v in values.items()],
                )
        except sqlite3.Error as exc:
            raise JournalError(f"cannot write journal {str(self.path)!r}: {exc}") from exc

    def record_tick(
        self,
        tick: int,
        now: float,
        inputs: list[tuple[int, object]],
        digest: str,
        changed: list[tuple[str, dict[str, Any]]],
    ) -> None:
        """Write one tick in one transaction (committed before the next tick starts).

        Raises:
            JournalError: an input cannot be encoded, or the file cannot be written.
        """
        rows = [(tick, seq, *encode_input(item)) for seq, item in inputs]
        states = [
            # The digest's canonical encoding: it never raises, whatever a behaviour's
            # result holds (a plain json.dumps failed the tick on a set or a huge int).
            (tick, agent_id, canonical(fields))
            for agent_id, fields in changed
        ]
        conn = self._conn
        try:
            conn.execute("BEGIN")
            conn.execute("INSERT INTO ticks VALUES (?, ?, ?)", (tick, now, digest))
            if rows:
                conn.executemany("INSERT INTO inputs VALUES (?, ?, ?, ?)", rows)
            if states:
                conn.executemany("INSERT INTO agent_states VALUES (?, ?, ?)", states)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise JournalError(f"cannot write journal {str(self.path)!r}: {exc}") from exc
        self.ticks += 1
        self.inputs += len(rows)

    def close(self) -> None:
        """Checkpoint the WAL into the main file and close. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(sqlite3.Error):  # else the WAL stays beside it; still read
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._conn.close()


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
            self._conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
            meta = dict(self._conn.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.DatabaseError as exc:
            raise JournalError(f"{where!r} is not a readable tickwork journal: {exc}") from exc
        if meta.get("magic") != MAGIC:
            raise JournalError(f"{where!r} is an SQLite file but not a tickwork journal")
        try:
            version = int(meta["format"])
            self.header: dict[str, Any] = json.loads(meta["header"])
        except (KeyError, ValueError) as exc:
            raise JournalError(f"{where!r} has a damaged header: {exc}") from exc
        if version > FORMAT_VERSION:
            raise JournalError(
                f"{where!r} is journal format {version}, newer than this tickwork"
                f" ({__version__}) reads (format {FORMAT_VERSION}): upgrade tickwork"
            )
        try:
            self._conn.execute("SELECT count(*) FROM ticks").fetchone()
        except sqlite3.DatabaseError as exc:
            raise JournalError(f"{where!r} is damaged: {exc}") from exc

    def tick_count(self) -> int:
        """How many complete ticks the journal holds."""
        return int(self._query("SELECT count(*) FROM ticks")[0][0])

    def ticks(self, until_tick: int | None = None) -> Iterator[RecordedTick]:
        """The recorded ticks in order (up to ``until_tick`` inclusive).

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
            inputs.setdefault(tick, []).append((seq, decode_input(kind, payload)))
        states: dict[int, dict[str, dict[str, Any]]] = {}
        for tick, agent, fields in self._query(
            "SELECT tick, agent, fields FROM agent_states WHERE tick <= ?", limit
        ):
            states.setdefault(tick, {})[agent] = json.loads(fields)
        for tick, now, digest in ticks:
            yield RecordedTick(tick, now, digest, inputs.get(tick, []), states.get(tick, {}))

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
