"""The journal's store: a tick cut by Ctrl-C while it is written leaves no trace."""

from __future__ import annotations

import contextlib
import gc
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from runtime import Journal, JournalError, JournalReader
from runtime.journal import store
from runtime.journal.reader import MAGIC


def test_a_tick_cut_by_ctrl_c_while_written_is_rolled_back(tmp_path, monkeypatch):
    journal = Journal.create(tmp_path / "j.db")
    journal.begin({"seed": 0})
    changed = [(f"a{i}", {"status": "idle", "n": i}) for i in range(100)]
    journal.record_tick(1, 0.0, [], "d1", changed)
    real = store._storable  # the agent states' rows, one by one

    def cut(rows):
        for index, row in enumerate(real(rows)):
            if index == 50:
                raise KeyboardInterrupt  # Ctrl-C between two rows of a big tick
            yield row

    monkeypatch.setattr(store, "_storable", cut)
    with pytest.raises(KeyboardInterrupt):
        journal.record_tick(2, 1.0, [], "d2", changed)
    monkeypatch.undo()
    assert not journal._conn.in_transaction
    assert journal.ticks == 1
    journal.close()
    with JournalReader(tmp_path / "j.db") as reader:
        assert [t.tick for t in reader.ticks()] == [1]  # tick 2 left nothing: no half rows
        assert reader.states_until(2)[1] == {}


def test_an_agent_state_holding_a_lone_surrogate_is_stored_and_read_back(tmp_path):
    # A model's reply streamed in pieces may split a surrogate pair: Python keeps each half
    # as a code point, which SQLite takes in no str (the tick failed on it).
    journal = Journal.create(tmp_path / "j.db")
    journal.begin({"seed": 0})
    text = '{"result":"half \ud83d of a pair","status":"complete"}'
    journal.record_tick(1, 0.0, [], "d1", [("a1", text), ("a2", '{"result":"caf\u00e9"}')])
    journal.close()
    with JournalReader(tmp_path / "j.db") as reader:
        last, _at = reader.states_until(1)
    assert last == {
        "a1": {"result": "half \ud83d of a pair", "status": "complete"},
        "a2": {"result": "caf\u00e9"},
    }


def test_overwrite_replaces_a_journal_and_nothing_else(tmp_path):
    # It unlinked whatever was at the path: a device as root, a FIFO, the scenario file
    # being run, a journal a running tickwork was writing.
    path = tmp_path / "run.db"
    first = Journal.create(path)
    try:
        with pytest.raises(JournalError, match="is being written by a running tickwork"):
            Journal.create(path, overwrite=True)
    finally:
        first.close()
    assert path.exists()
    Journal.create(path, overwrite=True).close()  # a journal: replaced
    other = tmp_path / "scenario.toml"
    other.write_text("[world]\n")
    with pytest.raises(JournalError, match="exists and is not a tickwork journal"):
        Journal.create(other, overwrite=True)
    assert other.read_text() == "[world]\n"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(JournalError, match="is not a regular file"):
        Journal.create(fifo, overwrite=True)
    empty = tmp_path / "empty.db"
    empty.touch()
    Journal.create(empty, overwrite=True).close()


def _open_files(path: Path) -> list[str]:
    """The descriptors this process holds on ``path`` or its ``-wal``/``-shm``."""
    names = {str(path.resolve()) + end for end in ("", "-wal", "-shm")}
    held = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor is gone
            if os.readlink(f"/proc/self/fd/{fd}") in names:
                held.append(fd)
    return held


def _bad_journal(path: Path, kind: str) -> None:
    """An SQLite file that fails one of a reader's checks."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")  # a killed run's file keeps its -wal
        if kind == "no meta":
            conn.execute("CREATE TABLE other (x)")
            return
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        rows = {"magic": MAGIC, "format": "1", "header": "{}"}
        if kind == "foreign":
            rows["magic"] = "something else"
        elif kind == "damaged header":
            rows["header"] = "{"
        elif kind == "too new":
            rows["format"] = "99"
        conn.executemany("INSERT INTO meta VALUES (?, ?)", rows.items())
        conn.commit()  # "no ticks table": the meta alone


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="lists descriptors in /proc")
@pytest.mark.parametrize("kind", ["no meta", "foreign", "damaged header", "too new", "no ticks"])
def test_a_file_a_reader_refuses_is_closed_at_once(tmp_path, kind):
    # The connection stayed open until the collector found it (the exception's traceback
    # holds it in a cycle). SQLite shares one WAL index per file within a process, so a
    # reader opened meanwhile trusted that index and missed the last ticks a killed run had
    # written: `test_resume`'s cut journal read one tick too many, now and then.
    path = tmp_path / "bad.db"
    _bad_journal(path, kind)
    gc.disable()  # what closes it must be the reader, not the collector
    try:
        with pytest.raises(JournalError):
            JournalReader(path)
        assert _open_files(path) == []
    finally:
        gc.enable()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="lists descriptors in /proc")
def test_a_journal_that_cannot_be_made_is_closed_at_once(tmp_path, monkeypatch):
    path = tmp_path / "j.db"
    monkeypatch.setattr(store, "_SCHEMA", "CREATE TABLE broken (")
    gc.disable()
    try:
        with pytest.raises(JournalError, match="cannot create journal"):
            Journal.create(path)
        assert _open_files(path) == []
    finally:
        gc.enable()


def test_a_journal_dropped_unclosed_lets_go_of_its_lock_when_collected(tmp_path):
    # Its connection closed when collected, but the writer's lock is a bare descriptor:
    # the path stayed locked ("being written by a running tickwork") for the process.
    path = tmp_path / "j.db"
    journal = Journal.create(path)
    del journal
    gc.collect()
    Journal.create(path, overwrite=True).close()


@pytest.mark.parametrize("opening", ["create", "append"])
def test_a_connection_whose_setup_fails_is_closed(tmp_path, monkeypatch, opening):
    # A pragma that failed (a file system without the shared memory WAL needs) left the
    # connection open: only the constructor's failure closed it.
    path = tmp_path / "j.db"
    if opening == "append":
        journal = Journal.create(path)
        journal.begin({"seed": 0})
        journal.close()
    real = sqlite3.connect
    made: list[_Refusing] = []

    class _Refusing:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.conn = real(*args, **kwargs)
            made.append(self)

        def execute(self, sql: str, *args: Any) -> Any:
            if sql.startswith("PRAGMA journal_mode"):
                raise sqlite3.OperationalError("disk I/O error")
            return self.conn.execute(sql, *args)

        def close(self) -> None:
            self.conn.close()
            self.closed = True

    monkeypatch.setattr(store.sqlite3, "connect", _Refusing)
    with pytest.raises(JournalError, match="disk I/O error"):
        Journal.create(path) if opening == "create" else Journal.append(path)
    assert made and all(getattr(conn, "closed", False) for conn in made)
