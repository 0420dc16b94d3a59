"""A second ``Position`` component type, for `tests.journal.fixture_twins`: two types of one
``__qualname__`` on one entity. Keep it as it is (a fixture journal names it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Position:
    x: int
    y: int
