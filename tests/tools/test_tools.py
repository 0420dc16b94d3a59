"""Tools: every failure is an error result for that call alone, and no argument is a command."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import sys
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from components import (
    InteractionRequest,
    InteractionResponse,
    PromptSettled,
    Settlement,
    ToolCall,
    ToolResult,
)
from runtime.cancel import Cancelled, CancelToken
from runtime.errors import ConfigError
from runtime.hub import InteractionHub
from runtime.lane import ToolJob, ToolLane
from runtime.tools import AskUserTool, ShellTool, SleepTool, ToolContext, ToolRegistry
from tests.conftest import callbacks_of
from tests.lane.test_lane import WAIT, Outcomes, wait_until


def echo_args(args: Mapping[str, Any], ctx: ToolContext) -> object:
    """A module-level tool (pickles by reference)."""
    return {"args": dict(args), "agent": ctx.agent_id, "call": ctx.call_id}


def run(tools: ToolRegistry, name: str, args: Mapping[str, Any] | None = None) -> ToolResult:
    return tools.run_call(ToolCall("c1", name, args or {}), agent_id="a1", cancel=CancelToken())


def test_the_decorator_registers_a_function_under_its_name_and_returns_it():
    tools = ToolRegistry()

    @tools.tool(timeout=5.0)
    def search(args: Mapping[str, Any], ctx: ToolContext) -> object:
        return [args["q"], ctx.agent_id, ctx.call_id]

    @tools.tool("rm", requires_approval=True)
    def remove(args: Mapping[str, Any], ctx: ToolContext) -> object:
        return "gone"

    @tools.tool
    def bare(args: Mapping[str, Any], ctx: ToolContext) -> object:
        return "bare"

    assert search.__name__ == "search" and callable(remove)  # the functions come back
    assert tools.names() == ["bare", "rm", "search"] and len(tools) == 3
    assert "search" in tools and "remove" not in tools
    assert tools.try_get("nope") is None
    assert tools.try_get("search").timeout == 5.0
    assert tools.requires_approval("rm") and not tools.requires_approval("search")
    assert not tools.requires_approval("unknown")
    assert run(tools, "search", {"q": "x"}) == ToolResult("c1", output=["x", "a1", "c1"])
    assert run(tools, "bare") == ToolResult("c1", output="bare")


def test_a_duplicate_or_bad_tool_is_a_config_error_naming_it():
    tools = ToolRegistry()
    tools.add(SleepTool())
    with pytest.raises(ConfigError, match="tool 'sleep' is already registered"):
        tools.add(SleepTool())
    with pytest.raises(ConfigError, match="`timeout` must be > 0 or None, got 0"):
        tools.tool("t", timeout=0)(echo_args)
    with pytest.raises(ConfigError, match="non-empty string"):
        tools.add(ShellTool("", ["true"]))
    # An empty name given to the decorator fell back to the function's ("<lambda>"), and a
    # non-callable raised AttributeError reading its __name__.
    with pytest.raises(ConfigError, match="`name` must be a non-empty string, got ''"):
        tools.tool(name="")
    with pytest.raises(ConfigError, match="a tool must be a function `fn\\(args, ctx\\)`, got 5"):
        tools.tool()(5)  # type: ignore[type-var]
    assert tools.names() == ["sleep"]
    with pytest.raises(ConfigError, match="`argv` of tool 'sh'"):
        ShellTool("sh", "echo hi")
    with pytest.raises(ConfigError, match="`argv` of tool 'sh'"):
        ShellTool("sh", [])
    # These failed each call (TypeError from Popen, ValueError from the run), not the set-up.
    with pytest.raises(ConfigError, match="`env` of tool 'sh' must map strings to strings"):
        ShellTool("sh", ["true"], env={"DEPTH": 3})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="`max_output` of tool 'sh' must be an integer >= 2"):
        ShellTool("sh", ["true"], max_output=0)


@pytest.mark.parametrize(
    ("env", "argv", "shown"),
    [
        ({"A=B": "x"}, ["true"], "'A=B'='x' is no environment variable"),
        ({"": "x"}, ["true"], "''='x' is no environment variable"),
        ({"A": "x\0y"}, ["true"], "'A'='x\\x00y' is no environment variable"),
        (None, ["echo", "a\0b"], "'a\\x00b' holds a NUL character"),
    ],
    ids=["name-with-equals", "empty-name", "value-with-nul", "argv-with-nul"],
)
def test_a_shell_tool_the_os_would_refuse_is_refused_at_set_up(env, argv, shown):
    # Each failed every call (ValueError from the process start), not the set-up.
    with pytest.raises(ConfigError) as caught:
        ShellTool("sh", argv, env=env)
    assert "tool 'sh'" in str(caught.value) and shown in str(caught.value), str(caught.value)


def test_a_hand_made_tool_with_a_bad_virtual_duration_is_refused_when_added():
    class Handmade:  # the `Tool` protocol, not `ToolBase`: nothing checked it before
        name = "handmade"
        timeout = None
        requires_approval = False
        local_only = False
        virtual_duration = float("nan")

        def __call__(self, args, ctx):
            return "done"

    with pytest.raises(
        ConfigError, match="`virtual_duration` must be a finite number >= 0, got nan"
    ):
        ToolRegistry().add(Handmade())  # type: ignore[arg-type]


def test_an_unknown_tool_is_an_error_result_for_that_call_alone():
    tools = ToolRegistry()
    tools.tool()(echo_args)
    calls = [ToolCall("c1", "echo_args"), ToolCall("c2", "x"), ToolCall("c3", "echo_args")]
    results = tools.run_batch(calls, agent_id="a1", cancel=CancelToken())
    assert [r.call_id for r in results] == ["c1", "c2", "c3"]
    assert results[1] == ToolResult("c2", error="unknown tool 'x'")
    assert results[0].ok and results[2].ok


def test_a_raising_tool_becomes_an_error_result():
    tools = ToolRegistry()

    @tools.tool()
    def broken(args: Mapping[str, Any], ctx: ToolContext) -> object:
        raise ValueError("bad input 7")

    assert run(tools, "broken") == ToolResult("c1", error="ValueError: bad input 7")


def test_a_tool_past_its_timeout_is_reported_and_its_token_fires():
    tools = ToolRegistry()
    saw: list[str | None] = []

    @tools.tool(timeout=0.1)
    def patient(args: Mapping[str, Any], ctx: ToolContext) -> object:
        ctx.cancel.wait(WAIT)
        saw.append(ctx.cancel.reason)
        ctx.cancel.raise_if_cancelled()
        return "finished anyway"

    batch = CancelToken()
    started = time.monotonic()
    got = tools.run_call(ToolCall("c1", "patient"), agent_id="a", cancel=batch)
    assert got == ToolResult("c1", error="tool timed out after 0.1s")
    assert saw == ["tool timed out after 0.1s"]
    assert time.monotonic() - started < WAIT - 1  # the token woke it, not its own wait
    assert not batch.cancelled  # the call's token is a child: the batch goes on


def test_a_tool_without_a_timeout_runs_on_its_batch_token_and_leaves_no_callback_on_it():
    tools = ToolRegistry()
    seen: list[CancelToken] = []

    @tools.tool
    def plain(args: Mapping[str, Any], ctx: ToolContext) -> object:
        seen.append(ctx.cancel)
        return 1

    batch = CancelToken()
    assert tools.run_batch(
        [ToolCall("c1", "plain"), ToolCall("c2", "plain")], agent_id="a", cancel=batch
    ) == [ToolResult("c1", output=1), ToolResult("c2", output=1)]
    assert seen == [batch, batch]  # no child token (and its link) per call
    assert callbacks_of(batch) == []


def test_a_tool_without_a_timeout_stopped_by_its_batch_token_is_cancelled_not_an_error():
    tools = ToolRegistry()
    batch = CancelToken()

    @tools.tool
    def obedient(args: Mapping[str, Any], ctx: ToolContext) -> object:
        batch.cancel("interrupted by user")
        ctx.cancel.raise_if_cancelled()
        return "not reached"

    with pytest.raises(Cancelled, match="interrupted by user"):
        tools.run_call(ToolCall("c1", "obedient"), agent_id="a", cancel=batch)


def test_a_tool_that_ignores_its_token_overruns_but_still_reports_the_timeout():
    tools = ToolRegistry()
    never = threading.Event()

    @tools.tool(timeout=0.05)
    def stubborn(args: Mapping[str, Any], ctx: ToolContext) -> object:
        never.wait(0.3)  # deaf to its token
        return "late"

    assert run(tools, "stubborn") == ToolResult("c1", error="tool timed out after 0.05s")


def test_timeouts_share_one_timer_thread_and_a_timeout_message_uses_g_format():
    tools = ToolRegistry()

    @tools.tool(timeout=2.0)
    def quick(args: Mapping[str, Any], ctx: ToolContext) -> object:
        return "ok"

    @tools.tool(timeout=0.2)
    def slow(args: Mapping[str, Any], ctx: ToolContext) -> object:
        ctx.cancel.wait(WAIT)
        return "late"

    def timers() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "tickwork-deadlines"}

    # Counted against those alive before: another test's timer (one made in a test of
    # the timer itself) lives on in this process and is not this test's to count.
    before = timers()
    results: list[ToolResult] = []
    threads = [
        threading.Thread(target=lambda: results.append(run(tools, "slow"))) for _ in range(20)
    ]
    for thread in threads:
        thread.start()
    for _ in range(200):
        assert run(tools, "quick").output == "ok"
    for thread in threads:
        thread.join(WAIT)
    assert results == [ToolResult("c1", error="tool timed out after 0.2s")] * 20
    assert len(timers() - before) <= 1 and timers()  # 220 timed calls, one timer at most


def test_a_non_json_output_is_an_error_result():
    tools = ToolRegistry()
    tools.tool("obj")(lambda args, ctx: object())
    tools.tool("nan")(lambda args, ctx: float("nan"))
    tools.tool("ok")(lambda args, ctx: {"a": [1, 2.5, None, True, "s"]})
    assert "tool 'obj' returned a non-JSON value" in (run(tools, "obj").error or "")
    assert "tool 'nan' returned a non-JSON value" in (run(tools, "nan").error or "")
    assert run(tools, "ok").output == {"a": [1, 2.5, None, True, "s"]}


def test_a_shell_tool_reports_exit_code_and_output():
    tools = ToolRegistry()
    code = "import sys; print(sys.argv[1]); print('oops', file=sys.stderr); sys.exit(3)"
    tools.add(ShellTool("py", [sys.executable, "-c", code, "{word}"]))
    assert run(tools, "py", {"word": "hello"}).output == {
        "exit_code": 3,
        "stdout": "hello\n",
        "stderr": "oops\n",
    }


def test_a_shell_tool_argument_cannot_inject_a_command(tmp_path):
    tools = ToolRegistry()
    tools.add(ShellTool("echo", ["echo", "{text}"]))
    attacks = [
        f"x; touch {tmp_path}/semicolon",
        f"$(touch {tmp_path}/subshell)",
        f"`touch {tmp_path}/backtick`",
        f"x && touch {tmp_path}/and | cat > {tmp_path}/pipe",
        "{text}",  # a value is not formatted again
    ]
    for attack in attacks:
        assert run(tools, "echo", {"text": attack}).output["stdout"] == attack + "\n"
    assert list(tmp_path.iterdir()) == []


def test_a_shell_tool_missing_argument_is_an_error_naming_the_tool_and_the_argument():
    tools = ToolRegistry()
    tools.add(ShellTool("grep", ["grep", "-c", "{pattern}", "{path}"]))
    error = run(tools, "grep", {"path": "/dev/null"}).error
    assert error == "ValueError: tool 'grep' needs the argument 'pattern' (for '{pattern}')"


def test_a_shell_tool_past_its_timeout_is_an_error_result():
    tools = ToolRegistry()
    tools.add(ShellTool("nap", ["sleep", "{secs}"], timeout=0.2))
    started = time.monotonic()
    assert run(tools, "nap", {"secs": "30"}) == ToolResult("c1", error="tool timed out after 0.2s")
    assert time.monotonic() - started < WAIT


def test_ask_user_asks_through_the_hub_from_a_lane_job_and_returns_the_answer():
    hub = InteractionHub(timeout_secs=30)
    tools = ToolRegistry()
    tools.add(AskUserTool())
    outcomes = Outcomes()
    calls = (
        ToolCall("c1", "ask_user", {"prompt": "name?"}),
        ToolCall("c2", "ask_user", {"prompt": "colour?", "choices": ["red", "blue"]}),
    )
    lane = ToolLane(1, on_outcome=outcomes)
    try:
        lane.submit(
            ToolJob(
                "a1",
                "b1",
                lambda c: tools.run_batch(calls, agent_id="a1", cancel=c, hub=hub),
                calls,
            )
        )
        wait_until(lambda: len(hub.pending()) == 1, "the first prompt")
        assert lane.stats().parked == 1  # the prompt holds no lane capacity
        agent, request = hub.pending()[0]
        assert (agent, request.prompt) == ("a1", "name?")
        hub.answer(InteractionResponse.text(request.id, "Ada"))
        wait_until(lambda: len(hub.pending()) == 1 and hub.pending()[0][1] != request, "next")
        choice = hub.pending()[0][1]
        assert choice.choices == ("red", "blue")
        hub.answer(InteractionResponse.choose(choice.id, 1))
        (outcome,) = outcomes.take()
    finally:
        hub.close()
        lane.close(WAIT)
    assert outcome.results == (ToolResult("c1", output="Ada"), ToolResult("c2", output="blue"))
    assert AskUserTool().local_only and not SleepTool().local_only


def test_ask_user_without_a_hub_or_a_prompt_is_a_clear_error_result():
    tools = ToolRegistry()
    tools.add(AskUserTool())
    error = run(tools, "ask_user", {"prompt": "hi?"}).error or ""
    assert error.startswith("ConfigError: call 'c1' of agent 'a1' cannot ask a person")
    hub = InteractionHub(timeout_secs=30)
    got = tools.run_call(
        ToolCall("c1", "ask_user", {}), agent_id="a1", cancel=CancelToken(), hub=hub
    )
    assert got.error == "ValueError: tool 'ask_user' needs the argument 'prompt', got None"
    # A model's call with a number for the choices raised "TypeError: 'int' object is not
    # iterable", which named neither the tool nor the argument.
    got = tools.run_call(
        ToolCall("c2", "ask_user", {"prompt": "which?", "choices": 5}),
        agent_id="a1",
        cancel=CancelToken(),
        hub=hub,
    )
    assert got.error == "ValueError: tool 'ask_user': `choices` must be strings, got 5"


def test_ask_user_past_its_timeout_withdraws_its_prompt():
    events: list[object] = []
    hub = InteractionHub(timeout_secs=3, listener=events.append)
    tools = ToolRegistry()
    tools.add(AskUserTool(timeout=0.2))
    call = ToolCall("c1", "ask_user", {"prompt": "anyone?"})
    got = tools.run_call(call, agent_id="a1", cancel=CancelToken(), hub=hub)
    assert got == ToolResult("c1", error="tool timed out after 0.2s")
    assert hub.pending() == []
    settled = [e for e in events if isinstance(e, PromptSettled)]
    assert [(e.agent_id, e.how) for e in settled] == [("a1", Settlement.CANCELLED)]


def test_sleep_tool_sleeps_and_a_cancel_wakes_it_early():
    tools = ToolRegistry()
    tools.add(SleepTool())
    assert run(tools, "sleep", {"seconds": 0.01}) == ToolResult("c1", output=0.01)
    assert "needs `seconds` >= 0" in (run(tools, "sleep", {"seconds": -1}).error or "")
    batch = CancelToken()
    asleep = threading.Event()
    raised: list[str] = []

    def sleeper() -> None:
        asleep.set()
        try:
            tools.run_batch([ToolCall("c1", "sleep", {"seconds": 30})], agent_id="a", cancel=batch)
        except Cancelled as exc:
            raised.append(exc.reason)

    thread = threading.Thread(target=sleeper)
    started = time.monotonic()
    thread.start()
    assert asleep.wait(WAIT)
    batch.cancel("interrupted")
    thread.join(WAIT)
    assert raised == ["interrupted"]
    assert time.monotonic() - started < WAIT


def test_a_batch_runs_its_calls_one_after_another_in_call_order():
    tools = ToolRegistry()
    log: list[str] = []
    running = threading.Lock()

    @tools.tool()
    def step(args: Mapping[str, Any], ctx: ToolContext) -> object:
        assert running.acquire(blocking=False), "two calls overlapped"
        try:
            log.append(args["n"])
            return args["n"]
        finally:
            running.release()

    calls = [ToolCall(f"c{i}", "step", {"n": f"n{i}"}) for i in range(5)]
    results = tools.run_batch(calls, agent_id="a", cancel=CancelToken())
    assert [r.output for r in results] == log == ["n0", "n1", "n2", "n3", "n4"]
    assert [r.call_id for r in results] == ["c0", "c1", "c2", "c3", "c4"]


def test_a_cancelled_batch_stops_before_the_next_call():
    tools = ToolRegistry()
    batch = CancelToken()
    ran: list[str] = []

    @tools.tool()
    def first(args: Mapping[str, Any], ctx: ToolContext) -> object:
        ran.append("first")
        batch.cancel("interrupted")
        return "done"

    @tools.tool()
    def second(args: Mapping[str, Any], ctx: ToolContext) -> object:
        ran.append("second")
        return "done"

    with pytest.raises(Cancelled, match="interrupted"):
        tools.run_batch(
            [ToolCall("c1", "first"), ToolCall("c2", "second")], agent_id="a", cancel=batch
        )
    assert ran == ["first"]


def test_a_registry_and_the_built_in_tools_pickle():
    tools = ToolRegistry()
    tools.tool(timeout=3.0)(echo_args)
    tools.add(ShellTool("echo", ["echo", "{text}"], timeout=5.0, env={"A": "1"}))
    tools.add(AskUserTool())
    tools.add(SleepTool(timeout=9.0))
    copy = pickle.loads(pickle.dumps(tools))
    assert copy.names() == tools.names()
    assert run(copy, "echo_args", {"x": 1}).output == {
        "args": {"x": 1},
        "agent": "a1",
        "call": "c1",
    }
    assert run(copy, "echo", {"text": "hi"}).output["stdout"] == "hi\n"
    assert copy.try_get("sleep").timeout == 9.0


@pytest.mark.parametrize(
    "raised", [SystemExit(3), GeneratorExit("gone"), KeyboardInterrupt("stop")], ids=repr
)
def test_a_base_exception_from_one_tool_is_that_calls_error_alone(raised):
    # It failed the whole batch: the call before it, which had done its work (a payment),
    # read as failed too, and the call after it as well, though it never ran.
    tools = ToolRegistry()
    paid: list[str] = []

    @tools.tool()
    def pay(args: Mapping[str, Any], ctx: ToolContext) -> object:
        paid.append(ctx.agent_id)
        return "paid"

    @tools.tool()
    def leave(args: Mapping[str, Any], ctx: ToolContext) -> object:
        raise raised

    class Unlistable(list):  # a list whose own iteration raises
        def __iter__(self):
            raise RuntimeError("iter boom")

    @tools.tool()
    def odd(args: Mapping[str, Any], ctx: ToolContext) -> object:
        return Unlistable()

    calls = [
        ToolCall("c1", "pay"),
        ToolCall("c2", "leave"),
        ToolCall("c3", "odd"),
        ToolCall("c4", "pay"),
    ]
    results = tools.run_batch(calls, agent_id="a1", cancel=CancelToken())
    assert results[0] == ToolResult("c1", "paid") and results[3] == ToolResult("c4", "paid")
    assert results[1].error == f"{type(raised).__name__}: {raised}"
    assert results[2].error == "tool 'odd' returned a value that raised RuntimeError: iter boom"
    assert paid == ["a1", "a1"]


@pytest.mark.parametrize("virtual", [False, True], ids=["real-clock", "virtual-clock"])
def test_run_until_idle_treats_a_prompt_a_tool_opened_as_an_ask(virtual):
    # Its job in flight kept `run_until_idle` waiting for lane work: until its timeout
    # (TickLimitError) or, without one, the hub's hour; a host answering prompts once it
    # returned hung. Now it ends the run on a real clock, and a virtual clock jumps to
    # the prompt's deadline (it expires, as an `Ask`'s does).
    from runtime import CallTools, ManualClock, MonotonicClock, World

    tools = ToolRegistry()
    tools.add(AskUserTool())

    def via_tool(turn):
        (result,) = yield CallTools(ToolCall("c1", "ask_user", {"prompt": "name?"}))
        return result.output if result.ok else result.error

    clock = ManualClock() if virtual else MonotonicClock()
    with World(clock=clock, tools=tools, interaction_timeout_secs=30) as world:
        agent = world.spawn(via_tool)
        world.run_until_idle(timeout=10)
        if virtual:
            assert world.status(agent).kind.value == "complete"  # the prompt expired at 30 s
            assert world.now >= 30
        else:
            assert world.status(agent).kind.value == "waiting"
            (opened,) = world.hub.pending()
            world.hub.answer(InteractionResponse.text(opened[1].id, "Ada"))
            world.run_until_idle(timeout=10)
            assert world.result(agent) == "Ada"


@pytest.mark.parametrize(
    ("timeout", "shown"),
    [
        (True, "True"),
        (10**400, "100000000000000000000"),
        (float("nan"), "nan"),
    ],
    ids=["bool", "huge-int", "nan"],
)
def test_a_tool_timeout_that_is_no_duration_is_refused_at_set_up(timeout, shown):
    # True was a 1 s timeout; 10**400 failed every call with a bare OverflowError.
    with pytest.raises(ConfigError, match=f"`timeout` must be > 0 or None, got {shown}"):
        ToolRegistry().tool(timeout=timeout)(echo_args)
    with pytest.raises(ConfigError, match=f"`timeout` must be > 0 or None, got {shown}"):
        ShellTool("sh", ["true"], timeout=timeout)


def test_a_shell_tools_argv_may_be_any_iterable_of_strings():
    # A generator was read by the check and left the tool an empty command.
    tool = ShellTool("say", (word for word in ["echo", "hi"]))
    assert tool.argv == ("echo", "hi")


class RecordingHub:
    """A `SupportsAsk` that answers at once and keeps the ids it was asked under."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def ask(self, agent_id, request, *, cancel=None):
        self.ids.append(request.id)
        return InteractionResponse.text(request.id, "ok")

    def cancel(self, request_id: str) -> bool:
        return False


