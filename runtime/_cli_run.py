"""The ``tickwork`` commands that run something: ``run``, ``serve``, ``replay``, ``validate``."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from components import PromptOpened

from ._operator import Operator
from .control import ControlServer, StateDir, default_state_dir
from .errors import ReplayDivergence, ScenarioError, TickLimitError
from .journal import Journal
from .replay import replay
from .scenario import Scenario, build_world, load_scenario, spawn_agents
from .view import LiveView, RunStats, Summary, render_summary, summarize
from .world import TickReport, World

__all__ = ["cmd_replay", "cmd_run", "cmd_serve", "cmd_validate", "run_to_end"]

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
def _signals_set(stop: threading.Event, world: World | None = None) -> Iterator[list[str]]:
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


def _open_journal(path: str | None, scenario: Scenario) -> Journal | None:
    return None if path is None else Journal.create(path, scenario=scenario.header())


def _print_summary(summary: Summary, as_json: bool, hint: str = "") -> None:
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


def _announce_backend(scenario: Scenario) -> None:
    """Say so before a Dask backend starts: a local cluster takes seconds to come up."""
    settings = scenario.world
    if settings.lane_backend == "dask-local":
        print(f"starting {settings.workers} local dask workers...", file=sys.stderr)
    elif settings.lane_backend == "dask":
        print(f"connecting to dask scheduler {settings.scheduler_address}...", file=sys.stderr)


def cmd_run(args: argparse.Namespace) -> int:
    """``tickwork run``: run a scenario to the end with a live view, then print a summary."""
    scenario = load_scenario(args.scenario)
    journal = _open_journal(args.journal, scenario)
    _announce_backend(scenario)
    world = build_world(scenario, journal=journal)
    stop = threading.Event()
    try:
        stats = RunStats(world)
        if scenario.operator is not None:
            op = scenario.operator
            Operator(world, delay=op.delay, policy=op.policy, text=op.text)
        spawn_agents(world, scenario)
        max_ticks = args.ticks if args.ticks is not None else scenario.world.max_ticks
        console = Console(stderr=True)
        live = not args.quiet and console.is_terminal
        view = LiveView(world, f"tickwork run {scenario.name}")
        started = time.monotonic()
        shown = Live(view, console=console, refresh_per_second=4, transient=True)
        with _signals_set(stop, world) as caught, shown if live else contextlib.nullcontext():
            ended = run_to_end(
                world, max_ticks=max_ticks, time_limit=scenario.world.time_limit, stop=stop
            )
        wall = time.monotonic() - started
        ended = _ending(world, ended)
        if caught:
            ended = f"stopped by {caught[0]}"
        summary = summarize(
            world, stats, scenario=scenario.name, ended=ended, wall_secs=wall, journal=args.journal
        )
    finally:
        world.close()  # cancels anything still in flight and closes the journal
    summary.extra["scenario_agents"] = scenario.agent_count
    _print_summary(summary, args.json, _open_prompt_hint(summary))
    return 130 if caught else 0


def _all_terminal(world: World) -> bool:
    counts = world.counts()
    total = sum(counts.values())
    known = sum(1 for _ in world.agents())
    return total >= known and total == sum(n for k, n in counts.items() if k.is_terminal)


class _PromptPrinter:
    """Tells the person at the ``serve`` terminal about each prompt that opens."""

    LIMIT = 20

    def __init__(self, world: World, state_flag: str) -> None:
        self._shown = 0
        self._flag = state_flag
        world.observe(self)

    def __call__(self, report: TickReport, inputs: list[tuple[int, object]]) -> None:
        for _, item in inputs:
            if type(item) is not PromptOpened or self._shown > self.LIMIT:
                continue
            assert isinstance(item, PromptOpened)
            self._shown += 1
            if self._shown > self.LIMIT:
                print("(more prompts: list them with `tickwork respond`)", file=sys.stderr)
                continue
            request = item.request
            choices = f" [{' / '.join(request.choices)}]" if request.choices else ""
            print(
                f"prompt {request.id} from {item.agent_id}: {request.prompt}{choices}\n"
                f"  answer with: tickwork respond{self._flag} {request.id} VALUE",
                file=sys.stderr,
                flush=True,
            )


def cmd_serve(args: argparse.Namespace) -> int:
    """``tickwork serve``: run a scenario with the control channel open until it ends."""
    scenario = load_scenario(args.scenario)
    state = StateDir(args.state_dir if args.state_dir else default_state_dir())
    state.prepare()
    state.acquire()  # before anything is created: a second serve changes nothing
    world = None
    server = None
    stop = threading.Event()
    try:
        _announce_backend(scenario)
        world = build_world(scenario, journal=_open_journal(args.journal, scenario))
        stats = RunStats(world)
        if scenario.operator is not None:
            op = scenario.operator
            Operator(world, delay=op.delay, policy=op.policy, text=op.text)
        if not args.quiet:
            _PromptPrinter(world, f" --state-dir {args.state_dir}" if args.state_dir else "")
        server = ControlServer(world, state, stats=stats.snapshot)
        server.start()
        if _prompts_expire_at_once(scenario):
            print(
                "note: on a virtual clock time skips ahead while nothing moves, so an open"
                " prompt expires at once; set interaction_timeout_secs = 0 to wait for answers",
                file=sys.stderr,
            )
        agents = spawn_agents(world, scenario)
        started = time.monotonic()
        with _signals_set(stop) as caught:
            world.start()
            print(
                f"serving {scenario.name} ({len(agents)} agents) on {state.socket} (Ctrl-C stops)",
                file=sys.stderr,
                flush=True,
            )
            while not stop.wait(0.05):
                if _all_terminal(world):
                    break
        ended = f"stopped by {caught[0]}" if caught else "every agent is done"
        server.close()
        world.stop()
        summary = summarize(
            world,
            stats,
            scenario=scenario.name,
            ended=ended,
            wall_secs=time.monotonic() - started,
            journal=args.journal,
        )
    finally:
        if server is not None:
            server.close()
        if world is not None:
            world.close()  # cancels in-flight work, settles prompts, closes the journal
        state.release()
    summary.extra["scenario_agents"] = scenario.agent_count
    _print_summary(summary, args.json)
    return 0


def _prompts_expire_at_once(scenario: Scenario) -> bool:
    settings, operator = scenario.world, scenario.operator
    nobody = operator is None or operator.policy == "none"
    return settings.clock == "virtual" and settings.interaction_timeout_secs > 0 and nobody


def cmd_replay(args: argparse.Namespace) -> int:
    """``tickwork replay``: replay a journal and report whether every tick matched."""
    console = Console(stderr=True)
    show = not args.quiet and console.is_terminal
    progress = Progress(
        TextColumn("replaying"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("ticks"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
    task = progress.add_task("replay", total=None)
    update: Callable[[int, int], None] = lambda done, total: progress.update(  # noqa: E731
        task, completed=done, total=total
    )
    try:
        with progress if show else contextlib.nullcontext():
            report = replay(args.journal, progress=update if show else None)
    except ReplayDivergence as exc:
        print(f"tickwork: replay of {args.journal} diverged\n{exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"match": True, **_report_data(report)}, indent=2))
    else:
        print(
            f"replay matched: {report.ticks} ticks, {report.inputs} inputs, {report.agents}"
            f" agents in {report.wall_time:.2f} s ({args.journal})"
        )
    return 0


def _report_data(report: Any) -> dict[str, Any]:
    return {
        "ticks": report.ticks,
        "inputs": report.inputs,
        "agents": report.agents,
        "wall_secs": report.wall_time,
        "journal": report.path,
    }


def cmd_validate(args: argparse.Namespace) -> int:
    """``tickwork validate``: check scenarios and report every problem; nothing runs."""
    problems: list[str] = []
    for path in args.scenarios:
        try:
            scenario = load_scenario(path)
        except ScenarioError as exc:
            problems.extend(exc.problems)
            continue
        print(f"{path}: ok ({_describe(scenario)})")
    if problems:
        raise ScenarioError(problems)
    return 0


def _describe(scenario: Scenario) -> str:
    parts = [
        f"{_count(scenario.agent_count, 'agent')} in {_count(len(scenario.agents), 'group')}",
        f"{_count(len(scenario.tools), 'tool')}, {_count(len(scenario.models), 'model')}",
    ]
    op = scenario.operator
    if op is not None:
        parts.append(f"operator: {op.policy} after {op.delay:g} s")
    parts.append(f"{scenario.world.clock} clock")
    return "; ".join(parts)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
