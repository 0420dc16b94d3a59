"""The ``tickwork`` command: its parser (``main``), its subcommands, and the live view."""

from runtime.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
