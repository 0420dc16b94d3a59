"""fast_frozen_init: the same objects as dataclass's own __init__, made faster."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from components import InteractionRequest, InteractionResponse, PromptSettled, Settlement
from components._frozen import fast_frozen_init


@dataclasses.dataclass(frozen=True, slots=True)
class Plain:
    a: int
    b: str = "x"
    c: tuple[int, ...] = ()


Fast = fast_frozen_init(
    dataclasses.make_dataclass(
        "Fast",
        [
            ("a", int),
            ("b", str, dataclasses.field(default="x")),
            ("c", tuple, dataclasses.field(default=())),
        ],
        frozen=True,
        slots=True,
    )
)


def test_it_keeps_the_signature_defaults_equality_and_frozenness():
    def shape(cls):
        return [(p.name, p.default) for p in inspect.signature(cls.__init__).parameters.values()]

    assert shape(Fast) == shape(Plain)
    made = Fast(1)
    assert (made.a, made.b, made.c) == (1, "x", ())
    assert Fast(1, "y", (2,)) == Fast(a=1, b="y", c=(2,))
    assert hash(Fast(1)) == hash(Fast(1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.a = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        Fast()  # the required field is still required


def test_the_hot_messages_use_it_and_behave_as_before():
    response = InteractionResponse("r1", "yes")
    assert response == InteractionResponse.text("r1", "yes")
    assert (response.choice, response.approved) == (None, None)
    request = InteractionRequest.free_text("", "go?")
    assert request.with_id("p1") == InteractionRequest("p1", request.kind, "go?")
    settled = PromptSettled("a", "p1", Settlement.ANSWERED, response, 0.0, 1.0)
    assert settled.kind is request.kind
    assert "_set_request_id" in InteractionResponse.__init__.__code__.co_names


def test_a_class_it_cannot_speed_up_is_refused_by_name():
    @dataclasses.dataclass(slots=True)
    class Mutable:
        a: int

    with pytest.raises(TypeError, match="Mutable"):
        fast_frozen_init(Mutable)

    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        a: list[int] = dataclasses.field(default_factory=list)

    with pytest.raises(TypeError, match="default_factory"):
        fast_frozen_init(Factory)
