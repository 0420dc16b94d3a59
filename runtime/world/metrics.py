"""A world's figures for operators: gauges read on demand, histograms and counters recorded.

`World.metrics()` returns a `WorldMetrics` snapshot: how many agents are in each status, each
lane's counters, how many prompts are open (read when asked), and, while recording is on,
histograms of tick time, tool-batch and model-call time and prompt waits, and token counts.
Recording is a `MetricsRecorder` the tick feeds (live ticks only, like a probe): it costs
nothing until switched on (``World.record_metrics()``, which ``runtime.telemetry.instrument``
and ``--metrics`` do), then O(1) per tick and per applied outcome. A tick within the first
tick bucket (`QUICK_TICK`: every idle tick) is only counted and summed; it joins
``tick_seconds`` when a snapshot is taken (a bucket search per tick cost a third of a
microsecond, 5% of an idle tick). ``runtime.telemetry`` serves the same figures to Prometheus.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from components import LaneStats, PromptSettled
from runtime.lane.jobs import ToolOutcome

__all__ = [
    "MODEL_BUCKETS",
    "PROMPT_BUCKETS",
    "QUICK_TICK",
    "TICK_BUCKETS",
    "TOOL_BUCKETS",
    "Histogram",
    "MetricsRecorder",
    "WorldMetrics",
]

# Upper bounds in seconds (Prometheus `le`); a +Inf bucket follows each.
TICK_BUCKETS = (1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1.0)
TOOL_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
MODEL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
PROMPT_BUCKETS = (0.1, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0)

QUICK_TICK = TICK_BUCKETS[0]
"""A tick at or below this many seconds falls in the first tick bucket: it is counted without
a bucket search (`MetricsRecorder.ticked`)."""


@dataclass(frozen=True, slots=True)
class Histogram:
    """Observations by bucket: ``counts[i]`` fell at or below ``bounds[i]`` and above the
    bound before it; the last count is above every bound (+Inf). ``sum`` in seconds."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    sum: float = 0.0

    @property
    def count(self) -> int:
        """How many observations there were."""
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """``(le, count at or below le)`` pairs, ending with ``(inf, count)``: Prometheus'."""
        out, running = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


@dataclass(frozen=True, slots=True)
class WorldMetrics:
    """A snapshot of a world's figures, taken between two ticks.

    ``agents`` maps each status (``"active"``, ``"waiting"``, ...) to how many agents have
    it; ``lanes`` maps each lane's name to its counters. The histograms and token counts
    cover the time ``recording`` has been on (empty before); ``tool_seconds`` is per tool
    batch and ``model_seconds`` per model call, both as the lane timed the job.
    """

    tick: int
    now: float
    agents: dict[str, int]
    lanes: dict[str, LaneStats]
    prompts_open: int
    recording: bool
    tick_seconds: Histogram
    tool_seconds: Histogram
    model_seconds: Histogram
    prompt_wait_seconds: Histogram
    input_tokens: int = 0
    output_tokens: int = 0


class _Buckets:
    """A histogram being filled (tick thread only)."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # bisect_left: a value equal to a bound belongs to that bound's bucket (le).
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def snapshot(self) -> Histogram:
        return Histogram(self.bounds, tuple(self.counts), self.sum)


class MetricsRecorder:
    """What fills a world's histograms and token counters from its live ticks.

    Everything comes from the applied inputs (a ``ToolOutcome``'s ``elapsed``, a
    ``PromptSettled``'s ``at - opened_at``, a ``ModelReply``'s ``usage``) and the tick's
    own wall time, so it needs no hook in any system. Ticks within `QUICK_TICK` wait in
    ``quick_ticks`` and ``quick_seconds`` until a snapshot adds them to ``tick_seconds``.
    """

    def __init__(self) -> None:
        self.tick_seconds = _Buckets(TICK_BUCKETS)
        self.quick_ticks = 0  # ticks in the first bucket not yet in tick_seconds
        self.quick_seconds = 0.0  # and their sum
        self.tool_seconds = _Buckets(TOOL_BUCKETS)
        self.model_seconds = _Buckets(MODEL_BUCKETS)
        self.prompt_wait_seconds = _Buckets(PROMPT_BUCKETS)
        self.input_tokens = 0
        self.output_tokens = 0

    def applied(self, inputs: list[tuple[int, object]]) -> None:
        for _seq, item in inputs:
            cls = type(item)
            if cls is ToolOutcome:
                assert isinstance(item, ToolOutcome)
                results = item.results
                # A model call's one result carries the call's own id (see LiveEffects), a
                # ref minted "<agent>/t<n>/m<k>": a tool call of one batch may carry its
                # batch's id too (a host's choice), which counted it as a model call.
                if (
                    len(results) == 1
                    and results[0].call_id == item.batch_id
                    and item.batch_id.rpartition("/")[2][:1] == "m"
                ):
                    self.model_seconds.observe(item.elapsed)
                    self._count_tokens(results[0].output)
                else:
                    self.tool_seconds.observe(item.elapsed)
            elif cls is PromptSettled:
                assert isinstance(item, PromptSettled)
                self.prompt_wait_seconds.observe(max(0.0, item.at - item.opened_at))

    def _count_tokens(self, reply: object) -> None:
        # `ModelReply.usage` comes with the model providers; a reply without one counts 0.
        usage = getattr(reply, "usage", None)
        if usage is None:
            return
        self.input_tokens += _tokens(getattr(usage, "input_tokens", 0))
        self.output_tokens += _tokens(getattr(usage, "output_tokens", 0))

    def snapshot(
        self,
        tick: int,
        now: float,
        *,
        agents: dict[str, int],
        lanes: dict[str, LaneStats],
        prompts_open: int,
        recording: bool,
    ) -> WorldMetrics:
        """The figures so far, with the gauges the world read."""
        if self.quick_ticks:
            hist = self.tick_seconds
            hist.counts[0] += self.quick_ticks
            hist.sum += self.quick_seconds
            self.quick_ticks, self.quick_seconds = 0, 0.0
        return WorldMetrics(
            tick=tick,
            now=now,
            agents=agents,
            lanes=lanes,
            prompts_open=prompts_open,
            recording=recording,
            tick_seconds=self.tick_seconds.snapshot(),
            tool_seconds=self.tool_seconds.snapshot(),
            model_seconds=self.model_seconds.snapshot(),
            prompt_wait_seconds=self.prompt_wait_seconds.snapshot(),
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
        )

    def ticked(self, seconds: float) -> None:
        """A live tick took ``seconds`` of wall time (the tick inlines this)."""
        if seconds <= QUICK_TICK:  # bucket 0, as `observe` would find
            self.quick_ticks += 1
            self.quick_seconds += seconds
        else:
            self.tick_seconds.observe(seconds)


def _tokens(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
