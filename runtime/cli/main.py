"""The ``tickwork`` command.

Exit status (the README's table): 0 done; 1 a run-time failure or nothing done (a run whose
agents failed, a replay that diverged, a control channel that refused or is unreachable, a
command that would do nothing); 2 bad input (usage, scenario, journal, an answer that does
not fit its prompt: nothing was run); 70 an internal error (a bug); 128 + N stopped by
signal N (130 Ctrl-C, 143 SIGTERM) for ``run`` and ``serve``. Errors are one line each on
stderr, never a traceback (``TICKWORK_DEBUG=1`` shows one for an unexpected error).
"""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import sys
from collections.abc import Sequence

from runtime._version import __version__
from runtime.cli.args import int_at_least
from runtime.errors import BehaviorNotFound, ConfigError, JournalError, ScenarioError, TickworkError
from runtime.scenario.check import escape_controls

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``tickwork`` command."""
    from runtime.cli.check import cmd_replay, cmd_validate
    from runtime.cli.control import add_control_commands
    from runtime.cli.resume import add_resume_command
    from runtime.cli.run import cmd_run
    from runtime.cli.serve import cmd_serve

    parser = argparse.ArgumentParser(
        prog="tickwork",
        description="Run many agents tick by tick: scenarios, replays and a control channel.",
    )
    parser.add_argument("--version", action="version", version=f"tickwork {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="run a scenario to the end with a live view and a summary")
    run.add_argument("scenario", metavar="SCENARIO", help="a scenario file (.toml)")
    run.add_argument("--journal", metavar="FILE", help="record the run to a new journal FILE")
    run.add_argument(
        "--force", action="store_true", help="overwrite an existing journal FILE (a journal only)"
    )
    run.add_argument("--ticks", type=_positive, metavar="N", help="stop after N ticks")
    run.add_argument("--quiet", action="store_true", help="no live view")
    run.add_argument("--json", action="store_true", help="print the summary as JSON")
    _metrics(run)
    run.set_defaults(func=cmd_run)

    serve = sub.add_parser("serve", help="run a scenario with the control channel open")
    serve.add_argument("scenario", metavar="SCENARIO", help="a scenario file (.toml)")
    serve.add_argument("--journal", metavar="FILE", help="record the run to a new journal FILE")
    serve.add_argument(
        "--force", action="store_true", help="overwrite an existing journal FILE (a journal only)"
    )
    _state_dir(serve)
    serve.add_argument("--quiet", action="store_true", help="do not print prompts as they open")
    serve.add_argument("--json", action="store_true", help="print the final summary as JSON")
    _metrics(serve)
    serve.set_defaults(func=cmd_serve)

    check = sub.add_parser("validate", help="check scenarios and list every problem")
    check.add_argument("scenarios", nargs="+", metavar="SCENARIO", help="scenario files (.toml)")
    check.set_defaults(func=cmd_validate)

    rep = sub.add_parser("replay", help="replay a journal and check every tick")
    rep.add_argument("journal", metavar="JOURNAL", help="a journal written by run --journal")
    rep.add_argument(
        "--path",
        action="append",
        default=[],
        metavar="DIR",
        help="also import the journal's behaviour modules and host setup (and its types) from"
        " DIR (repeatable; the current directory is searched too, a directory the journal"
        " names never is)",
    )
    rep.add_argument("--quiet", action="store_true", help="no progress bar")
    rep.add_argument("--json", action="store_true", help="print the report as JSON")
    rep.add_argument(
        "--setup", metavar="MODULE:FN", help="the host setup to call (default: the journal's)"
    )
    rep.set_defaults(func=cmd_replay)

    add_resume_command(sub, _state_dir, _positive, _metrics)
    add_control_commands(sub, _state_dir)
    for action in sub._choices_actions:  # each subcommand's --help opens with what it does
        command = sub.choices[action.dest]
        if command.description is None and action.help:
            command.description = action.help[0].upper() + action.help[1:] + "."
    return parser


def _state_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        help="where the control socket and token live"
        " (default: $TICKWORK_STATE_DIR, else $XDG_RUNTIME_DIR/tickwork, else a per-user temp dir)",
    )


def _metrics(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics while it runs"
        " (port 0: any free port; needs the `metrics` extra)",
    )


_positive = int_at_least(1)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tickwork`` command; returns the exit status."""
    if argv is None:  # the command itself: the process ends when this returns
        atexit.register(_skip_final_collection)
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        status: int = args.func(args)
        return status
    except ScenarioError as exc:
        for problem in exc.problems:
            print(escape_controls(problem), file=sys.stderr)
        count = len(exc.problems)
        plural = "s" if count > 1 else ""
        print(f"tickwork: {count} problem{plural}; nothing was run", file=sys.stderr)
        return 2
    except (ConfigError, JournalError, BehaviorNotFound) as exc:
        _error(str(exc))
        return 2
    except TickworkError as exc:
        _error(str(exc))
        return 1
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:
        return 1  # the reader went away (`tickwork ps | head`): nothing to tell
    except Exception as exc:
        if os.environ.get("TICKWORK_DEBUG"):
            raise
        _error(f"internal error: {type(exc).__name__}: {exc} (TICKWORK_DEBUG=1 shows where)")
        return 70


def _skip_final_collection() -> None:
    # A run of 200,000 agents leaves a million objects in reference cycles; collecting
    # them as the interpreter exits took ~1 s after Ctrl-C. The OS frees them at once.
    gc.freeze()


def _error(message: str) -> None:
    print(f"tickwork: error: {escape_controls(message)}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
