"""The benchmark harness: interleaved repetitions, paired ratios, the table, JSON and plot.

Every benchmark measures tickwork and its baseline in the same process, alternating between
the two (ABBA order, after a warm-up of each), because the machines this runs on are shared
and noisy: an absolute figure moves from run to run, a ratio of neighbouring samples holds.
The reported ratio is the median of the per-repetition ratios (each pairs a tickwork sample
with the baseline sample taken next to it); ``ours`` and ``baseline`` are the medians of
their own samples, and the spread of each is reported as its min and max.
"""

from __future__ import annotations

import gc
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "BENCHMARKS",
    "Benchmark",
    "Context",
    "Progress",
    "Result",
    "Target",
    "benchmark",
    "format_value",
    "interleave",
    "interleave_arms",
    "markdown_table",
    "paired_result",
    "render_table",
    "run_benchmarks",
    "write_json",
    "write_plot",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Target:
    """What the ratio ours/baseline must be: ``>= value`` or ``<= value``."""

    op: str
    value: float

    def __post_init__(self) -> None:
        if self.op not in (">=", "<="):
            raise ValueError(f"`op` must be '>=' or '<=', got {self.op!r}")

    def met(self, ratio: float) -> bool:
        """Whether ``ratio`` meets the target (a NaN ratio never does)."""
        if math.isnan(ratio):
            return False
        return ratio >= self.value if self.op == ">=" else ratio <= self.value

    def __str__(self) -> str:
        return f"{self.op} {self.value:g}"


@dataclass(slots=True)
class Result:
    """One benchmark's figures: the medians, the paired ratio, and their spreads."""

    name: str
    ours: float
    baseline: float
    unit: str
    ratio: float
    target: Target
    ours_label: str = ""
    baseline_label: str = ""
    ours_samples: list[float] = field(default_factory=list)
    baseline_samples: list[float] = field(default_factory=list)
    ratio_samples: list[float] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0  # wall time the benchmark took, set by the harness

    @property
    def met(self) -> bool:
        """Whether the ratio meets the target."""
        return self.target.met(self.ratio)

    def to_json(self) -> dict[str, Any]:
        """The issue's fields (name, ours, baseline, unit, ratio, target, met) and extras."""

        def spread(samples: list[float]) -> list[float] | None:
            return [min(samples), max(samples)] if samples else None

        return {
            "name": self.name,
            "ours": self.ours,
            "baseline": self.baseline,
            "unit": self.unit,
            "ratio": self.ratio,
            "target": str(self.target),
            "met": self.met,
            "ours_label": self.ours_label,
            "baseline_label": self.baseline_label,
            "ours_spread": spread(self.ours_samples),
            "baseline_spread": spread(self.baseline_samples),
            "ratio_spread": spread(self.ratio_samples),
            "reps": len(self.ratio_samples),
            "ours_samples": self.ours_samples,
            "baseline_samples": self.baseline_samples,
            "ratio_samples": self.ratio_samples,
            "details": self.details,
            "seconds": round(self.seconds, 3),
        }


class Progress:
    """Progress lines on stderr: which benchmark, which repetition.

    On a terminal the current line is rewritten; elsewhere (CI logs) each step is a line.
    """

    def __init__(self, stream: Any = None, *, enabled: bool = True) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())
        self._enabled = enabled
        self._prefix = ""
        self._started = time.perf_counter()

    def begin(self, index: int, total: int, name: str) -> None:
        """Announce benchmark ``index`` of ``total``."""
        self._prefix = f"[{index}/{total}] {name}"
        self.note("starting")

    def rep(self, n: int, of: int, what: str = "rep") -> None:
        """Announce repetition ``n`` of ``of``."""
        self.note(f"{what} {n}/{of}")

    def note(self, text: str) -> None:
        """Show a free-form step of the current benchmark."""
        if not self._enabled:
            return
        elapsed = time.perf_counter() - self._started
        line = f"{elapsed:6.1f}s {self._prefix}: {text}"
        if self._tty:
            self._stream.write("\r\x1b[2K" + line)
        else:
            self._stream.write(line + "\n")
        self._stream.flush()

    def end(self, text: str) -> None:
        """Finish the current benchmark's line."""
        if not self._enabled:
            return
        self.note(text)
        if self._tty:
            self._stream.write("\n")
            self._stream.flush()


