"""The journal's store: a tick cut by Ctrl-C while it is written leaves no trace."""

from __future__ import annotations

import pytest

from runtime import Journal, JournalError, JournalReader
from runtime.journal import store


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
    import os

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
