"""The journal room: a run recorded to SQLite (``store.py``), its codec, and replay."""

from runtime.journal.replay import ReplayReport, replay
from runtime.journal.store import Journal, JournalReader, RecordedTick

__all__ = ["Journal", "JournalReader", "RecordedTick", "ReplayReport", "replay"]
