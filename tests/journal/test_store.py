"""The journal's store: a tick cut by Ctrl-C while it is written leaves no trace."""

from __future__ import annotations

import pytest

from runtime import Journal, JournalReader
from runtime.journal import store


def test_a_tick_cut_by_ctrl_c_while_written_is_rolled_back(tmp_path, monkeypatch):
    journal = Journal.create(tmp_path / "j.db")
    journal.begin({"seed": 0})
    changed = [(f"a{i}", {"status": "idle", "n": i}) for i in range(100)]
    journal.record_tick(1, 0.0, [], "d1", changed)
    real = store._one_by_one

    def cut(rows):
        for index, row in enumerate(real(rows)):
            if index == 50:
                raise KeyboardInterrupt  # Ctrl-C between two rows of a big tick
            yield row

    monkeypatch.setattr(store, "_one_by_one", cut)
    with pytest.raises(KeyboardInterrupt):
        journal.record_tick(2, 1.0, [], "d2", changed)
    monkeypatch.undo()
    assert not journal._conn.in_transaction
    assert journal.ticks == 1
    journal.close()
    with JournalReader(tmp_path / "j.db") as reader:
        assert [t.tick for t in reader.ticks()] == [1]  # tick 2 left nothing: no half rows
        assert reader.states_until(2)[1] == {}
