"""What a waiting agent keeps: a record with no side object, a turn with no view of its own."""

from __future__ import annotations

import random
from collections import deque

import pytest

from runtime import Ask, ConfigError, InteractionRequest, ManualClock, Sleep, StatusKind, World
from runtime.world.actions import HistoryView, Turn
from systems.lifecycle.history import add_history


def _asker(turn):
    seen.append(turn)
    yield Ask(InteractionRequest.free_text("", "go on?"))


seen: list[Turn] = []


def test_a_waiting_agent_has_no_extras_its_entity_is_its_ordinal_and_its_view_is_unmade():
    seen.clear()
    world = World(clock=ManualClock())
    try:
        agent = world.spawn(_asker)
        world.run_until_idle(skip_time=False)
        rec = world._state.records[agent]
        assert rec.status.kind is StatusKind.WAITING
        assert rec._extras is None  # no rng, mailbox, children... stored: no side object
        assert rec.entity is rec.ordinal  # one int for both
        (turn,) = seen
        assert turn._history is None  # the behaviour never read it
        # Read now, it is the record's live history, made once.
        assert [e.content for e in turn.history] == ["go on?"]
        assert turn.history is turn.history
        assert turn.agent_id == agent
    finally:
        world.close()


def test_a_record_makes_its_extras_on_the_first_stored_value_and_reads_none_before():
    world = World(clock=ManualClock())
    try:
        world.spawn(_asker)
        world.tick()
        (rec,) = world._state.records.values()
        fields = ("rng", "mailbox", "paused_from", "holding", "children", "components")
        for name in fields:
            assert getattr(rec, name) is None
            setattr(rec, name, None)  # storing None makes nothing
        assert rec._extras is None
        values = {
            "rng": random.Random(1),
            "mailbox": deque(["m"]),
            "paused_from": StatusKind.ACTIVE,
            "holding": [(1, "x")],
            "children": ["a2"],
            "components": {int: 1},
        }
        for name, value in values.items():
            setattr(rec, name, value)
        assert rec._extras is not None
        assert {name: getattr(rec, name) for name in fields} == values
        rec.mailbox = None  # once made, None is stored like any value
        assert rec.mailbox is None and rec.children == ["a2"]
    finally:
        world.close()


def _drawer(turn):
    turn.rng.random()  # makes the agent's random stream (an extra)
    yield Ask(InteractionRequest.free_text("", "go on?"))


def test_an_ended_agent_keeps_no_rng_mailbox_or_paused_status_but_its_other_extras():
    world = World(clock=ManualClock())
    try:
        agent = world.spawn(_drawer, interactive=True, message="go")
        world.run_until_idle(skip_time=False)
        world.send(agent, "later")  # queued: the turn is waiting on its prompt
        world.pause(agent)
        world.tick()
        rec = world._state.records[agent]
        assert rec.rng is not None and rec.mailbox and rec.paused_from is StatusKind.WAITING
        rec.children = []  # an extra an ended agent keeps (the children it had)
        world.cancel(agent)
        world.tick()
        assert rec.status.kind is StatusKind.CANCELLED
        assert (rec.rng, rec.mailbox, rec.paused_from) == (None, None, None)
        assert rec.children == []
    finally:
        world.close()


def test_a_turn_made_without_a_record_keeps_its_id_and_the_history_it_was_given():
    view = HistoryView([])
    turn = Turn("a7", "hi", view, 3, None)  # type: ignore[arg-type]
    assert (turn.agent_id, turn.message, turn.generation) == ("a7", "hi", 3)
    assert turn.history is view
    bare = Turn("a8", None, None, 1, None)  # type: ignore[arg-type]
    assert list(bare.history) == []
    assert repr(bare) == "Turn(agent_id='a8', generation=1)"


