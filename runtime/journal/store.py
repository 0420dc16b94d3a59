"""The journal: a run recorded to one SQLite file, tick by tick, for deterministic replay.

What is stored: a header (format version, seed, world settings, the scenario if any, and
the tickwork/esper/python versions), every input applied with its tick and sequence
number, each tick's time and digest, and for each tick the fields of the agents that
changed (so a divergence can be explained field by field). The tick thread writes it and
commits once per tick, in WAL mode: a process killed mid-run leaves a journal whose
committed ticks are complete and replay.

Reading one is `runtime.journal.reader`'s (``JournalReader``, re-exported here).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import sqlite3
import stat
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runtime._version import __version__
from runtime.errors import JournalError
from runtime.journal.codec import encode_input
from runtime.journal.reader import (
    FORMAT_VERSION,
    MAGIC,
    JournalReader,
    RecordedTick,
    read_only_uri,
)
from runtime.world.digest import canonical

# The reader's names are re-exported: `from runtime.journal.store import JournalReader` works.
__all__ = ["FORMAT_VERSION", "Journal", "JournalReader", "RecordedTick"]


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
        # A journal dropped unclosed (a world that was never made or closed) lets go of its
        # writer's lock when it is collected, as its connection does: a bare descriptor
        # is an int, which nothing closes, and the path stayed locked for the process.
        self._unlock = None if self._lock is None else weakref.finalize(self, os.close, self._lock)

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

        ``overwrite`` replaces a journal (a file holding one, an empty file, or a symlink,
        itself and never its target), never another file, and never one a running
        tickwork is writing.

        Raises:
            JournalError: ``path`` exists (and ``overwrite`` is False, or it is no journal,
                or a run is writing it), is a directory, or cannot be written (the message
                says why: no such directory, permission).
        """
        path = Path(path)
        _make_private_file(path, overwrite)
        try:
            conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        except sqlite3.Error as exc:
            raise JournalError(f"cannot create journal {str(path)!r}: {exc}") from exc
        try:  # a connection that fails here is closed at once (see `JournalReader`)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                # NORMAL in WAL mode: a commit survives the process being killed (it is in
                # the OS's cache); only an OS crash can lose the last commits, never
                # corrupt them.
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.executescript(_SCHEMA)
            except sqlite3.Error as exc:
                raise JournalError(f"cannot create journal {str(path)!r}: {exc}") from exc
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
        except sqlite3.Error as exc:
            raise JournalError(f"cannot open journal {str(path)!r} to append: {exc}") from exc
        try:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as exc:
                raise JournalError(f"cannot open journal {str(path)!r} to append: {exc}") from exc
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
        with JournalReader(source) as reader:
            # The source's format too: the prefix's ticks, and the world that goes on
            # from them, keep to its rules.
            self._write_meta({"magic": MAGIC, "format": str(reader.format), "header": header})
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
        changed: list[tuple[str, str]] | list[tuple[str, dict[str, Any]]],
    ) -> None:
        """Write one tick in one transaction (committed before the next tick starts).

        ``changed`` holds each changed agent's id and its digest fields as the world gives
        them, in their canonical JSON text (what the digest hashed); a dict of fields is
        encoded here.

        Raises:
            JournalError: an input cannot be encoded, or the file cannot be written.
        """
        rows = [(tick, seq, *encode_input(item)) for seq, item in inputs]
        states = [
            # The digest's canonical encoding: it never raises, whatever a behaviour's
            # result holds (a plain json.dumps failed the tick on a set or a huge int).
            (tick, agent_id, fields if fields.__class__ is str else canonical(fields))
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
                conn.executemany("INSERT INTO agent_states VALUES (?, ?, ?)", _storable(states))
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
        if self._unlock is not None:
            self._unlock()  # closes the lock's descriptor (once), releasing it


def _one_by_one(rows: list[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
    for row in rows:  # noqa: UP028 (`yield from` runs in C, where no signal handler runs)
        yield row


def _storable(rows: list[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
    # `_one_by_one` for agent states, whose text may hold a lone surrogate (a streamed
    # model reply split inside a pair): SQLite takes no such str, so that text goes in as
    # its `surrogatepass` bytes, which `json.loads` reads back as the same str.
    for tick, agent_id, text in rows:
        if not text.isascii():
            try:
                text.encode()
            except UnicodeEncodeError:
                yield tick, agent_id, text.encode("utf-8", "surrogatepass")
                continue
        yield tick, agent_id, text


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


def _check_file_kind(path: Path) -> bool:
    """Whether ``path``, about to be overwritten, is a regular file (False: a symlink,
    replaced itself and never its target).

    ``overwrite`` unlinked whatever was at the path: a device (``/dev/null``, as root), a
    FIFO, the scenario file being run (`_check_journal`).

    Raises:
        JournalError: anything else is there.
    """
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        return False
    if not stat.S_ISREG(mode):
        raise JournalError(
            f"journal {str(path)!r} is not a regular file: overwriting replaces only a journal"
        )
    return True


def _check_journal(path: Path) -> None:
    """Refuse to overwrite a file that holds no tickwork journal (an empty one may go).

    Raises:
        JournalError: naming the file.
    """
    where = str(path)
    if os.path.getsize(path) == 0:
        return
    try:  # a journal by its magic, damaged or of a newer format as it may be, or one made
        # and never given its header (meta is written as a world takes the journal)
        with contextlib.closing(sqlite3.connect(read_only_uri(path), uri=True)) as conn:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            conn.execute("SELECT count(*) FROM ticks").fetchone()
    except sqlite3.DatabaseError:
        meta = {"magic": None}
    if meta.get("magic", MAGIC) == MAGIC:
        return
    raise JournalError(
        f"{where!r} exists and is not a tickwork journal: overwriting replaces only a"
        " journal (remove the file yourself if it is to go)"
    )


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
        regular = _check_file_kind(path)
        lock = _writer_lock(path) if regular else None  # refuses a running tickwork's
        try:
            if regular:
                _check_journal(path)
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
        finally:
            if lock is not None:
                os.close(lock)
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
