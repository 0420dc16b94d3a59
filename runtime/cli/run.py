"""``tickwork run``: a scenario run to the end with a live view and a summary."""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from rich.console import Console
from rich.live import Live

from runtime.cli.observe import CommandTelemetry, check_metrics_address
from runtime.cli.view import LiveView, RunStats, Summary, render_summary, summarize
from runtime.errors import TickLimitError
from runtime.journal import Journal
from runtime.scenario import Operator, Scenario, build_world, load_scenario, spawn_agents
from runtime.scenario.check import escape_controls
from runtime.world import World, sigint

__all__ = [
    "announce_backend",
    "cmd_run",
    "exit_status",
    "open_journal",
    "print_summary",
    "run_to_end",
    "run_world",
    "short_collections",
    "signals_set",
]

_CHUNK_SECS = 0.1  # a stop request is noticed within about this (or one tick, if longer)
_MAX_CHUNK_TICKS = 512


def run_to_end(
    world: World, *, max_ticks: int, time_limit: float | None, stop: threading.Event
) -> str:
    """Tick ``world`` until nothing can move; returns why it stopped.

    ``"finished"`` when nothing can move without outside input, else ``"tick limit"``,
    ``"time limit"`` or ``"stopped"`` (``stop`` was set). Runs in short chunks so that a
    stop request or a limit is noticed within a fraction of a second.
    """
    started = time.monotonic()
    chunk = 1  # ticks per run_until_idle call, sized so that one call takes ~_CHUNK_SECS
    while True:
        if stop.is_set():
            return "stopped"
        left = max_ticks - world.tick_count
        if left <= 0:
            return "tick limit"
        if time_limit is not None and time.monotonic() - started >= time_limit:
            return "time limit"
        before, began = world.tick_count, time.monotonic()
        try:
            world.run_until_idle(max_ticks=min(left, chunk), timeout=_CHUNK_SECS)
        except TickLimitError:
            # Still busy: size the next chunk by how long these ticks took, so a stop is
            # seen within a fraction of a second whether a tick takes 10 µs or 0.1 s.
            took, ran = time.monotonic() - began, world.tick_count - before
            per_tick = took / ran if ran else _CHUNK_SECS
            chunk = max(1, min(_MAX_CHUNK_TICKS, int(_CHUNK_SECS / max(per_tick, 1e-9))))
            continue
        return "finished"


def _ending(world: World, ended: str) -> str:
    if ended != "finished":
        return ended
    if world.hub.stats().open:
        return "waiting for a person"
    counts = world.counts()
    if all(kind.is_terminal or not n for kind, n in counts.items()):
        return "finished"
    return "idle"


@contextlib.contextmanager
def signals_set(stop: threading.Event, world: World | None = None) -> Iterator[list[str]]:
    """SIGINT, SIGTERM and SIGHUP set ``stop`` (and wake ``world``); a second SIGINT aborts.

    Inside `sigint.abandoning()` (``run_world``'s run) the first one also raises
    ``KeyboardInterrupt`` at once, abandoning the tick in progress (see `runtime.world.sigint`).
    """
    caught: list[str] = []

    def handle(signum: int, frame: FrameType | None) -> None:
        if sigint.rekicked():
            return
        if caught and signum == signal.SIGINT:
            raise KeyboardInterrupt
        caught.append(signal.Signals(signum).name)
        stop.set()
        if world is not None:
            world.wake.notify()
        sigint.interrupt_now()

    def unraisable(report: Any) -> None:
        # Our Ctrl-C, raised inside code whose exceptions C ignores (a `__del__`, a gc
        # callback): the world raises it again (`sigint.rekicked`), so it is no error.
        if not (caught and isinstance(report.exc_value, KeyboardInterrupt)):
            hook(report)

    # SIGHUP too (the terminal closed, the ssh session dropped): its default ended the
    # process at once, and the tools' commands, in sessions of their own, ran on.
    stopping = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, handle) for sig in stopping}
    hook, sys.unraisablehook = sys.unraisablehook, unraisable
    try:
        yield caught
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sys.unraisablehook = hook


@contextlib.contextmanager
def short_collections() -> Iterator[None]:
    """While the block runs, each full garbage collection freezes what survived it.

    Python's full collections walk the whole heap in C, where no signal handler runs: with
    200,000 agents one took up to 1.7 s (and 14 of them 7 s of a 26 s first tick), so
    Ctrl-C waited. Frozen (`gc.freeze`), the survivors are left out of the next ones, which
    walk only what is new since. Objects are still freed when their last reference goes;
    a reference cycle that dies after it was frozen is left for the process's exit, which
    a run of a scenario, whose agents are bounded, can afford (measured: the same peak
    memory for 50,000 agents and for examples/factory.toml).
    """

    def freeze_survivors(phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] == 2:
            gc.freeze()

    gc.callbacks.append(freeze_survivors)
    try:
        yield
    finally:
        gc.callbacks.remove(freeze_survivors)


def discard_journal(journal: Journal) -> None:
    """Close ``journal`` and remove its files: a run refused before its first tick."""
    journal.close()
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(OSError):
            os.unlink(f"{journal.path}{suffix}")


