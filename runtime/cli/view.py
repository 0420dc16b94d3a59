"""What a person sees of a run: the live view while it runs, and the summary after.

``RunStats`` watches the inputs every tick applies (``world.observe``) and keeps the numbers
a summary needs: tool-job and model-call latencies (``ToolOutcome.elapsed``), and how long
each prompt waited (``PromptSettled.at - opened_at``) and how it ended. ``LiveView`` is a
rich renderable that reads the world afresh each time rich refreshes it (agents by status,
lane gauges, open prompts, ticks per second). ``summarize`` freezes it all into a
``Summary``, printed as a table or, for machines, as JSON.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from components import PromptOpened, PromptSettled, Settlement, StatusKind
from runtime.lane import BackendInfo, ToolOutcome
from runtime.scenario.check import escape_controls
from runtime.world import TickReport, World

__all__ = ["Latency", "LiveView", "RunStats", "Summary", "render_summary", "summarize"]

_PERCENTILES = (50, 90, 99)


@dataclass(frozen=True, slots=True)
class Latency:
    """How many things took how long, in seconds (None when there were none)."""

    count: int = 0
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, samples: list[float]) -> Latency:
        """The percentiles of ``samples`` (``numpy.percentile``, linear interpolation)."""
        if not samples:
            return cls()
        values = np.asarray(samples, dtype=float)
        p50, p90, p99 = (float(v) for v in np.percentile(values, _PERCENTILES))
        return cls(len(samples), p50, p90, p99, float(values.max()))

    def describe(self) -> str:
        """``12 · p50 3.1 ms  p90 ...`` for a table cell."""
        if not self.count:
            return "0"
        parts = [f"p{p} {_duration(getattr(self, f'p{p}'))}" for p in _PERCENTILES]
        return f"{self.count} · " + "  ".join(parts) + f"  max {_duration(self.max)}"


class RunStats:
    """Counts what a run's ticks applied; attach with ``RunStats(world)``. Thread-safe reads."""

    def __init__(self, world: World) -> None:
        self._lock = threading.Lock()
        self.tool_elapsed: list[float] = []
        self.model_elapsed: list[float] = []
        self.prompt_waits: list[float] = []
        self.opened = 0
        self.settled = dict.fromkeys(Settlement, 0)
        world.observe(self._on_tick, every_tick=False)  # counts only what inputs carried

    def _on_tick(self, report: TickReport, inputs: list[tuple[int, object]]) -> None:
        if not inputs:
            return
        with self._lock:
            for _, item in inputs:
                kind = type(item)
                if kind is ToolOutcome:
                    assert isinstance(item, ToolOutcome)
                    # A model call's one result carries the request's own id; a tool batch's
                    # results carry their calls' ids.
                    results = item.results
                    is_model = len(results) == 1 and results[0].call_id == item.batch_id
                    (self.model_elapsed if is_model else self.tool_elapsed).append(item.elapsed)
                elif kind is PromptOpened:
                    self.opened += 1
                elif kind is PromptSettled:
                    assert isinstance(item, PromptSettled)
                    self.settled[item.how] += 1
                    self.prompt_waits.append(item.at - item.opened_at)

    def snapshot(self) -> dict[str, Any]:
        """The counters and latencies so far, as plain data."""
        with self._lock:
            tools, models = list(self.tool_elapsed), list(self.model_elapsed)
            waits, settled, opened = list(self.prompt_waits), dict(self.settled), self.opened
        return {
            "tool_jobs": asdict(Latency.of(tools)),
            "model_calls": asdict(Latency.of(models)),
            "prompts": {
                "opened": opened,
                **{how.value: n for how, n in settled.items()},
                "open": opened - sum(settled.values()),
                "wait": asdict(Latency.of(waits)),
            },
        }


