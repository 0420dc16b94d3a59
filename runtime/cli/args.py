"""Argument types the ``tickwork`` subcommands share."""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["int_at_least"]


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type`` for an integer >= ``minimum`` (the error names the value)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be an integer >= {minimum}, got {text!r}"
            ) from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {value}")
        return value

    return parse
