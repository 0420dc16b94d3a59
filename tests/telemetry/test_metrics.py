"""Metrics: ``World.metrics()`` snapshots, and Prometheus text at ``/metrics`` over real HTTP.

The end-to-end test runs ``tickwork serve --metrics 127.0.0.1:0`` as a user does and
scrapes it while gated tool jobs hold the lane and a prompt waits for an answer.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client")

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from runtime import (
    Ask,
    CallTools,
    ConfigError,
    InteractionRequest,
    InteractionResponse,
    ScriptedModel,
    Think,
    ToolCall,
    ToolRegistry,
)
from runtime.telemetry import instrument, parse_address, serve_metrics
from runtime.telemetry.prometheus import WorldCollector
from tests.conftest import wait_for
from tests.telemetry.test_tracing import _CountingModel

ROOT = Path(__file__).resolve().parents[2]
TICKWORK = str(Path(sys.executable).parent / "tickwork")


def worker(turn):
    yield Think("plan")
    yield CallTools(ToolCall("c1", "echo", {"x": 1}), ToolCall("c2", "echo", {"x": 2}))
    answer = yield Ask(InteractionRequest.free_text("", "go?"))
    return answer.value


def _echo_tools() -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool()
    def echo(args, ctx):
        return args["x"]

    return tools


def test_world_metrics_is_a_frozen_snapshot_of_gauges_histograms_and_tokens(make_world):
    world = make_world(
        tools=_echo_tools(), models={"default": _CountingModel()}, interaction_timeout_secs=0
    )
    before = world.metrics()
    assert before.recording is False
    assert before.tick_seconds.count == 0
    world.record_metrics()
    agents = [world.spawn(worker, f"job {i}") for i in range(3)]
    world.run_until_idle(timeout=10)
    waiting = world.metrics()
    assert waiting.recording is True
    assert waiting.prompts_open == 3
    assert waiting.agents["waiting"] == 3
    assert waiting.lanes["tools"].capacity == 8 and waiting.lanes["tools"].busy == 0
    assert waiting.model_seconds.count == 3
    assert waiting.tool_seconds.count == 3  # one per batch
    assert waiting.input_tokens == 33 and waiting.output_tokens == 12
    assert waiting.tick_seconds.count == waiting.tick == world.tick_count
    assert waiting.prompt_wait_seconds.count == 0
    with pytest.raises(FrozenInstanceError):
        waiting.prompts_open = 0  # type: ignore[misc]
    world.clock.advance(2.5)  # the prompts wait 2.5 s of world time
    for _agent, request in world.hub.pending():
        world.hub.answer(InteractionResponse.text(request.id, "yes"))
    world.run_until_idle(timeout=10)
    done = world.metrics()
    assert done.prompts_open == 0
    assert done.agents["complete"] == 3 and all(world.result(a) == "yes" for a in agents)
    waits = done.prompt_wait_seconds
    assert waits.count == 3 and waits.sum == pytest.approx(7.5)
    # 2.5 s falls in the (1, 5] bucket; cumulative counts end with +Inf = count.
    assert dict(waits.cumulative())[5.0] == 3 and dict(waits.cumulative())[1.0] == 0
    assert waits.cumulative()[-1] == (float("inf"), 3)
    assert waiting.prompts_open == 3  # the earlier snapshot did not move


def test_the_collector_exposes_the_design_names_as_prometheus_text(make_world):
    world = make_world(
        tools=_echo_tools(), models={"default": ScriptedModel(["ok"], cycle=True)},
        interaction_timeout_secs=0,
    )  # fmt: skip
    instrument(world, traces=False)
    world.spawn(worker, "job")
    world.run_until_idle(timeout=10)
    registry = CollectorRegistry()
    registry.register(WorldCollector(world))
    samples = _samples(generate_latest(registry).decode())
    assert samples[("tickwork_agents", (("status", "waiting"),))] == 1
    assert samples[("tickwork_agents", (("status", "complete"),))] == 0
    for gauge in ("busy", "queued", "parked", "capacity"):
        for lane in ("tools", "inference"):
            assert (f"tickwork_lane_{gauge}", (("lane", lane),)) in samples
    assert samples[("tickwork_lane_capacity", (("lane", "tools"),))] == 8
    assert samples[("tickwork_prompts_open", ())] == 1
    for hist in ("tick", "tool", "model", "prompt_wait"):
        assert (f"tickwork_{hist}_seconds_count", ()) in samples
        assert (f"tickwork_{hist}_seconds_bucket", (("le", "+Inf"),)) in samples
    assert samples[("tickwork_model_seconds_count", ())] == 1
    assert samples[("tickwork_tokens_total", (("type", "input"),))] == 0


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("9464", "HOST:PORT"),
        (":9464", "HOST:PORT"),
        ("127.0.0.1:", "port"),
        ("127.0.0.1:65536", "port"),
        ("127.0.0.1:-1", "port"),
        ("127.0.0.1:٩٤٦٤", "port"),
        ("127.0.0.1:" + "9" * 5000, "port"),
        ("bad\x1bhost:9464", "HOST:PORT"),
    ],
)
def test_a_bad_address_is_refused_naming_the_argument_and_the_value(text, problem):
    with pytest.raises(ConfigError, match=f"`--metrics` .*{problem}") as caught:
        parse_address(text, name="--metrics")
    assert "\x1b" not in str(caught.value)


def test_serve_metrics_answers_over_http_and_a_taken_port_is_a_clear_error(make_world):
    world = make_world()
    with serve_metrics(world, "127.0.0.1:0") as server:
        assert world.metrics().recording is True
        body = _scrape(server.url)
        assert ("tickwork_prompts_open", ()) in body
        with pytest.raises(ConfigError, match=r"cannot listen on '127\.0\.0\.1:"):
            serve_metrics(world, f"127.0.0.1:{server.port}")
    # A host name IDNA cannot encode raised UnicodeError from its lookup: exit 70.
    for host in ("a..b", "x" * 64 + ".example"):
        with pytest.raises(ConfigError, match=f"cannot listen on '{host}:0'"):
            serve_metrics(world, f"{host}:0")


# -- the command line ----------------------------------------------------------------


GATE = """
import os