@dataclass(frozen=True, slots=True)
class Summary:
    """The end of a run: how agents ended, how long it took, and how work and prompts went.

    ``ended`` says why the run stopped: ``"finished"`` (nothing left that can move),
    ``"tick limit"``, ``"time limit"``, ``"stopped"`` (a signal) or ``"all terminal"``.
    """

    scenario: str
    ended: str
    agents: dict[str, int]
    total_agents: int
    ticks: int
    wall_secs: float
    world_secs: float
    tool_jobs: dict[str, Any]
    model_calls: dict[str, Any]
    prompts: dict[str, Any]
    journal: str | None = None
    backend: str = ""
    errors: list[dict[str, str]] = field(default_factory=list)  # every failed agent's message
    digest: str = ""  # the world's state digest at the end
    lockstep: bool = False  # whether outcomes landed in lockstep (then: same every run)
    tokens: dict[str, dict[str, int]] = field(default_factory=dict)  # per model: in, out
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The summary as plain JSON data."""
        data = asdict(self)
        data.update(data.pop("extra"))
        return data


def summarize(
    world: World,
    stats: RunStats,
    *,
    scenario: str,
    ended: str,
    wall_secs: float,
    started_at: float = 0.0,
    journal: str | None = None,
    digest: bool = True,
) -> Summary:
    """Freeze the run so far into a ``Summary``; ``digest=False`` leaves the digest out
    (a world whose tick was abandoned has none worth folding: O(agents) to compute)."""
    counts = world.counts()
    data = stats.snapshot()
    return Summary(
        scenario=scenario,
        ended=ended,
        agents={kind.value: n for kind, n in counts.items() if n},
        total_agents=sum(counts.values()),
        ticks=world.tick_count,
        wall_secs=round(wall_secs, 6),
        world_secs=round(world.now - started_at, 6),
        tool_jobs=data["tool_jobs"],
        model_calls=data["model_calls"],
        prompts=data["prompts"],
        journal=journal,
        backend=describe_backend(world.backend_info()),
        errors=_errors(world) if counts[StatusKind.ERROR] else [],
        digest=world.digest() if digest else "",
        lockstep=world.lockstep,
        tokens={
            name: {"in": usage.input_tokens, "out": usage.output_tokens}
            for name, usage in world.token_usage().items()
        },
    )


def _errors(world: World) -> list[dict[str, str]]:
    """Each agent that ended in error, with its message, in spawn order."""
    found = []
    for agent_id in world.agents():
        status = world.status(agent_id)
        if status.kind is StatusKind.ERROR:
            found.append({"agent": agent_id, "message": status.message or ""})
    return found


def render_summary(summary: Summary) -> RenderableType:
    """The summary as a table for a terminal."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    agents = ", ".join(f"{n} {kind}" for kind, n in summary.agents.items()) or "none"
    table.add_row("agents", f"{summary.total_agents}: {agents}")
    table.add_row("ticks", f"{summary.ticks} in {summary.wall_secs:.2f} s wall time")
    table.add_row("world time", f"{summary.world_secs:.2f} s")
    table.add_row("tool jobs", Latency(**summary.tool_jobs).describe())
    table.add_row("model calls", Latency(**summary.model_calls).describe())
    for name, tokens in summary.tokens.items():
        table.add_row("tokens", f"{name}: {tokens['in']:,} in · {tokens['out']:,} out")
    prompts = summary.prompts
    ended = ", ".join(
        f"{prompts[key]} {key}"
        for key in ("answered", "cancelled", "expired", "open")
        if prompts[key]
    )
    line = f"{prompts['opened']} opened" + (f" ({ended})" if ended else "")
    table.add_row("prompts", line)
    if prompts["wait"]["count"]:
        table.add_row("prompt wait", Latency(**prompts["wait"]).describe())
    if summary.backend and not summary.backend.startswith("threads"):
        table.add_row("tool runner", summary.backend)
    if summary.journal:
        table.add_row("journal", Text(summary.journal))
    if summary.digest:
        how = "lockstep: the same on every run" if summary.lockstep else "as soon as possible"
        table.add_row("digest", f"{summary.digest} ({how})")
    for n, error in enumerate(summary.errors[:SHOWN_ERRORS]):
        # Text, not a markup string: an error message may hold "[...]" or escapes.
        shown = Text(f"{error['agent']}: {escape_controls(error['message'])}", style="red")
        table.add_row("errors" if n == 0 else "", shown)
    if len(summary.errors) > SHOWN_ERRORS:
        more = len(summary.errors) - SHOWN_ERRORS
        table.add_row("", f"... and {more} more (--json lists them all)")
    title = Text(escape_controls(f"{summary.scenario}: {summary.ended}"))
    return Panel(table, title=title, title_align="left", expand=False)


SHOWN_ERRORS = 5
"""Agent errors the summary shows (``--json`` has them all)."""


