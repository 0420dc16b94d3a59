"""Digests: same seed and inputs give the same digest after every tick; seeds matter."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import InteractionResponse, ManualClock, ToolOutcome, ToolResult, World
from runtime.world.digest import canonical
from tests import journal_behaviors as jb
from tests.conftest import wait_for

commands = st.sampled_from(["tick", "answer", "interrupt", "send", "pause", "resume", "cancel"])
scripts = st.lists(st.tuples(commands, st.integers(0, 5)), min_size=1, max_size=30)


def _request_id(pending: tuple[str, object]) -> str:
    return pending[1].id  # type: ignore[attr-defined]


def _run(seed: int, script: list[tuple[str, int]], agents: int) -> list[str]:
    world = World(
        seed=seed, clock=ManualClock(), tools=jb.make_tools(), models=jb.scripted_models()
    )
    try:
        ids = [world.spawn(jb.worker, f"t{i}") for i in range(agents)]
        digests = []
        for command, index in script:
            agent = ids[index % len(ids)]
            if command == "answer":
                # Not `pending()[:1]`: the hub lists prompts in opening order, and prompts
                # opened in one tick open in the order their agents' outcomes arrived, which
                # is thread timing outside lockstep delivery (DESIGN: "Delivery"). That made
                # this property fail under CPU load (answering another agent's prompt is a
                # different input, not a runtime fault). Issue 15 replaces this test with a
                # lockstep one; until then, answer the prompt with the smallest id.
                for _owner, request in sorted(world.hub.pending(), key=_request_id)[:1]:
                    world.hub.answer(InteractionResponse.text(request.id, f"yes {index}"))
            elif command != "tick":
                getattr(world, command)(agent, *(["more"] if command == "send" else []))
            world.tick()
            wait_for(
                lambda: (
                    world.lane.stats().in_flight == 0
                    and world.inference_lane.stats().in_flight == 0
                )
            )
            digests.append(world.digest())
            world.clock.advance(0.01)  # type: ignore[attr-defined]
        return digests
    finally:
        world.close()


@settings(max_examples=30, deadline=None)
@given(script=scripts, seed=st.integers(0, 5), agents=st.integers(1, 4))
def test_same_seed_and_inputs_give_the_same_digest_after_every_tick(script, seed, agents):
    assert _run(seed, script, agents) == _run(seed, script, agents)


def test_different_seeds_that_change_behaviour_change_the_digest():
    script = [("tick", 0)] * 4 + [("answer", 0)] * 3 + [("tick", 0)] * 4
    # After its answer, jb.worker sleeps for a time drawn from the agent's seeded rng.
    runs = {tuple(_run(seed, script, 3)) for seed in range(4)}
    assert len(runs) > 1


def test_the_digest_does_not_depend_on_the_order_agents_changed_in():
    def nap(turn):
        from runtime import Sleep

        yield Sleep(turn.message)

    first, second = World(clock=ManualClock()), World(clock=ManualClock())
    try:
        for world, order in ((first, ["x", "y"]), (second, ["y", "x"])):
            world.spawn(nap, 1, agent_id=order[0])
            world.spawn(nap, 1, agent_id=order[1])
            world.tick()
        # Same agents, same state, spawned in a different order.
        assert first.digest() == second.digest()
    finally:
        first.close()
        second.close()


def test_canonical_encoding_is_stable_for_nested_values():
    value = {"b": [1, 2.5, None], "a": {"y": True, "x": "é"}}
    assert canonical(value) == '{"a":{"x":"é","y":true},"b":[1,2.5,null]}'


def test_a_late_outcome_for_an_abandoned_batch_is_dropped_as_stale():
    from runtime import CallTools, ToolCall, ToolRegistry

    tools = ToolRegistry()
    release = __import__("threading").Event()

    @tools.tool()
    def slow(args, ctx):
        release.wait(10)
        return "late"

    resumed: list[object] = []

    def worker(turn):
        resumed.append((yield CallTools(ToolCall("c1", "slow"))))

    world = World(clock=ManualClock(), tools=tools)
    try:
        agent = world.spawn(worker, "go", interactive=True)
        world.tick()
        batch_id = f"{agent}/t1/b1"
        world.interrupt(agent)
        world.tick()
        # What a lane that missed the cancel would deliver:
        world.post(ToolOutcome(agent, batch_id, (ToolResult("c1", output="late"),), 0.1))
        world.tick()
        world.tick()
        assert resumed == []
        assert world._state.stale_dropped == 1
        before = world.digest()
        world.post(ToolOutcome(agent, batch_id, (ToolResult("c1", output="late"),), 0.1))
        world.tick()
        assert world.digest() == before
    finally:
        release.set()
        world.close()