def test_threads_of_one_call_asking_at_once_never_get_the_same_prompt_id():
    # Two threads the tool started ask at once: the second reads the count while the
    # first is between reading and writing it (held there until the second is in, or
    # 0.5 s, as the lock keeps it out). Without the lock both were "#1", and the hub
    # refused the second prompt as a duplicate.
    first_in, second_in = threading.Event(), threading.Event()

    class SlowCount(list[int]):
        """The call's prompt count, read slowly the first time."""

        def __getitem__(self, index: Any) -> Any:
            if not first_in.is_set():
                first_in.set()
                second_in.wait(0.5)
            else:
                second_in.set()
            return super().__getitem__(index)

    hub = RecordingHub()
    ctx = ToolContext("a1", "c1", CancelToken(), hub, "a1/t1/b1", _prompts=SlowCount([0]))
    ask = lambda: ctx.ask(InteractionRequest.free_text("", "ok?"))  # noqa: E731
    first = threading.Thread(target=ask)
    first.start()
    assert first_in.wait(WAIT)
    second = threading.Thread(target=ask)
    second.start()
    first.join(WAIT)
    second.join(WAIT)
    assert sorted(hub.ids) == ["a1/t1/b1/c1", "a1/t1/b1/c1#2"]


def _context_on_a_lane(**run: Any) -> ToolContext:
    """The context a call gets on a lane thread (``run``: `run_batch`'s keywords)."""
    tools = ToolRegistry()
    made: list[ToolContext] = []

    @tools.tool()
    def keep(args: Mapping[str, Any], ctx: ToolContext) -> object:
        made.append(ctx)
        return 1

    def batch(cancel: CancelToken) -> object:
        return tools.run_batch([ToolCall("c1", "keep")], agent_id="a1", cancel=cancel, **run)

    outcomes = Outcomes()
    lane = ToolLane(1, on_outcome=outcomes)
    try:
        lane.submit(ToolJob("a1", "b1", batch))
        outcomes.take()
    finally:
        lane.close()
    [ctx] = made
    assert ctx._slot is not None  # made on the lane's thread: it carries the job's slot
    return ctx