@dataclass(slots=True)
class Context:
    """What a benchmark is run with: quick or full, and where to report progress."""

    quick: bool
    progress: Progress

    def pick(self, quick: T, full: T) -> T:
        """The quick or the full value of a size or repetition count."""
        return quick if self.quick else full


@dataclass(frozen=True, slots=True)
class Benchmark:
    """A registered benchmark: its name, unit, target, and the function that runs it."""

    name: str
    unit: str
    target: Target
    ours: str
    baseline: str
    run: Callable[[Context], Result]


BENCHMARKS: dict[str, Benchmark] = {}


def benchmark(
    name: str, *, unit: str, target: str, ours: str, baseline: str
) -> Callable[[Callable[[Context], Result]], Callable[[Context], Result]]:
    """Register a benchmark function; ``target`` reads like ``">= 0.7"``."""
    op, value = target.split()
    parsed = Target(op, float(value))

    def register(fn: Callable[[Context], Result]) -> Callable[[Context], Result]:
        if name in BENCHMARKS:
            raise ValueError(f"benchmark {name!r} is registered twice")
        BENCHMARKS[name] = Benchmark(name, unit, parsed, ours, baseline, fn)
        return fn

    return register


def _order(arms: int, rep: int) -> list[int]:
    """The order of the arms in repetition ``rep``: forwards, then backwards (ABBA), so a
    drift in the machine's speed hits every arm alike."""
    order = list(range(arms))
    return order if rep % 2 == 0 else order[::-1]


def interleave_arms(
    ctx: Context,
    arms: Sequence[Callable[[], float]],
    *,
    reps: int,
    warmup: int = 1,
    collect: bool = True,
) -> list[list[float]]:
    """Run every arm once per repetition, in ABBA order, ``reps`` times (after ``warmup``
    discarded rounds); return each arm's samples, paired by index.

    Each arm runs one repetition and returns its figure (a rate or a time). With
    ``collect``, a full garbage collection runs before every sample, outside the timing.
    """
    for _ in range(warmup):
        for arm in arms:
            arm()
    samples: list[list[float]] = [[] for _ in arms]
    for rep in range(reps):
        ctx.progress.rep(rep + 1, reps)
        for index in _order(len(arms), rep):
            if collect:
                gc.collect()
            samples[index].append(arms[index]())
    return samples


def interleave(
    ctx: Context,
    ours: Callable[[], float],
    baseline: Callable[[], float],
    *,
    reps: int,
    warmup: int = 1,
    collect: bool = True,
) -> tuple[list[float], list[float]]:
    """`interleave_arms` for the usual two arms: tickwork and its baseline."""
    ours_samples, base_samples = interleave_arms(
        ctx, (ours, baseline), reps=reps, warmup=warmup, collect=collect
    )
    return ours_samples, base_samples


def paired_result(
    bench: Benchmark,
    ours_samples: Sequence[float],
    base_samples: Sequence[float],
    *,
    ours_label: str = "",
    baseline_label: str = "",
    details: dict[str, Any] | None = None,
) -> Result:
    """A `Result` from paired samples: medians, and the median of the per-pair ratios."""
    ratios = [o / b if b else math.nan for o, b in zip(ours_samples, base_samples, strict=True)]
    return Result(
        name=bench.name,
        ours=statistics.median(ours_samples),
        baseline=statistics.median(base_samples),
        unit=bench.unit,
        ratio=statistics.median(ratios),
        target=bench.target,
        ours_label=ours_label or bench.ours,
        baseline_label=baseline_label or bench.baseline,
        ours_samples=list(ours_samples),
        baseline_samples=list(base_samples),
        ratio_samples=ratios,
        details=details or {},
    )


def format_value(value: float, unit: str) -> str:
    """A figure with its unit, scaled for reading (``41.2k jobs/s``, ``85.1 µs``)."""
    if math.isnan(value):
        return "n/a"
    if unit == "s":
        if value < 1e-3:
            return f"{value * 1e6:.1f} µs"
        if value < 1:
            return f"{value * 1e3:.1f} ms"
        return f"{value:.2f} s"
    if unit in ("µs", "µs/tick"):
        return f"{value:.1f} {unit}"
    if unit == "bytes/agent":
        return f"{value:,.0f} B/agent"
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.2f}{suffix} {unit}"
    return f"{value:.1f} {unit}"


