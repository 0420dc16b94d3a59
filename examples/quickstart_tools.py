"""Python tools for ``quickstart.toml``: a tool is ``fn(args, ctx)`` returning a JSON value."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def word_count(args: Mapping[str, Any], ctx: Any) -> int:
    """Count the words of ``args["text"]``."""
    return len(str(args.get("text", "")).split())


def publish(args: Mapping[str, Any], ctx: Any) -> str:
    """Pretend to publish ``args["title"]`` (the scenario makes it wait for approval)."""
    return f"published {args['title']!r}"
