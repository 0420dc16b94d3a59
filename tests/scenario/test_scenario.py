"""Scenario files: every mistake reported at once with file, line and key; scripted steps run."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from components import InteractionKind, InteractionRequest, Settlement
from runtime import Journal, PromptSettled, StatusKind, replay
from runtime.errors import ScenarioError
from runtime.scenario import (
    build_world,
    load_scenario,
    parse_scenario,
    register_scenario_behaviors,
    spawn_agents,
)
from runtime.scenario.operator import Operator, operator_response
from runtime.scenario.toml_lines import format_path, key_lines
from runtime.world import BehaviorRegistry

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

# Lines 1-4: a model and a tool that the cases below can refer to.
HEAD = """\
[models.default]
replies = ["a plan"]
[tools.echo]
shell = ["echo", "{text}"]
"""


def problems(body: str, **kwargs: object) -> list[str]:
    """The problems of HEAD + ``body`` (an empty list if it checks)."""
    try:
        parse_scenario(HEAD + textwrap.dedent(body), "s.toml", **kwargs)  # type: ignore[arg-type]
    except ScenarioError as exc:
        return exc.problems
    return []


AGENT = '[[agents]]\nsteps = [{ think = "x" }]\n'

MISTAKES = [
    pytest.param(
        '[world]\ncolour = "blue"\n' + AGENT,
        "s.toml:6: world.colour: unknown key 'colour'",
        id="unknown-world-key",
    ),
    pytest.param(
        '[world]\nclock = "fast"\n' + AGENT,
        "s.toml:6: world.clock: must be one of 'real', 'virtual', got 'fast'",
        id="bad-clock",
    ),
    pytest.param(
        "[world]\ntool_capacity = 0\n" + AGENT,
        "s.toml:6: world.tool_capacity: must be an integer 1..100,000, got 0",
        id="zero-capacity",
    ),
    pytest.param(
        '[world]\ninteraction_timeout_secs = "soon"\n' + AGENT,
        "s.toml:6: world.interaction_timeout_secs: must be a number >= 0, got 'soon'",
        id="timeout-not-a-number",
    ),
    pytest.param(
        '[[agents]]\ncount = -2\nsteps = [{ think = "x" }]\n',
        "s.toml:6: agents[0].count: must be an integer 0..1,000,000, got -2",
        id="negative-count",
    ),
    pytest.param(
        AGENT + '[[agents]]\nsteps = [\n  { think = "x" },\n  { thnk = "y" },\n]\n',
        "s.toml:10: agents[1].steps[1]: unknown step 'thnk' (did you mean 'think'?)",
        id="unknown-step",
    ),
    pytest.param(
        '[[agents]]\nsteps = [{ tools = [{ name = "ecco", args = { text = "x" } }] }]\n',
        "s.toml:6: agents[0].steps[0].tools[0].name: unknown tool 'ecco' (known: echo)",
        id="unknown-tool",
    ),
    pytest.param(
        '[[agents]]\nsteps = [{ tools = [{ name = "echo" }] }]\n',
        "s.toml:6: agents[0].steps[0].tools[0]: tool 'echo' needs the argument 'text'",
        id="missing-shell-argument",
    ),
    pytest.param(
        '[[agents]]\nsteps = [\n  { think = "x", model = "gpt" },\n]\n',
        "s.toml:7: agents[0].steps[0].model: unknown model 'gpt' (known: default)",
        id="unknown-model",
    ),
    pytest.param(
        '[[agents]]\nsteps = [{ think = "go {mesage}" }]\n',
        "s.toml:6: agents[0].steps[0].think: unknown placeholder {mesage}"
        " (did you mean {message}?)",
        id="unknown-placeholder",
    ),
    # A format spec or conversion passed the check, then raised at run time (exit 70)
    # or, `{i:>100000}` over 10^6 agents, filled memory.
    pytest.param(
        '[[agents]]\ncount = 2\nname = "w{i:{x}}"\nsteps = [{ finish = "x" }]\n',
        "s.toml:7: agents[0].name: placeholder {i:{x}} must be a plain {name}: no format"
        " spec, conversion, index or position",
        id="nested-format-spec",
    ),
    pytest.param(
        '[[agents]]\nmessage = "{i:>99999999999999999999}"\nsteps = [{ finish = "x" }]\n',
        "s.toml:6: agents[0].message: placeholder {i:>99999999999999999999} must be a plain"
        " {name}: no format spec, conversion, index or position",
        id="huge-format-spec",
    ),
    pytest.param(
        '[[agents]]\nsteps = [{ finish = "{message!r}" }]\n',
        "s.toml:6: agents[0].steps[0].finish: placeholder {message!r} must be a plain {name}:"
        " no format spec, conversion, index or position",
        id="conversion",
    ),
    # Spawn counts were checked one by one: nested, they multiplied past the bound (a
    # review's run of three nested spawns of 1,000 had made 1.1M agents at 40 s).
    pytest.param(
        '[[agents]]\nsteps = [{ spawn = [{ spawn = [{ finish = "x" }], count = 1000 }],'
        " count = 1000 }]\n",
        "s.toml:6: agents[0].steps[0].count: this spawn would start 1,001,000 agents, over"
        " the maximum of 1,000,000",
        id="nested-spawns",
    ),
    pytest.param(
        '[[agents]]\ncount = 1000\nsteps = [{ spawn = [{ finish = "x" }], count = 1000 }]\n',
        "s.toml:5: agents[0]: the scenario would start 1,001,000 agents or more with the ones"
        " its steps spawn, over the maximum of 1,000,000",
        id="spawning-agents",
    ),
    pytest.param(
        '[[agents]]\nsteps = [{ think = "x", colour = "red" }]\n',
        "s.toml:6: agents[0].steps[0].colour: unknown key 'colour' in a think step",
        id="unknown-step-key",
    ),
    pytest.param(
        '[[agents]]\nsteps = [{ think = "x", ask = "y" }]\n',
        "s.toml:6: agents[0].steps[0]: a step does one thing, got 'think' and 'ask'",
        id="two-verbs",
    ),
    pytest.param(
        '[[agents]]\nsteps = [\n  { finish = "done" },\n  { think = "x" },\n]\n',
        "s.toml:8: agents[0].steps[1]: unreachable: it comes after a finish step",
        id="step-after-finish",
    ),
    pytest.param(
        '[[agents]]\nsteps = [{ ask = "a?", confirm = true, choices = ["x"] }]\n',
        "s.toml:6: agents[0].steps[0]: an ask step takes `choices` or `confirm = true`, not both",
        id="choices-and-confirm",
    ),
    pytest.param(
        '[[agents]]\nbehaviour = "no_such_module_xyz:worker"\n',
        "s.toml:6: agents[0].behaviour: cannot import 'no_such_module_xyz:worker':"
        " ModuleNotFoundError: No module named 'no_such_module_xyz'",
        id="behaviour-does-not-import",
    ),
    pytest.param(
        '[[agents]]\nbehaviour = "tests.journal_behaviors:nothing_here"\n',
        "s.toml:6: agents[0].behaviour: cannot import 'tests.journal_behaviors:nothing_here':"
        " 'tests.journal_behaviors' has no 'nothing_here'",
        id="behaviour-missing-function",
    ),
    pytest.param(
        '[[agents]]\nbehaviour = "worker"\n',
        "s.toml:6: agents[0].behaviour: must name a behaviour as 'module:function', got 'worker'",
        id="behaviour-not-a-target",
    ),
    pytest.param(
        '[[agents]]\nbehaviour = "tests.journal_behaviors:worker"\nsteps = [{ think = "x" }]\n',
        "s.toml:5: agents[0]: an agent needs exactly one of `behaviour` or `steps`",
        id="behaviour-and-steps",
    ),
    pytest.param(
        '[[agents]]\nbehavior = "tests.journal_behaviors:worker"\n'
        'behaviour = "tests.journal_behaviors:nothing_here"\n',
        "s.toml:5: agents[0]: an agent gives both `behavior` and `behaviour`"
        " ('tests.journal_behaviors:worker' and 'tests.journal_behaviors:nothing_here'):"
        " give one",
        id="behavior-and-behaviour",  # the American spelling was dropped without a word
    ),
    pytest.param(
        '[tools.both]\nshell = ["true"]\nsleep = true\n' + AGENT,
        "s.toml:5: tools.both: a tool needs exactly one of python, shell, sleep, ask_user,"
        " got shell and sleep",
        id="tool-of-two-kinds",
    ),
    pytest.param(
        "[tools.nap]\nsleep = false\n" + AGENT,
        "s.toml:6: tools.nap.sleep: must be true to declare a sleep tool, got false",
        id="sleep-false",
    ),
    pytest.param(
        '[tools.fetch]\npython = "no_such_module_xyz:fetch"\n' + AGENT,
        "s.toml:6: tools.fetch.python: cannot import 'no_such_module_xyz:fetch':"
        " ModuleNotFoundError: No module named 'no_such_module_xyz'",
        id="python-tool-does-not-import",
    ),
    pytest.param(
        '[[agents]]\nname = "w"\nsteps = [{ think = "x" }]\n'
        '[[agents]]\nname = "w"\nsteps = [{ think = "x" }]\n',
        "s.toml:9: agents[1].name: agent id 'w' is also used by agents[0]",
        id="duplicate-agent-id",
    ),
    pytest.param(
        '[[agents]]\nname = "a7"\nsteps = [{ think = "x" }]\n',
        "s.toml:6: agents[0].name: agent id 'a7' is reserved for agents without a name",
        id="reserved-agent-id",
    ),
    pytest.param(
        '[[agents]]\nname = "my agent"\nsteps = [{ think = "x" }]\n',
        "s.toml:6: agents[0].name: agent id 'my agent' may hold only letters, digits, '-' and '_'",
        id="bad-agent-id",
    ),
    pytest.param(
        "",
        "s.toml: no agents: add at least one [[agents]] table",
        id="no-agents",
    ),
    pytest.param(
        AGENT + "[operator]\ndelay = 4000\n",
        "s.toml:8: operator.delay: 4000.0 is not before the prompt deadline"
        " (world.interaction_timeout_secs = 3600.0): every prompt would expire",
        id="operator-slower-than-the-deadline",
    ),
    pytest.param(
        AGENT + '[operator]\npolicy = "maybe"\n',
        "s.toml:8: operator.policy: must be one of 'approve', 'deny', 'first-choice', 'text',"
        " 'none', got 'maybe'",
        id="bad-policy",
    ),
    pytest.param(
        AGENT + "[[agents]]\nsteps = [{ spawn = [{ sleep = -1 }] }]\n",
        "s.toml:8: agents[1].steps[0].spawn[0].sleep: must be a number >= 0, got -1",
        id="nested-spawn-step",
    ),
    pytest.param(
        AGENT + "extra = 1\n",
        "s.toml:7: agents[0].extra: unknown key 'extra'",
        id="unknown-agent-key",
    ),
    pytest.param(
        '[world]\nlane_backend = "dask"\n' + AGENT,
        's.toml:6: world.lane_backend: lane_backend = "dask" needs world.scheduler_address',
        id="dask-without-scheduler",
    ),
    pytest.param(
        '[world]\nscheduler_address = "tcp://x:8786"\n' + AGENT,
        "s.toml:6: world.scheduler_address: only used with lane_backend = \"dask\", not 'threads'",
        id="scheduler-without-dask",
    ),
    pytest.param(
        '[world]\nlane_backend = "dask"\nscheduler_address = "tcp://x:8786"\nworkers = 4\n' + AGENT,
        "s.toml:8: world.workers: only used with lane_backend = \"dask-local\", not 'dask'",
        id="workers-without-local-cluster",
    ),
    pytest.param(
        '[world]\nlane_backend = "cluster"\n' + AGENT,
        "s.toml:6: world.lane_backend: must be one of 'threads', 'dask', 'dask-local', got 'cluster'",
        id="unknown-backend",
    ),
    pytest.param(
        '[world]\nlane_backend = "dask-local"\n[tools.person]\nask_user = true\n' + AGENT,
        "s.toml:8: tools.person.ask_user: tool 'person' asks a person and must run on this host;"
        " it cannot be used with lane_backend = 'dask-local' (use an ask step instead)",
        id="ask-user-on-a-cluster",
    ),
]


@pytest.mark.parametrize(("body", "expected"), MISTAKES)
def test_each_kind_of_mistake_gets_its_precise_message(body, expected):
    assert problems(body) == [expected]


def test_every_problem_is_reported_at_once_in_line_order():
    found = problems(
        """\
        [world]
        clock = "fast"
        [[agents]]
        count = -1
        steps = [{ thnk = "x" }]
        """
    )
    assert found == [
        "s.toml:6: world.clock: must be one of 'real', 'virtual', got 'fast'",
        "s.toml:8: agents[0].count: must be an integer 0..1,000,000, got -1",
        "s.toml:9: agents[0].steps[0]: unknown step 'thnk' (did you mean 'think'?)",
    ]


def test_a_toml_syntax_error_names_its_line_and_column():
    with pytest.raises(ScenarioError) as caught:
        parse_scenario("[world]\nseed = = 1\n", "s.toml")
    (problem,) = caught.value.problems
    assert problem.startswith("s.toml: not valid TOML: ")
    assert "line 2, column 8" in problem


def test_a_missing_file_is_a_scenario_error(tmp_path):
    with pytest.raises(ScenarioError, match="no such scenario file"):
        load_scenario(tmp_path / "nope.toml")


def test_the_bad_example_lists_every_mistake_it_holds():
    with pytest.raises(ScenarioError) as caught:
        load_scenario(EXAMPLES / "bad.toml")
    found = caught.value.problems
    assert len(found) >= 10
    where = str(EXAMPLES / "bad.toml")
    assert f"{where}:35: agents[2].steps[0]: unknown step 'thnk' (did you mean 'think'?)" in found
    lines = [int(p[len(where) + 1 :].split(":")[0]) for p in found]
    assert lines == sorted(lines)


@pytest.mark.parametrize("name", ["quickstart", "factory", "needs_a_person"])
def test_the_examples_check(name):
    scenario = load_scenario(EXAMPLES / f"{name}.toml")
    assert scenario.agent_count > 0


def test_key_lines_follow_tables_arrays_of_tables_and_inline_values():
    text = (
        '[tools."my tool"]\n'
        'shell = ["a", "{b}"]\n'
        "[[agents]]\n"
        "steps = [\n"
        '  { think = "a, ] }" },\n'
        '  { tools = [{ name = "x" }] },\n'
        "]\n"
        "[[agents]]\n"
        "[[agents.steps]]\n"
        'think = """two\nlines"""\n'
        "[[agents.steps]]\n"
        "finish = 1\n"
    )
    found = {format_path(path): line for path, line in key_lines(text).items()}
    assert found['tools."my tool".shell[1]'] == 2
    assert found["agents[0].steps[0].think"] == 5
    assert found["agents[0].steps[1].tools[0].name"] == 6
    assert found["agents[1]"] == 8
    assert found["agents[1].steps[0].think"] == 10
    assert found["agents[1].steps[1].finish"] == 13


SCRIPT = """\
[world]
clock = "virtual"
seed = 3
[tools.shout]
python = "tests.scenario.test_scenario:shout"
[tools.approve_me]
python = "tests.scenario.test_scenario:shout"
requires_approval = true
[models.default]
replies = ["first idea", "second idea"]
[[agents]]
name = "boss"
message = "build {i}"
steps = [
    { think = "plan {message}" },
    { tools = [{ name = "shout", args = { text = "{last} for {agent}" } }] },
    { sleep = 30 },
    { ask = "Which?", choices = ["left", "right"] },
    { spawn = [{ think = "part" }, { finish = "{message}: {last}" }], count = 2, message = "{last}-{i}" },
    { tools = [{ name = "approve_me", args = { text = "ship" } }] },
    { finish = "{message} -> {last}" },
]
[operator]
delay = 5
policy = "approve"
"""


def shout(args, ctx):
    """A python tool for SCRIPT."""
    return str(args["text"]).upper()


def test_scripted_steps_thread_each_result_into_the_next_step(tmp_path):
    path = tmp_path / "script.toml"
    path.write_text(SCRIPT)
    scenario = load_scenario(path)
    world = build_world(scenario)
    try:
        Operator(world, delay=5, policy="approve")
        (boss,) = spawn_agents(world, scenario)
        world.run_until_idle(timeout=10)
        assert boss == "boss"
        assert world.status(boss).kind is StatusKind.COMPLETE
        children = [a for a in world.agents() if a.startswith("boss.")]
        assert [world.result(c) for c in children] == ["left-0: first idea", "left-1: first idea"]
        assert world.result(boss) == "build 0 -> SHIP"
        history = [e.content for e in world.history(boss)]
        assert "FIRST IDEA FOR BOSS" in str(history)
    finally:
        world.close()


def test_the_operator_answers_exactly_its_delay_after_a_prompt_opens_in_world_time(tmp_path):
    path = tmp_path / "script.toml"
    path.write_text(SCRIPT)
    scenario = load_scenario(path)
    world = build_world(scenario)
    settled: list[PromptSettled] = []
    world.observe(
        lambda report, inputs: settled.extend(i for _, i in inputs if type(i) is PromptSettled)
    )
    try:
        Operator(world, delay=5, policy="approve")
        spawn_agents(world, scenario)
        world.run_until_idle(timeout=10)
    finally:
        world.close()
    assert [s.how for s in settled] == [Settlement.ANSWERED, Settlement.ANSWERED]
    assert [s.at - s.opened_at for s in settled] == [5.0, 5.0]
    assert settled[1].kind is InteractionKind.TOOL_APPROVAL


@pytest.mark.parametrize(
    ("policy", "kind", "expected"),
    [
        ("approve", "confirm", (True, None, "yes")),
        ("approve", "choice", (None, 0, "left")),
        ("approve", "free_text", (None, None, "yes")),
        ("deny", "confirm", (False, None, "no")),
        ("deny", "tool_approval", (False, None, "no")),
        ("deny", "choice", (None, None, "no")),
        ("first-choice", "choice", (None, 0, "left")),
        ("first-choice", "confirm", (None, None, "ok")),
        ("text", "confirm", (None, None, "ok")),
        ("text", "free_text", (None, None, "ok")),
    ],
)
def test_each_operator_policy_gives_its_answer(policy, kind, expected):
    requests = {
        "confirm": InteractionRequest.confirm("r", "ok?"),
        "choice": InteractionRequest.choice("r", "which?", ["left", "right"]),
        "free_text": InteractionRequest.free_text("r", "name?"),
        "tool_approval": InteractionRequest.tool_approval("r", "rm", {}),
    }
    response = operator_response(requests[kind], policy)
    assert response is not None
    assert (response.approved, response.choice, response.value) == expected


def test_the_none_policy_never_answers():
    assert operator_response(InteractionRequest.confirm("r", "ok?"), "none") is None


def test_a_journal_of_a_scenario_replays_with_its_scripted_behaviours(tmp_path):
    path = tmp_path / "script.toml"
    path.write_text(SCRIPT)
    scenario = load_scenario(path)
    journal = tmp_path / "run.db"
    world = build_world(scenario, journal=Journal.create(journal, scenario=scenario.header()))
    try:
        Operator(world, delay=5, policy="approve")
        spawn_agents(world, scenario)
        world.run_until_idle(timeout=10)
    finally:
        world.close()
    report = replay(journal)
    assert report.agents == 3
    assert report.ticks == world.tick_count


def test_register_scenario_behaviors_rebuilds_them_from_a_stored_header(tmp_path):
    path = tmp_path / "script.toml"
    path.write_text(SCRIPT)
    header = load_scenario(path).header()
    registry = BehaviorRegistry()
    register_scenario_behaviors(registry, header)
    assert registry.resolve("scenario:agents[0]") is not None
    assert registry.resolve("scenario:agents[0].steps[4].spawn") is not None
    with pytest.raises(ScenarioError, match="stores no scenario text"):
        register_scenario_behaviors(BehaviorRegistry(), {"path": "x.toml"})


def test_python_tools_and_behaviours_import_from_beside_the_scenario(tmp_path):
    (tmp_path / "beside_mod_xyz.py").write_text(
        "from runtime import Sleep\n"
        "def worker(turn):\n"
        "    yield Sleep(1)\n"
        "    return 'slept'\n"
        "def tool(args, ctx):\n"
        "    return 1\n"
    )
    (tmp_path / "s.toml").write_text(
        '[world]\nclock = "virtual"\n'
        '[tools.t]\npython = "beside_mod_xyz:tool"\n'
        '[[agents]]\nbehaviour = "beside_mod_xyz:worker"\n'
    )
    scenario = load_scenario(tmp_path / "s.toml")
    world = build_world(scenario)
    try:
        (agent,) = spawn_agents(world, scenario)
        world.run_until_idle(timeout=10)
        assert world.result(agent) == "slept"
    finally:
        world.close()


def test_a_module_that_exits_at_import_is_a_problem_not_a_silent_success(tmp_path):
    # `sys.exit(0)` at import ended `tickwork validate` with exit 0 and nothing printed,
    # and the files after it were never checked.
    (tmp_path / "exits_at_import.py").write_text("import sys\nsys.exit(0)\n")
    (tmp_path / "s.toml").write_text('[[agents]]\nbehaviour = "exits_at_import:fn"\n')
    with pytest.raises(ScenarioError) as caught:
        load_scenario(tmp_path / "s.toml")
    assert "cannot import 'exits_at_import:fn': SystemExit: 0" in caught.value.problems[0]


def test_key_lines_go_on_past_an_escaped_quote_run_in_a_multi_line_string():
    # `\"""` inside a basic multi-line string was taken for its end: the lines after it
    # counted as the string's, and the keys there got the wrong line or none.
    text = '[[agents]]\nmessage = """say \\""" twice"""\nsteps = 1\ncolour = 1\n[operator]\nx = 2\n'
    found = {format_path(path): line for path, line in key_lines(text).items()}
    assert found["agents[0].colour"] == 4
    assert found["operator.x"] == 6
