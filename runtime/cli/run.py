"""``tickwork run``: a scenario run to the end with a live view and a summary."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from types import FrameType

from rich.console import Console
from rich.live import Live

from runtime.cli.observe import CommandTelemetry, check_metrics_address
from runtime.cli.view import LiveView, RunStats, Summary, render_summary, summarize
from runtime.errors import TickLimitError
from runtime.journal import Journal
from runtime.scenario import Operator, Scenario, build_world, load_scenario, spawn_agents
from runtime.world import World

__all__ = [
    "announce_backend",
    "cmd_run",
    "open_journal",
    "print_summary",
    "run_to_end",
    "run_world",
    "signals_set",
]

_CHUNK_TICKS = 512  # ticks per run_until_idle call: how often a stop request is noticed
_CHUNK_SECS = 0.25


def run_to_end(
    world: World, *, max_ticks: int, time_limit: float | None, stop: threading.Event
) -> str:
    """Tick ``world`` until nothing can move; returns why it stopped.

    ``"finished"`` when nothing can move without outside input, else ``"tick limit"``,
    ``"time limit"`` or ``"stopped"`` (``stop`` was set). Runs in short chunks so that a
    stop request or a limit is noticed within a fraction of a second.
    """
    started = time.monotonic()
    while True:
        if stop.is_set():
            return "stopped"
        left = max_ticks - world.tick_count
        if left <= 0:
            return "tick limit"
        if time_limit is not None and time.monotonic() - started >= time_limit:
            return "time limit"
        try:
            world.run_until_idle(max_ticks=min(left, _CHUNK_TICKS), timeout=_CHUNK_SECS)
        except TickLimitError:
            continue  # still busy: check the limits and go on
        return "finished"


def _ending(world: World, ended: str) -> str:
    if ended != "finished":
        return ended
    if world.hub.pending():
        return "waiting for a person"
    counts = world.counts()
    if all(kind.is_terminal or not n for kind, n in counts.items()):
        return "finished"
    return "idle"


@contextlib.contextmanager
def signals_set(stop: threading.Event, world: World | None = None) -> Iterator[list[str]]:
    """SIGINT and SIGTERM set ``stop`` (and wake ``world``); a second SIGINT aborts."""
    caught: list[str] = []

    def handle(signum: int, frame: FrameType | None) -> None:
        if caught and signum == signal.SIGINT:
            raise KeyboardInterrupt
        caught.append(signal.Signals(signum).name)
        stop.set()
        if world is not None:
            world.wake.notify()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield caught
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def open_journal(path: str | None, scenario: Scenario) -> Journal | None:
    return None if path is None else Journal.create(path, scenario=scenario.header())


def print_summary(summary: Summary, as_json: bool, hint: str = "") -> None:
    if as_json:
        print(json.dumps(summary.to_json(), indent=2))
        return
    console = Console()
    console.print(render_summary(summary))
    if hint:
        console.print(hint, highlight=False)


def _open_prompt_hint(summary: Summary) -> str:
    open_prompts = summary.prompts["open"]
    if not open_prompts:
        return ""
    return (
        f"{open_prompts} prompt(s) were left open with nobody to answer them: give the scenario"
        " an [operator], or run it with `tickwork serve` and answer with `tickwork respond`"
    )


def announce_backend(scenario: Scenario) -> None:
    """Say so before a Dask backend starts: a local cluster takes seconds to come up."""
    settings = scenario.world
    if settings.lane_backend == "dask-local":
        print(f"starting {settings.workers} local dask workers...", file=sys.stderr)
    elif settings.lane_backend == "dask":
        print(f"connecting to dask scheduler {settings.scheduler_address}...", file=sys.stderr)


def cmd_run(args: argparse.Namespace) -> int:
    """``tickwork run``: run a scenario to the end with a live view, then print a summary."""
    check_metrics_address(args.metrics)
    scenario = load_scenario(args.scenario)
    journal = open_journal(args.journal, scenario)
    announce_backend(scenario)
    world = build_world(scenario, journal=journal)
    return run_world(
        world,
        scenario,
        args,
        title=f"tickwork run {scenario.name}",
        journal=args.journal,
        start=partial(spawn_agents, world, scenario),
    )


def run_world(
    world: World,
    scenario: Scenario,
    args: argparse.Namespace,
    *,
    title: str,
    journal: str | None,
    start: Callable[[], object],
) -> int:
    """Run ``world`` to the end with a live view and print a summary; closes the world.

    The scenario's operator is set up first, then ``start()`` (spawning the agents, for a
    new run). ``tickwork run`` and ``tickwork resume`` share it.
    """
    stop = threading.Event()
    telemetry = CommandTelemetry(world, args.metrics)
    try:
        telemetry.start()
        stats = RunStats(world)
        if scenario.operator is not None:
            op = scenario.operator
            Operator(world, delay=op.delay, policy=op.policy, text=op.text)
        start()
        max_ticks = args.ticks if args.ticks is not None else scenario.world.max_ticks
        console = Console(stderr=True)
        live = not args.quiet and console.is_terminal
        view = LiveView(world, title)
        started = time.monotonic()
        shown = Live(view, console=console, refresh_per_second=4, transient=True)
        with signals_set(stop, world) as caught, shown if live else contextlib.nullcontext():
            ended = run_to_end(
                world, max_ticks=max_ticks, time_limit=scenario.world.time_limit, stop=stop
            )
        wall = time.monotonic() - started
        ended = _ending(world, ended)
        if caught:
            ended = f"stopped by {caught[0]}"
        summary = summarize(
            world, stats, scenario=scenario.name, ended=ended, wall_secs=wall, journal=journal
        )
    finally:
        telemetry.close()
        world.close()  # cancels anything still in flight and closes the journal
    summary.extra["scenario_agents"] = scenario.agent_count
    print_summary(summary, args.json, _open_prompt_hint(summary))
    return 130 if caught else 0
