"""fast_frozen_init: the same objects as dataclass's own __init__, made faster."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle

import pytest

from components import (
    InteractionKind,
    InteractionRequest,
    InteractionResponse,
    PromptSettled,
    Settlement,
)
from components._frozen import fast_frozen_init, frozen_builder
from components.interaction import build_prompt_settled


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


def test_a_keyword_only_field_stays_keyword_only_as_in_the_generated_init():
    fields = [("a", int), ("k", int, dataclasses.field(default=1, kw_only=True)), ("b", int, 2)]
    plain = dataclasses.make_dataclass("Keyed", fields, frozen=True, slots=True)
    fast = fast_frozen_init(dataclasses.make_dataclass("Keyed", fields, frozen=True, slots=True))

    def shape(cls):
        params = inspect.signature(cls.__init__).parameters.values()
        return [(p.name, p.default, p.kind) for p in params]

    assert shape(fast) == shape(plain)
    assert fast(1, 3, k=4) == fast(a=1, b=3, k=4) and (fast(1).b, fast(1).k) == (2, 1)
    with pytest.raises(TypeError):
        fast(1, 3, 4)  # `k` only by name


def test_a_field_that_is_no_parameter_starts_at_its_default_as_in_the_generated_init():
    @dataclasses.dataclass(frozen=True, slots=True)
    class Counted:
        a: int
        seen: int = dataclasses.field(default=0, init=False, compare=False)

    fast = fast_frozen_init(
        dataclasses.make_dataclass(
            "Counted",
            [("a", int), ("seen", int, dataclasses.field(default=0, init=False, compare=False))],
            frozen=True,
            slots=True,
        )
    )
    shape = [p.name for p in inspect.signature(fast.__init__).parameters.values()]
    assert shape == [p.name for p in inspect.signature(Counted.__init__).parameters.values()]
    assert shape == ["self", "a"]
    assert fast(1).seen == Counted(1).seen == 0
    with pytest.raises(TypeError):
        fast(1, 2)  # not a parameter
    with pytest.raises(TypeError, match=r"Bare\.b: init=False needs a default"):
        fast_frozen_init(
            dataclasses.make_dataclass(
                "Bare", [("b", int, dataclasses.field(init=False))], frozen=True, slots=True
            )
        )


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


def test_a_default_factory_is_called_for_each_object_not_given_the_field():
    def made(name: str) -> type:
        fields = [
            ("a", list[int], dataclasses.field(default_factory=list)),
            ("k", list[int], dataclasses.field(default_factory=lambda: [0], kw_only=True)),
            ("n", list[int], dataclasses.field(default_factory=list, init=False)),
        ]
        return dataclasses.make_dataclass(name, fields, frozen=True, slots=True)

    plain, fast = made("Factory"), fast_frozen_init(made("Factory"))

    def shape(cls):
        return [(p.name, p.kind) for p in inspect.signature(cls.__init__).parameters.values()]

    assert shape(fast) == shape(plain)
    first, second = fast(), fast()
    assert (first.a, first.k, first.n) == ([], [0], []) and repr(first) == repr(plain())
    assert first.a is not second.a and first.k is not second.k and first.n is not second.n
    given = [1]
    assert fast(given, k=given).a is given and fast(k=given).k is given
    assert fast(None).a is None  # a value that is no default is kept, None included


def test_a_subclass_with_fields_of_its_own_is_sped_up_whole():
    @dataclasses.dataclass(frozen=True, slots=True)
    class Base:
        a: int

    @fast_frozen_init
    @dataclasses.dataclass(frozen=True, slots=True)
    class More(Base):  # `a`'s slot is the base's (it raised KeyError: 'a')
        b: str = "x"

    assert (More(1).a, More(1).b, More(2, "y")) == (1, "x", More(a=2, b="y"))


def test_a_post_init_or_an_init_var_is_refused_not_skipped():
    # The fast `__init__` never called `__post_init__` (its checks were skipped: a value
    # it refuses was taken) and dropped `InitVar` parameters.
    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            if self.a < 0:
                raise ValueError(self.a)

    @dataclasses.dataclass(frozen=True, slots=True)
    class Passing:
        a: int
        scale: dataclasses.InitVar[int] = 1

    for cls in (Checked, Passing):
        with pytest.raises(TypeError, match="__post_init__ and InitVar"):
            fast_frozen_init(cls)


def test_a_field_may_have_any_name_the_generated_init_takes():
    fields = [("_NO_VALUE", int, 0), ("other", list[int], dataclasses.field(default_factory=list))]
    fast = fast_frozen_init(dataclasses.make_dataclass("N", fields, frozen=True, slots=True))
    assert (fast(5)._NO_VALUE, fast(5).other) == (5, [])


def test_frozen_builder_builds_the_very_objects_the_class_builds():
    build = frozen_builder(Plain)
    made = build(1, "y", (2,))
    assert type(made) is Plain
    assert made == Plain(1, "y", (2,))
    assert hash(made) == hash(Plain(1, "y", (2,)))
    assert repr(made) == repr(Plain(1, "y", (2,)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.a = 2  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(made)) == made
    assert copy.deepcopy(made) == made
    assert dataclasses.replace(made, a=3) == Plain(3, "y", (2,))


def test_the_hub_messages_built_quicker_are_ordinary_instances():
    request = InteractionRequest.free_text("p1", "go?")
    assert type(request) is InteractionRequest
    assert request == InteractionRequest("p1", InteractionKind.FREE_TEXT, "go?")
    copied = InteractionRequest("", InteractionKind.CHOICE, "pick", ("a",), "s", False, [1])
    assert copied.with_id("p2") == dataclasses.replace(copied, id="p2")
    assert InteractionResponse.text("r", "v") == InteractionResponse("r", "v")
    assert InteractionResponse.neutral("r") == InteractionResponse("r")
    response = InteractionResponse.neutral("r")
    settled = build_prompt_settled("a", "r", Settlement.CANCELLED, response, 0.0, 1.0, copied.kind)
    assert settled == PromptSettled("a", "r", Settlement.CANCELLED, response, 0.0, 1.0, copied.kind)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settled.at = 2.0  # type: ignore[misc]


def test_the_lane_messages_built_quicker_are_ordinary_instances():
    from components import ToolCall, ToolResult
    from components.tools import build_result
    from runtime.cancel import CancelToken
    from runtime.lane.jobs import ToolJob, ToolOutcome, build_job, build_outcome
    from runtime.tools.base import ToolContext
    from runtime.tools.registry import _context

    result = build_result("c1", [1], None)
    assert type(result) is ToolResult and result == ToolResult("c1", output=[1])
    token = CancelToken()
    calls = (ToolCall("c1", "t"),)
    job = build_job("a1", "b1", len, calls, token, 2.5)
    assert type(job) is ToolJob and job == ToolJob("a1", "b1", len, calls, token, bound=2.5)
    outcome = build_outcome("a1", "b1", (result,), 0.5, None)
    assert type(outcome) is ToolOutcome and outcome == ToolOutcome("a1", "b1", (result,), 0.5)
    context = _context("a1", "c1", token, None, "b1", [0], None)
    assert type(context) is ToolContext and context == ToolContext("a1", "c1", token, None, "b1")
    assert context._prompts == [0]  # the cell `ask` counts prompts in
    for made, field in (
        (result, "call_id"),
        (job, "batch_id"),
        (outcome, "batch_id"),
        (context, "call_id"),
    ):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(made, field, "x")


def test_a_subclass_of_a_message_still_builds_itself():
    class Tagged(InteractionRequest):
        __slots__ = ("tag",)

        def __init__(self, *args: object) -> None:
            super().__init__(*args)  # type: ignore[arg-type]
            object.__setattr__(self, "tag", "t")

    made = Tagged.free_text("p1", "go?")
    assert type(made) is Tagged and made.tag == "t"

    class Loud(InteractionResponse):
        __slots__ = ()

    assert type(Loud.text("r", "v")) is Loud and type(Loud.neutral("r")) is Loud


def test_frozen_builder_refuses_a_class_it_cannot_build_by_name():
    @dataclasses.dataclass(slots=True)
    class Mutable:
        a: int

    with pytest.raises(TypeError, match="Mutable"):
        frozen_builder(Mutable)
