"""The journal's input codec: every input decodes to what was encoded, and a payload of
the wrong shape is refused naming the field, however deep it sits."""

from __future__ import annotations

import json

import pytest

from components import (
    InteractionRequest,
    InteractionResponse,
    PromptOpened,
    PromptSettled,
    Settlement,
    ToolResult,
)
from runtime import JournalError
from runtime.journal.codec import decode_input, encode_input
from runtime.lane import ToolOutcome


def _outcome() -> ToolOutcome:
    results = (ToolResult("c1", {"n": 1}, None), ToolResult("c2", None, "boom"))
    return ToolOutcome("a1", "a1/t1/b1", results, 0.25, None)


def _tampered(item: object, edit) -> tuple[str, str]:
    kind, payload = encode_input(item)
    data = json.loads(payload)
    edit(data)
    return kind, json.dumps(data)


def test_inputs_decode_to_what_was_encoded():
    opened = PromptOpened("a1", InteractionRequest.free_text("r1", "why?"), 1.0, None)
    for item in (_outcome(), opened):
        assert decode_input(*encode_input(item)) == item


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(agent_id=5), "`agent_id` must be a string, got 5"),
        (lambda d: d.update(error=[1]), "`error` must be a string or null, got [1]"),
        (
            lambda d: d["results"][1].update(call_id=7),
            "`results[1].call_id` must be a string, got 7",
        ),
        (
            lambda d: d["results"][0].update(error=True),
            "`results[0].error` must be a string or null, got True",
        ),
    ],
    ids=["top", "optional", "nested", "nested-optional"],
)
def test_a_field_of_the_wrong_kind_is_refused_naming_its_path(edit, message):
    with pytest.raises(JournalError) as caught:
        decode_input(*_tampered(_outcome(), edit))
    assert str(caught.value) == f"journal holds a malformed outcome input: {message}"


def test_json_writes_a_whole_float_as_an_integer_and_that_still_decodes():
    item = decode_input(*_tampered(_outcome(), lambda d: d.update(elapsed=2)))
    assert isinstance(item, ToolOutcome) and item.elapsed == 2


def test_a_number_field_takes_no_text_nor_a_bool():
    opened = PromptOpened("a1", InteractionRequest.free_text("r1", "why?"), 1.0, None)
    for bad, shown in (("x", "'x'"), (True, "True")):
        kind, payload = _tampered(opened, lambda d, bad=bad: d.update(at=bad))
        with pytest.raises(JournalError) as caught:
            decode_input(kind, payload)
        assert str(caught.value).endswith(f"`at` must be a number, got {shown}")


def test_a_payload_is_the_text_json_dumps_writes():
    # The journal's encoder is built once (not per call, as json.dumps builds it): its text
    # must stay what json.dumps writes, non-ASCII escaped and keys in their order.
    output = {"zé": [1.5, None, True, -0.0, 10**20], "a": {"ü": "\u2603", "n": 2}}
    item = ToolOutcome("a1", "a1/t1/b1", (ToolResult("c1", output, None),), 0.25, None)
    kind, payload = encode_input(item)
    expected = {
        "agent_id": "a1",
        "batch_id": "a1/t1/b1",
        "elapsed": 0.25,
        "error": None,
        "results": [{"call_id": "c1", "error": None, "value": output}],
    }
    assert (kind, payload) == ("outcome", json.dumps(expected, allow_nan=False))
    assert payload.isascii()


@pytest.mark.parametrize("bad", ["nan", "cycle"])
def test_a_value_json_cannot_write_is_refused_naming_the_agent(bad):
    value: object
    if bad == "nan":
        value = float("nan")
    else:
        value = []
        value.append(value)
    item = ToolOutcome("a7", "a7/t1/b1", (ToolResult("c1", value, None),), 0.25, None)
    with pytest.raises(JournalError, match="cannot journal the outcome input of agent 'a7'"):
        encode_input(item)


