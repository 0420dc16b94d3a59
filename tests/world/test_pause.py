"""Pause holds everything that lands, whole, until resume; pause and resume reach the subtree."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import (
    Ask,
    InteractionRequest,
    InteractionResponse,
    Join,
    ScriptedModel,
    Sleep,
    Spawn,
    StatusKind,
    Think,
    UnknownAgentError,
    World,
)
from runtime.errors import ConfigError
from tests.conftest import wait_for


def _drained(world) -> bool:
    return world.lane.stats().in_flight == 0 and world.inference_lane.stats().in_flight == 0


def test_a_model_reply_landing_while_paused_is_held_whole_history_included(make_world):
    def thinker(turn):
        reply = yield Think("plan")
        return reply.text

    world = make_world(models={"default": ScriptedModel(["the plan"])})
    agent = world.spawn(thinker, "x")
    world.tick()  # the model call is dispatched
    world.pause(agent)
    world.tick()
    wait_for(lambda: _drained(world), what="the model call to finish")
    before = world.history(agent)
    for _ in range(3):
        world.tick()
    assert world.status(agent).kind is StatusKind.PAUSED
    assert world.history(agent) == before
    assert [e.role for e in before] == ["user"]
    world.resume(agent)
    world.run_until_idle(max_ticks=10)
    assert world.status(agent).kind is StatusKind.COMPLETE
    assert [e.content for e in world.history(agent)] == ["x", "the plan"]


def test_a_prompt_answered_while_paused_is_held_until_resume(make_world):
    def asker(turn):
        answer = yield Ask(InteractionRequest.free_text("", "go?"))
        return answer.value

    world = make_world(interaction_timeout_secs=0)
    agent = world.spawn(asker, "x")
    world.run_until_idle(max_ticks=10)
    world.pause(agent)
    world.tick()
    [(_owner, request)] = world.hub.pending()
    world.hub.answer(InteractionResponse.text(request.id, "yes"))
    for _ in range(3):
        world.tick()
    assert world.status(agent).kind is StatusKind.PAUSED
    assert "yes" not in [e.content for e in world.history(agent)]
    assert world.result(agent) is None
    world.resume(agent)
    world.run_until_idle(max_ticks=10)
    assert world.result(agent) == "yes"
    assert world.history(agent)[-1].content == "yes"


def ticker(turn):
    for _ in range(5):
        yield Sleep(0)
    return "child done"


def test_pausing_a_parent_pauses_its_children_and_resuming_resumes_them(make_world):
    def parent(turn):
        child = yield Spawn(ticker, "c")
        grandchild_parent = yield Spawn(_spawner, "g")
        return (yield Join(child, grandchild_parent))

    world = make_world()
    agent = world.spawn(parent, "x")
    world.tick()
    world.tick()
    world.tick()  # the grandchild exists now
    world.pause(agent)
    world.tick()
    family = [agent, f"{agent}.1", f"{agent}.2", f"{agent}.2.1"]
    assert [world.status(a).kind for a in family] == [StatusKind.PAUSED] * 4
    before = world.digest()
    for _ in range(5):
        world.tick()
    assert world.digest() == before  # nobody in the subtree moved
    world.resume(agent)
    world.run_until_idle(max_ticks=50)
    assert [world.status(a).kind for a in family] == [StatusKind.COMPLETE] * 4
    assert world.result(agent) == ["child done", ["child done"]]


def _spawner(turn):
    child = yield Spawn(ticker, "gc")
    return (yield Join(child))


def _long_sleeper(turn):
    for _ in range(5):
        yield Sleep(1)
    return "slept"


def _leaves_a_child(turn):
    yield Spawn(_long_sleeper, "left")
    return "left it"  # ends without joining its child


def _family(world):
    """A parent whose child ended, leaving a grandchild running."""

    def parent(turn):
        child = yield Spawn(_leaves_a_child, "c")
        yield Join(child)
        yield Sleep(100)
        return "parent done"

    agent = world.spawn(parent, "x")
    for _ in range(3):
        world.tick()
    child, grandchild = f"{agent}.1", f"{agent}.1.1"
    assert world.status(child).kind is StatusKind.COMPLETE
    assert world.status(grandchild).kind is StatusKind.ACTIVE
    return agent, child, grandchild


def test_cancelling_a_parent_cancels_the_live_agents_under_a_child_that_ended(make_world):
    # The cancel stopped at the finished child: the grandchild ran on, though cancelling
    # reaches the whole subtree (as pausing does, through the same finished child).
    world = make_world()
    agent, child, grandchild = _family(world)
    world.cancel(agent)
    world.tick()
    status = world.status(grandchild)
    assert (status.kind, status.message) == (StatusKind.CANCELLED, f"ancestor {agent} cancelled")
    assert world.status(child).kind is StatusKind.COMPLETE  # an ended agent stays as it ended
    world.run_until_idle()
    assert world.status(grandchild).kind is StatusKind.CANCELLED


def test_a_format_2_world_cancels_only_live_children_as_its_journals_recorded(make_world):
    world = make_world()
    world._state.journal_format = 2  # as a replay or resume of a format-2 journal sets
    agent, _child, grandchild = _family(world)
    world.cancel(agent)
    world.run_until_idle()
    assert world.result(grandchild) == "slept"


def test_resuming_a_parent_that_ended_resumes_the_subtree_its_pause_paused(make_world):
    # Pausing an ended parent paused its live subtree; resuming it did nothing, leaving
    # the subtree paused until each agent was resumed by name.
    world = make_world()
    _agent, child, grandchild = _family(world)
    world.pause(child)  # ended: its live subtree is paused
    world.tick()
    assert world.status(grandchild).kind is StatusKind.PAUSED
    world.resume(child)
    world.tick()
    assert world.status(grandchild).kind is StatusKind.ACTIVE
    assert world.status(child).kind is StatusKind.COMPLETE
    world.run_until_idle(max_ticks=50)
    assert world.result(grandchild) == "slept"


def test_a_format_2_world_resumes_only_a_paused_agents_subtree(make_world):
    world = make_world()
    world._state.journal_format = 2
    _agent, child, grandchild = _family(world)
    world.pause(child)
    world.tick()
    world.resume(child)
    world.tick()
    assert world.status(grandchild).kind is StatusKind.PAUSED


def _leaves_a_grandchild(turn):
    child = yield Spawn(_leaves_a_child, "c")
    yield Join(child)
    return "joined"


def _line_through_a_released_agent(world):
    """root -> mid (ended) -> gone (ended, then forgotten: released) -> leaf (running)."""

    def root(turn):
        child = yield Spawn(_leaves_a_grandchild, "m")
        yield Join(child)
        yield Sleep(100)
        return "root done"

    agent = world.spawn(root, "x")
    for _ in range(6):
        world.tick()
    mid, gone, leaf = f"{agent}.1", f"{agent}.1.1", f"{agent}.1.1.1"
    assert world.status(mid).kind is StatusKind.COMPLETE
    world.forget(gone)  # ended: released at once, its child no longer listed under anyone
    assert world.children(mid) == [] and world.status(leaf).kind is StatusKind.ACTIVE
    return agent, leaf


def test_pause_resume_and_cancel_reach_agents_below_one_released_since(make_world):
    # The walk down `children` stopped at the released agent: the leaf below it was
    # neither paused, resumed nor cancelled with the root.
    world = make_world()
    agent, leaf = _line_through_a_released_agent(world)
    world.pause(agent)
    world.tick()
    assert world.status(leaf).kind is StatusKind.PAUSED
    world.resume(agent)
    world.tick()
    assert world.status(leaf).kind is StatusKind.ACTIVE
    world.cancel(agent)
    world.tick()
    status = world.status(leaf)
    assert (status.kind, status.message) == (StatusKind.CANCELLED, f"ancestor {agent} cancelled")


def test_a_format_2_world_does_not_reach_below_a_released_agent(make_world):
    world = make_world()
    world._state.journal_format = 2
    agent, leaf = _line_through_a_released_agent(world)
    world.pause(agent)
    world.cancel(agent)
    world.run_until_idle()
    assert world.result(leaf) == "slept"


def test_a_cancelled_tree_looks_for_agents_below_released_ones_once_at_its_top(
    make_world, monkeypatch
):
    # Each agent cancelled with the tree scanned every agent again: a tree of k agents in
    # a world of n cost k x n once any agent had been released with children.
    from runtime.world.state import WorldState

    def keeps_a_child(turn):
        yield Spawn(_long_sleeper, "g")
        yield Sleep(100)

    def fans_out(turn):
        for _ in range(10):
            yield Spawn(keeps_a_child, "c")  # each child runs on with a child of its own
        yield Sleep(100)

    world = make_world()
    _line_through_a_released_agent(world)  # an agent released with a child
    other = world.spawn(fans_out, "y")
    for _ in range(12):
        world.tick()
    scans: list[str] = []
    _count_walks(monkeypatch, WorldState, "cut_off", scans)
    world.cancel(other)
    world.tick()
    assert scans == [other]
    grandchildren = [f"{other}.{i}.1" for i in range(1, 11)]
    assert {world.status(a).kind for a in grandchildren} == {StatusKind.CANCELLED}


def _sleeps_with_a_child(turn):
    yield Spawn(_long_sleeper, "c")
    yield Sleep(100)


def test_no_agent_is_taken_for_a_descendant_by_its_id_alone(make_world):
    # Ancestry below a released agent was read off ids: a host's top-level "team.helper"
    # was paused and cancelled with "team", and after "w" was released and its id taken
    # again, the new "w"'s pause and cancel reached the old one's grandchild.
    world = make_world()
    agent, _leaf = _line_through_a_released_agent(world)  # an agent released with a child
    world.spawn(_sleeps_with_a_child, "lead", agent_id="team")
    helper = world.spawn(_long_sleeper, "help", agent_id="team.helper")
    world.spawn(_leaves_a_grandchild, "x", agent_id="w")  # w -> w.1 (ends) -> w.1.1 (runs)
    for _ in range(4):
        world.tick()
    assert world.status("w").kind is StatusKind.COMPLETE
    world.forget("w.1")
    world.forget("w")
    world.spawn(_long_sleeper, "new", agent_id="w")  # the id, free again, for a stranger
    world.tick()
    for command in (world.pause, world.cancel):
        command("team")
        command("w")
        world.tick()
        assert world.status(helper).kind is StatusKind.ACTIVE
        assert world.status("w.1.1").kind is StatusKind.ACTIVE
    assert world.status("team.1").kind is StatusKind.CANCELLED  # its real child
    world.cancel(agent)
    world.tick()
    assert world.status(_leaf).kind is StatusKind.CANCELLED


def test_the_links_kept_for_released_agents_go_once_nothing_held_is_below_them(make_world):
    # Every released agent that had had children kept its link for good: with
    # keep_finished bounding what a long run holds, the links grew with every agent.
    world = make_world(keep_finished=0)
    for _ in range(50):
        world.spawn(_leaves_a_grandchild, "x")  # each: a -> a.1 (ends) -> a.1.1 (sleeps)
    world.run_until_idle()
    state = world._state
    assert not state.records  # every one released, in whatever order
    assert (state.released_up, state.orphan_up, state.below) == ({}, {}, {})
    world = make_world()
    state = world._state
    agent, leaf = _line_through_a_released_agent(world)  # held below a released agent
    assert state.released_up and state.orphan_up
    world.cancel(agent)
    world.tick()
    world.forget(leaf)  # cancelled: the last agent held below the released one goes
    assert (state.released_up, state.orphan_up, state.below) == ({}, {}, {})


def _count_walks(monkeypatch, owner: object, name: str, seen: list[str]) -> None:
    """Patch ``owner.<name>``, a walk whose last argument is the agent record it starts
    from, to note that agent's id in ``seen`` and walk on."""
    real = getattr(owner, name)

    def counted(*args):
        seen.append(args[-1].id)
        return real(*args)

    monkeypatch.setattr(owner, name, counted)