def test_an_agents_id_is_kept_once_by_its_record_and_stays_taken_and_listed_in_spawn_order():
    world = World(clock=ManualClock())
    try:
        first = world.spawn(_asker)
        chosen = world.spawn(_asker, agent_id="mine")
        assert list(world.agents()) == [first, chosen]  # pending: known from the call
        world.tick()
        assert world._pending_ids == {}  # created: the records' keys hold the ids alone
        third = world.spawn(_asker)
        assert list(world.agents()) == [first, chosen, third]
        for taken in (first, chosen, third):
            with pytest.raises(ConfigError, match="already taken"):
                world.spawn(_asker, agent_id=taken)
        world.tick()
        assert list(world.agents()) == [first, chosen, third] and world._pending_ids == {}
        assert world.spawn(_asker, agent_id="a3") == "a3"
        world.tick()  # created: taken through its record alone
        assert world.spawn(_asker) == "a4"  # the minted id skips the one chosen by hand
    finally:
        world.close()


def test_the_pending_ids_let_their_grown_table_go_once_every_spawn_is_created():
    import sys

    world = World(clock=ManualClock())
    try:
        for _ in range(2_000):
            world.spawn(_asker)
        assert sys.getsizeof(world._pending_ids) > 50 * sys.getsizeof({})
        world.tick()
        assert world._pending_ids == {}
        assert sys.getsizeof(world._pending_ids) == sys.getsizeof({})
        assert len(list(world.agents())) == 2_000
    finally:
        world.close()


def test_an_id_leaves_the_pending_ids_only_once_its_record_exists():
    # Readers on other threads (`status`, `send`, ...) check an id without the ids lock:
    # the pending ids first, the records after. That is sound only if the tick adds an
    # agent's record before it drops the id from the pending ones; a tick that did it the
    # other way round would let a reader between the two find the agent nowhere.
    class Watched(dict[str, None]):
        def pop(self, key: str, *default: None) -> None:
            recorded.append((key, key in world._state.records))
            return super().pop(key, *default)

    recorded: list[tuple[str, bool]] = []
    world = World(clock=ManualClock())
    try:
        ids = [world.spawn(_asker) for _ in range(3)]
        world._pending_ids = Watched(world._pending_ids)
        world.tick()
        assert recorded == [(agent_id, True) for agent_id in ids]
        for agent_id in ids:
            world.status(agent_id)  # known, through its record alone now
    finally:
        world.close()


def test_a_record_reads_its_rarely_used_components_from_the_entity_and_digests_on_demand():
    import esper

    from components import Agent, AgentSpec, History

    world = World(clock=ManualClock())
    try:
        agent = world.spawn(_asker, name="n")
        world.run_until_idle(skip_time=False)
        rec = world._state.records[agent]
        with world._in_esper():
            assert rec.agent is esper.component_for_entity(rec.entity, Agent)
            assert rec.spec is esper.component_for_entity(rec.entity, AgentSpec)
            assert rec.history is esper.component_for_entity(rec.entity, History)
        assert (rec.agent.name, rec.spec.interactive) == ("n", False)
        assert rec._digested is None  # no digest taken: no digest state
        assert (rec.digest, rec.hist_hash, rec.hist_hashed) == (0, b"", 0)
        first = world.digest()
        assert rec._digested is not None and rec.digest != 0 and rec.hist_hashed == 1
        assert world.digest() == first
    finally:
        world.close()


def test_a_short_history_is_sized_to_fit_and_stays_the_same_list_as_it_grows():
    import sys

    from runtime.world.actions import HistoryView

    def talker(turn):
        for _ in range(6):
            yield Sleep(1)

    world = World(clock=ManualClock())
    try:
        agent = world.spawn(talker, "hi")
        world.tick()
        rec = world._state.records[agent]
        entries = rec.history.entries
        view = HistoryView(entries)
        assert len(entries) == 1 and sys.getsizeof(entries) == sys.getsizeof([None, None])
        for n in range(2, 8):
            add_history(world._state, rec, "user", f"m{n}")
            assert rec.history.entries is entries and len(view) == n
            grown: list[object] = []
            for _ in range(n):
                grown.append(None)
            assert sys.getsizeof(entries) <= sys.getsizeof(grown)  # never more than before
        assert [e.content for e in view] == ["hi"] + [f"m{n}" for n in range(2, 8)]
    finally:
        world.close()