def wait(args, ctx):
    while not os.path.exists(args["path"]):
        if ctx.cancel.wait(0.01):
            return "cancelled"
    return "released"
"""

SCENARIO = """
name = "metrics"

[world]
seed = 1
tool_capacity = 2
interaction_timeout_secs = 0

[tools.gate]
python = "gate_tools:wait"
timeout = 60

[[agents]]
count = 3
name = "worker-{{i}}"
steps = [{{ tools = [{{ name = "gate", args = {{ path = "{release}" }} }}] }}, {{ finish = "done" }}]

[[agents]]
name = "asker"
steps = [{{ ask = "ship it?" }}, {{ finish = "{{last}}" }}]

[[agents]]
name = "helper"
interactive = true
steps = [{{ finish = "{{message}}" }}]
"""


@pytest.fixture
def scenario(tmp_path) -> Path:
    (tmp_path / "gate_tools.py").write_text(GATE)
    path = tmp_path / "metrics.toml"
    path.write_text(SCENARIO.format(release=tmp_path / "RELEASE"))
    return path


@pytest.fixture
def state_dir() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="tw-", dir="/tmp"))  # short: a socket path
    yield base / "state"
    shutil.rmtree(base, ignore_errors=True)


class _Command:
    """A ``tickwork`` subprocess whose stderr lines are collected as they come."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [TICKWORK, *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)

    def wait_line(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"never printed {text!r}; printed {self.seen!r}")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            self.seen.append(line)
            if text in line:
                return line

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return _samples(response.read().decode())


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _gauge(url: str, name: str, **labels: str) -> float:
    return _scrape(url)[(name, tuple(sorted(labels.items())))]


