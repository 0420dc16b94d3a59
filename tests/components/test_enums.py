"""The runtime's enums hash their members in C, by identity (`components._enum`).

`enum.Enum.__hash__` is Python code, run each time a member keys a dict or a set: what
`World.counts()` did twice an agent, holding the world's lock. Whether Python runs is
counted with a profile hook, so no clock is needed.
"""

from __future__ import annotations

import copy
import pickle
import sys
from collections.abc import Callable, Generator
from typing import Any

import pytest

from components import InteractionKind, Phase, Settlement, StatusKind, WaitReason
from runtime import ManualClock, Sleep, World
from runtime.process import ProcessEnd

ENUMS = [StatusKind, WaitReason, Phase, InteractionKind, Settlement, ProcessEnd]


def _python_calls(work: Callable[[], object]) -> list[str]:
    """The names of the Python functions ``work`` called (C functions left out)."""
    called: list[str] = []

    def hook(frame: Any, event: str, _arg: object) -> None:
        if event == "call":
            called.append(frame.f_code.co_name)

    sys.setprofile(hook)
    try:
        work()
    finally:
        sys.setprofile(None)
    return called


@pytest.mark.parametrize("kind", ENUMS, ids=lambda k: k.__name__)
def test_a_member_keys_a_dict_without_running_python(kind: type[Any]) -> None:
    members = list(kind)
    table = {member: member.value for member in members}
    assert "__hash__" not in _python_calls(lambda: [table[m] for m in members])
    assert "__hash__" not in _python_calls(lambda: {hash(m) for m in members})


@pytest.mark.parametrize("kind", ENUMS, ids=lambda k: k.__name__)
def test_a_member_pickled_or_copied_is_the_same_key(kind: type[Any]) -> None:
    for member in kind:
        table = {member: "here"}
        for again in (
            pickle.loads(pickle.dumps(member)),
            copy.deepcopy(member),
            kind(member.value),
        ):
            assert again is member
            assert hash(again) == hash(member)
            assert table[again] == "here"


def _sleeper(turn: Any) -> Generator[Any, Any, None]:
    yield Sleep(1e9)


def _done(turn: Any) -> Generator[Any, Any, None]:
    yield Sleep(0)


def test_counts_tallies_every_status_without_hashing_in_python() -> None:
    with World(clock=ManualClock()) as world:
        for _ in range(30):
            world.spawn(_sleeper)
        for _ in range(12):
            world.spawn(_done)
        for _ in range(3):  # spawned, stepped, the quick ones ended: no time passes
            world.tick()
        counts = world.counts()
        assert list(counts) == list(StatusKind)  # every kind, in declaration order
        assert counts[StatusKind.ACTIVE] == 30
        assert counts[StatusKind.COMPLETE] == 12
        assert sum(counts.values()) == 42
        assert "__hash__" not in _python_calls(world.counts)