@pytest.mark.parametrize(
    ("kind", "payload", "why"),
    [
        ("outcome", '{"agent_id": "a1", "batch_id": "b", "elapsed": NaN, "results": []}', "NaN"),
        ("add_entity", '{"entity": Infinity, "components": []}', "Infinity"),
        ("outcome", '{"agent_id": "a1", "batch_id": "b", "elapsed": 1e999, "results": []}', "inf"),
        (
            "outcome",
            '{"agent_id": "a1", "batch_id": "b", "elapsed": 1' + "0" * 400 + ', "results": []}',
            "int too large",
        ),
        ("add_entity", '{"entity": 1e999, "components": []}', "must be an integer, got inf"),
        (
            "send",
            '{"agent_id": "a1", "message": ' + "[" * 100_000 + "]" * 100_000 + "}",
            "recursion",
        ),
        ("pause", "[" * 100_000 + "]" * 100_000, "recursion"),
    ],
    ids=[
        "nan",
        "infinity",
        "overflowing-float",
        "overflowing-int",
        "infinite-int",
        "deep",
        "deep-top",
    ],
)
def test_a_number_no_clock_reads_or_nesting_past_the_decoder_is_a_journal_error(kind, payload, why):
    # Each raised ValueError's neighbours (OverflowError, RecursionError) or decoded, though
    # the encoder writes none of them.
    with pytest.raises(JournalError, match=f"malformed {kind} input: .*{why}"):
        decode_input(kind, payload)


def test_a_prompts_deadline_that_is_no_time_is_refused():
    opened = PromptOpened("a1", InteractionRequest.free_text("r1", "why?"), 1.0, 5.0)
    kind, payload = encode_input(opened)
    for bad in ("NaN", "Infinity", "-Infinity", "1e999"):
        with pytest.raises(JournalError, match="malformed prompt_opened input"):
            decode_input(kind, payload.replace("5.0", bad))
    assert decode_input(kind, payload) == opened


def _settled() -> PromptSettled:
    request = InteractionRequest.choice("r1", "which?", ("a", "b"))
    return PromptSettled(
        "a1",
        "r1",
        Settlement.ANSWERED,
        InteractionResponse.choose("r1", 1, "b"),
        1.0,
        2.0,
        request.kind,
    )


@pytest.mark.parametrize(
    ("item", "edit", "message"),
    [
        (
            "opened",
            lambda d: d["request"].update(id=5),
            "`request.id` must be a string, got 5",
        ),
        (
            "opened",
            lambda d: d["request"].update(required="no"),
            "`request.required` must be true or false, got 'no'",
        ),
        (
            "opened",
            lambda d: d["request"].update(choices=["a", 2]),
            "a prompt's choices must be a list of strings, got ['a', 2]",
        ),
        (
            "opened",
            lambda d: d["request"].update(prompt=None),
            "`request.prompt` must be a string, got None",
        ),
        (
            "settled",
            lambda d: d["response"].update(value=None),
            "`response.value` must be a string, got None",
        ),
        (
            "settled",
            lambda d: d["response"].update(request_id=["r1"]),
            "`response.request_id` must be a string, got ['r1']",
        ),
        (
            "settled",
            lambda d: d["response"].update(approved="yes"),
            "`response.approved` must be true or false or null, got 'yes'",
        ),
    ],
    ids=["id", "required", "choices", "prompt", "value", "request-id", "approved"],
)
def test_a_prompts_request_or_response_of_the_wrong_kind_is_refused_not_coerced(
    item, edit, message
):
    # A tampered answer of null replayed as the text "None", an id of 5 as "5", and a
    # `required` of "no" as True: each field now stands as decoded, and is checked.
    opened = PromptOpened("a1", InteractionRequest.choice("r1", "which?", ("a", "b")), 1.0, None)
    value = opened if item == "opened" else _settled()
    assert decode_input(*encode_input(value)) == value
    kind = "prompt_opened" if item == "opened" else "prompt_settled"
    with pytest.raises(JournalError) as caught:
        decode_input(*_tampered(value, edit))
    assert str(caught.value) == f"journal holds a malformed {kind} input: {message}"


@pytest.mark.parametrize("entity", ["5", 5.7, True])
def test_an_entity_id_that_is_no_integer_is_refused_not_coerced(entity):
    # `int()` around it made "5" and 5.7 the id 5, and True the id 1.
    from runtime.world.inputs import AddEntity

    kind, payload = encode_input(AddEntity(4294967296, ()))
    data = json.loads(payload)
    data["entity"] = entity
    with pytest.raises(JournalError, match="`entity` must be an integer"):
        decode_input(kind, json.dumps(data))
