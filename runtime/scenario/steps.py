"""Scripted steps: behaviours written in a scenario file instead of in Python.

An agent's ``steps`` is an array of tables, each doing one thing::

    { think = "plan for {message}", model = "default" }          # -> Think
    { tools = [{ name = "grep", args = { pattern = "x" } }] }     # -> CallTools, in order
    { ask = "Ship it?", confirm = true }                          # -> Ask (or choices = [...])
    { sleep = 5 }                                                 # -> Sleep, world seconds
    { spawn = [ ...steps... ], count = 3, message = "part {i}" }  # -> Spawn each, then Join
    { finish = "done: {last}" }                                   # -> the turn's result

Strings are ``str.format`` templates over ``{message}`` (the turn's message), ``{agent}``
(the agent's id) and ``{last}`` (the text of the previous step's result); a spawn's
``message`` and ``name`` may use ``{i}``, the child's index. Every step is checked when the
scenario loads (unknown steps, tools, models and placeholders, missing tool arguments), so a
scripted behaviour cannot fail on its own script at run time.
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable, Collection, Generator, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from components import InteractionRequest, InteractionResponse, ToolCall, ToolResult
from runtime.scenario.check import (
    MAX_AGENTS,
    Checker,
    Field,
    boolean,
    integer,
    number,
    show,
    string_list,
    suggest,
    text,
)
from runtime.scenario.toml_lines import Path, format_path
from runtime.world import Action, Ask, Behavior, CallTools, Join, Sleep, Spawn, Think, Turn

__all__ = ["STEP_VERBS", "ScriptContext", "Step", "parse_steps", "scripted"]

STEP_FIELDS = frozenset({"message", "agent", "last"})
SPAWN_FIELDS = STEP_FIELDS | {"i"}


@dataclass(frozen=True, slots=True)
class ThinkStep:
    """Ask a model to complete ``prompt``."""

    prompt: str
    model: str


@dataclass(frozen=True, slots=True)
class CallSpec:
    """One tool call of a tools step; string ``args`` values are templates."""

    id: str
    name: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolsStep:
    """Run ``calls`` as one batch."""

    calls: tuple[CallSpec, ...]


@dataclass(frozen=True, slots=True)
class AskStep:
    """Put a question to a person: free text, one of ``choices``, or yes/no (``confirm``)."""

    prompt: str
    choices: tuple[str, ...]
    confirm: bool
    stage: str


@dataclass(frozen=True, slots=True)
class SleepStep:
    """Wait ``seconds`` of world time."""

    seconds: float


@dataclass(frozen=True, slots=True)
class SpawnStep:
    """Start ``count`` children running the behaviour named ``behavior``; maybe join them."""

    behavior: str
    message: str
    name: str
    count: int
    join: bool
    started: int = 0  # agents it starts in all: the children and what their steps start


def agents_started(steps: tuple[Step, ...] | None) -> int:
    """How many agents one agent running ``steps`` starts through spawn steps, nested
    ones included (a behaviour imported from a module counts none: its code is not read)."""
    return sum(step.started for step in steps or () if isinstance(step, SpawnStep))


@dataclass(frozen=True, slots=True)
class FinishStep:
    """End the turn with ``value`` as its result."""

    value: str


Step: TypeAlias = ThinkStep | ToolsStep | AskStep | SleepStep | SpawnStep | FinishStep

# Each verb's own value check and the other keys a step of that verb may have.
_MODIFIERS: dict[str, dict[str, Field]] = {
    "think": {"model": Field(text, "default")},
    "tools": {},
    "ask": {
        "choices": Field(string_list, None),
        "confirm": Field(boolean, False),
        "stage": Field(text, ""),
    },
    "sleep": {},
    "spawn": {
        "message": Field(text, ""),
        "name": Field(text, ""),
        "count": Field(integer(1, MAX_AGENTS), 1),
        "join": Field(boolean, True),
    },
    "finish": {},
}
STEP_VERBS = tuple(_MODIFIERS)


@dataclass(slots=True)
class ScriptContext:
    """What step checking needs from the rest of the scenario.

    ``tools`` maps each tool name to the argument names its calls must carry (None: any);
    ``register(name, behavior)`` records a behaviour that a spawn step starts;
    ``resolve(path, target)`` imports a ``module:function`` behaviour (None if it fails).
    """

    checker: Checker
    tools: Mapping[str, frozenset[str] | None]
    models: Collection[str]
    register: Callable[[str, Behavior], None]
    resolve: Callable[[Path, str], Behavior | None]


def parse_steps(ctx: ScriptContext, path: Path, value: Any) -> tuple[Step, ...] | None:
    """Check the steps array at ``path``; the steps, or None when any problem was found."""
    checker = ctx.checker
    if not isinstance(value, list) or not value:
        checker.problem(path, f"must be a non-empty array of steps, got {show(value)}")
        return None
    before = len(checker.problems)
    steps: list[Step] = []
    for index, raw in enumerate(value):
        step_path = (*path, index)
        table = checker.table(step_path, raw)
        if table is None:
            continue
        step = _parse_step(ctx, step_path, table)
        if step is not None:
            steps.append(step)
        if isinstance(step, FinishStep) and index < len(value) - 1:
            checker.problem((*path, index + 1), "unreachable: it comes after a finish step")
    return tuple(steps) if len(checker.problems) == before else None


def _parse_step(ctx: ScriptContext, path: Path, table: dict[str, Any]) -> Step | None:
    checker = ctx.checker
    verbs = [key for key in table if key in _MODIFIERS]
    if len(verbs) != 1:
        if verbs:
            checker.problem(path, f"a step does one thing, got {' and '.join(map(repr, verbs))}")
            return None
        others = [key for key in table if not any(key in m for m in _MODIFIERS.values())]
        if len(others) == 1:
            checker.problem(path, f"unknown step {others[0]!r}{suggest(others[0], STEP_VERBS)}")
        else:
            checker.problem(path, f"a step needs one of {', '.join(STEP_VERBS)}")
        return None
    verb = verbs[0]
    known = _MODIFIERS[verb]
    rest = {k: v for k, v in table.items() if k != verb}
    checker.unknown_keys(path, rest, known, where=f" in a {verb} step")
    mods = checker.fields(path, {k: v for k, v in rest.items() if k in known}, known)
    mods["_given"] = set(rest)
    return _BUILDERS[verb](ctx, path, table[verb], mods)


def _think(ctx: ScriptContext, path: Path, value: Any, mods: dict[str, Any]) -> Step | None:
    checker = ctx.checker
    if not checker.check((*path, "think"), value, text):
        return None
    checker.template((*path, "think"), value, STEP_FIELDS)
    model = mods["model"]
    if model not in ctx.models:
        known = ", ".join(sorted(ctx.models))
        fix = f"known: {known}" if known else f"define it under [models.{model}]"
        at = (*path, "model" if "model" in mods["_given"] else "think")
        checker.problem(at, f"unknown model {model!r} ({fix})")
        return None
    return ThinkStep(value, model)


def _tools(ctx: ScriptContext, path: Path, value: Any, mods: dict[str, Any]) -> Step | None:
    checker = ctx.checker
    at = (*path, "tools")
    if not isinstance(value, list) or not value:
        checker.problem(at, f"must be a non-empty array of tool calls, got {show(value)}")
        return None
    calls: list[CallSpec] = []
    for n, raw in enumerate(value, 1):
        call = _call(ctx, (*at, n - 1), raw, f"c{n}")
        if call is not None:
            calls.append(call)
    ids = [call.id for call in calls]
    for dup in sorted({i for i in ids if ids.count(i) > 1}):
        checker.problem(at, f"tool call id {dup!r} is used twice in one batch")
    return ToolsStep(tuple(calls)) if len(calls) == len(value) else None


_CALL_FIELDS = {
    "name": Field(text, None),
    "args": Field(lambda value: None, None),  # checked below: it needs its own message
    "id": Field(text, None),
}


def _call(ctx: ScriptContext, path: Path, raw: Any, default_id: str) -> CallSpec | None:
    checker = ctx.checker
    if isinstance(raw, str):
        raw = {"name": raw}
    table = checker.table(path, raw)
    if table is None:
        return None
    fields = checker.fields(path, table, _CALL_FIELDS)
    name, args = fields["name"], fields["args"] if fields["args"] is not None else {}
    if name is None:
        checker.problem(path, "a tool call needs a `name`")
        return None
    if not isinstance(args, dict):
        checker.problem((*path, "args"), f"must be a table of arguments, got {show(args)}")
        return None
    if name not in ctx.tools:
        known = ", ".join(sorted(ctx.tools)) or "none: add a [tools.NAME] table"
        checker.problem((*path, "name"), f"unknown tool {name!r} (known: {known})")
        return None
    needs = ctx.tools[name]
    for missing in sorted((needs or frozenset()) - set(args)):
        checker.problem(path, f"tool {name!r} needs the argument {missing!r}")
    _check_arg_templates(checker, (*path, "args"), args)
    return CallSpec(fields["id"] or default_id, name, args)


def _check_arg_templates(checker: Checker, path: Path, value: Any) -> None:
    if isinstance(value, str):
        checker.template(path, value, STEP_FIELDS)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_arg_templates(checker, (*path, key), item)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_arg_templates(checker, (*path, index), item)


def _ask(ctx: ScriptContext, path: Path, value: Any, mods: dict[str, Any]) -> Step | None:
    checker = ctx.checker
    if not checker.check((*path, "ask"), value, text):
        return None
    checker.template((*path, "ask"), value, STEP_FIELDS)
    choices, confirm = mods["choices"], mods["confirm"]
    if choices is not None and confirm:
        checker.problem(path, "an ask step takes `choices` or `confirm = true`, not both")
        return None
    return AskStep(value, tuple(choices or ()), confirm, mods["stage"])


def _sleep(ctx: ScriptContext, path: Path, value: Any, mods: dict[str, Any]) -> Step | None:
    if not ctx.checker.check((*path, "sleep"), value, number(0.0)):
        return None
    return SleepStep(float(value))


def _spawn(ctx: ScriptContext, path: Path, value: Any, mods: dict[str, Any]) -> Step | None:
    checker = ctx.checker
    at = (*path, "spawn")
    name = f"scenario:{format_path(at)}"
    steps: tuple[Step, ...] | None = None
    if isinstance(value, str):
        behavior = ctx.resolve(at, value)
    else:
        steps = parse_steps(ctx, at, value)
        behavior = None if steps is None else scripted(steps)
    for key in ("message", "name"):
        checker.template((*path, key), mods[key], SPAWN_FIELDS)
    # Counts multiply down nested spawns: each was checked alone, and a few lines started
    # 10^9 agents past the scenario's bound (1.1M made, 1.3 GB, before a person stopped it).
    started = mods["count"] * (1 + agents_started(steps))
    if started > MAX_AGENTS:
        checker.problem(
            (*path, "count"),
            f"this spawn would start {started:,} agents, over the maximum of {MAX_AGENTS:,}",
        )
        return None
    if behavior is None:
        return None
    ctx.register(name, behavior)
    return SpawnStep(name, mods["message"], mods["name"], mods["count"], mods["join"], started)


def _finish(ctx: ScriptContext, path: Path, value: Any, mods: dict[str, Any]) -> Step | None:
    if not ctx.checker.check((*path, "finish"), value, text):
        return None
    ctx.checker.template((*path, "finish"), value, STEP_FIELDS)
    return FinishStep(value)


_BUILDERS: dict[str, Callable[[ScriptContext, Path, Any, dict[str, Any]], Step | None]] = {
    "think": _think,
    "tools": _tools,
    "ask": _ask,
    "sleep": _sleep,
    "spawn": _spawn,
    "finish": _finish,
}


def scripted(steps: tuple[Step, ...]) -> Behavior:
    """The behaviour that runs ``steps`` once per turn (checked steps only)."""

    def run(turn: Turn) -> Generator[Action, Any, Any]:
        values = {
            "message": "" if turn.message is None else str(turn.message),
            "agent": turn.agent_id,
            "last": "",
        }
        for step in steps:
            if isinstance(step, FinishStep):
                return _fill(step.value, values)
            values["last"] = yield from _run_step(step, values)
        return values["last"]

    return run


def _run_step(step: Step, values: dict[str, str]) -> Generator[Action, Any, str]:
    if isinstance(step, ThinkStep):
        reply = yield Think(_fill(step.prompt, values), step.model)
        return str(reply.text)
    if isinstance(step, ToolsStep):
        calls = [ToolCall(c.id, c.name, _fill_args(c.args, values)) for c in step.calls]
        results = yield CallTools(*calls)
        return "; ".join(_result_text(r) for r in results)
    if isinstance(step, AskStep):
        prompt = _fill(step.prompt, values)
        if step.choices:
            request = InteractionRequest.choice("", prompt, step.choices, step.stage)
        elif step.confirm:
            request = InteractionRequest.confirm("", prompt, step.stage)
        else:
            request = InteractionRequest.free_text("", prompt, step.stage)
        response = yield Ask(request)
        return _answer_text(step, response)
    if isinstance(step, SleepStep):
        yield Sleep(step.seconds)
        return values["last"]
    assert isinstance(step, SpawnStep)
    children = []
    for i in range(step.count):
        local = {**values, "i": str(i)}
        child = yield Spawn(step.behavior, _fill(step.message, local), _fill(step.name, local))
        children.append(child)
    if not step.join:
        return ", ".join(children)
    results = yield Join(*children)
    return ", ".join("" if r is None else str(r) for r in results)


def _fill(template: str, values: Mapping[str, str]) -> str:
    return string.Formatter().vformat(template, (), values)


def _fill_args(value: Any, values: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return _fill(value, values)
    if isinstance(value, dict):
        return {k: _fill_args(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill_args(v, values) for v in value]
    return value


def _result_text(result: ToolResult) -> str:
    if result.error is not None:
        return f"error: {result.error}"
    output = result.output
    if isinstance(output, dict) and isinstance(output.get("stdout"), str):
        return str(output["stdout"]).strip()
    if isinstance(output, str):
        return output
    return json.dumps(output, sort_keys=True)


def _answer_text(step: AskStep, response: InteractionResponse) -> str:
    if step.choices and response.choice is not None and 0 <= response.choice < len(step.choices):
        return step.choices[response.choice]
    if step.confirm and response.approved is not None:
        return "yes" if response.approved else "no"
    return response.value
