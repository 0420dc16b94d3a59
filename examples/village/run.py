"""Run the village: ``python examples/village/run.py --frames 300``.

Each frame the host ticks the world once, answers the questions villagers ask the player
(a simulated player says yes), and draws the map with rich. ``--real`` runs at 30 frames a
second of real time; by default time is virtual and frames run as fast as they can.
``--journal FILE`` records the run; ``tickwork replay FILE --path examples/village``
replays it (the journal names the setup function; ``--path`` allows its import).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `village`, by that name

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.text import Text
from village import model, populate, render, setup

from runtime import InteractionResponse, Journal, ManualClock, MonotonicClock, World

FPS = 30


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=300, help="frames to run (default 300)")
    parser.add_argument("--npcs", type=int, default=1000, help="villagers (default 1000)")
    parser.add_argument("--real", action="store_true", help="30 frames a second, real time")
    parser.add_argument("--journal", metavar="FILE", help="record the run to FILE")
    parser.add_argument("--quiet", action="store_true", help="no map, only the summary")
    args = parser.parse_args(argv)
    if args.frames < 1 or args.npcs < 1:
        parser.error("--frames and --npcs must be >= 1")
    clock = MonotonicClock() if args.real else ManualClock()
    journal = Journal.create(args.journal, setup="village:setup") if args.journal else None
    console = Console()
    with World(seed=1, clock=clock, models={"default": model()}, journal=journal) as world:
        setup(world)
        populate(world, args.npcs)
        started = time.perf_counter()
        live = None if args.quiet or not console.is_terminal else Live(console=console)
        if live is not None:
            live.start()
        try:
            for frame in range(args.frames):
                frame_start = time.perf_counter()
                world.tick()
                for _agent, request in world.hub.pending():  # the player, always keen
                    world.hub.answer(InteractionResponse(request.id, "yes", choice=0))
                if live is not None:
                    live.update(_view(world, frame), refresh=True)
                if args.real:
                    time.sleep(max(0.0, 1 / FPS - (time.perf_counter() - frame_start)))
                else:
                    clock.advance(1 / FPS)
        finally:
            if live is not None:
                live.stop()
        wall = time.perf_counter() - started
        if live is None and not args.quiet:
            console.print(_view(world, args.frames - 1))
        counts = world.counts()
        print(
            f"village: {args.frames} frames, {args.npcs} villagers, {wall:.2f} s wall"
            f" ({args.frames / wall:.0f} frames/s); "
            + ", ".join(f"{n} {k.value}" for k, n in counts.items() if n)
            + f"; digest {world.digest()}"
        )
    return 0


def _view(world: World, frame: int) -> Panel:
    grid, bubbles = render(world)
    said = ", ".join(bubbles[:6]) or "…"
    return Panel(
        Group(Text(grid), Text(f"saying: {said}", overflow="ellipsis", no_wrap=True)),
        title=f"village · frame {frame + 1} · tick {world.tick_count}",
        width=68,
    )


if __name__ == "__main__":
    sys.exit(main())
