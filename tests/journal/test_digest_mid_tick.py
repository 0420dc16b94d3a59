"""``world.digest()`` asked during a tick (a host system, a timer) previews the digest and
takes nothing from the tick: its journal rows and its recorded digest are those of the
same run that never asked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runtime import ManualClock, Sleep, World
from runtime.journal import Journal, JournalReader, replay


def counter(turn: Any):
    for _ in range(4):
        yield Sleep(1)
    return "done"


def _run(path: Path, where: str, *, ask: bool) -> list[str]:
    """A journaled run with a host system or timers at ``where``; they ask for the digest
    only if ``ask`` (else they do nothing, so both runs tick the same ticks)."""
    world = World(seed=3, clock=ManualClock(), journal=Journal.create(path))
    asked: list[str] = []

    def hook(*_: object) -> None:
        if ask:
            asked.append(world.digest())

    try:
        if where == "system":
            world.add_system(hook, after="step_behaviors")
        else:
            for when in (0.5, 1.0, 2.5):
                world.call_at(when, hook)
        for _ in range(3):
            world.spawn(counter)
        world.run_until_idle(max_ticks=50)
        assert world.digest() == world.digest()  # between ticks: folds, then nothing to fold
    finally:
        world.close()
    return asked


def _recorded(path: Path) -> list[tuple[int, str, dict[str, dict[str, Any]]]]:
    with JournalReader(path) as reader:
        return [(t.tick, t.digest, t.agents) for t in reader.ticks()]


@pytest.mark.parametrize("where", ["system", "timer"])
def test_a_digest_asked_mid_tick_leaves_the_journal_as_it_would_be(tmp_path, where):
    _run(tmp_path / "quiet.db", where, ask=False)
    asked = _run(tmp_path / "asking.db", where, ask=True)
    quiet, asking = _recorded(tmp_path / "quiet.db"), _recorded(tmp_path / "asking.db")
    assert asked, "the digest was never asked"
    assert asking == quiet  # every tick's digest and every changed agent's row
    assert any(agents for _, _, agents in quiet)


def test_a_mid_tick_digest_is_the_digest_of_the_state_at_that_moment(tmp_path):
    # After step_behaviors the agents have stepped; nothing else changes them later in the
    # tick, so the preview is the tick's own recorded digest.
    path = tmp_path / "asking.db"
    asked = _run(path, "system", ask=True)
    recorded = [digest for _, digest, _ in _recorded(path)]
    assert asked == recorded[: len(asked)]
    replay(path, setup=lambda w: w.add_system(lambda ctx: w.digest(), after="step_behaviors"))


@dataclass(slots=True)
class Spot:
    x: int


def _host_run(path: Path, *, ask: bool) -> list[str]:
    world = World(seed=3, clock=ManualClock(), journal=Journal.create(path))
    asked: list[str] = []

    def nudge(ctx: Any) -> None:
        for _entity, (spot,) in ctx.query(Spot):
            spot.x += 1  # in place: the digest finds it (the query saw the entity)
        if ask:
            asked.append(world.digest())

    try:
        world.add_entity(Spot(0))
        world.add_system(nudge)
        for _ in range(4):
            world.tick()
    finally:
        world.close()
    return asked


def test_host_components_changed_before_a_mid_tick_digest_are_still_journaled(tmp_path):
    _host_run(tmp_path / "quiet.db", ask=False)
    asked = _host_run(tmp_path / "asking.db", ask=True)
    quiet, asking = _recorded(tmp_path / "quiet.db"), _recorded(tmp_path / "asking.db")
    assert asking == quiet
    rows = [list(agents.values()) for _, _, agents in asking]
    assert [[row["Spot.x"] for row in tick] for tick in rows] == [[1], [2], [3], [4]]
    assert asked == [digest for _, digest, _ in quiet]