def test_a_scrape_of_serve_shows_lane_gauges_move_and_a_prompt_open_and_close(scenario, state_dir):
    serve = _Command(
        "serve", str(scenario), "--metrics", "127.0.0.1:0", "--state-dir", str(state_dir),
        "--quiet", "--json",
    )  # fmt: skip
    try:
        url = serve.wait_line("metrics on http://127.0.0.1:").split()[-1]
        serve.wait_line("serving metrics")
        # Three gated jobs on a lane of two: two run, one waits for a permit.
        lanes = lambda: (  # noqa: E731
            _gauge(url, "tickwork_lane_busy", lane="tools"),
            _gauge(url, "tickwork_lane_queued", lane="tools"),
        )
        wait_for(lambda: lanes() == (2, 1), what="two busy and one queued")
        assert _gauge(url, "tickwork_lane_capacity", lane="tools") == 2
        assert _gauge(url, "tickwork_prompts_open") == 1
        assert _gauge(url, "tickwork_agents", status="waiting") == 1
        (scenario.parent / "RELEASE").write_text("go")
        wait_for(lambda: lanes() == (0, 0), what="the lane to drain")
        wait_for(lambda: _gauge(url, "tickwork_agents", status="complete") == 3, what="done")
        assert _gauge(url, "tickwork_tool_seconds_count") == 3
        assert _gauge(url, "tickwork_prompts_open") == 1
        answered = subprocess.run(
            [TICKWORK, "respond", "--state-dir", str(state_dir), "asker", "yes"],
            capture_output=True, text=True, timeout=30, check=False, cwd=ROOT,
        )  # fmt: skip
        assert answered.returncode == 0, answered.stderr
        wait_for(lambda: _gauge(url, "tickwork_prompts_open") == 0, what="the prompt settled")
        assert _gauge(url, "tickwork_prompt_wait_seconds_count") == 1
        assert _gauge(url, "tickwork_ticks_total") > 0
        serve.proc.send_signal(signal.SIGTERM)
        assert serve.proc.wait(timeout=30) == 128 + signal.SIGTERM  # stopped by a signal
        with pytest.raises(OSError):
            urllib.request.urlopen(url, timeout=5)  # the endpoint went with the run
    finally:
        serve.close()


def test_run_serves_metrics_while_it_runs(scenario):
    (scenario.parent / "RELEASE").write_text("go")
    text = scenario.read_text().split('[[agents]]\nname = "asker"')[0]
    scenario.write_text(text)
    run = _Command("run", str(scenario), "--metrics", "127.0.0.1:0", "--quiet", "--json")
    try:
        run.wait_line("metrics on http://127.0.0.1:")
        assert run.proc.wait(timeout=60) == 0
    finally:
        run.close()


@pytest.mark.parametrize("command", ["run", "serve"])
@pytest.mark.parametrize("value", ["nonsense", "127.0.0.1:99999", "127.0.0.1:\x07"])
def test_a_bad_metrics_value_is_exit_2_naming_the_argument(command, value, scenario, state_dir):
    extra = ["--state-dir", str(state_dir)] if command == "serve" else []
    done = subprocess.run(
        [TICKWORK, command, str(scenario), "--metrics", value, *extra],
        capture_output=True, text=True, timeout=60, check=False, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--metrics" in done.stderr
    assert "Traceback" not in done.stderr and "\x07" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not state_dir.exists() or not (state_dir / "control.sock").exists()


def test_a_taken_metrics_port_is_exit_2_and_nothing_runs(scenario, make_world):
    world = make_world()
    with serve_metrics(world, "127.0.0.1:0") as taken:
        done = subprocess.run(
            [TICKWORK, "run", str(scenario), "--metrics", f"127.0.0.1:{taken.port}", "--json"],
            capture_output=True, text=True, timeout=60, check=False, cwd=ROOT,
        )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "`--metrics` cannot listen on" in done.stderr
    assert done.stdout == ""
    assert os.path.exists(scenario)


def test_a_one_call_batch_whose_call_has_the_batch_id_is_counted_as_tools(make_world):
    # A model call was told by its result's id equal to its batch's: a one-call tool
    # batch whose call a host named after the batch id counted as a model call.
    def one_call(turn):
        yield CallTools(ToolCall(f"{turn.agent_id}/t1/b1", "echo", {"x": 1}))
        return "done"

    world = make_world(tools=_echo_tools())
    world.record_metrics()
    world.spawn(one_call)
    world.run_until_idle()
    figures = world.metrics()
    assert (figures.model_seconds.count, figures.tool_seconds.count) == (0, 1)


def test_the_endpoint_drops_a_stalled_client_and_answers_only_at_metrics(make_world, monkeypatch):
    # Each connection got a thread with no timeout: clients that connected and stalled
    # kept theirs for good (300 of them: 300 threads), and outlived `close()`. Every path
    # answered the metrics.
    import socket
    import urllib.error
    import urllib.request

    from runtime.telemetry import prometheus

    monkeypatch.setattr(prometheus._Handler, "timeout", 0.5)
    world = make_world()
    with serve_metrics(world, "127.0.0.1:0") as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as stalled:
            stalled.sendall(b"GET /met")  # and nothing more
            assert stalled.recv(100) == b""  # dropped by the server, not by us
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/nope", timeout=10)
        caught.value.close()
        assert caught.value.code == 404
        assert ("tickwork_prompts_open", ()) in _scrape(server.url)
