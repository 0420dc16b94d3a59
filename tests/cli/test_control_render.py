"""What `tickwork ps` and `tickwork respond` print of text from the world: as it is, never
read as rich markup, with control characters and lone surrogates escaped."""

from __future__ import annotations

import io
import sys

import pytest

from runtime.cli.control import _list_prompts


@pytest.mark.parametrize(
    ("prompt", "shown"),
    [
        ("[/oops] close a tag never opened", "[/oops] close a tag never opened"),
        ("[link=http://evil]click[/link] [bold red]loud[/]", "[link=http://evil]click[/link]"),
        ("clear \x1b[2J then \x1b]0;title\x07", "clear \\x1b[2J then \\x1b]0;title\\x07"),
        ("half a pair \ud800?", "half a pair \\ud800?"),
    ],
    ids=["closing-tag", "markup", "escapes", "surrogate"],
)
def test_a_listed_prompts_text_is_printed_as_it_is_and_escaped(prompt, shown, monkeypatch):
    # `[/oops]` raised MarkupError (exit 70), `[link=...]` vanished into markup, an ESC
    # reached the terminal raw and a lone surrogate failed the write (exit 70).
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="")
    monkeypatch.setattr(sys, "stdout", out)
    prompts = [
        {
            "id": "echo/t1/p1",
            "agent": "echo",
            "kind": "choice",
            "prompt": prompt,
            "choices": ["[b]yes[/b]", "no\x1b"],
        },
    ]
    assert _list_prompts(prompts, as_json=False) == 0
    out.flush()
    text = out.buffer.getvalue().decode("utf-8")  # type: ignore[attr-defined]
    assert shown in text
    assert "\x1b" not in text
    assert "0: [b]yes[/b]" in text and "1: no\\x1b" in text


def _args(value=None, *, approve=False, deny=False, choice=None):
    import argparse

    return argparse.Namespace(value=value, approve=approve, deny=deny, choice=choice)


@pytest.mark.parametrize("value", ["²", "①", "1" * 5000])
def test_a_digit_like_answer_that_is_no_index_is_refused_as_no_choice(value):
    # `isdigit` took them and `int` then raised ValueError: exit 70, an internal error.
    from runtime.cli.control import _answer_fields
    from runtime.errors import ConfigError

    prompt = {"id": "d/t1/p1", "kind": "choice", "choices": ["staging", "production"]}
    with pytest.raises(ConfigError, match="is not one of the choices"):
        _answer_fields(prompt, _args(value))


@pytest.mark.parametrize(("value", "flag"), [("yes", "deny"), ("no", "approve")])
def test_an_answer_whose_value_and_flag_disagree_is_refused(value, flag):
    from runtime.cli.control import _answer_fields
    from runtime.errors import ConfigError

    prompt = {"id": "c/t1/p1", "kind": "confirm", "choices": []}
    with pytest.raises(ConfigError, match=f"VALUE '{value}' and --{flag} disagree"):
        _answer_fields(prompt, _args(value, **{flag: True}))
    agreeing = "no" if value == "yes" else "yes"
    assert _answer_fields(prompt, _args(agreeing, **{flag: True}))["approved"] is (
        flag == "approve"
    )
