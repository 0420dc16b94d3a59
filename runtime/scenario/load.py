"""Scenarios: a world, its tools, models and agents, and a simulated operator, in one TOML file.

``load_scenario(path)`` reads and checks a scenario and returns a ``Scenario``; every problem
is reported at once in one ``ScenarioError`` (file, line and key of each), and nothing runs
until the file is valid. ``build_world(scenario)`` makes the ``World`` it describes, with the
scenario's behaviours registered under stable names (``scenario:agents[0]``), and
``spawn_agents`` starts its agents. A journal of a scenario run stores the scenario's text,
and ``register_scenario_behaviors`` rebuilds the same behaviours from it for a replay.

The format (see ``examples/*.toml``)::

    name = "quickstart"                 # optional: name and description
    [world]                             # all optional
    seed = 7
    clock = "real"                      # or "virtual": time skips ahead when nothing moves
    lockstep = false                    # default: on exactly when the clock is virtual
    tool_capacity = 8
    inference_capacity = 8
    interaction_timeout_secs = 3600     # 0: prompts wait forever
    max_ticks = 1000000                 # `tickwork run` stops after this many ticks
    time_limit = 60                     # ... or after this many seconds of wall time

    [tools.grep]                        # exactly one of python / shell / sleep / ask_user
    shell = ["grep", "-c", "{pattern}", "{path}"]
    timeout = 10
    requires_approval = false
    virtual_duration = 2.5              # world seconds a call takes in lockstep

    [models.default]
    replies = ["a plan", "another plan"]
    delay = 0.2                         # real seconds per reply
    virtual_duration = 0.4              # world seconds per reply in lockstep
    cycle = true

    [[agents]]
    count = 3                           # at most MAX_AGENTS (1,000,000) in all entries
    name = "worker-{i}"                 # agent ids; {i} is the index within the entry
    message = "task {i}"
    interactive = false
    steps = [{ think = "plan {message}" }, { finish = "{last}" }]   # or behaviour = "mod:fn"

    [[systems]]                         # host systems, actions, components: scenario.host
    fn = "village:walk"
    after = "step_behaviors"
    [actions]
    MoveTo = "village:move_to"

    [operator]                          # a simulated person who answers every prompt
    delay = 2                           # seconds of world time after it opens
    policy = "approve"                  # approve | deny | first-choice | text | none
    text = "yes"
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path as FilePath
from typing import Any

from runtime.errors import ScenarioError
from runtime.scenario.check import Checker, escape_controls
from runtime.scenario.parse import check_scenario
from runtime.scenario.spec import Scenario
from runtime.world import BehaviorRegistry

__all__ = [
    "load_scenario",
    "parse_scenario",
    "recorded_scenario",
    "register_scenario_behaviors",
]


def load_scenario(path: str | FilePath) -> Scenario:
    """Read and check the scenario file at ``path``.

    Raises:
        ScenarioError: the file cannot be read, is not TOML, or has problems (all listed).
    """
    where = str(path)
    try:
        source = FilePath(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError([f"{where}: no such scenario file"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError([f"{where}: cannot read the scenario: {exc}"]) from None
    return parse_scenario(source, where, base_dir=FilePath(path).resolve().parent)


def parse_scenario(
    source: str,
    where: str = "<scenario>",
    *,
    base_dir: FilePath | None = None,
    import_tools: bool = True,
) -> Scenario:
    """Check the scenario ``source`` (named ``where`` in messages) and return it.

    ``module:function`` names are imported from ``base_dir`` too; ``import_tools=False``
    skips importing python tools (a replay runs none).

    Raises:
        ScenarioError: the text is not TOML or has problems (every one is listed).
    """
    try:
        data = tomllib.loads(source)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError([escape_controls(f"{where}: not valid TOML: {exc}")]) from None
    except ValueError as exc:  # an integer past Python's 4,300-digit limit for int(str)
        raise ScenarioError([_huge_integer(source, where, exc)]) from None
    except RecursionError:  # arrays nested thousands deep
        raise ScenarioError([f"{where}: not valid TOML: nested too deep"]) from None
    checker = Checker(where, source, base_dir)
    scenario = check_scenario(checker, data, source, import_tools=import_tools)
    if checker.problems or scenario is None:
        raise ScenarioError(checker.problems)
    return scenario


def _huge_integer(source: str, where: str, exc: ValueError) -> str:
    """The problem for a TOML integer too long to convert, with its line when found."""
    found = re.search(r"\d[\d_]{4299,}", source)
    if found is None:
        return escape_controls(f"{where}: not valid TOML: {exc}")
    line = source.count("\n", 0, found.start()) + 1
    return f"{where}:{line}: an integer of more than 4,300 digits (not a usable number)"


def register_scenario_behaviors(
    registry: BehaviorRegistry,
    scenario: Scenario | Mapping[str, Any],
    *,
    base_dir: FilePath | None = None,
) -> Scenario:
    """Register a scenario's behaviours under their stable names (``scenario:agents[0]``);
    returns the scenario (checked again from a journal's header).

    ``scenario`` is a ``Scenario`` or the header a journal stored (``{"path", "text"}``),
    whose text is checked again (python tools are not imported: a replay runs none). A
    journal is data: its ``module:function`` names are imported from ``base_dir`` (the
    caller's choice) and ``sys.path``, never from the ``base_dir`` the journal stored.

    Raises:
        ScenarioError: the stored scenario no longer checks (a module moved, say); a module
            that cannot be imported gets a line saying where the journal says it lived.
    """
    if not isinstance(scenario, Scenario):
        where = str(scenario.get("path") or "<journal scenario>")
        source, recorded = scenario.get("text"), scenario.get("base_dir")
        if not isinstance(source, str):
            raise ScenarioError([f"{where}: the journal stores no scenario text"])
        try:
            scenario = parse_scenario(source, where, base_dir=base_dir, import_tools=False)
        except ScenarioError as exc:
            problems = list(exc.problems)
            if isinstance(recorded, str) and any("cannot import" in p for p in problems):
                problems.append(
                    f"{where}: the journal says this scenario lived in {recorded!r}, but a"
                    " journal never makes tickwork import code from a directory it names:"
                    f" if you trust that code, replay from there or pass --path {recorded!r}"
                )
            raise ScenarioError(problems) from None
    registry.update(scenario.behaviors)
    return scenario


def recorded_scenario(stored: Mapping[str, Any], *, import_tools: bool = True) -> Scenario:
    """The scenario a journal's header stores (``{"path", "text"}``), checked and ready to build.

    Its ``module:function`` names (behaviours and python tools) are imported from installed
    modules only, never from the directory the journal names: a journal is data, and code
    beside a scenario runs only when the user names that scenario (``load_scenario``).
    ``import_tools=False`` leaves python tools out (their ``fn`` is None).

    Raises:
        ScenarioError: the stored text does not check, or needs a module that is not
            installed (one beside the scenario, say).
    """
    where = str(stored.get("path") or "<journal scenario>")
    source = stored.get("text")
    if not isinstance(source, str):
        raise ScenarioError([f"{where}: the journal stores no scenario text"])
    return parse_scenario(source, where, base_dir=None, import_tools=import_tools)
