"""ReflectInteractionStatus: the truth table, and O(changes) cost."""

from __future__ import annotations

import esper
import pytest

from components import (
    Agent,
    AgentSpec,
    History,
    InteractionKind,
    InteractionRequest,
    InteractionResponse,
    Status,
    StatusKind,
    TurnState,
    WaitReason,
)
from runtime import Ask, ManualClock, World
from runtime.world import BehaviorRegistry
from runtime.world.state import AgentRecord, WorldState
from systems import ReflectInteractionStatus


class _NoEffects:
    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"reflect must not cause effects, but called {name}")


def _state() -> WorldState:
    return WorldState(seed=0, effects=_NoEffects(), behaviors=BehaviorRegistry(), now=0.0)  # type: ignore[arg-type]


def _record(state: WorldState, kind: StatusKind, reason: WaitReason | None = None) -> AgentRecord:
    ordinal = state.next_ordinal
    state.next_ordinal += 1
    agent = Agent(f"a{ordinal}")
    comps = {Agent: agent, AgentSpec: AgentSpec("x"), Status: Status(kind, reason)}
    comps.update({TurnState: TurnState(), History: History()})
    rec = AgentRecord(ordinal, comps, print)
    state.records[agent.id] = rec
    return rec


def _open(state: WorldState, rec: AgentRecord, request_id: str, kind=InteractionKind.FREE_TEXT):
    rec.add_prompt(InteractionRequest(request_id, kind, "?"))
    state.prompt_changed[rec.ordinal] = rec


def _settle(state: WorldState, rec: AgentRecord, request_id: str) -> None:
    assert rec.drop_prompt(request_id)
    state.prompt_changed[rec.ordinal] = rec


def test_a_record_keeps_one_open_prompt_as_its_request_and_more_by_id(reflect_system):
    # Memory: one open prompt costs the record no dict (the hub keeps the request alive).
    state = _state()
    rec = _record(state, StatusKind.ACTIVE)
    first = InteractionRequest("p1", InteractionKind.FREE_TEXT, "?")
    rec.add_prompt(first)
    assert rec.prompts is first
    assert (rec.prompt_ids(), rec.prompt_kinds()) == (["p1"], [InteractionKind.FREE_TEXT])
    rec.add_prompt(InteractionRequest("p2", InteractionKind.TOOL_APPROVAL, "?"))
    state.prompt_changed[rec.ordinal] = rec
    reflect_system.process(state)
    assert rec.status.reason is WaitReason.TOOL_APPROVAL
    assert rec.prompt_ids() == ["p1", "p2"]
    assert not rec.drop_prompt("ghost")
    _settle(state, rec, "p2")
    reflect_system.process(state)
    assert (rec.status.kind, rec.status.reason) == (StatusKind.WAITING, WaitReason.USER_PROMPT)
    _settle(state, rec, "p1")
    assert not rec.drop_prompt("p1")
    reflect_system.process(state)
    assert rec.prompts is None and rec.prompt_ids() == [] and rec.prompt_kinds() == []
    assert rec.status.kind is StatusKind.ACTIVE


@pytest.fixture
def reflect_system():
    return ReflectInteractionStatus()


def test_an_open_prompt_flips_active_to_waiting_and_back_when_it_clears(reflect_system):
    state = _state()
    rec = _record(state, StatusKind.ACTIVE)
    _open(state, rec, "p1")
    reflect_system.process(state)
    assert (rec.status.kind, rec.status.reason) == (StatusKind.WAITING, WaitReason.USER_PROMPT)
    _settle(state, rec, "p1")
    reflect_system.process(state)
    assert (rec.status.kind, rec.status.reason) == (StatusKind.ACTIVE, None)


def test_an_open_tool_approval_waits_for_approval(reflect_system):
    state = _state()
    rec = _record(state, StatusKind.ACTIVE)
    _open(state, rec, "p1", InteractionKind.TOOL_APPROVAL)
    reflect_system.process(state)
    assert rec.status.reason is WaitReason.TOOL_APPROVAL


@pytest.mark.parametrize(
    "kind", [StatusKind.PAUSED, StatusKind.COMPLETE, StatusKind.ERROR, StatusKind.CANCELLED]
)
def test_a_paused_or_terminal_agent_is_never_flipped(reflect_system, kind):
    state = _state()
    rec = _record(state, kind)
    _open(state, rec, "p1")
    reflect_system.process(state)
    assert rec.status.kind is kind
    _settle(state, rec, "p1")
    reflect_system.process(state)
    assert rec.status.kind is kind


def test_stale_prompt_state_is_cleared_without_reviving_a_terminal_agent(reflect_system):
    state = _state()
    rec = _record(state, StatusKind.ACTIVE)
    _open(state, rec, "p1")
    reflect_system.process(state)
    rec.status.kind, rec.status.reason = StatusKind.CANCELLED, None  # cancelled meanwhile
    _settle(state, rec, "p1")
    reflect_system.process(state)
    assert rec.prompts is None
    assert rec.status.kind is StatusKind.CANCELLED
    assert not state.prompt_changed


def test_waiting_on_children_is_not_a_prompt_wait(reflect_system):
    state = _state()
    rec = _record(state, StatusKind.WAITING, WaitReason.CHILDREN)
    rec.prompts = {}
    state.prompt_changed[rec.ordinal] = rec
    reflect_system.process(state)
    assert rec.status.reason is WaitReason.CHILDREN


def test_reflect_touches_only_the_agents_whose_prompts_changed(reflect_system):
    state = _state()
    records = [_record(state, StatusKind.ACTIVE) for _ in range(10_000)]
    changed = records[::1000]
    for rec in changed:
        _open(state, rec, f"p{rec.ordinal}")

    seen: list[str] = []

    class Spy(dict):
        def values(self):
            seen.extend(r.id for r in super().values())
            return super().values()

    state.prompt_changed = Spy(state.prompt_changed)
    reflect_system.process(state)
    assert sorted(seen) == sorted(r.id for r in changed)
    waiting = [r for r in records if r.status.kind is StatusKind.WAITING]
    assert waiting == changed
    assert sorted(state.dirty) == [r.ordinal for r in changed]


def test_reflect_does_not_use_esper_queries(reflect_system, monkeypatch):
    def boom(*_args: object) -> None:
        raise AssertionError("reflect must not scan esper")

    monkeypatch.setattr(esper, "get_component", boom)
    monkeypatch.setattr(esper, "get_components", boom)
    state = _state()
    rec = _record(state, StatusKind.ACTIVE)
    _open(state, rec, "p1")
    reflect_system.process(state)
    assert rec.status.kind is StatusKind.WAITING


def _asks_once(turn):
    yield Ask(InteractionRequest.free_text("", "first?"))


def test_a_waiting_agent_points_at_the_hubs_request_and_lets_go_once_answered():
    world = World(clock=ManualClock())
    try:
        agent = world.spawn(_asks_once)
        world.run_until_idle(skip_time=False)
        ((_, request),) = world.hub.pending()
        rec = world._state.records[agent]
        assert rec.prompts is request  # no dict of its own, no copy
        assert world.status(agent).reason is WaitReason.USER_PROMPT
        world.hub.answer(InteractionResponse.text(request.id, "yes"))
        world.run_until_idle(skip_time=False)
        assert rec.prompts is None
        assert world.status(agent).kind is StatusKind.COMPLETE
    finally:
        world.close()
