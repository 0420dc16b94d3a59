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
    count = 3
    name = "worker-{i}"                 # agent ids; {i} is the index within the entry
    message = "task {i}"
    interactive = false
    steps = [{ think = "plan {message}" }, { finish = "{last}" }]   # or behaviour = "mod:fn"

    [operator]                          # a simulated person who answers every prompt
    delay = 2                           # seconds of world time after it opens
    policy = "approve"                  # approve | deny | first-choice | text | none
    text = "yes"
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path as FilePath
from typing import Any

from runtime.errors import ScenarioError
from runtime.scenario.check import Checker
from runtime.scenario.parse import check_scenario
from runtime.scenario.spec import Scenario
from runtime.world import BehaviorRegistry

__all__ = ["load_scenario", "parse_scenario", "register_scenario_behaviors"]


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
        raise ScenarioError([f"{where}: not valid TOML: {exc}"]) from None
    checker = Checker(where, source, base_dir)
    scenario = check_scenario(checker, data, source, import_tools=import_tools)
    if checker.problems or scenario is None:
        raise ScenarioError(checker.problems)
    return scenario


def register_scenario_behaviors(
    registry: BehaviorRegistry, scenario: Scenario | Mapping[str, Any]
) -> None:
    """Register a scenario's behaviours under their stable names (``scenario:agents[0]``).

    ``scenario`` is a ``Scenario`` or the header a journal stored (``{"path", "text"}``),
    whose text is checked again (python tools are not imported: a replay runs none).

    Raises:
        ScenarioError: the stored scenario no longer checks (a module moved, say).
    """
    if not isinstance(scenario, Scenario):
        where = str(scenario.get("path") or "<journal scenario>")
        source, base = scenario.get("text"), scenario.get("base_dir")
        if not isinstance(source, str):
            raise ScenarioError([f"{where}: the journal stores no scenario text"])
        base_dir = FilePath(base) if isinstance(base, str) else None
        scenario = parse_scenario(source, where, base_dir=base_dir, import_tools=False)
    registry.update(scenario.behaviors)
