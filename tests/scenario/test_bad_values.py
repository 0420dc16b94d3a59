"""Every bad scenario value is one clear problem, exit status 2: never a traceback or a 70."""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.cli.main import main
from runtime.scenario import MAX_AGENTS

AGENT = '[[agents]]\nsteps = [{ finish = "x" }]\n'


def validate(text: str) -> tuple[int, str]:
    """``tickwork validate`` of a scenario with ``text``: its exit status and stderr."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.toml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            status = main(["validate", str(path)])
    return status, err.getvalue().replace(str(path), "s.toml")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[tools.t]\nshell = ["echo", "{"]\n' + AGENT, "s.toml:2: tools.t.shell[1]: bad template"),
        ('[tools.t]\nshell = ["echo", "}"]\n' + AGENT, "s.toml:2: tools.t.shell[1]: bad template"),
        ("[world]\ntime_limit = 1" + "0" * 400 + "\n" + AGENT, "world.time_limit: must be a"),
        ("[world]\nseed = 1" + "0" * 5000 + "\n" + AGENT, "s.toml:2: an integer of more than"),
        ("[[agents]]\ncount = 100000000000\nsteps = [{ finish = 'x' }]\n", "over the maximum"),
        (
            "[[agents]]\nsteps = [{ spawn = [{ finish = 'x' }], count = 100000000000 }]\n",
            "count: must be an integer 1..1,000,000",
        ),
        ("[world]\ntool_capacity = 10000000000000\n" + AGENT, "tool_capacity: must be an"),
        ("[world]\nmax_ticks = nan\n" + AGENT, "world.max_ticks: must be an integer"),
        ("[world]\nx = [" + "[" * 3000 + "]" * 3001 + "\n" + AGENT, "s.toml"),
    ],
)
def test_odd_values_are_one_problem_with_exit_2(text, expected):
    status, err = validate(text)
    assert status == 2, err
    assert expected in err
    assert "internal error" not in err and "Traceback" not in err


def test_the_agent_count_bound_is_documented_and_enforced_across_entries():
    half = MAX_AGENTS // 2 + 1
    entry = f"[[agents]]\ncount = {half}\nsteps = [{{ finish = 'x' }}]\n"
    status, err = validate(entry * 2)
    assert status == 2
    assert "s.toml:5: agents[1].count: the scenario would start" in err
    assert f"{MAX_AGENTS:,}" in err


def test_control_characters_in_keys_and_values_are_escaped_not_printed():
    forged = "\u001b[31mred\nFAKE.toml:1: all good"
    text = f"[world]\n{json.dumps(forged)} = 1\nclock = {json.dumps(forged)}\n{AGENT}"
    status, err = validate(text)
    assert status == 2
    assert "\u001b" not in err
    assert "\\x1b[31mred\\nFAKE.toml:1: all good" in err
    assert not any(line.startswith("FAKE.toml") for line in err.splitlines())


def test_a_broken_tool_gets_one_problem_not_a_second_wrong_one():
    text = '[tools.t]\nsleep = -2\n[[agents]]\nsteps = [{ tools = [{ name = "t" }] }]\n'
    status, err = validate(text)
    assert status == 2
    assert err.count("\n") == 2, err  # the problem, then the count line
    assert "tools.t.sleep: must be true or false, got -2" in err
    assert "unknown tool" not in err


def test_a_misspelt_array_of_tables_has_its_line():
    status, err = validate('name = "x"\n\n[[agent]]\nsteps = [{ finish = "x" }]\n')
    assert status == 2
    assert "s.toml:3: agent: unknown top-level key 'agent' (did you mean 'agents'?)" in err


BASE: dict[str, Any] = {
    "name": "fuzzed",
    "world": {"seed": 3, "clock": "virtual", "tool_capacity": 2, "time_limit": 5},
    "tools": {"t": {"shell": ["echo", "{x}"], "timeout": 2}, "z": {"sleep": True}},
    "models": {"default": {"replies": ["a", "b"], "delay": 0.1, "cycle": True}},
    "agents": [
        {
            "count": 2,
            "name": "w-{i}",
            "message": "task {i}",
            "steps": [
                {"think": "plan {message}"},
                {"tools": [{"name": "t", "args": {"x": "1"}}]},
                {"ask": "where?", "choices": ["a", "b"]},
                {"spawn": [{"finish": "c"}], "count": 2},
                {"finish": "{last}"},
            ],
        }
    ],
    "operator": {"delay": 1, "policy": "approve"},
}

weird_numbers = st.one_of(
    st.integers(),
    st.integers(min_value=10**300, max_value=10**4000),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e308, 5e-324]),
    st.floats(),
)
scalars = st.one_of(
    st.booleans(),
    weird_numbers,
    st.text(max_size=20),
    st.text(alphabet=st.sampled_from("{}[]\\\"'\n\t\u001b\u0000é漢 \U0001f600"), max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
keys = st.one_of(
    st.sampled_from(
        [
            "count",
            "name",
            "steps",
            "shell",
            "sleep",
            "replies",
            "seed",
            "clock",
            "think",
            "tools",
            "spawn",
            "behaviour",
            "delay",
            "policy",
            "agents",
            "world",
            "choices",
        ]
    ),
    st.text(max_size=10),
)


def _paths(data: Any, path: tuple = ()) -> list[tuple]:
    found = [path]
    if isinstance(data, dict):
        for key, value in data.items():
            found += _paths(value, (*path, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += _paths(value, (*path, index))
    return found


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    data = json.loads(json.dumps(BASE))
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in _paths(data) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        last = path[-1]
        how = draw(st.sampled_from(["value", "key", "drop", "add", "nest"]))
        if how == "value":
            parent[last] = draw(values)
        elif how == "drop" and isinstance(parent, dict):
            del parent[last]
        elif how == "key" and isinstance(parent, dict):
            parent[draw(keys)] = parent.pop(last)
        elif how == "add" and isinstance(parent, dict):
            parent[draw(keys)] = draw(values)
        elif how == "nest":
            parent[last] = [parent[last]] if draw(st.booleans()) else {draw(keys): parent[last]}
    return data


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if abs(value) < 10**4000 else "1" + "0" * 4400
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def toml_document(data: dict[str, Any]) -> str:
    lines = []
    for key, value in data.items():
        if key == "agents" and isinstance(value, list) and all(isinstance(v, dict) for v in value):
            for entry in value:
                lines.append("[[agents]]")
                lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in entry.items()]
            continue
        lines.append(f"{json.dumps(key)} = {toml_value(value)}")
    return "\n".join(lines) + "\n"


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=mutated())
def test_fuzzed_scenarios_get_exit_0_or_2_and_never_a_traceback(data):
    status, err = validate(toml_document(data))
    assert status in (0, 2), err
    assert "internal error" not in err and "Traceback" not in err
    assert all(ch.isprintable() for line in err.splitlines() for ch in line), err


def test_validate_checks_each_scenario_against_the_modules_beside_it(tmp_path, monkeypatch):
    # Two directories each with a `team.py`: the second scenario's `team:helper` was
    # looked up in the first directory's module, already imported, and reported missing.
    # What `team` imports from a package directory inside the project (its `.venv`, on
    # the path) stays imported: an extension module cannot be imported a second time.
    vendor = tmp_path / "one" / ".venv" / "site"
    vendor.mkdir(parents=True)
    (vendor / "vendored_lib_for_validate.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(vendor))
    for name, function in (("one", "worker"), ("two", "helper")):
        folder = tmp_path / name
        uses = "import vendored_lib_for_validate\n" if name == "one" else ""
        (folder / "team.py").parent.mkdir(exist_ok=True)
        (folder / "team.py").write_text(f"{uses}def {function}(turn):\n    return 'done'\n")
        (folder / "s.toml").write_text(f'[[agents]]\nbehavior = "team:{function}"\n')
    try:
        _validate_both(tmp_path)
        assert "vendored_lib_for_validate" in sys.modules and "team" not in sys.modules
    finally:
        sys.modules.pop("vendored_lib_for_validate", None)
        sys.modules.pop("team", None)


def _validate_both(tmp_path: Path) -> None:
    """``tickwork validate one/s.toml two/s.toml`` in this process: both ok, exit 0."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        status = main(["validate", str(tmp_path / "one/s.toml"), str(tmp_path / "two/s.toml")])
    assert status == 0, err.getvalue()
    assert out.getvalue().count(": ok (") == 2


