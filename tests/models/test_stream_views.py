"""Streamed deltas reach the live view and the control channel's subscribers."""

from __future__ import annotations

import shutil
import tempfile
import threading

from rich.console import Console

from runtime import MonotonicClock, OpenAIChat, Think, World
from runtime.cli.view import LiveView
from runtime.control import ControlClient, ControlServer

from ..conftest import wait_for
from .stub_server import openai_text


def thinker(turn):
    reply = yield Think("go")
    return reply.text


def test_the_live_view_shows_each_agents_latest_streamed_line(openai_server):
    gate = threading.Event()
    openai_server.script(openai_text("first line\nsecond ", "li", "ne\x1b[2J", gate, "\nthird"))
    with World(
        clock=MonotonicClock(), models={"default": OpenAIChat("m", base_url=openai_server.url)}
    ) as world:
        agent = world.spawn(thinker, "x")
        world.start()
        wait_for(
            lambda: world.streams.latest_lines().get(agent, "").startswith("second line"),
            10,
            "the line",
        )
        console = Console(width=120, record=True, color_system=None)
        console.print(LiveView(world, "t"))
        shown = console.export_text()
        gate.set()
        assert f"{agent}: second line\\x1b[2J" in shown  # control characters shown escaped
        wait_for(lambda: world.result(agent) is not None, 10, "the reply")
        assert world.streams.latest_lines()[agent] == "third"


def test_subscribers_get_each_delta_as_it_arrives(openai_server):
    gate = threading.Event()
    openai_server.script(openai_text("Hel", gate, "lo"))
    base = tempfile.mkdtemp(prefix="tw-", dir="/tmp")  # short enough for a Unix socket
    state = f"{base}/state"
    with World(
        clock=MonotonicClock(), models={"default": OpenAIChat("m", base_url=openai_server.url)}
    ) as world:
        server = ControlServer(world, state)
        try:
            server.start()
            client = ControlClient(state)
            events = client.subscribe()
            agent = world.spawn(thinker, "x")
            world.start()
            deltas = []
            for event in events:
                if event.get("event") == "delta":
                    deltas.append(event)
                    if len(deltas) == 1:
                        gate.set()  # the second delta is sent only after the first was seen
                    else:
                        break
            assert deltas == [
                {"event": "delta", "agent_id": agent, "text": "Hel"},
                {"event": "delta", "agent_id": agent, "text": "lo"},
            ]
            client.close()
        finally:
            server.close()
            shutil.rmtree(base, ignore_errors=True)


def test_a_hub_ends_a_stream_in_one_step_and_a_stopped_one_reports_it():
    from runtime.models import StreamHub

    hub = StreamHub()
    stream = hub.open("a1", "r1")
    assert stream.delta("par")
    assert hub.end(stream) is True  # finished and forgotten
    assert hub.stop("a1") is None and not stream.stopped
    other = hub.open("a2", "r2")
    assert hub.stop("a2") == ("r2", "")
    assert hub.end(other) is False  # an interrupt stopped it first: its reply is stale
    later = hub.open("a2", "r3")
    assert hub.end(other) is False and hub.stop("a2") == ("r3", "")  # the newer one stays
    assert later.stopped
