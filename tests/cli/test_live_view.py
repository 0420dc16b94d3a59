"""The live view reads what it shows of a world without copying all of it."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from rich.console import Console

from runtime import Ask, InteractionRequest, ManualClock, World
from runtime.cli.view import LiveView


def asker(turn: Any) -> Generator[Any, Any, None]:
    yield Ask(InteractionRequest.free_text("", f"may {turn.agent_id} go on?"))


def test_the_view_counts_every_open_prompt_and_lists_only_the_first_few():
    with World(clock=ManualClock(), interaction_timeout_secs=0) as world:
        ids = [world.spawn(asker) for _ in range(8)]
        world.run_until_idle(timeout=5.0)
        asked: list[int | None] = []
        pending = world.hub.pending

        def recording(limit: int | None = None) -> list[Any]:
            asked.append(limit)
            return pending(limit)

        world.hub.pending = recording  # type: ignore[method-assign]
        console = Console(width=120, record=True, color_system=None)
        console.print(LiveView(world, "t", max_prompts=3))
        text = console.export_text()
    assert "open prompts: 8" in text
    listed = [agent for agent in ids if f"may {agent} go on?" in text]
    assert listed == ids[:3]  # the first three opened, in opening order
    assert "... and 5 more" in text
    assert asked == [3]  # never the whole open set, at every refresh


def evil_asker(turn: Any) -> Generator[Any, Any, None]:
    yield Ask(InteractionRequest.free_text("", "deploy? \x1b]0;PWNED\x07\x1b[41m[/red]"))


def test_the_views_title_and_prompts_are_shown_as_text_and_escaped():
    # A scenario named "demo[/bold]" failed the live view (rich read the title as markup),
    # and a prompt's text (a model's or a tool's, through `{last}`) reached the terminal
    # raw: an ESC sequence set its title and coloured it.
    with World(clock=ManualClock(), interaction_timeout_secs=0) as world:
        world.spawn(evil_asker)
        world.run_until_idle(timeout=5.0)
        console = Console(width=160, record=True, color_system=None)
        console.print(LiveView(world, "tickwork run demo[/bold] \x1b[2J"))
        text = console.export_text()
    assert "demo[/bold] \\x1b[2J" in text
    assert "deploy? \\x1b]0;PWNED\\x07\\x1b[41m[/red]" in text
    assert "\x1b" not in text