def test_validate_keeps_a_package_beside_a_scenario_whole_when_it_holds_an_extension(
    tmp_path,
):
    # The package was dropped and its extension module kept: imported again, the package
    # never bound the extension as its attribute, and the next scenario failed to import.
    import types

    from runtime.cli.check import _forget_modules_beside

    before = set(sys.modules)
    made = {
        "fastpkg": tmp_path / "fastpkg" / "__init__.py",
        "fastpkg._speed": tmp_path / "fastpkg" / "_speed.cpython-311-x86_64-linux-gnu.so",
        "plainpkg": tmp_path / "plainpkg" / "__init__.py",
        "plainpkg.util": tmp_path / "plainpkg" / "util.py",
    }
    try:
        for name, file in made.items():
            module = types.ModuleType(name)
            module.__file__ = str(file)
            sys.modules[name] = module
        _forget_modules_beside(tmp_path, before)
        assert "fastpkg" in sys.modules and "fastpkg._speed" in sys.modules
        assert "plainpkg" not in sys.modules and "plainpkg.util" not in sys.modules
    finally:
        for name in made:
            sys.modules.pop(name, None)


def test_validate_checks_each_scenario_against_its_own_namespace_package(tmp_path):
    # A namespace package (a directory without __init__.py) has no file: it was kept, and
    # the second scenario's `team.agents:helper` looked up in the first one's module.
    for name, function in (("one", "worker"), ("two", "helper")):
        package = tmp_path / name / "team"
        package.mkdir(parents=True)
        (package / "agents.py").write_text(f"def {function}(turn):\n    return 'done'\n")
        (tmp_path / name / "s.toml").write_text(
            f'[[agents]]\nbehavior = "team.agents:{function}"\n'
        )
    try:
        _validate_both(tmp_path)
    finally:
        sys.modules.pop("team.agents", None)
        sys.modules.pop("team", None)