def test_a_copy_of_a_context_is_the_same_call_its_slot_and_its_prompt_count():
    # `dataclasses.replace(ctx, cancel=...)` (a tool giving part of its work a shorter
    # deadline) lost the slot: the copy's `ask` held the lane permit while it waited, so a
    # full lane could deadlock on it. It also counted prompts from zero: its first prompt
    # took the id of the call's first, and the hub refused it as a duplicate.
    hub = RecordingHub()
    ctx = _context_on_a_lane(hub=hub, batch_id="a1/t1/b1")
    ctx.ask(InteractionRequest.free_text("", "first?"))
    child = ctx.cancel.child()
    for again in (dataclasses.replace(ctx, cancel=child), copy.copy(ctx)):
        assert again._slot is ctx._slot
        again.ask(InteractionRequest.free_text("", "more?"))
    assert dataclasses.replace(ctx, call_id="c2")._slot is ctx._slot
    ctx.ask(InteractionRequest.free_text("", "last?"))
    assert hub.ids == [f"a1/t1/b1/c1{n}" for n in ("", "#2", "#3", "#4")]


def test_a_copy_made_before_the_first_prompt_shares_the_count_of_a_context_built_by_hand():
    # The count's cell was made at the first `ask`: a copy made before it counted apart,
    # and the two named their first prompts alike.
    hub = RecordingHub()
    ctx = ToolContext("a1", "c1", CancelToken(), hub, "b1")
    copies = [dataclasses.replace(ctx), copy.copy(ctx), copy.deepcopy(ctx)]
    for asking in (ctx, *copies):
        asking.ask(InteractionRequest.free_text("", "ok?"))
    assert hub.ids == ["b1/c1", "b1/c1#2", "b1/c1#3", "b1/c1#4"]


