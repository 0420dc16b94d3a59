"""``tickwork resume``: carry on a scenario run from its journal, or fork it from a tick."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from runtime.cli.args import int_at_least
from runtime.cli.observe import check_metrics_address
from runtime.cli.run import announce_backend, discard_journal, run_world, signals_set
from runtime.cli.serve import serve_world
from runtime.cluster import tool_backend
from runtime.errors import ControlError, JournalError, ScenarioError
from runtime.journal import Journal, JournalReader, resume
from runtime.scenario import (
    Scenario,
    build_models,
    build_tools,
    load_scenario,
    recorded_scenario,
    spawn_agents,
)
from runtime.scenario.check import escape_controls
from runtime.world import World, sigint

__all__ = ["add_resume_command", "cmd_resume"]


def add_resume_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    state_dir: Callable[[argparse.ArgumentParser], None],
    positive: Callable[[str], int],
    metrics: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Add ``tickwork resume`` to the subcommands (``main`` lends its argument helpers)."""
    res = sub.add_parser(
        "resume",
        help="resume JOURNAL: carry on a scenario run from its journal (after a crash or"
        " Ctrl-C); resume AGENT: undo pause of an agent of a running serve",
    )
    res.add_argument(
        "journal", metavar="JOURNAL|AGENT", help="the journal a run left, or a paused agent"
    )
    res.add_argument(
        "--scenario",
        metavar="FILE",
        help="the scenario file the run came from: its own modules (python tools,"
        " behaviours beside it) are imported only when you name it here",
    )
    res.add_argument(
        "--at-tick", type=_tick, metavar="N", help="fork: start from the state after tick N"
    )
    res.add_argument("--journal", dest="fork", metavar="NEW", help="fork into the new journal NEW")
    res.add_argument("--serve", action="store_true", help="open the control channel")
    state_dir(res)
    res.add_argument("--ticks", type=positive, metavar="N", help="stop after N ticks in all")
    res.add_argument("--quiet", action="store_true", help="no live view")
    res.add_argument("--json", action="store_true", help="print the summary as JSON")
    metrics(res)
    res.set_defaults(func=cmd_resume)


_tick = int_at_least(0)


def cmd_resume(args: argparse.Namespace) -> int:
    """``tickwork resume``: rebuild the run, then go on as ``run`` (or ``serve``) would.

    ``tickwork resume AGENT`` (not a file) is the control command that undoes a pause.
    """
    check_metrics_address(args.metrics)
    if not Path(args.journal).is_file() and not _journal_flags(args):
        from runtime.cli.control import cmd_steer

        args.agent, args.op = args.journal, "resume"
        try:
            return cmd_steer(args)
        except ControlError as exc:  # say both readings: a mistyped journal path lands here
            raise ControlError(f"no journal at {args.journal!r}; as an agent: {exc}") from None
    if args.at_tick is not None and args.fork is None:
        raise JournalError(
            "--at-tick forks the run: name the new journal with --journal NEW"
            " (the original is never rewritten)"
        )
    with JournalReader(args.journal) as reader:
        stored = reader.header.get("scenario")
    if not stored:
        raise JournalError(
            f"{args.journal!r} was not recorded from a scenario: resume it from Python"
            " with runtime.resume(path, tools=..., models=..., behaviors=...)"
        )
    scenario = _scenario(args, stored)
    label = args.fork if args.fork is not None else args.journal
    forked: list[tuple[Journal, int]] = []  # the fork, and its ticks (the prefix) when made

    def make_world() -> World:
        fork = None
        if args.fork is not None:
            fork = Journal.create(args.fork, scenario=stored)
        try:
            # The run's lane backend again (a Dask cluster): started before the replay,
            # so a cluster that cannot be reached stops the resume before anything runs.
            settings = scenario.world
            # Built before the backend, which nothing would close if they raised.
            tools = build_tools(scenario, ship_by_value=settings.lane_backend != "threads")
            models = build_models(scenario)
            announce_backend(scenario)
            backend = tool_backend(
                settings.lane_backend,
                scheduler_address=settings.scheduler_address,
                workers=settings.workers,
                retries=settings.retries,
            )
            # Ctrl-C stops the rebuild at once, as it stops a run's tick: nothing has run
            # live yet and the journal is as it was (else it waited for the whole replay).
            with sigint.abandoning():
                world = resume(
                    args.journal,
                    tools=tools,
                    models=models,
                    behaviors=scenario.behaviors,
                    at_tick=args.at_tick,
                    journal=fork,
                    tool_executor=backend,
                )
        except BaseException:
            if fork is not None:  # nothing was run: leave no half-made fork behind
                discard_journal(fork)
            raise
        if fork is not None:
            forked.append((fork, fork.ticks))
        return world

    try:
        if args.serve:
            return serve_world(make_world, scenario, args, journal=label, start=_no_new_agents)
        stop = threading.Event()
        with signals_set(stop) as caught:
            world = make_world()
            print(
                escape_controls(f"resumed {scenario.name} at tick {world.tick_count} ({label})"),
                file=sys.stderr,
                flush=True,
            )
            title = f"tickwork resume {scenario.name}"
            fresh = world.tick_count == 0
            return run_world(
                world,
                scenario,
                args,
                title=title,
                journal=label,
                start=lambda view: _start(world, scenario, stop, view.spawned),
                stop=stop,
                caught=caught,
                spawning=scenario.agent_count if fresh else 0,
            )
    except BaseException:
        # Refused or stopped by an error before its first live tick: as `tickwork run`,
        # "nothing was run" leaves no fork behind, or the same command, corrected, would
        # be refused for the file.
        for fork, replayed in forked:
            if fork.ticks == replayed:
                discard_journal(fork)
        raise


def _scenario(args: argparse.Namespace, stored: dict[str, object]) -> Scenario:
    """The run's scenario: the file the user names, if it is the one recorded, else the
    journal's copy with nothing imported from beside it."""
    if args.scenario is not None:
        scenario = load_scenario(args.scenario)
        if scenario.text != stored.get("text"):
            raise JournalError(
                f"--scenario {args.scenario} is not the scenario {args.journal!r} recorded"
                " (its text differs): resuming would not carry on the same run"
            )
        return scenario
    try:
        return recorded_scenario(stored)
    except ScenarioError as exc:
        raise JournalError(
            f"cannot resume {args.journal!r} from its stored scenario: {exc.problems[0]}"
            f" (code beside a scenario is imported only when you name the scenario:"
            f" tickwork resume {args.journal} --scenario {stored.get('path') or 'FILE'})"
        ) from None


def _journal_flags(args: argparse.Namespace) -> bool:
    return bool(args.scenario or args.fork or args.at_tick is not None or args.serve)


def _start(
    world: World, scenario: Scenario, stop: threading.Event, progress: Callable[[int], None]
) -> None:
    # A run stopped before its first tick was committed (Ctrl-C while spawning, or in the
    # first tick) left a journal of no ticks: its agents were never recorded, so they are
    # spawned as `run` would. Otherwise every agent is in the journal already.
    if world.tick_count == 0:
        spawn_agents(world, scenario, stop=stop, progress=progress)


def _no_new_agents(world: World, scenario: Scenario) -> list[str]:
    if world.tick_count == 0:  # as in `_start`
        return spawn_agents(world, scenario)
    return list(world.agents())