def test_agents_made_with_one_behaviour_share_one_spec_and_others_get_their_own():
    def chatter(turn):
        yield from ()

    world = World(clock=ManualClock())
    try:
        first, second = world.spawn(_asker), world.spawn(_asker)
        talker = world.spawn(_asker, interactive=True)
        other = world.spawn(chatter)
        world.tick()
        specs = {a: world._state.records[a].spec for a in (first, second, talker, other)}
        assert specs[first] is specs[second]  # one object: a spec never changes
        assert specs[talker] is not specs[first] and specs[talker].interactive
        assert specs[other] is not specs[first] and specs[other].behavior != specs[first].behavior
        assert [s.interactive for s in specs.values()] == [False, False, True, False]
    finally:
        world.close()


def test_agents_asking_the_same_question_share_its_history_entry_and_others_keep_theirs():
    def asks(turn):
        answer = yield Ask(InteractionRequest.free_text("", turn.message))
        return answer.value

    question = "go on?"
    other = "".join(["go", " on?"])  # equal, but another string
    world = World(clock=ManualClock())
    try:
        ids = [world.spawn(asks, m) for m in (question, question, other)]
        world.run_until_idle(skip_time=False)
        prompts = [world._state.records[a].history.entries[-1] for a in ids]
        assert [(e.role, e.content) for e in prompts] == [("assistant", "go on?")] * 3
        assert prompts[0] is prompts[1]  # one frozen entry for the same question
        assert prompts[2] is not prompts[0] and prompts[2].content is other
        assert [e.content for e in world.history(ids[0])] == ["go on?", "go on?"]
    finally:
        world.close()


def test_a_host_system_cannot_change_a_shared_spec_in_place():
    # ctx.query hands out the live component; with one spec shared by every agent of a
    # behaviour, an in-place change for one agent would have changed them all, silently.
    import dataclasses

    from components import AgentSpec

    errors: list[BaseException] = []

    def flips(ctx):
        for _entity, (spec,) in ctx.query(AgentSpec):
            try:
                spec.interactive = True
            except dataclasses.FrozenInstanceError as exc:
                errors.append(exc)
            return

    world = World(clock=ManualClock())
    try:
        world.add_system(flips)
        first, second = world.spawn(_asker), world.spawn(_asker)
        world.tick()
        assert errors and not any(world._state.records[a].spec.interactive for a in (first, second))
    finally:
        world.close()


@pytest.mark.parametrize("before", range(7))
@pytest.mark.parametrize("calls", [1, 2, 3, 5])
def test_a_batch_of_tool_results_leaves_the_history_as_one_entry_at_a_time_would(before, calls):
    import sys

    from components import ToolCall, ToolResult
    from runtime.world.state import PendingBatch
    from systems.lifecycle.history import record_tool_results

    def sleeper(turn):
        yield Sleep(1)

    def history_after(batched: bool) -> tuple[list[object], int, int, bool]:
        world = World(clock=ManualClock())
        try:
            agent = world.spawn(sleeper)
            world.tick()
            state = world._state
            rec = state.records[agent]
            entries = rec.history.entries
            for n in range(before):
                add_history(state, rec, "user", f"m{n}")
            pending = PendingBatch("b1", tuple(ToolCall(f"c{i}", "io") for i in range(calls)))
            for i in range(calls):
                pending.results[f"c{i}"] = ToolResult(f"c{i}", output=i)
            state.dirty.clear()
            changed = state.changed_this_tick
            if batched:
                record_tool_results(state, rec, pending)
            else:  # what it did before: one `add_history` per call
                for call, result in zip(pending.calls, pending.final(), strict=True):
                    add_history(state, rec, "tool", f"{call.name}[{call.id}]: {result.output}")
            assert rec.history.entries is entries  # the same list (a view may hold it)
            counted = state.changed_this_tick - changed
            return list(entries), sys.getsizeof(entries), counted, rec.ordinal in state.dirty
        finally:
            world.close()

    assert history_after(batched=True) == history_after(batched=False)