def _parent(turn):
    yield Spawn(_napper, "below")
    yield Sleep(3600)


def _napper(turn):
    yield Sleep(3600)


def test_no_effect_counts_the_commands_queued_before_by_anyone(make_world):
    # A command is applied at the next tick: judged by the status alone, a resume right
    # after a pause found the agent not paused yet, and a pause after a cancel found it live.
    world = make_world()
    world.spawn(_parent, agent_id="p")
    for _ in range(3):
        world.tick()
    [child] = world.children("p")
    assert (
        world.no_effect(child, "resume")
        == f"agent {child!r} is active, not paused: nothing to resume"
    )
    assert world.no_effect(child, "pause") is None
    world.pause(child)
    assert world.no_effect(child, "resume") is None
    assert world.no_effect(child, "pause") == f"agent {child!r} has a pause queued already"
    world.resume("p")  # p is not paused: it resumes nobody, so the child stays paused
    assert world.no_effect(child, "resume") is None
    world.cancel("p")
    assert world.no_effect("p", "send") == "agent 'p' has a cancel queued: send does nothing"
    assert world.no_effect("p", "cancel") == "agent 'p' has a cancel queued already"
    assert world.no_effect(child, "send") is None  # it ends later in the tick (the abort)
    world.tick()
    assert world.status(child).kind is StatusKind.CANCELLED
    assert world.no_effect(child, "send") == f"agent {child!r} is cancelled: send does nothing"
    with pytest.raises(UnknownAgentError, match="nobody"):
        world.no_effect("nobody", "pause")
    with pytest.raises(ConfigError, match="`op` must be one of send, pause, resume"):
        world.no_effect(child, "forget")
    pending = world.spawn(_napper, agent_id="later")  # a spawn pending is judged too
    assert (
        world.no_effect(pending, "resume") == "agent 'later' is idle, not paused: nothing to resume"
    )
    world.pause(pending)
    assert world.no_effect(pending, "resume") is None
    assert world.no_effect(pending, "pause") == "agent 'later' has a pause queued already"


