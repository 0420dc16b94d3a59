"""Replay: rebuild a recorded run from its journal and check every tick's digest.

No tool runs and no prompt is shown: outcomes and settlements come from the journal as
the inputs they were, at the ticks they were applied, and the clock is set to each
tick's recorded time. A behaviour's code runs again, so a change to it that changes what
it does is caught at the first tick where the state differs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components import InteractionRequest, ToolCall
from runtime.cancel import CancelToken
from runtime.clock import ManualClock
from runtime.errors import BehaviorNotFound, JournalError, ReplayDivergence
from runtime.journal.store import JournalReader, RecordedTick
from runtime.models import ModelRequest
from runtime.scenario.load import register_scenario_behaviors
from runtime.world import Behavior, World
from runtime.world.digest import agent_fields
from runtime.world.inputs import SpawnAgent

__all__ = ["ReplayEffects", "ReplayReport", "replay"]


@dataclass(slots=True)
class ReplayEffects:
    """Effects that do nothing but count: in a replay, every outcome comes from the journal."""

    approval_required: frozenset[str] = frozenset()
    calls: dict[str, int] = field(default_factory=dict)

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def think(self, agent_id: str, ref: str, request: ModelRequest, cancel: CancelToken) -> None:
        self._count("think")

    def run_tools(
        self, agent_id: str, ref: str, calls: tuple[ToolCall, ...], cancel: CancelToken
    ) -> None:
        self._count("run_tools")

    def open_prompt(self, agent_id: str, request: InteractionRequest) -> None:
        self._count("open_prompt")

    def cancel_prompt(self, request_id: str) -> None:
        self._count("cancel_prompt")

    def cancel_prompts_of(self, agent_id: str) -> None:
        self._count("cancel_prompts_of")

    def expire_prompts(self, now: float) -> None:
        pass  # expiries were recorded as settlements

    def requires_approval(self, tool: str) -> bool:
        return tool in self.approval_required


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """What a replay did: ticks and inputs replayed, agents seen, and its wall time."""

    path: str
    ticks: int
    inputs: int
    agents: int
    wall_time: float
    effects: dict[str, int]
    recorded_ticks: int


def replay(
    path: str | Path,
    *,
    until_tick: int | None = None,
    behaviors: Mapping[str, Behavior] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ReplayReport:
    """Replay the journal at ``path`` and compare every tick's digest with the recording.

    ``behaviors`` maps behaviour names the journal uses to functions, for behaviours that
    cannot be imported by name (nested functions, lambdas). ``progress(done, total)`` is
    called as ticks are replayed.

    Raises:
        JournalError: the journal cannot be read.
        BehaviorNotFound: the journal names a behaviour that cannot be found.
        ReplayDivergence: a tick's state differs from the recording (names tick and agents).
    """
    started = time.monotonic()
    with JournalReader(path) as reader:
        header = reader.header
        total = reader.tick_count()
        if until_tick is not None:
            total = min(total, until_tick)
        recorded = list(reader.ticks(until_tick))
    effects = ReplayEffects(frozenset(header.get("approval_required", ())))
    world = _rebuild(header, effects, behaviors or {})
    try:
        _check_behaviors(world, recorded)
        inputs = 0
        last_fields: dict[str, dict[str, Any]] = {}
        for done, tick in enumerate(recorded, 1):
            if tick.tick != world.tick_count + 1:
                raise JournalError(f"journal skips from tick {world.tick_count} to {tick.tick}")
            changed: list[tuple[str, dict[str, Any]]] = []
            report = world._tick(tick.inputs, tick.now, changed)
            inputs += len(tick.inputs)
            last_fields.update(tick.agents)
            if report.digest != tick.digest:
                assert report.digest is not None
                raise ReplayDivergence(
                    tick.tick,
                    tick.digest,
                    report.digest,
                    _explain(world, tick, changed, last_fields),
                )
            if progress is not None:
                progress(done, total)
        return ReplayReport(
            path=str(path),
            ticks=len(recorded),
            inputs=inputs,
            agents=len(list(world.agents())),
            wall_time=time.monotonic() - started,
            effects=dict(effects.calls),
            recorded_ticks=total,
        )
    finally:
        world.close()


def _rebuild(
    header: dict[str, Any], effects: ReplayEffects, behaviors: Mapping[str, Behavior]
) -> World:
    try:
        world = World(
            seed=int(header["seed"]),
            clock=ManualClock(float(header.get("start", 0.0))),
            tool_capacity=int(header.get("tool_capacity", 1)),
            inference_capacity=int(header.get("inference_capacity", 1)),
            interaction_timeout_secs=float(header.get("interaction_timeout_secs", 3600.0)),
            keep_finished=header.get("keep_finished"),
            behaviors=behaviors,
            effects=effects,
            track_digests=True,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise JournalError(f"journal header is missing or has a bad setting: {exc}") from exc
    if header.get("scenario"):
        try:
            register_scenario_behaviors(world.behaviors, header["scenario"])
        except BaseException:
            world.close()
            raise
    return world


def _check_behaviors(world: World, recorded: list[RecordedTick]) -> None:
    """Fail before replaying anything if a spawned behaviour cannot be found."""
    names = sorted(
        {
            item.behavior
            for tick in recorded
            for _, item in tick.inputs
            if isinstance(item, SpawnAgent)
        }
    )
    for name in names:
        try:
            world.behaviors.resolve(name)
        except BehaviorNotFound as exc:
            raise BehaviorNotFound(f"the journal's {exc}") from None


def _explain(
    world: World,
    tick: RecordedTick,
    changed: list[tuple[str, dict[str, Any]]],
    expected: dict[str, dict[str, Any]],
) -> dict[str, list[str]]:
    actual = dict(changed)
    suspects = sorted(set(tick.agents) | set(actual))
    found: dict[str, list[str]] = {}
    for agent_id in suspects:
        want = expected.get(agent_id)
        have = actual.get(agent_id)
        if have is None:
            rec = world._state.records.get(agent_id)
            have = agent_fields(rec) if rec is not None else None
        if want is None or have is None:
            found[agent_id] = [
                "exists in the replay only" if want is None else "missing from the replay"
            ]
            continue
        lines = [
            f"{key}: expected {want.get(key)!r}, got {have.get(key)!r}"
            for key in sorted(set(want) | set(have))
            if want.get(key) != have.get(key)
        ]
        if lines:
            found[agent_id] = lines
    return found or {"?": ["the digests differ but no changed agent's fields do"]}
