"""Actions: cheap to build (issue 20), and still frozen, equal, hashable and picklable."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from runtime import Ask, CallTools, InteractionRequest, Join, Sleep, Spawn, Think, ToolCall


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


def test_call_tools_refuses_a_non_call_and_repeated_ids_naming_them() -> None:
    with pytest.raises(TypeError, match="got 'grep'"):
        CallTools("grep")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\['c1', 'c1'\]"):
        CallTools(ToolCall("c1", "a", {}), ToolCall("c1", "b", {}))
