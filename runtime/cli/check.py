"""The ``tickwork`` commands that check something: ``replay`` a journal, ``validate`` scenarios."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from runtime.errors import JournalError, ReplayDivergence, ScenarioError
from runtime.journal import replay
from runtime.scenario import Scenario, load_scenario
from runtime.scenario.check import escape_controls
from runtime.world import sigint

__all__ = ["cmd_replay", "cmd_validate"]


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
    setup = _host_setup(args)
    try:
        # Ctrl-C stops at once, mid-tick: a replay changes nothing it could leave half done.
        with sigint.abandoning(), progress if show else contextlib.nullcontext():
            report = replay(
                args.journal,
                progress=update if show else None,
                setup=setup,
                import_path=[os.getcwd(), *args.path],
            )
    except ReplayDivergence as exc:
        print(escape_controls(f"tickwork: replay of {args.journal} diverged"), file=sys.stderr)
        print("\n".join(map(escape_controls, str(exc).splitlines())), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"match": True, **_report_data(report)}, indent=2))
    else:
        print(
            f"replay matched: {report.ticks} ticks, {report.inputs} inputs, {report.agents}"
            f" agents in {report.wall_time:.2f} s ({args.journal})"
        )
    return 0


def _host_setup(args: argparse.Namespace) -> Callable[[Any], object] | None:
    """The host setup a replay calls: ``--setup``, else the one the journal's header names.

    A journal is data: the setup it names is imported only from where Python finds it
    anyway (installed modules) or from a directory the user allows with ``--path``, never
    from a directory the journal names on its own.

    Raises:
        JournalError: the setup cannot be imported (the message says how to allow it).
    """
    from runtime.journal import JournalReader
    from runtime.world.behaviors import import_by_name

    name = args.setup
    if name is None:
        with JournalReader(args.journal) as reader:
            name = reader.header.get("setup")
    if not name:
        return None
    for folder in args.path:
        if not Path(folder).is_dir():
            raise JournalError(f"--path: {str(folder)!r} is not a directory")
        if folder not in sys.path:
            sys.path.insert(0, str(Path(folder).resolve()))
    fn = import_by_name(str(name))
    if not callable(fn):
        raise JournalError(
            f"the journal's host setup {name!r} cannot be imported: pass --path DIR where its"
            " module lives (or --setup MODULE:FN)"
        )
    return fn


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
        before = set(sys.modules)
        try:
            scenario = load_scenario(path)
        except ScenarioError as exc:
            problems.extend(exc.problems)
            continue
        finally:
            _forget_modules_beside(Path(path).resolve().parent, before)
        print(escape_controls(f"{path}: ok ({_describe(scenario)})"))
    if problems:
        raise ScenarioError(problems)
    return 0


def _forget_modules_beside(base: Path, before: set[str]) -> None:
    """Drop the modules a scenario imported from beside it (a module or package directly in
    its directory ``base``), so that the next scenario validated imports its own: two
    directories each with a ``behaviors.py`` had the second scenario checked against the
    first's module. Everything else stays: installed packages (also those of a ``.venv``
    inside ``base``), packages imported before, and extension modules, which cannot be
    imported twice."""
    beside: dict[str, list[str]] = {}  # top-level name -> its new modules, if from beside
    kept: set[str] = set()  # top-level names with a module that must stay
    for name in [n for n in sys.modules if n not in before]:
        top = name.partition(".")[0]
        module = sys.modules[name]
        file = getattr(module, "__file__", None)
        # Where it comes from: its file, or a namespace package's directories.
        places = [file] if file is not None else list(getattr(module, "__path__", None) or ())
        if top in before or not places:
            kept.add(top)  # imported before, or built in
            continue
        for place in places:
            path = Path(place).resolve()
            if not path.is_relative_to(base) or path.relative_to(base).parts[0] not in (
                top,
                f"{top}.py",
            ):
                kept.add(top)  # installed (a `.venv`'s too), or not where its name says
            elif file is not None and path.suffix not in (".py", ".pyc"):
                kept.add(top)  # an extension module: its package stays whole with it
        beside.setdefault(top, []).append(name)
    for top, names in beside.items():
        if top not in kept:
            for name in names:
                del sys.modules[name]


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