def test_no_effect_of_a_command_that_changes_the_agent_itself_walks_no_subtree(
    make_world, monkeypatch
):
    # A pause of a live agent (a resume of a paused one) with nothing queued that steers
    # anyone changes the agent itself: the walk of its subtree, under the tick's lock,
    # took ~85 ms with 100,000 agents below it, at every such command.
    from runtime.world import steering

    world = make_world()
    world.spawn(_parent, agent_id="p")
    for _ in range(3):
        world.tick()
    walked: list[str] = []
    _count_walks(monkeypatch, steering, "subtree", walked)
    assert world.no_effect("p", "pause") is None and walked == []
    world.send("p", "hi")  # a send steers nobody
    assert world.no_effect("p", "pause") is None and walked == []
    assert world.no_effect("p", "resume") is not None and "p" in walked  # not paused: walked
    world.pause("p")
    world.tick()
    walked.clear()
    assert world.no_effect("p", "resume") is None and walked == []
    world.pause("p")  # queued: the walk follows it
    assert world.no_effect("p", "resume") is None and "p" in walked


def test_no_effect_during_a_tick_is_refused(make_world):
    # A host timer runs after the tick took its inputs out of the inbox and before they
    # are applied: judged there, a resume after a queued pause read "not paused".
    world = make_world()
    world.spawn(_napper, agent_id="a")
    for _ in range(3):
        world.tick()
    world.pause("a")
    seen: list[BaseException] = []

    def at_the_tick() -> None:
        try:
            world.no_effect("a", "resume")
        except RuntimeError as exc:
            seen.append(exc)

    world.call_at(world.now, at_the_tick)
    world.tick()
    assert len(seen) == 1 and "called during a tick" in str(seen[0])
    assert world.status("a").kind is StatusKind.PAUSED
    assert world.no_effect("a", "resume") is None