class LiveView:
    """A rich renderable of a running world, re-read from the world at every refresh."""

    def __init__(
        self, world: World, title: str, *, max_prompts: int = 5, spawning: int = 0
    ) -> None:
        self._world = world
        self._spawning = spawning  # agents to spawn before the run starts
        self._spawned = 0
        self._title = title
        self._max_prompts = max_prompts
        self._started = time.monotonic()
        self._last = (self._started, world.tick_count)
        self._rate = 0.0

    def spawned(self, n: int) -> None:
        """Note that ``n`` of the agents to spawn are spawned (shown until all are)."""
        self._spawned = n

    def _ticks_per_sec(self) -> float:
        now, ticks = time.monotonic(), self._world.tick_count
        then, before = self._last
        if now - then >= 0.2:
            self._rate = (ticks - before) / (now - then)
            self._last = (now, ticks)
        return self._rate

    def __rich__(self) -> RenderableType:
        world = self._world
        counts = world.counts()
        total = sum(counts.values())
        done = sum(n for kind, n in counts.items() if kind.is_terminal)
        agents = Table.grid(padding=(0, 1))
        for kind in StatusKind:
            if counts[kind]:
                agents.add_row(Text(kind.value, style=_STYLE.get(kind, "")), str(counts[kind]))
        lanes = Table("lane", "busy", "queued", "parked", "capacity", "done", box=None)
        for stats in (world.lane.stats(), world.inference_lane.stats()):
            lanes.add_row(
                stats.name,
                str(stats.busy),
                str(stats.queued),
                str(stats.parked),
                str(stats.capacity),
                str(stats.finished),
            )
        backend = Text(f"tool jobs run on: {describe_backend(world.backend_info())}")
        # The count and the few shown, not a copy of every open prompt (O(open) under
        # the hub's lock, at every refresh).
        open_count = world.hub.stats().open
        prompts = Text(f"open prompts: {open_count}")
        first = world.hub.pending(limit=self._max_prompts)
        for agent_id, request in first:
            shown = escape_controls(request.prompt[:60])  # a model's or a tool's text, maybe
            prompts.append(f"\n  {escape_controls(request.id)} ({agent_id}): {shown}")
        if open_count > len(first):
            prompts.append(f"\n  ... and {open_count - len(first)} more")
        lines = list(world.streams.latest_lines().items())[-self._max_prompts :]
        streaming = Text("latest model lines:" if lines else "")
        for agent_id, line in lines:
            streaming.append(f"\n  {agent_id}: {escape_controls(line)[:70]}")
        elapsed = time.monotonic() - self._started
        head = Text(
            f"{done}/{total} agents done · tick {world.tick_count} · "
            f"{self._ticks_per_sec():,.0f} ticks/s · world {world.now:.1f} s · "
            f"wall {elapsed:.1f} s"
        )
        if self._spawned < self._spawning:
            head = Text(
                f"spawning agents: {self._spawned:,}/{self._spawning:,} · wall {elapsed:.1f} s"
            )
        body = Group(head, Text(""), agents, Text(""), lanes, backend, Text(""), prompts, streaming)
        # Text, not a str: rich reads a str title as markup ("demo[/bold]" raised).
        title = Text(escape_controls(self._title))
        return Panel(body, title=title, title_align="left", expand=False)


_STYLE = {
    StatusKind.ACTIVE: "cyan",
    StatusKind.WAITING: "yellow",
    StatusKind.PAUSED: "magenta",
    StatusKind.COMPLETE: "green",
    StatusKind.ERROR: "red",
    StatusKind.CANCELLED: "dim",
}


def describe_backend(info: BackendInfo) -> str:
    """One line about what runs the tool jobs: ``threads · 5 alive`` or a cluster's workers.

    A Dask backend with no workers left is called out: its jobs cannot run.
    """
    if info.kind == "threads":
        return f"threads · {info.workers or 0} alive"
    where = f" {info.address}" if info.address else ""
    if info.workers == 0:
        return f"{info.kind}{where} · NO WORKERS (the cluster is gone)"
    workers = "?" if info.workers is None else str(info.workers)
    threads = "" if info.threads is None else f" · {info.threads} threads"
    return f"{info.kind}{where} · {workers} workers{threads}"


def _duration(secs: float | None) -> str:
    if secs is None:
        return "-"
    if secs < 1.0:
        return f"{secs * 1000:.1f} ms"
    return f"{secs:.2f} s"