@dataclasses.dataclass(frozen=True, slots=True)
class _MoreContext(ToolContext):
    """A host's context with a field of its own."""

    extra: str = ""


def test_a_copied_or_pickled_context_keeps_its_class_and_fields():
    ctx = _MoreContext("a1", "c1", CancelToken(), None, "b1", extra="x")
    for again in (copy.copy(ctx), copy.deepcopy(ctx), pickle.loads(pickle.dumps(ctx))):
        assert type(again) is _MoreContext
        assert (again.agent_id, again.call_id, again.batch_id, again.extra) == (
            "a1",
            "c1",
            "b1",
            "x",
        )


def test_a_pickled_context_leaves_its_lane_slot_behind_and_keeps_its_count():
    ctx = _context_on_a_lane(batch_id="a1/t1/b1")
    ctx._prompts[0] = 2  # two prompts named
    again = pickle.loads(pickle.dumps(ctx))
    assert (again.agent_id, again.call_id, again.batch_id) == ("a1", "c1", "a1/t1/b1")
    assert again._slot is None  # it holds the lane's locks, and means nothing elsewhere
    again._prompts[0] += 1  # its own count from here: another process's prompts
    assert (again._prompts, ctx._prompts) == ([3], [2])


def test_a_thread_the_tool_started_can_step_off_the_lane_through_its_context():
    # A tool's helper thread waiting on work only a queued job can do: `runtime.off_lane`
    # on that thread does nothing (the thread runs no lane job), so the call held its
    # permit and the job behind it never ran. `ctx.off_lane()` steps the call off.
    tools = ToolRegistry()
    filled = threading.Event()

    @tools.tool()
    def wait_for_fill(args: Mapping[str, Any], ctx: ToolContext) -> object:
        def helper() -> bool:
            with ctx.off_lane():
                return filled.wait(WAIT)

        with ThreadPoolExecutor(1) as pool:
            return pool.submit(helper).result(WAIT)

    @tools.tool()
    def fill(args: Mapping[str, Any], ctx: ToolContext) -> object:
        filled.set()
        return "filled"

    def batch(name: str) -> Callable[[CancelToken], object]:
        calls = [ToolCall("c1", name)]
        return lambda cancel: tools.run_batch(calls, agent_id=name, cancel=cancel)

    outcomes = Outcomes()
    lane = ToolLane(1, on_outcome=outcomes)
    try:
        lane.submit(ToolJob("waiter", "b1", batch("wait_for_fill")))
        wait_until(lambda: lane.stats().parked == 1, "the waiter off the lane")
        lane.submit(ToolJob("filler", "b2", batch("fill")))
        done = {o.agent_id: o.results[0].output for o in outcomes.take(2)}
        s = lane.stats()
    finally:
        lane.close()
    assert done == {"waiter": True, "filler": "filled"}
    assert (s.parks, s.resumes, s.busy, s.parked) == (1, 1, 0, 0)


def test_off_lane_of_a_context_outside_a_lane_just_runs_the_block():
    ctx = ToolContext("a1", "c1", CancelToken())
    with ctx.off_lane():
        ran = True
    assert ran
