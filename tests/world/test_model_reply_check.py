"""`checked_reply`: a reply already in the form a journal gives back is kept as it is."""

from __future__ import annotations

from components import ToolCall
from runtime import ModelReply
from runtime.world.effects import checked_reply


def test_a_plain_reply_is_handed_on_as_it_is() -> None:
    reply = ModelReply("plan", finish_reason="stop")
    assert checked_reply(reply) is reply


def test_a_reply_with_tool_calls_is_rebuilt_with_json_arguments() -> None:
    reply = ModelReply("", (ToolCall("c1", "lookup", {"q": ("a", "b")}),), finish_reason="tool")
    checked = checked_reply(reply)
    assert checked is not reply
    assert checked.tool_calls == (ToolCall("c1", "lookup", {"q": ["a", "b"]}),)
    assert checked.finish_reason == "tool"


def test_a_usage_of_a_models_own_type_becomes_the_usage_a_journal_gives_back() -> None:
    from dataclasses import dataclass

    from runtime import Usage

    @dataclass
    class TheirUsage:  # a model's own type, with the two counts
        input_tokens: int
        output_tokens: int

    checked = checked_reply(ModelReply("plan", usage=TheirUsage(11, 4)))  # type: ignore[arg-type]
    assert type(checked.usage) is Usage and checked.usage == Usage(11, 4)
    kept = ModelReply("plan", usage=Usage(1, 2))
    assert checked_reply(kept) is kept  # a `Usage` already: the reply is handed on as it is
