"""``tickwork serve``: a scenario run with the control channel open."""

from __future__ import annotations

import argparse
import sys
import threading
import time

from components import PromptOpened
from runtime.cli.run import announce_backend, open_journal, print_summary, signals_set
from runtime.cli.view import RunStats, summarize
from runtime.control import ControlServer, StateDir, default_state_dir
from runtime.scenario import Operator, Scenario, build_world, load_scenario, spawn_agents
from runtime.world import TickReport, World

__all__ = ["cmd_serve"]


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
        announce_backend(scenario)
        world = build_world(scenario, journal=open_journal(args.journal, scenario))
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
        with signals_set(stop) as caught:
            # Before the loop starts: its prompt notices come from the tick thread, and
            # after start() one could print first, even mid-line of this banner.
            print(
                f"serving {scenario.name} ({len(agents)} agents) on {state.socket} (Ctrl-C stops)",
                file=sys.stderr,
                flush=True,
            )
            world.start()
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
    print_summary(summary, args.json)
    return 0


def _prompts_expire_at_once(scenario: Scenario) -> bool:
    settings, operator = scenario.world, scenario.operator
    nobody = operator is None or operator.policy == "none"
    return settings.clock == "virtual" and settings.interaction_timeout_secs > 0 and nobody
