"""Compare source trees (a runtime before and after a change) with the same benchmarks.

``python -m benchmarks.compare --tree before=DIR --tree after=DIR [--only NAME,...]
[--rounds N] [--quick] [--json FILE]``

Each tree is a directory holding ``runtime/``, ``systems/`` and ``components/`` (a copy of
the repository with a patch applied, say). Rounds alternate the trees (ABBA), each round
running ``python -m benchmarks --only ...`` in a fresh process whose ``runtime`` comes from
that tree (this harness is used for every tree). Every run still measures tickwork against
its baseline, interleaved, so the figure that compares trees is the ratio to the baseline,
which holds on a noisy machine where absolute figures drift.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from . import ORDER

HARNESS_ROOT = Path(__file__).resolve().parent.parent


def run_tree(tree: Path, names: Sequence[str], quick: bool) -> list[dict[str, object]]:
    """Run the harness once with ``runtime`` imported from ``tree``; return its JSON."""
    with tempfile.TemporaryDirectory(prefix="tickwork-compare-") as tmp:
        out = Path(tmp) / "results.json"
        cmd = [sys.executable, "-m", "benchmarks", "--only", ",".join(names), "--json", str(out)]
        if quick:
            cmd.append("--quick")
        cmd.append("--no-progress")
        env = dict(os.environ)
        # The tree's runtime/systems/components shadow the installed ones; the harness
        # itself comes from this checkout even when the tree has a benchmarks/ of its own
        # (a checkout of main does: run from the tree, with the tree first on the path, its
        # older harness ran, and two trees were measured by two methods).
        path = Path(tmp) / "path"
        path.mkdir()
        for name in ("runtime", "systems", "components"):
            (path / name).symlink_to(tree / name, target_is_directory=True)
        (path / "benchmarks").symlink_to(HARNESS_ROOT / "benchmarks", target_is_directory=True)
        env["PYTHONPATH"] = str(path)
        subprocess.run(cmd, cwd=path, env=env, check=True, stdout=subprocess.DEVNULL)
        data: list[dict[str, object]] = json.loads(out.read_text())
    for row in data:
        run = row.get("run")
        where = run.get("runtime", "") if isinstance(run, dict) else ""
        if where and not str(where).startswith(str(tree)):
            raise RuntimeError(f"tree {tree}: runtime was imported from {where}")
    return data


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__)
    parser.add_argument(
        "--tree", action="append", required=True, metavar="LABEL=DIR", help="a tree to run"
    )
    parser.add_argument("--only", metavar="NAME[,NAME]", help="benchmarks to run (default: all)")
    parser.add_argument("--rounds", type=int, default=3, help="runs per tree (default 3)")
    parser.add_argument("--quick", action="store_true", help="run the harness with --quick")
    parser.add_argument("--json", metavar="FILE", help="write every run's results here")
    args = parser.parse_args(argv)
    trees: list[tuple[str, Path]] = []
    for spec in args.tree:
        label, _, path = spec.partition("=")
        if not path:
            parser.error(f"--tree takes LABEL=DIR, got {spec!r}")
        trees.append((label, Path(path).resolve()))
    names = [n for n in ORDER if not args.only or n in args.only.split(",")]
    ratios: dict[str, dict[str, list[float]]] = {label: {} for label, _ in trees}
    ours: dict[str, dict[str, list[float]]] = {label: {} for label, _ in trees}
    runs = []
    for rnd in range(args.rounds):
        order = trees if rnd % 2 == 0 else trees[::-1]
        for label, tree in order:
            print(f"round {rnd + 1}/{args.rounds}: {label} ({tree})", file=sys.stderr)
            for row in run_tree(tree, names, args.quick):
                name = str(row["name"])
                ratios[label].setdefault(name, []).append(float(row["ratio"]))  # type: ignore[arg-type]
                ours[label].setdefault(name, []).append(float(row["ours"]))  # type: ignore[arg-type]
                runs.append({"round": rnd, "tree": label, **row})
    first = trees[0][0]
    header = f"{'benchmark':<18}" + "".join(f"{label:>22}" for label, _ in trees)
    print(header + f"{'change vs ' + first:>22}")
    for name in names:
        line = f"{name:<18}"
        meds = []
        for label, _ in trees:
            values = ratios[label].get(name, [])
            med = statistics.median(values) if values else float("nan")
            meds.append(med)
            lo, hi = (min(values), max(values)) if values else (med, med)
            line += f"{med:>10.3g} ({lo:.3g}–{hi:.3g})"
        changes = " ".join(f"{m / meds[0]:.2f}x" for m in meds[1:]) if meds[0] else "n/a"
        print(line + f"{changes:>22}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"ratios": ratios, "ours": ours, "runs": runs}, indent=2) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
