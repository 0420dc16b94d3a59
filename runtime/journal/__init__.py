"""The journal room: a run recorded to SQLite (``store.py``), its codec, replay and resume."""

from runtime.journal.replay import ReplayReport, replay
from runtime.journal.resume import RESTART_ERROR, resume
from runtime.journal.store import Journal, JournalReader, RecordedTick

__all__ = [
    "RESTART_ERROR",
    "Journal",
    "JournalReader",
    "RecordedTick",
    "ReplayReport",
    "replay",
    "resume",
]