def _ends_leaving_a_napper(turn):
    yield Spawn(_napper, "below")
    return "done"


def test_no_effect_never_takes_a_new_agent_under_a_released_id_for_the_old_one(make_world):
    # p ended and forgotten, its id taken by a new agent that is then cancelled: not the
    # child's parent (the world links them by ordinal, not by id), so the child's send
    # acts; and a cancel queued for the old p is not the new p's.
    world = make_world()
    world.spawn(_ends_leaving_a_napper, agent_id="p")
    for _ in range(3):
        world.tick()
    [child] = world.children("p")
    world.cancel("p")  # p has ended: it does nothing
    world.forget("p")
    world.spawn(_napper, agent_id="p")  # pending, after the old p's cancel
    assert world.no_effect("p", "send") is None
    assert world.no_effect("p", "pause") is None
    world.tick()
    world.tick()
    world.cancel("p")
    assert world.no_effect(child, "send") is None
    assert world.no_effect(child, "pause") is None
    world.tick()
    assert world.status(child).kind is StatusKind.ACTIVE


def _ends_leaving_a_parent(turn):
    yield Spawn(_ends_leaving_a_napper, "middle")
    return "done"


def test_no_effect_sees_below_a_released_agent_as_the_commands_reach(make_world):
    # top (ended) > top.1 (ended, forgotten) > top.1.1 (live): a pause of top reaches the
    # leaf (from format 3), so it was wrongly refused ("is complete: pause does nothing").
    world = make_world()
    world.spawn(_ends_leaving_a_parent, agent_id="top")
    for _ in range(5):
        world.tick()
    [middle] = world.children("top")
    [leaf] = world.children(middle)
    world.forget(middle)
    world.tick()
    assert world.children("top") == []
    assert world.no_effect("top", "pause") is None
    assert world.no_effect("top", "resume") == "agent 'top' is complete: resume does nothing"
    world.pause("top")
    assert world.no_effect("top", "resume") is None
    assert world.no_effect("top", "pause") == "agent 'top' has a pause queued already"
    world.tick()
    assert world.status(leaf).kind is StatusKind.PAUSED


