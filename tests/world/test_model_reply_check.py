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
