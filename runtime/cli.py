"""The ``tickwork`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ._version import __version__

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``tickwork`` command."""
    parser = argparse.ArgumentParser(
        prog="tickwork",
        description="Run many agents tick by tick: scenarios, replays and a control channel.",
    )
    parser.add_argument("--version", action="version", version=f"tickwork {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tickwork`` command; returns the exit status."""
    parser = build_parser()
    parser.parse_args(argv)
    parser.print_help()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
