"""``python -m benchmarks``: run the benchmarks, print the table, write JSON and a plot."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from . import ORDER
from .harness import Context, Progress, render_table, run_benchmarks, write_json, write_plot


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Measure tickwork against its baselines, interleaved, in one run.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smaller sizes and fewer repetitions (< 1 min)"
    )
    parser.add_argument(
        "--only",
        metavar="NAME[,NAME]",
        help=f"run only these benchmarks (of: {', '.join(ORDER)})",
    )
    parser.add_argument("--json", metavar="FILE", help="write the results as a JSON list")
    parser.add_argument("--plot", metavar="FILE", help="write a PNG of ratios and tick times")
    parser.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in ORDER]
        if unknown or not names:
            parser.error(
                f"unknown benchmark(s) {', '.join(unknown) or '(none given)'}; "
                f"choose from {', '.join(ORDER)}"
            )
        args.names = [n for n in ORDER if n in names]
    else:
        args.names = list(ORDER)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    progress = Progress(enabled=not args.no_progress)
    ctx = Context(quick=args.quick, progress=progress)
    started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    started = time.perf_counter()
    results = run_benchmarks(args.names, ctx)
    total = time.perf_counter() - started
    mode = "quick" if args.quick else "full"
    render_table(results, title=f"tickwork benchmarks ({mode} run, {total:.0f} s)")
    missed = [r.name for r in results if not r.met]
    print(
        f"{len(results) - len(missed)}/{len(results)} targets met"
        + (f"; missed: {', '.join(missed)}" if missed else "")
        + f"; total {total:.1f} s"
    )
    import runtime

    meta = {
        "mode": mode,
        "runtime": str(Path(runtime.__file__).resolve().parent),
        "total_seconds": round(total, 2),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "started": started_at,
    }
    if args.json:
        write_json(results, args.json, meta)
        print(f"wrote {args.json}", file=sys.stderr)
    if args.plot:
        write_plot(results, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    # Timing targets are information, never a failure: the exit status says the harness ran.
    return 0


if __name__ == "__main__":
    sys.exit(main())
