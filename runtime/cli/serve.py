"""``tickwork serve``: a scenario run with the control channel open."""

from __future__ import annotations

import argparse
import shlex
import sys
import threading
import time
from collections.abc import Callable

from components import InteractionKind, InteractionRequest, PromptOpened
from runtime.cli.observe import CommandTelemetry, check_metrics_address
from runtime.cli.run import (
    announce_backend,
    discard_journal,
    exit_status,
    open_journal,
    print_summary,
    signals_set,
)
from runtime.cli.view import RunStats, summarize
from runtime.control import ControlServer, StateDir, default_state_dir
from runtime.journal import Journal
from runtime.scenario import Operator, Scenario, build_world, load_scenario, spawn_agents
from runtime.scenario.check import escape_controls
from runtime.world import TickReport, World

__all__ = ["cmd_serve", "serve_world"]


def _all_terminal(world: World) -> bool:
    counts = world.counts()
    total = sum(counts.values())
    known = sum(1 for _ in world.agents())
    return total >= known and total == sum(n for k, n in counts.items() if k.is_terminal)


_SAY = threading.Lock()


def _say(text: str) -> None:
    """Write one whole line to stderr: the tick thread and the main thread both print, and
    ``print`` writes the text and its newline apart, so two lines could run together."""
    with _SAY:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


def _how_to_answer(request: InteractionRequest, flag: str) -> str:
    """The ``tickwork respond`` line that fits ``request``'s kind."""
    if request.kind in (InteractionKind.CONFIRM, InteractionKind.TOOL_APPROVAL):
        how = "--approve | --deny"
    elif request.kind is InteractionKind.CHOICE:
        how = f"--choice 0..{len(request.choices) - 1}"
    else:
        how = "VALUE"
    return f"tickwork respond{flag} {request.id} {how}"


class _PromptPrinter:
    """Tells the person at the ``serve`` terminal about each prompt that opens (and, for a
    resumed run, about those already open)."""

    LIMIT = 20

    def __init__(self, world: World, state_flag: str) -> None:
        self._shown = 0
        self._flag = state_flag
        for opened in world.hub.opened():
            self._show(opened)
        world.observe(self)

    def __call__(self, report: TickReport, inputs: list[tuple[int, object]]) -> None:
        for _, item in inputs:
            if type(item) is PromptOpened:
                self._show(item)

    def _show(self, item: PromptOpened) -> None:
        if self._shown > self.LIMIT:
            return
        self._shown += 1
        if self._shown > self.LIMIT:
            _say("(more prompts: list them with `tickwork respond`)")
            return
        request = item.request
        choices = f" [{' / '.join(request.choices)}]" if request.choices else ""
        text = f"{request.prompt}{choices}"
        _say(
            f"prompt {request.id} from {item.agent_id}: {escape_controls(text)}\n"
            f"  answer with: {_how_to_answer(request, self._flag)}"
        )


def cmd_serve(args: argparse.Namespace) -> int:
    """``tickwork serve``: run a scenario with the control channel open until it ends."""
    check_metrics_address(args.metrics)
    scenario = load_scenario(args.scenario)

    opened: list[Journal] = []

    def make_world() -> World:
        announce_backend(scenario)
        journal = open_journal(args.journal, scenario, force=args.force)
        if journal is not None:
            opened.append(journal)
        return build_world(scenario, journal=journal)

    try:
        return serve_world(make_world, scenario, args, journal=args.journal, start=spawn_agents)
    except BaseException:
        # Refused before its first tick (a --metrics port taken, a spawn refused), or
        # stopped there by a Ctrl-C or an internal error: as `tickwork run`, "nothing was
        # run" leaves no journal behind, or the same command, corrected, would be refused
        # for the file.
        for journal in opened:
            if journal.ticks == 0:
                discard_journal(journal)
        raise


def _close_all(
    server: ControlServer | None,
    telemetry: CommandTelemetry | None,
    world: World | None,
    state: StateDir,
) -> None:
    """Close what a serve opened, each whatever the one before raised."""
    try:
        if server is not None:
            server.close()
        if telemetry is not None:
            telemetry.close()
    finally:
        try:
            if world is not None:
                world.close()  # cancels in-flight work, settles prompts, closes the journal
        finally:
            state.release(remove=True)


def serve_world(
    make_world: Callable[[], World],
    scenario: Scenario,
    args: argparse.Namespace,
    *,
    journal: str | None,
    start: Callable[[World, Scenario], list[str]],
) -> int:
    """Serve the world ``make_world()`` builds until every agent is done; closes it.

    The state dir is taken before the world is made (a second serve changes nothing);
    ``start(world, scenario)`` returns the agents it started. ``tickwork serve`` and
    ``tickwork resume --serve`` share it.
    """
    state = StateDir(args.state_dir if args.state_dir else default_state_dir())
    state.prepare()
    state.acquire()  # before anything is created: a second serve changes nothing
    world = None
    server = None
    telemetry = None
    stop = threading.Event()
    try:
        world = make_world()
        telemetry = CommandTelemetry(world, args.metrics)
        telemetry.start()
        stats = RunStats(world)
        if scenario.operator is not None:
            op = scenario.operator
            Operator(world, delay=op.delay, policy=op.policy, text=op.text)
        if not args.quiet:
            where = f" --state-dir {shlex.quote(args.state_dir)}" if args.state_dir else ""
            _PromptPrinter(world, where)  # the hint pastes as it is, spaces and all
        server = ControlServer(world, state, stats=stats.snapshot)
        server.start()
        if _prompts_expire_at_once(scenario):
            _say(
                "note: on a virtual clock time skips ahead while nothing moves, so an open"
                " prompt expires at once; set interaction_timeout_secs = 0 to wait for answers"
            )
        agents = start(world, scenario)
        started = time.monotonic()
        with signals_set(stop) as caught:
            # Before the loop starts: its prompt notices come from the tick thread, and
            # after start() one could print first, even mid-line of this banner.
            _say(
                escape_controls(
                    f"serving {scenario.name} ({len(agents)} agents) on {state.socket}"
                    " (Ctrl-C stops)"
                )
            )
            world.start()
            while not stop.wait(0.05):
                # A loop that died (its journal could not be written) ticks no more: the
                # serve ends, and `world.stop()` below raises why (it waited for Ctrl-C,
                # taking commands that no tick would ever apply).
                if _all_terminal(world) or not world.running:
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
            journal=journal,
        )
    finally:
        _close_all(server, telemetry, world, state)
    summary.extra["scenario_agents"] = scenario.agent_count
    print_summary(summary, args.json)
    return exit_status(summary, caught)


def _prompts_expire_at_once(scenario: Scenario) -> bool:
    settings, operator = scenario.world, scenario.operator
    nobody = operator is None or operator.policy == "none"
    return settings.clock == "virtual" and settings.interaction_timeout_secs > 0 and nobody
