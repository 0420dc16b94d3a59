"""Actions: cheap to build (issue 20), and still frozen, equal, hashable and picklable."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from fractions import Fraction

import pytest

from runtime import (
    Ask,
    CallTools,
    InteractionRequest,
    InteractionResponse,
    Join,
    ManualClock,
    MonotonicClock,
    Sleep,
    Spawn,
    StatusKind,
    Think,
    ToolCall,
)
from runtime.lane.values import shown


def _examples() -> list[object]:
    return [
        Sleep(0),
        Sleep(0.0),
        Sleep(2.5),
        Think("plan"),
        Think("plan", "big"),
        CallTools(ToolCall("c1", "grep", {"q": "x"}), ToolCall("c2", "grep", {})),
        Ask(InteractionRequest.free_text("r1", "go?")),
        Spawn("worker", {"task": 1}, name="w"),
        Join("a", "b"),
    ]


@pytest.mark.parametrize("action", _examples(), ids=repr)
def test_an_action_is_frozen_equal_hashable_and_survives_pickle_and_copy(action: object) -> None:
    field = dataclasses.fields(action)[0].name  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(action, field, None)
    for again in (pickle.loads(pickle.dumps(action)), copy.copy(action), copy.deepcopy(action)):
        assert again == action
        assert type(again) is type(action)
        assert repr(again) == repr(action)
    if not isinstance(action, Ask | Spawn | CallTools):  # their fields hold dicts
        assert hash(pickle.loads(pickle.dumps(action))) == hash(action)


def test_actions_keep_their_fields_defaults_and_reprs() -> None:
    assert Think("p") == Think(prompt="p", model="default")
    assert repr(Think("p", "m")) == "Think(prompt='p', model='m')"
    assert repr(Sleep(0)) == "Sleep(seconds=0)"
    assert repr(Sleep(0.0)) == "Sleep(seconds=0.0)"  # only the int 0 is shared
    assert Sleep(seconds=3).seconds == 3
    assert Spawn("w").message is None and Spawn("w").name == ""
    assert Join("a", "b").agent_ids == ("a", "b")
    assert Sleep(1) != Sleep(2) and Sleep(1) != Think("1")


def test_sleep_zero_is_one_shared_instance_and_others_are_fresh() -> None:
    assert Sleep(0) is Sleep(0)
    assert pickle.loads(pickle.dumps(Sleep(0))) is Sleep(0)
    assert Sleep(0.0) is not Sleep(0.0)
    assert Sleep(1) is not Sleep(1)


def test_a_subclass_of_sleep_is_never_the_shared_instance() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, init=False)
    class Nap(Sleep):
        pass

    nap = Nap(0)
    assert type(nap) is Nap and nap.seconds == 0


def test_a_sleep_is_still_a_frozen_dataclass_to_its_users() -> None:
    # Its value lives in a private slot under a read-only `seconds` (a cheaper store):
    # what a user of a frozen dataclass does with one still works, and still refuses.
    nap = Sleep(1.5)
    assert dataclasses.is_dataclass(nap) and dataclasses.asdict(nap) == {"seconds": 1.5}
    assert dataclasses.replace(nap, seconds=2) == Sleep(2)
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'seconds'"):
        del nap.seconds  # type: ignore[misc]
    with pytest.raises(AttributeError):
        nap.other = 1  # type: ignore[attr-defined]
    match nap:
        case Sleep(seconds=seconds):
            assert seconds == 1.5
    assert Sleep(1.5) == Sleep(1.5) != Sleep(2.5) and hash(Sleep(1.5)) == hash(Sleep(1.5))


def test_a_subclass_of_sleep_keeps_its_own_fields() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, init=False)
    class Tagged(Sleep):
        tag: str = "t"

        def __new__(cls, seconds: float, tag: str = "t") -> Tagged:
            self = Sleep.__new__(cls, seconds)  # (a slotted dataclass: no bare super())
            object.__setattr__(self, "tag", tag)
            return self  # type: ignore[return-value]

    class Plain(Sleep):
        pass

    tagged = Tagged(2, "x")
    assert (tagged.seconds, tagged.tag) == (2, "x") and tagged == Tagged(2, "x")
    assert (
        repr(tagged)
        == "test_a_subclass_of_sleep_keeps_its_own_fields.<locals>.Tagged(seconds=2, tag='x')"
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        tagged.seconds = 3  # type: ignore[misc]
    plain = Plain(0)
    assert type(plain) is Plain and plain.seconds == 0 and plain != Sleep(0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plain.seconds = 3  # type: ignore[misc]

    @dataclasses.dataclass(frozen=True)
    class Frozen(Sleep):  # its generated __init__ writes `seconds` with object.__setattr__
        pass

    frozen = Frozen(2)
    assert frozen.seconds == 2 and repr(frozen).endswith("Frozen(seconds=2)")
    assert dataclasses.replace(frozen, seconds=3) == Frozen(3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        frozen.seconds = 4  # type: ignore[misc]


def test_call_tools_refuses_a_non_call_and_repeated_ids_naming_them() -> None:
    with pytest.raises(TypeError, match="got 'grep'"):
        CallTools("grep")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\['c1', 'c1'\]"):
        CallTools(ToolCall("c1", "a", {}), ToolCall("c1", "b", {}))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Sleep("1"), "Sleep takes a number of seconds, got '1'"),
        (lambda: Sleep(None), "Sleep takes a number of seconds, got None"),
        (
            lambda: Ask("hello"),  # type: ignore[arg-type]
            "Ask takes an InteractionRequest, got 'hello' (a question in words:"
            " Ask(InteractionRequest.free_text('', 'hello')))",
        ),
        (lambda: Ask(None), "Ask takes an InteractionRequest, got None"),  # type: ignore[arg-type]
        (lambda: Think(5), "Think takes the prompt as a string, got 5"),  # type: ignore[arg-type]
        (
            lambda: Think("plan", None),  # type: ignore[arg-type]
            "Think takes the model's name as a string, got None",
        ),
        (
            lambda: Join(["a", "b"]),  # type: ignore[arg-type]
            "Join takes agent ids as strings, got ['a', 'b'] (the ids of a collection go in"
            " one by one: Join(*ids))",
        ),
        (lambda: Join("a", 5), "Join takes agent ids as strings, got 5"),  # type: ignore[arg-type]
        (
            lambda: Spawn(5),  # type: ignore[arg-type]
            "Spawn takes a behaviour (a generator function, or the name it is registered"
            " under), got 5",
        ),
        (
            lambda: Spawn("worker", None, 7),  # type: ignore[arg-type]
            "Spawn takes the child's name as a string, got 7",
        ),
    ],
    ids=[
        "sleep-str",
        "sleep-none",
        "ask-str",
        "ask-none",
        "think-int",
        "think-model-none",
        "join-list",
        "join-int",
        "spawn-int",
        "spawn-name-int",
    ],
)
def test_an_action_of_the_wrong_kind_of_value_is_refused_where_it_is_made(make, message) -> None:
    # It used to be made, then fail the agent inside the step or the dispatch with a
    # message about `<=` or `.id` (no word of the action or the value), or (`Think`) go
    # to the model as it was.
    with pytest.raises(TypeError) as caught:
        make()
    assert str(caught.value) == message


def test_a_behaviour_that_builds_a_bad_sleep_fails_with_that_message(make_world) -> None:
    def bad(turn):
        yield Sleep("5")

    world = make_world()
    agent = world.spawn(bad)
    world.run_until_idle(max_ticks=5)
    assert world.status(agent).message == "TypeError: Sleep takes a number of seconds, got '5'"


_TOO_LONG = {"int": 10**400, "fraction": Fraction(10**400, 3)}


@pytest.mark.parametrize("kind", list(_TOO_LONG))
@pytest.mark.parametrize("journal_format", [3, 4])
@pytest.mark.parametrize(
    "when", ["first-step", "after-a-sleep", "after-a-sleep-of-two", "after-an-answer"]
)
def test_a_sleep_too_long_for_a_float_fails_its_agent_naming_it(
    make_world, kind, journal_format, when
) -> None:
    # Its deadline overflows: format 3 failed the agent with Python's words alone
    # ("StepBehaviors: OverflowError: int too large to convert to float"), whichever loop
    # stepped it (the step, the run of wake-ups' two loops, the settlement's tick); format
    # 4 names the action and the value.
    # The settlement's tick is a real-time world's (lockstep ticks every tick whole).
    clock = MonotonicClock() if when == "after-an-answer" else ManualClock()
    world = make_world(clock=clock, interaction_timeout_secs=0)
    world._state.journal_format = journal_format
    seconds = _TOO_LONG[kind]

    def sleeper(turn):
        if when.startswith("after-a-sleep"):
            yield Sleep(1)
        elif when == "after-an-answer":
            yield Ask(InteractionRequest.free_text("", "go on?"))
        yield Sleep(seconds)

    agent = world.spawn(sleeper)
    if when == "after-a-sleep-of-two":  # a deadline of two sleepers: the run's other loop
        world.spawn(sleeper)
    world.run_until_idle(max_ticks=20)
    if when == "after-an-answer":
        [(_agent, request)] = world.hub.pending()
        world.hub.answer(InteractionResponse.text(request.id, "yes"))
        world.tick()  # the settlement's tick
    status = world.status(agent)
    assert status.kind is StatusKind.ERROR
    if journal_format >= 4:
        assert status.message == f"Sleep: `seconds` is too large: {shown(seconds)}"
    else:
        assert status.message.startswith("StepBehaviors: OverflowError: ")


def test_a_behaviour_can_catch_a_bad_join_where_it_made_it(make_world) -> None:
    # `Join(ids)` for `Join(*ids)` failed the agent inside the step with "StepBehaviors:
    # TypeError: unhashable type: 'list'"; now it raises in the behaviour, at that line.
    def parent(turn):
        child = yield Spawn(worker)
        try:
            yield Join([child])
        except TypeError as exc:
            return f"caught: {exc}"
        return "joined"

    def worker(turn):
        yield Sleep(1)

    world = make_world()
    agent = world.spawn(parent)
    world.run_until_idle(max_ticks=20)
    assert world.result(agent) == (
        "caught: Join takes agent ids as strings, got ['a1.1'] (the ids of a collection go in"
        " one by one: Join(*ids))"
    )


@pytest.mark.parametrize("seconds", [1, 2.5, True, 10**30])
def test_a_sleep_takes_any_real_number(seconds) -> None:
    import fractions

    import numpy as np

    for value in (seconds, np.float64(seconds), fractions.Fraction(seconds)):
        assert Sleep(value).seconds == value


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ((5, "grep", {}), "`id` must be a string, got 5"),
        (("c1", None, {}), "`name` must be a string, got None"),
        (("c1", "grep", 5), "`args` must be a mapping, got 5"),
        (("c1", "grep", None), "`args` must be a mapping, got None"),
        (("c1", "grep", [("q", "x")]), "`args` must be a mapping, got [('q', 'x')]"),
    ],
    ids=["id", "name", "args-int", "args-none", "args-pairs"],
)
def test_a_tool_call_whose_fields_are_of_the_wrong_kind_is_refused_where_it_is_made(
    fields, message
) -> None:
    # They used to reach the tool as they were (args=5 was handed to the tool function).
    with pytest.raises(TypeError) as caught:
        ToolCall(*fields)
    assert str(caught.value) == f"ToolCall: {message}"


def test_a_tool_call_without_args_gets_a_new_empty_dict_each() -> None:
    first, second = ToolCall("c1", "grep"), ToolCall("c2", "grep")
    assert first.args == {} and first.args is not second.args
    assert ToolCall("c1", "grep") == ToolCall("c1", "grep", {})


def test_call_tools_takes_any_mapping_as_args() -> None:
    from types import MappingProxyType

    call = ToolCall("c1", "grep", MappingProxyType({"q": "x"}))
    assert CallTools(call).calls == (call,)


def test_an_ask_whose_prompt_is_no_string_fails_its_agent_naming_it(make_world) -> None:
    # `free_text("", reply)` with a ModelReply (not `reply.text`) opened a prompt of it.
    def asker(turn):
        yield Ask(InteractionRequest.free_text("", 6))  # type: ignore[arg-type]

    world = make_world()
    agent = world.spawn(asker)
    world.run_until_idle(max_ticks=5)
    assert world.status(agent).message.endswith("`prompt` must be a string, got 6")
    assert world.hub.stats().opened == 0
