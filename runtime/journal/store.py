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
import fcntl
import json
import os
import platform
import sqlite3
import urllib.parse
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

    def __init__(
        self,
        path: Path,
        conn: sqlite3.Connection,
        scenario: dict[str, Any] | None,
        setup: str | None = None,
    ):
        self.path = path
        self._conn = conn
        self._scenario = scenario
        self._setup = setup
        self._closed = False
        self.ticks = 0
        self.inputs = 0
        self._lock = _writer_lock(path)

    @classmethod
    def create(
        cls,
        path: str | Path,
        *,
        scenario: dict[str, Any] | None = None,
        overwrite: bool = False,
        setup: str | None = None,
    ) -> Journal:
        """Create a new journal file at ``path``.

        ``scenario`` (plain JSON data, e.g. ``{"path": ..., "text": ...}``) is stored in the
        header so a replay can rebuild scenario behaviours. ``setup`` names the function
        (``module:function``) that registers the run's host systems and actions, so that
        ``tickwork replay`` can call it again (only if the user allows its import).

        Raises:
            JournalError: ``path`` exists (and ``overwrite`` is False), is a directory, or
                cannot be written (the message says why: no such directory, permission).
        """
        path = Path(path)
        _make_private_file(path, overwrite)
        try:
            conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a commit survives the process being killed (it is in the
            # OS's cache); only an OS crash can lose the last commits, never corrupt them.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise JournalError(f"cannot create journal {str(path)!r}: {exc}") from exc
        try:
            return cls(path, conn, scenario, setup)
        except BaseException:
            conn.close()
            raise

    @classmethod
    def append(cls, path: str | Path) -> Journal:
        """Open the existing journal at ``path`` to write more ticks after its last one.

        For `runtime.resume`: the header and the recorded ticks stay as they are (a tick
        cut mid-write was never committed, so SQLite drops it when the file is opened).

        Raises:
            JournalError: no journal is there, or it is foreign, damaged or too new.
        """
        with JournalReader(path) as reader:  # every check a reader makes, first
            header = reader.header
            ticks = reader.tick_count()
        path = Path(path)
        try:
            conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.Error as exc:
            raise JournalError(f"cannot open journal {str(path)!r} to append: {exc}") from exc
        try:
            journal = cls(path, conn, header.get("scenario"), header.get("setup"))
        except BaseException:
            conn.close()
            raise
        journal.ticks = ticks
        return journal

    def write_prefix(self, header: dict[str, Any], source: str | Path, until_tick: int) -> None:
        """Make this new journal a copy of ``source`` up to ``until_tick``: a fork's start.

        ``header`` (the source's) is written as it is, so the fork replays on its own; the
        ticks, inputs and changed-agent rows up to ``until_tick`` are copied row for row.

        Raises:
            JournalError: the source cannot be read or this file cannot be written.
        """
        self._write_meta({"magic": MAGIC, "format": str(FORMAT_VERSION), "header": header})
        with JournalReader(source) as reader:
            conn = self._conn
            try:
                conn.execute("BEGIN")
                for table, columns in (("ticks", 3), ("inputs", 4), ("agent_states", 3)):
                    marks = ", ".join("?" * columns)
                    rows = reader.rows(table, until_tick)
                    conn.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise JournalError(f"cannot write journal {str(self.path)!r}: {exc}") from exc
        self.ticks = until_tick

    def begin(self, settings: dict[str, Any]) -> None:
        """Write the header: the world's ``settings``, the scenario, and the versions.

        A ``World`` calls it once with everything a replay needs to rebuild it.
        """
        import esper

        header = {
            "format": FORMAT_VERSION,
            **settings,
            "scenario": self._scenario,
            **({"setup": self._setup} if self._setup else {}),
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
            # Rows through a generator: Python code runs between them, so a Ctrl-C that
            # abandons the tick lands within a row, not after 200,000 (~0.7 s in C).
            if rows:
                conn.executemany("INSERT INTO inputs VALUES (?, ?, ?, ?)", _one_by_one(rows))
            if states:
                conn.executemany("INSERT INTO agent_states VALUES (?, ?, ?)", _one_by_one(states))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            _roll_back(conn)
            raise JournalError(f"cannot write journal {str(self.path)!r}: {exc}") from exc
        except BaseException:  # Ctrl-C abandoning the tick: the journal ends at the last one
            _roll_back(conn)
            raise
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
        if self._lock is not None:
            os.close(self._lock)  # releases the writer's lock


def _one_by_one(rows: list[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
    for row in rows:  # noqa: UP028 (`yield from` runs in C, where no signal handler runs)
        yield row


def _roll_back(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):  # the error being raised says what failed
            conn.execute("ROLLBACK")


def _writer_lock(path: Path) -> int | None:
    """Take the one-writer lock of the journal at ``path``; its descriptor, or None where
    the file system has no locks.

    A journal has one writer at a time: resuming a run that is still going would interleave
    two runs' ticks. The lock is ``flock`` on the file itself, which SQLite's own (POSIX)
    locks do not see, and the OS drops it when the writer dies, so a killed run's journal is
    free at once.

    Raises:
        JournalError: another process (or another journal object) is writing it.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise JournalError(
            f"journal {str(path)!r} is being written by a running tickwork: stop that run"
            " first (a journal has one writer)"
        ) from None
    except OSError:
        os.close(fd)
        return None
    return fd


def _make_private_file(path: Path, overwrite: bool) -> None:
    """Create ``path`` empty and 0600 (journals hold prompts and answers), or say why not.

    SQLite then opens the file as it is, and gives its ``-wal`` and ``-shm`` files the
    same mode.

    Raises:
        JournalError: naming the reason: a directory, exists, no such directory, permission.
    """
    where = str(path)
    if path.is_dir():
        raise JournalError(f"journal {where!r} is a directory: name a file inside it")
    if path.exists() or path.is_symlink():
        if not overwrite:
            raise JournalError(f"journal {where!r} already exists (--force overwrites it)")
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    parent = path.parent
    if not parent.is_dir():
        raise JournalError(f"cannot create journal {where!r}: no directory {str(parent)!r}")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise JournalError(f"journal {where!r} already exists (--force overwrites it)") from None
    except PermissionError:
        raise JournalError(
            f"cannot create journal {where!r}: no permission to write in {str(parent)!r}"
        ) from None
    except OSError as exc:
        raise JournalError(f"cannot create journal {where!r}: {exc.strerror}") from None
    os.fchmod(fd, 0o600)  # whatever the umask
    os.close(fd)


def _read_only_uri(path: Path) -> str:
    """An SQLite URI that reads ``path`` and leaves no ``-wal``/``-shm`` beside it.

    A journal closed cleanly has no ``-wal``: opened ``immutable``, SQLite creates none. A
    killed run's ``-wal`` holds its last ticks, so then it is read (and left) as it is.
    """
    uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"
    if not Path(f"{path}-wal").exists():
        uri += "&immutable=1"
    return uri


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
            self._conn = sqlite3.connect(_read_only_uri(self.path), uri=True)
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
            inputs.setdefault(tick, []).append((seq, decode_input(kind, payload)))
        by_tick: dict[int, dict[str, dict[str, Any]]] = {}
        if states:
            for tick, agent, fields in self._query(
                "SELECT tick, agent, fields FROM agent_states WHERE tick <= ?", limit
            ):
                by_tick.setdefault(tick, {})[agent] = json.loads(fields)
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
            last[agent] = json.loads(fields)
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