def _ratio_text(result: Result) -> str:
    if not result.ratio_samples or len(result.ratio_samples) < 2:
        return f"{result.ratio:.3g}x"
    lo, hi = min(result.ratio_samples), max(result.ratio_samples)
    return f"{result.ratio:.3g}x ({lo:.3g}–{hi:.3g})"


def render_table(results: Sequence[Result], *, file: Any = None, title: str = "") -> None:
    """Print the results table (rich) to ``file`` (stdout by default)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title or None)
    for column, justify in (
        ("benchmark", "left"),
        ("tickwork", "right"),
        ("baseline", "right"),
        ("ratio (min–max)", "right"),
        ("target", "center"),
        ("met", "center"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for r in results:
        table.add_row(
            r.name,
            format_value(r.ours, r.unit),
            format_value(r.baseline, r.unit),
            _ratio_text(r),
            str(r.target),
            "yes" if r.met else "[bold red]NO[/]",
        )
    Console(file=file or sys.stdout, width=120).print(table)


def markdown_table(results: Sequence[Result]) -> str:
    """The results as a Markdown table (for the README)."""
    lines = [
        "| benchmark | tickwork | baseline | ratio (min–max) | target | met |",
        "|---|---:|---:|---:|:---:|:---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.name} | {format_value(r.ours, r.unit)} | {format_value(r.baseline, r.unit)}"
            f" | {_ratio_text(r)} | {r.target} | {'yes' if r.met else '**no**'} |"
        )
    return "\n".join(lines)


def write_json(results: Sequence[Result], path: str | Path, meta: dict[str, Any]) -> None:
    """Write a list with one object per benchmark: the issue's fields first, then the
    samples and details, and the run's ``meta`` (mode, machine, versions) under ``run``."""
    data = [dict(r.to_json(), run=meta) for r in results]
    Path(path).write_text(json.dumps(data, indent=2) + "\n")


def write_plot(results: Sequence[Result], path: str | Path) -> None:
    """A PNG: each ratio against its target, and tick time versus agent count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.5))
    names = [r.name for r in results]
    ratios = [r.ratio for r in results]
    colors = ["tab:green" if r.met else "tab:red" for r in results]
    ys = range(len(results))
    left.barh(list(ys), ratios, color=colors, alpha=0.8)
    for y, r in zip(ys, results, strict=True):
        if r.ratio_samples:
            lo, hi = min(r.ratio_samples), max(r.ratio_samples)
            left.plot([lo, hi], [y, y], color="black", linewidth=1)
        left.plot([r.target.value] * 2, [y - 0.4, y + 0.4], color="black", linewidth=2.5)
        left.text(
            r.target.value,
            y + 0.42,
            f" target {r.target}",
            fontsize=7,
            va="bottom",
        )
    left.set_yticks(list(ys), names)
    left.invert_yaxis()
    left.set_xscale("log")
    left.set_xlabel("ratio tickwork / baseline (log); bar: median, line: min–max, tick: target")
    left.set_title("ratios against their targets (green: met, red: missed)")

    curve = next((r.details.get("curve") for r in results if r.details.get("curve")), None)
    if curve:
        sizes = [point["agents"] for point in curve]
        medians = [point["us_per_tick"] for point in curve]
        lows = [point["min"] for point in curve]
        highs = [point["max"] for point in curve]
        right.plot(sizes, medians, marker="o", label="tick time (median)")
        right.fill_between(sizes, lows, highs, alpha=0.2, label="min–max")
        right.set_xscale("log")
        right.set_ylim(bottom=0)
        right.set_xlabel("waiting agents")
        right.set_ylabel("µs per tick")
        right.set_title("idle tick time versus agent count")
        right.legend()
    else:
        right.text(0.5, 0.5, "idle_tick_scaling not run", ha="center", va="center")
        right.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_benchmarks(names: Sequence[str], ctx: Context) -> list[Result]:
    """Run the named benchmarks in order and return their results."""
    results = []
    for index, name in enumerate(names, 1):
        bench = BENCHMARKS[name]
        ctx.progress.begin(index, len(names), name)
        started = time.perf_counter()
        gc.collect()
        result = bench.run(ctx)
        result.seconds = time.perf_counter() - started
        ctx.progress.end(
            f"ratio {result.ratio:.3g} (target {bench.target}) in {result.seconds:.1f}s"
        )
        results.append(result)
    return results