def _node(turn):
    """Spawn the children ``turn.message`` lists, then end or sleep (as it says)."""
    spec = turn.message
    for kid in spec["k"]:
        yield Spawn(_node, kid)
    if spec["end"]:
        return "done"
    yield Sleep(3600)


_trees = st.recursive(
    st.fixed_dictionaries({"end": st.booleans(), "k": st.just([])}),
    lambda kids: st.fixed_dictionaries({"end": st.booleans(), "k": st.lists(kids, max_size=2)}),
    max_leaves=5,
)
_steps = st.lists(
    st.tuples(st.sampled_from(["pause", "resume", "cancel", "forget", "tick"]), st.integers(0, 50)),
    max_size=8,
)
_COMMANDS = ("pause", "resume", "cancel", "send", "interrupt")


def _play(journal_format: int | None, tree: dict, steps: list[tuple[str, int]]) -> World:
    """A world ticked by hand: ``tree`` grown, then ``steps`` (the commands after the last
    tick stay queued); an index picks an agent among those known (ended ones to forget)."""
    world = World(seed=1)
    if journal_format is not None:
        world._state.journal_format = journal_format
    world.spawn(_node, tree, agent_id="r")
    for _ in range(8):
        world.tick()
    for step, index in steps:
        if step == "tick":
            world.tick()
            continue
        records = world._state.records
        if step == "forget":
            ended = sorted(a for a, rec in records.items() if rec.status.kind.is_terminal)
            if ended:
                world.forget(ended[index % len(ended)])
            continue
        known = sorted(records)
        if known:
            getattr(world, step)(known[index % len(known)])
    return world


def _after(world: World) -> dict[str, tuple[object, ...]]:
    for _ in range(3):
        world.tick()
    return {
        agent: (rec.ordinal, rec.status.kind, rec.paused_from, len(rec.mailbox or ()))
        for agent, rec in sorted(world._state.records.items())
    }


@settings(max_examples=60, deadline=None)
@given(journal_format=st.sampled_from([2, None]), tree=_trees, steps=_steps)
def test_no_effect_never_refuses_a_command_that_would_change_something(journal_format, tree, steps):
    # Each command a judgement refuses is applied to a twin world: nothing may differ
    # after the ticks that apply it (a review's fuzzer, as a property: it found 1,331 such
    # refusals in ~54,800 commands before `no_effect` followed the queue).
    world = _play(journal_format, tree, steps)
    try:
        agents = sorted(world._state.records)
        refused = [
            (agent, op) for agent in agents for op in _COMMANDS if world.no_effect(agent, op)
        ]
        base = _after(world)
    finally:
        world.close()
    for agent, op in refused:
        twin = _play(journal_format, tree, steps)
        try:
            if op == "send":
                twin.send(agent, "hi")
            else:
                getattr(twin, op)(agent)
            assert _after(twin) == base, (agent, op)
        finally:
            twin.close()


@settings(max_examples=60, deadline=None)
@given(journal_format=st.sampled_from([2, None]), tree=_trees, steps=_steps)
def test_no_effect_says_what_its_whole_walk_would_say(journal_format, tree, steps):
    # The judgement without a walk (nothing queued steers anyone) against the whole
    # walk, made to run by a queued resume of an agent that does not exist (the walk
    # follows it over nobody). Only a shortcut that answered otherwise fails this.
    from runtime.world import steering
    from runtime.world.inputs import ResumeAgent

    world = _play(journal_format, tree, steps)
    try:
        state, queued = world._state, world._inbox.queued()
        walked = [*queued, (10**9, ResumeAgent("nobody"))]
        for agent in sorted(state.records):
            for op in _COMMANDS:
                said = steering.no_effect(state, queued, agent, op)
                assert said == steering.no_effect(state, walked, agent, op), (agent, op)
    finally:
        world.close()