def open_journal(path: str | None, scenario: Scenario, *, force: bool = False) -> Journal | None:
    """A new journal at ``path`` (None: no journal); ``force`` overwrites an existing file.

    Raises:
        JournalError: the path is a directory, exists (without ``force``), or cannot be
            written (the message names the reason).
    """
    if path is None:
        return None
    return Journal.create(path, scenario=scenario.header(), overwrite=force)


def exit_status(summary: Summary, caught: list[str]) -> int:
    """The exit status of a run that ended as ``summary`` says (see the README's table).

    128 + the signal's number when a signal stopped it (130 for Ctrl-C), 1 when any agent
    ended in error, else 0.
    """
    if caught:
        return 128 + int(signal.Signals[caught[0]])
    return 1 if summary.agents.get("error") else 0


def print_summary(summary: Summary, as_json: bool, hint: str = "") -> None:
    if as_json:
        print(json.dumps(summary.to_json(), indent=2))
        return
    console = Console()
    console.print(render_summary(summary))
    if hint:
        console.print(hint, highlight=False, markup=False)  # "[operator]" is no markup tag


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
        address = escape_controls(str(settings.scheduler_address))
        print(f"connecting to dask scheduler {address}...", file=sys.stderr)


def cmd_run(args: argparse.Namespace) -> int:
    """``tickwork run``: run a scenario to the end with a live view, then print a summary."""
    check_metrics_address(args.metrics)
    scenario = load_scenario(args.scenario)
    stop = threading.Event()
    # The handlers go in before the journal is created: a Ctrl-C from here on stops the
    # run at a tick boundary, so the journal always holds its header and whole ticks.
    with signals_set(stop) as caught:
        journal = open_journal(args.journal, scenario, force=args.force)
        world = None
        try:
            announce_backend(scenario)
            world = build_world(scenario, journal=journal)
            return run_world(
                world,
                scenario,
                args,
                title=f"tickwork run {scenario.name}",
                journal=args.journal,
                start=lambda view: spawn_agents(world, scenario, stop=stop, progress=view.spawned),
                stop=stop,
                caught=caught,
                spawning=scenario.agent_count,
            )
        except BaseException:
            # Refused before its first tick (a --metrics port taken, a Dask scheduler not
            # there, a spawn refused), or stopped there by an internal error: "nothing
            # was run" leaves no journal behind either, or the same command, corrected,
            # would be refused for the file. (A Ctrl-C stops the run, which ends as any
            # stopped run does, keeping its journal.)
            if journal is not None and (world is None or world.tick_count == 0):
                discard_journal(journal)
            raise


def run_world(
    world: World,
    scenario: Scenario,
    args: argparse.Namespace,
    *,
    title: str,
    journal: str | None,
    start: Callable[[LiveView], object],
    stop: threading.Event,
    caught: list[str],
    spawning: int = 0,
) -> int:
    """Run ``world`` to the end with a live view and print a summary; closes the world.

    Returns the exit status. The scenario's operator is set up first, then ``start(view)``
    (spawning the agents, for a new run, showing progress in ``view``). ``stop`` and
    ``caught`` come from the caller's `signals_set`. ``tickwork run`` and ``tickwork
    resume`` share it.
    """
    telemetry = CommandTelemetry(world, args.metrics)
    try:
        telemetry.start()
        stats = RunStats(world)
        if scenario.operator is not None:
            op = scenario.operator
            Operator(world, delay=op.delay, policy=op.policy, text=op.text)
        max_ticks = args.ticks if args.ticks is not None else scenario.world.max_ticks
        console = Console(stderr=True)
        live = not args.quiet and console.is_terminal
        view = LiveView(world, title, spawning=spawning)
        started = time.monotonic()
        shown = Live(view, console=console, refresh_per_second=4, transient=True)
        with shown if live else contextlib.nullcontext():
            # Ctrl-C stops at once, even inside a tick of 200,000 agents: that tick is
            # abandoned, and the journal ends at the last committed one (DESIGN.md).
            abandons = sigint.ticks_abandoned()
            try:
                with sigint.abandoning(), short_collections():
                    start(view)
                    ended = run_to_end(
                        world, max_ticks=max_ticks, time_limit=scenario.world.time_limit, stop=stop
                    )
            except KeyboardInterrupt:
                if not caught:
                    raise
                ended = "stopped"
        wall = time.monotonic() - started
        ended = _ending(world, ended)
        if caught:
            ended = f"stopped by {caught[0]}"
        half_ticked = sigint.ticks_abandoned() != abandons
        summary = summarize(
            world,
            stats,
            scenario=scenario.name,
            ended=ended,
            wall_secs=wall,
            journal=journal,
            digest=not half_ticked,
        )
    finally:
        try:
            telemetry.close()
        finally:
            world.close()  # cancels anything still in flight and closes the journal
    summary.extra["scenario_agents"] = scenario.agent_count
    print_summary(summary, args.json, _open_prompt_hint(summary))
    return exit_status(summary, caught)
