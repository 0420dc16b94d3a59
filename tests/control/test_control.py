"""The control channel: token, permissions, error replies, fuzzing, and steering a live world."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime import (
    Ask,
    CallTools,
    InteractionRequest,
    ManualClock,
    Sleep,
    Spawn,
    StatusKind,
    ToolCall,
    ToolRegistry,
    World,
    __version__,
)
from runtime.control import MAX_CLIENTS, MAX_LINE, ControlClient, ControlServer, default_state_dir
from runtime.control.ops import Refused, steer
from runtime.errors import ControlError, JournalError
from runtime.world.inputs import CancelAgent, InterruptAgent, PauseAgent, ResumeAgent, SendMessage
from tests.conftest import wait_for

ACTING = (PauseAgent, ResumeAgent, CancelAgent, InterruptAgent, SendMessage)


def asker(turn):
    """Ask a question and return the answer."""
    answer = yield Ask(InteractionRequest.free_text("", "name?"))
    return answer.value


def sleeper(turn):
    """Sleep for an hour of real time (a test interrupts or cancels it)."""
    yield Sleep(3600)
    return "rested"


@dataclass
class Served:
    world: World
    server: ControlServer
    state: Path
    applied: list[object]

    def client(self) -> ControlClient:
        return ControlClient(self.state, timeout=10)

    def raw(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(str(self.state / "control.sock"))
        return sock

    @property
    def token(self) -> str:
        return (self.state / "token").read_text().strip()


def short_state_dir() -> Path:
    """A state dir short enough for a Unix socket path (pytest's tmp_path can be too long)."""
    return Path(tempfile.mkdtemp(prefix="tw-", dir="/tmp")) / "state"


@pytest.fixture
def state() -> Iterator[Path]:
    """A fresh, short state dir, removed after the test."""
    path = short_state_dir()
    yield path
    shutil.rmtree(path.parent, ignore_errors=True)


@pytest.fixture
def served(state: Path) -> Iterator[Served]:
    world = World(seed=1, interaction_timeout_secs=0)
    applied: list[object] = []
    world.observe(lambda report, inputs: applied.extend(item for _, item in inputs))
    world.spawn(asker, agent_id="asker")
    world.spawn(sleeper, agent_id="sleeper")
    server = ControlServer(world, state)
    try:
        server.start()
        world.start()
        wait_for(lambda: len(world.hub.pending()) == 1, what="the asker's prompt to open")
        wait_for(lambda: world.status("sleeper").kind is StatusKind.ACTIVE, what="the sleeper")
        yield Served(world, server, state, applied)
    finally:
        server.close()
        world.close()


def read_reply(sock: socket.socket) -> dict:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
    return json.loads(buf)


def test_the_socket_and_token_are_0600_and_the_state_dir_0700(served):
    for name in ("control.sock", "token"):
        mode = stat.S_IMODE(os.stat(served.state / name).st_mode)
        assert mode == 0o600, f"{name} is {oct(mode)}"
    assert stat.S_ISSOCK(os.stat(served.state / "control.sock").st_mode)
    assert stat.S_IMODE(os.stat(served.state).st_mode) == 0o700


def test_the_socket_is_born_0600_not_tightened_after_binding(monkeypatch, state):
    # With chmod disabled, only the umask held around bind() can make the mode right: no
    # moment exists in which another user could connect.
    monkeypatch.setattr(os, "chmod", lambda *args, **kwargs: None)
    with World() as world, ControlServer(world, state):
        mode = stat.S_IMODE(os.stat(state / "control.sock").st_mode)
    assert mode == 0o600, oct(mode)


def test_the_token_is_random_per_server(state):
    tokens = []
    for _ in range(2):
        with World() as world, ControlServer(world, state):
            tokens.append((state / "token").read_text().strip())
    assert tokens[0] != tokens[1] and len(tokens[0]) == 64


def test_a_second_server_on_the_same_state_dir_refuses_to_start(served):
    with World() as other, pytest.raises(ControlError, match="already running on state dir"):
        ControlServer(other, served.state).start()
    with served.client() as client:  # the first one is untouched
        assert client.request("ping")["pong"] is True


def test_closing_removes_the_socket_and_token_and_frees_the_state_dir(state):
    with World() as world:
        server = ControlServer(world, state)
        server.start()
        server.close()
        assert not (state / "control.sock").exists()
        assert not (state / "token").exists()
        with ControlServer(world, state), ControlClient(state) as client:
            assert client.request("ping")["ok"] is True


def _no_thread_named(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Threads called ``name`` fail to start, as when the process has no thread to give."""
    start = threading.Thread.start

    def refuse(thread: threading.Thread) -> None:
        if thread.name == name:
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", refuse)


def test_a_server_whose_thread_cannot_start_leaves_nothing_behind(monkeypatch, state):
    # Its lock, socket, token file and tick observer stayed: the next server on the state
    # dir said another was already running.
    with World() as world:
        server = ControlServer(world, state)
        with monkeypatch.context() as patched:
            _no_thread_named(patched, "tickwork-control")
            with pytest.raises(RuntimeError, match="can't start new thread"):
                server.start()
        assert not (state / "control.sock").exists() and not (state / "token").exists()
        assert not world.unobserve(server._on_tick)
        with ControlServer(world, state), ControlClient(state) as client:
            assert client.request("ping")["ok"] is True


def test_a_client_whose_thread_cannot_start_is_refused_and_the_server_goes_on(monkeypatch, served):
    # The accept loop died on it (the server stopped accepting, silently), and close()
    # raised joining the thread it had listed before starting it.
    with monkeypatch.context() as patched:
        _no_thread_named(patched, "tickwork-client")
        with served.client() as client, pytest.raises(ControlError, match="cannot start a thread"):
            client.request("ping")
    with served.client() as client:
        assert client.request("ping")["ok"] is True
    served.server.close()  # raises if an unstarted thread was listed
    assert not (served.state / "control.sock").exists()


def test_a_lock_file_that_cannot_be_written_is_not_left_locked(monkeypatch, state):
    # A full disk: `os.write` failed after the flock, the descriptor was never recorded,
    # and the state dir stayed locked for the process.
    def full(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    with World() as world:
        with monkeypatch.context() as patched:
            patched.setattr(os, "write", full)
            with pytest.raises(ControlError, match=r"cannot write .*serve\.lock.*No space left"):
                ControlServer(world, state).start()
        with ControlServer(world, state), ControlClient(state) as client:
            assert client.request("ping")["ok"] is True


def test_a_socket_that_cannot_be_made_private_is_closed_and_refused(monkeypatch, state):
    # A failing chmod (or listen) raised a bare OSError with the bound socket still open.
    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    with World() as world:
        with monkeypatch.context() as patched:
            patched.setattr(os, "chmod", refuse)
            with pytest.raises(ControlError, match="cannot open control socket"):
                ControlServer(world, state).start()
        assert not (state / "control.sock").exists()
        with ControlServer(world, state), ControlClient(state) as client:
            assert client.request("ping")["ok"] is True


def test_a_client_without_a_server_gets_a_clear_error(state):
    with pytest.raises(ControlError, match="no `tickwork serve` is running on state dir"):
        ControlClient(state)


def test_each_bad_request_gets_a_clear_error_and_the_connection_keeps_serving(served):
    token = served.token
    cases = [
        (b"{not json", "bad_json"),
        (b"\xff\xfe", "bad_json"),
        (b"[1, 2]", "bad_request"),
        (b"[" * 50_000, "bad_json"),  # too deep for the decoder: a reply, not a crash
        (b'{"a": ' * 8_000 + b"1" + b"}" * 8_000, "bad_json"),
        (json.dumps({"token": token}).encode(), "missing_field"),
        (json.dumps({"token": token, "op": "fly"}).encode(), "unknown_op"),
        (json.dumps({"token": token, "op": "pause"}).encode(), "missing_field"),
        (json.dumps({"token": token, "op": "pause", "agent": 5}).encode(), "bad_field"),
        (json.dumps({"token": token, "op": "pause", "agent": "nobody"}).encode(), "unknown_agent"),
        (json.dumps({"token": token, "op": "answer", "request_id": "x"}).encode(), "no_prompt"),
    ]
    with contextlib.closing(served.raw()) as sock:
        for line, code in cases:
            sock.sendall(line + b"\n")
            reply = read_reply(sock)
            assert reply["ok"] is False
            assert reply["code"] == code, reply
            assert reply["error"]
        sock.sendall(json.dumps({"token": token, "op": "ping", "id": 7}).encode() + b"\n")
        assert read_reply(sock) == {"ok": True, "pong": True, "version": __version__, "id": 7}
    assert not [item for item in served.applied if isinstance(item, ACTING)]


def test_a_wrong_token_is_refused_closes_the_connection_and_never_acts(served):
    with contextlib.closing(served.raw()) as sock:
        request = {"token": "0" * 64, "op": "cancel", "agent": "sleeper"}
        sock.sendall(json.dumps(request).encode() + b"\n")
        assert read_reply(sock)["code"] == "unauthorized"
        assert sock.recv(1) == b""  # closed by the server
    with served.client() as client:
        client.request("ping")
    assert served.world.status("sleeper").kind is StatusKind.ACTIVE
    assert not [item for item in served.applied if isinstance(item, ACTING)]


def test_an_oversized_line_is_refused_and_other_clients_are_still_served(served):
    with served.client() as steady, contextlib.closing(served.raw()) as sock:
        sock.sendall(b"x" * (MAX_LINE + 10))
        reply = read_reply(sock)
        assert reply["code"] == "too_large"
        assert sock.recv(1) == b""
        assert steady.request("ping")["ok"] is True


def test_a_client_past_a_full_house_of_idle_ones_is_served_and_evicts_the_oldest(served):
    socks = []
    try:
        for n in range(1, MAX_CLIENTS + 1):
            socks.append(served.raw())
            wait_for(lambda n=n: served.server.accepted == n, what=f"client {n}")
        with served.client() as client:
            assert client.request("ping")["ok"] is True
        assert socks[0].recv(1) == b""  # the longest idle was let go to make room
        assert served.server.dropped == 1
    finally:
        for sock in socks:
            sock.close()
    wait_for(lambda: len(served.server._clients) == 0, what="the clients to be let go")


def test_one_client_past_a_full_house_of_subscribers_gets_a_busy_reply(served):
    clients = []
    try:
        for _ in range(MAX_CLIENTS):
            client = served.client()
            clients.append(client)
            client.request("subscribe")
        wait_for(lambda: len(served.server._subscribers) == MAX_CLIENTS, what="subscribers")
        with served.client() as client, pytest.raises(ControlError, match="too many clients"):
            client.request("ping")
    finally:
        for client in clients:
            client.close()
    wait_for(lambda: len(served.server._clients) == 0, what="the clients to be let go")
    with served.client() as client:
        assert client.request("ping")["ok"] is True


def _request_for(op: str) -> dict:
    return {
        "op": op,
        "agent": "sleeper",
        "text": "hi",
        "request_id": "asker/t1/p1",
        "value": "mallory",
    }


acting_ops = st.sampled_from(["cancel", "pause", "interrupt", "send", "answer", "cancel_prompt"])
fuzz = st.one_of(
    st.binary(max_size=300).map(lambda b: b + b"\n"),
    st.binary(min_size=1, max_size=200).filter(lambda b: b"\n" not in b),  # no newline at all
    st.tuples(acting_ops, st.text(max_size=70)).map(
        lambda t: json.dumps({**_request_for(t[0]), "token": t[1]}).encode() + b"\n"
    ),
    st.tuples(acting_ops, st.none()).map(lambda t: json.dumps(_request_for(t[0])).encode() + b"\n"),
    st.tuples(acting_ops, st.integers(min_value=1)).map(("truncated",).__add__),
    st.integers(min_value=MAX_LINE + 1, max_value=3 * MAX_LINE).map(lambda n: b"{" * n + b"\n"),
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(payloads=st.lists(fuzz, min_size=1, max_size=4))
def test_the_server_survives_fuzz_keeps_serving_and_never_acts_unauthorised(served, payloads):
    token = served.token
    with served.client() as steady, contextlib.closing(served.raw()) as sock:
        for payload in payloads:
            data = payload
            if isinstance(payload, tuple):  # a real request with the right token, cut short
                full = json.dumps({**_request_for(payload[1]), "token": token}).encode()
                data = full[: payload[2] % len(full)] + b"\n"
            with contextlib.suppress(OSError):
                sock.sendall(data)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)
        received = b""
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                received += chunk
        for line in received.splitlines():
            reply = json.loads(line)
            assert reply["ok"] is False and reply["code"] and reply["error"]
        assert steady.request("ping")["ok"] is True
    assert not [item for item in served.applied if isinstance(item, ACTING)]
    assert served.world.hub.try_request("asker/t1/p1") is not None
    assert served.world.status("asker").kind is StatusKind.WAITING
    assert served.world.status("sleeper").kind is StatusKind.ACTIVE


def test_answering_through_the_channel_completes_the_agent(served):
    with served.client() as client:
        (prompt,) = client.request("prompts")["prompts"]
        assert prompt == {
            "id": "asker/t1/p1",
            "agent": "asker",
            "kind": "free_text",
            "prompt": "name?",
            "choices": [],
            "stage": "",
        }
        reply = client.request("answer", request_id=prompt["id"], value="ada")
        assert reply["answered"] == "asker/t1/p1"
    wait_for(lambda: served.world.status("asker").kind is StatusKind.COMPLETE, what="asker")
    assert served.world.result("asker") == "ada"


def test_interrupt_then_cancel_act_on_a_live_agent(served):
    world = served.world
    with served.client() as client:
        client.request("interrupt", agent="sleeper")
        wait_for(lambda: world.status("sleeper").kind is StatusKind.IDLE, what="interrupt")
        client.request("cancel", agent="sleeper")
        wait_for(lambda: world.status("sleeper").kind is StatusKind.CANCELLED, what="cancel")
        agents = {a["id"]: a["status"] for a in client.request("agents")["agents"]}
    assert agents == {"asker": "waiting", "sleeper": "cancelled"}


def test_stats_report_lanes_agents_and_prompts(served):
    with served.client() as client:
        stats = client.request("stats")
    assert stats["agents"]["waiting"] == 1
    assert stats["lanes"]["tools"]["capacity"] == 8
    assert stats["hub"]["open"] == 1


def test_subscribers_get_every_applied_input_as_an_event(served):
    events: list[dict] = []

    def listen() -> None:
        with served.client() as client:
            for event in client.subscribe():
                events.append(event)

    thread = threading.Thread(target=listen)
    thread.start()
    try:
        wait_for(lambda: len(served.server._subscribers) == 1, what="the subscription")
        with served.client() as client:
            client.request("pause", agent="sleeper")
            client.request("cancel_prompt", request_id="asker/t1/p1")
        wait_for(lambda: len(events) >= 2, what="two events")
    finally:
        served.server.close()
        thread.join(timeout=10)
    kinds = [(e["kind"], e["data"].get("agent_id")) for e in events if e["event"] == "input"]
    assert ("pause", "sleeper") in kinds
    assert any(kind == "prompt_settled" for kind, _ in kinds)
    assert events[-1] == {"event": "closed"}


def test_the_default_state_dir_prefers_the_environment(monkeypatch):
    monkeypatch.setenv("TICKWORK_STATE_DIR", "/x/y")
    assert default_state_dir() == Path("/x/y")
    monkeypatch.delenv("TICKWORK_STATE_DIR")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/5")
    assert default_state_dir() == Path("/run/user/5/tickwork")
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert default_state_dir().name == f"tickwork-{os.getuid()}"


def test_a_refusal_sent_before_the_client_speaks_is_read_not_lost(state):
    """The server replies 'busy' and closes at once; the client's send then fails, but the
    reply explaining why is already waiting and must be what the caller sees."""
    state.mkdir(mode=0o700)
    (state / "token").write_text("t0k3n\n")
    os.chmod(state / "token", 0o600)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(state / "control.sock"))
    listener.listen(1)
    closed = threading.Event()

    def refuse() -> None:
        conn, _ = listener.accept()
        reply = {"ok": False, "code": "busy", "error": "too many clients"}
        conn.sendall(json.dumps(reply).encode() + b"\n")
        conn.close()
        closed.set()

    thread = threading.Thread(target=refuse)
    thread.start()
    with ControlClient(state, timeout=5) as client:
        assert closed.wait(timeout=5)
        with pytest.raises(ControlError, match="too many clients"):
            client.request("ping")
    thread.join(timeout=5)
    listener.close()


def _returns_pairs(turn):
    return {(1, 2): "pair"}


def _returns_huge(turn):
    return [10**5000]


def test_an_agent_whose_result_json_refuses_is_listed_by_its_repr_or_type(state):
    # A 5,000-digit int has no repr either (str()'s limit): the listing names its type.
    world = World(seed=1)
    world.spawn(_returns_pairs, agent_id="pairs")
    world.spawn(_returns_huge, agent_id="huge")
    server = ControlServer(world, state)
    try:
        server.start()
        world.start()
        wait_for(lambda: world.counts()[StatusKind.COMPLETE] == 2, what="both to finish")
        with ControlClient(state, timeout=10) as client:
            agents = {a["id"]: a["result"] for a in client.request("agents")["agents"]}
    finally:
        server.close()
        world.close()
    assert agents == {"pairs": "{(1, 2): 'pair'}", "huge": "<list>"}


def test_hung_up_tells_a_quiet_subscriber_from_a_gone_one_without_waiting():
    # A stream checks its client every half second with no event: the check must not
    # wait for the socket's timeout (a quiet watcher looked gone after it, and its
    # events were held back meanwhile), and a client that wrote something before it
    # left must read as gone (a peek saw the byte and never its end: a slot held for good).
    from runtime.control.wire import hung_up

    ours, theirs = socket.socketpair()
    try:
        ours.settimeout(5.0)
        started = time.monotonic()
        assert hung_up(ours) is False
        assert time.monotonic() - started < 2.5  # not the 5 s timeout
        assert ours.gettimeout() == 5.0
        theirs.sendall(b"bye\n")
        assert hung_up(ours) is False  # still there: what it wrote is read and dropped
        theirs.sendall(b"more\n")
        theirs.close()
        assert hung_up(ours) is True
    finally:
        ours.close()


def test_a_connection_accepted_while_the_server_closes_never_acts(state):
    # close() took its snapshot of the connections outside the lock the accept loop
    # registers one under: a connection accepted in between was never shut, and its
    # request acted on the world after close() had returned.
    accepted, proceed, listener_shut = threading.Event(), threading.Event(), threading.Event()

    class Gated:
        def __init__(self, sock: socket.socket) -> None:
            self.sock = sock

        def accept(self):
            conn, addr = self.sock.accept()
            accepted.set()
            assert proceed.wait(10), "never let through"
            return conn, addr

        def shutdown(self, how: int) -> None:
            listener_shut.set()  # close() has taken its snapshot by now
            self.sock.shutdown(how)

        def __getattr__(self, name: str):
            return getattr(self.sock, name)

    class GatedServer(ControlServer):
        def _bind(self):
            return Gated(super()._bind())

    world = World(seed=1)
    world.spawn(sleeper, agent_id="sleeper")
    server = GatedServer(world, state)
    server.start()
    client = socket.socket(socket.AF_UNIX)
    closer = threading.Thread(target=server.close)
    try:
        client.settimeout(10)
        client.connect(str(state / "control.sock"))
        token = (state / "token").read_text().strip()
        request = {"token": token, "op": "send", "agent": "sleeper", "text": "after close"}
        client.sendall(json.dumps(request).encode() + b"\n")
        assert accepted.wait(10)
        closer.start()
        assert listener_shut.wait(10)
        proceed.set()
        closer.join(10)
        assert not closer.is_alive()
        try:
            got = client.recv(65536)
        except ConnectionResetError:  # closed with the request unread
            got = b""
        assert got == b""  # no reply, and nothing done
        world.tick()
        assert [e.content for e in world.history("sleeper")] == []
    finally:
        proceed.set()
        client.close()
        if closer.is_alive():
            closer.join(10)
        server.close()
        world.close()


def test_clients_that_never_read_their_replies_cannot_lock_a_person_out(served):
    # A slot was busy while its reply went out, and busy slots are never evicted: 32
    # connections pipelining bad lines and never reading held every slot for the send's
    # whole deadline (10 s, again at each reconnect), and `ps` got "too many clients".
    flood = b"\n" * 200_000  # far more replies than the socket buffers hold
    attackers = []
    try:
        for _ in range(MAX_CLIENTS):
            sock = served.raw()
            sock.settimeout(0.2)
            with contextlib.suppress(TimeoutError):
                sock.sendall(flood)  # until the server stops reading: blocked sending
            attackers.append(sock)

        def settled() -> bool:  # no reply goes out any more: every attacker's send blocked
            before = served.server.refused
            time.sleep(0.2)
            return served.server.refused == before > 0

        wait_for(settled, what="the attackers to block the server's sends")
        with served.client() as client:
            assert client.request("ping")["ok"] is True
    finally:
        for sock in attackers:
            sock.close()


def test_close_joins_its_client_threads_through_one_budget(served, monkeypatch):
    # `close()` itself, not only its helper: every thread in one call, two seconds for
    # all of them (a close that joined each in turn passed the helper's test).
    from runtime.control import server as server_module

    joins: list[tuple[int, float]] = []
    join_all = server_module._join_all

    def counted(threads: list[threading.Thread], seconds: float) -> None:
        joins.append((len(threads), seconds))
        join_all(threads, seconds)

    monkeypatch.setattr(server_module, "_join_all", counted)
    with served.client() as client:
        assert client.request("ping")["ok"] is True  # its connection's thread is running
        served.server.close()
    assert joins and all(seconds == 2.0 for _n, seconds in joins), joins
    assert joins[0][0] >= 1, joins  # the client's thread among them


def test_closing_waits_for_its_threads_two_seconds_in_all_not_each():
    # close() joined each client thread for up to 2 s in turn: with four watchers stuck
    # in a send, Ctrl-C on `tickwork serve` took 8 s.
    from runtime.control.server import _join_all

    release = threading.Event()
    stuck = [threading.Thread(target=release.wait, args=(30,)) for _ in range(4)]
    for thread in stuck:
        thread.start()
    try:
        started = time.monotonic()
        _join_all(stuck, 0.5)
        assert time.monotonic() - started < 1.5  # one budget for all four, not 4 x 0.5 s
        assert all(thread.is_alive() for thread in stuck)
    finally:
        release.set()
        for thread in stuck:
            thread.join(10)


def test_a_slow_subscribers_backlog_is_bounded_in_bytes_too(monkeypatch):
    # Bounded by count alone, 10,000 queued events of 60 KB messages held 600 MB for one
    # watcher that did not read.
    from runtime.control import wire

    monkeypatch.setattr(wire, "_SUBSCRIBER_BYTES", 1000)
    ours, theirs = socket.socketpair()
    try:
        sub = wire.Subscriber(ours)
        for n in range(3):
            sub.push({"event": "input", "n": n}, 400)  # the third would pass 1,000 bytes
        assert [sub.get(), sub.get()] == [{"event": "input", "n": 0}, {"event": "input", "n": 1}]
        assert sub.get() == {"event": "dropped", "error": "subscriber too slow: events were lost"}
        sub.push({"event": "input", "n": 3}, 1)  # dropped for good, however little
        assert sub.get()["event"] == "dropped"
    finally:
        ours.close()
        theirs.close()


def test_a_state_dir_too_deep_for_a_socket_is_refused_before_anything_is_made(tmp_path):
    # It was refused only after the directory (and its parents) had been made and left.
    from runtime.control import StateDir

    deep = tmp_path / ("d" * 60) / ("e" * 60) / "state"
    with pytest.raises(ControlError, match="too deep for a Unix socket path"):
        StateDir(deep).prepare()
    assert not (tmp_path / ("d" * 60)).exists()


def test_an_empty_state_dir_is_the_default_one_for_clients_as_for_serve(monkeypatch, tmp_path):
    import argparse

    from runtime.cli import control

    made: list[object] = []
    monkeypatch.setattr(control, "ControlClient", made.append)
    control._client(argparse.Namespace(state_dir=""))
    assert made == [None]  # the default dir, not the current one


def test_a_request_being_handled_as_the_server_closes_gets_its_reply(state):
    # close() shut every connection that was not streaming: one whose command had just
    # acted lost its reply ("the control server closed the connection" from a
    # `tickwork cancel` that cancelled), as when `serve` ends once every agent is done.
    handling, proceed = threading.Event(), threading.Event()

    class Slow(ControlServer):
        def _handle(self, line):
            reply = super()._handle(line)
            handling.set()
            assert proceed.wait(10)
            return reply

    world = World(seed=1)
    world.spawn(sleeper, agent_id="sleeper")
    server = Slow(world, state, apply_timeout=0)  # nothing ticks the world here
    server.start()
    closer = threading.Thread(target=server.close)
    try:
        with contextlib.closing(socket.socket(socket.AF_UNIX)) as client:
            client.settimeout(10)
            client.connect(str(state / "control.sock"))
            token = (state / "token").read_text().strip()
            request = {"token": token, "op": "cancel", "agent": "sleeper"}
            client.sendall(json.dumps(request).encode() + b"\n")
            assert handling.wait(10)
            closer.start()
            wait_for(server._closing.is_set, what="close() to begin")
            proceed.set()
            assert read_reply(client) == {
                "ok": True,
                "agent": "sleeper",
                "seq": 2,
                "applied": False,
            }
        closer.join(10)
        assert not closer.is_alive()
    finally:
        proceed.set()
        if closer.is_alive():
            closer.join(10)
        server.close()
        world.close()


def _leaves_a_sleeper(turn):
    from runtime import Spawn

    yield Spawn(sleeper, "left running")
    return "left it"


def test_pause_and_resume_of_an_ended_agent_act_on_its_subtree(state):
    # Both were refused as doing nothing ("is complete: pause does nothing"), though the
    # world's pause of an ended agent pauses its live subtree and its resume resumes it.
    world = World(seed=1)
    parent = world.spawn(_leaves_a_sleeper, agent_id="parent")
    server = ControlServer(world, state)
    try:
        server.start()
        world.start()
        child = "parent.1"
        wait_for(lambda: world.status(parent).kind is StatusKind.COMPLETE, what="the parent")
        assert world.children(parent) == [child]
        with ControlClient(state, timeout=10) as client:
            assert client.request("pause", agent=parent)["agent"] == parent
            wait_for(lambda: world.status(child).kind is StatusKind.PAUSED, what="the pause")
            with pytest.raises(ControlError, match="is paused already"):
                client.request("pause", agent=child)
            client.request("resume", agent=parent)
            wait_for(lambda: world.status(child).kind is StatusKind.ACTIVE, what="the resume")
            with pytest.raises(ControlError, match="'parent' is complete: resume does nothing"):
                client.request("resume", agent=parent)  # nothing below it is paused
            client.request("cancel", agent=child)
            wait_for(lambda: world.status(child).kind is StatusKind.CANCELLED, what="cancel")
            with pytest.raises(ControlError, match="'parent' is complete: pause does nothing"):
                client.request("pause", agent=parent)  # nothing below it is live
    finally:
        server.close()
        world.close()


def test_a_format_2_worlds_ended_agent_is_not_resumed_through_the_channel(state):
    world = World(seed=1)
    world._state.journal_format = 2  # as a resume of a format-2 journal sets
    parent = world.spawn(_leaves_a_sleeper, agent_id="parent")
    server = ControlServer(world, state)
    try:
        server.start()
        world.start()
        wait_for(lambda: world.status(parent).kind is StatusKind.COMPLETE, what="the parent")
        assert world.journal_format == 2
        with ControlClient(state, timeout=10) as client:
            client.request("pause", agent=parent)
            wait_for(lambda: world.status("parent.1").kind is StatusKind.PAUSED, what="pause")
            with pytest.raises(ControlError, match="resume does nothing"):
                client.request("resume", agent=parent)  # format 2's resume would not act
    finally:
        server.close()
        world.close()


@contextlib.contextmanager
def _serving(world: World, state: Path, **options: Any) -> Iterator[ControlServer]:
    """``world`` served on ``state`` (a `ControlServer` with ``options``); the server and
    the world are closed at the end."""
    server = ControlServer(world, state, **options)
    try:
        server.start()
        yield server
    finally:
        server.close()
        world.close()


def _in_thread(fn: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """Run ``fn`` on a thread of its own; its result (or exception) lands in the list."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn())
        except Exception as exc:
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_a_command_is_answered_once_a_tick_applied_it_so_the_next_one_sees_it(state):
    # "ok" came as soon as the command was queued: a `resume` sent on its heels found the
    # agent not paused yet and was refused, leaving it paused (14 of 200 pause/resume
    # pairs against a running serve). The world here ticks only when the test says.
    world = World(seed=1)
    world.spawn(sleeper, agent_id="sleeper")
    world.tick()
    with _serving(world, state):
        with ControlClient(state, timeout=10) as client:
            for op, after in (("pause", StatusKind.PAUSED), ("resume", StatusKind.ACTIVE)):
                thread, out = _in_thread(lambda op=op: client.request(op, agent="sleeper"))
                wait_for(lambda: len(world._inbox) == 1, what=f"the {op} to be queued")
                assert out == []  # no reply before a tick has applied it
                world.tick()
                thread.join(10)
                [reply] = out
                assert reply == {
                    "ok": True,
                    "agent": "sleeper",
                    "seq": reply["seq"],
                    "applied": True,
                }
                assert world.status("sleeper").kind is after


def test_an_answer_is_replied_to_once_the_agent_has_taken_it(state):
    world = World(seed=1, interaction_timeout_secs=0)
    world.spawn(asker, agent_id="asker")
    world.tick()
    world.tick()
    [(_agent, prompt)] = world.hub.pending()
    with _serving(world, state):
        with ControlClient(state, timeout=10) as client:
            thread, out = _in_thread(
                lambda: client.request("answer", request_id=prompt.id, value="ada")
            )
            wait_for(lambda: not world.hub.pending(), what="the hub to settle the prompt")
            assert out == []  # settled in the hub, not yet taken by the agent
            world.tick()
            thread.join(10)
        assert out == [{"ok": True, "answered": prompt.id, "agent": "asker", "applied": True}]
        assert world.status("asker").kind is StatusKind.COMPLETE


def test_a_command_no_tick_applies_in_time_is_answered_as_queued_and_still_applies(state):
    world = World(seed=1)
    world.spawn(sleeper, agent_id="sleeper")
    world.tick()
    with _serving(world, state, apply_timeout=0.05):
        with ControlClient(state, timeout=10) as client:
            reply = client.request("pause", agent="sleeper")
        assert reply == {"ok": True, "agent": "sleeper", "seq": 2, "applied": False}
        world.tick()
        assert world.status("sleeper").kind is StatusKind.PAUSED


class _BrokenDisk:
    """A journal that records ticks until ``full`` is set, then cannot write one."""

    def __init__(self) -> None:
        self.full = threading.Event()

    def begin(self, settings: dict[str, Any]) -> None:
        pass

    def record_tick(self, *args: Any) -> None:
        if self.full.is_set():
            raise JournalError("cannot write journal 'run.db': disk I/O error")

    def close(self) -> None:
        pass


@pytest.mark.parametrize("lockstep", [False, True], ids=["live", "lockstep"])
def test_a_command_to_a_world_whose_loop_died_is_answered_at_once_with_why(state, lockstep):
    # An embedded host's `start()` loop died (its journal could not be written): each
    # command then waited out `apply_timeout` for a tick that would never come, and its
    # reply said only `"applied": false`, as for a slow tick (in lockstep, at once).
    disk = _BrokenDisk()
    world = World(seed=1, journal=disk, lockstep=lockstep)
    world.spawn(sleeper, agent_id="a")
    world.spawn(sleeper, agent_id="b")
    with _serving(world, state, apply_timeout=60):  # past the client's 10 s: no waiting
        world.start()
        wait_for(lambda: world.status("b").kind is StatusKind.ACTIVE, what="the sleepers")
        disk.full.set()
        with ControlClient(state, timeout=10) as client:
            # The tick applying it dies recording it (a live world's reply waits for that
            # tick; a lockstep one's does not); the next command finds the loop dead.
            # (In lockstep the first reply may come before or after the loop died.)
            first = client.request("pause", agent="a")
            assert first["applied"] is False, first
            wait_for(lambda: not world.running, what="the loop to die of its journal")
            reply = client.request("pause", agent="b")
            assert reply["applied"] is False, reply
            for said in (reply,) if lockstep else (reply, first):
                assert "tick loop died" in said["reason"] and "disk I/O error" in said["reason"]
        assert not world.running
        assert isinstance(world.loop_error, JournalError)
        with pytest.raises(JournalError, match="disk I/O error"):
            world.stop()
        assert world.loop_error is None  # raised by `stop()`: said once


class _TickHolder:
    """A host observer (registered before the server's) that, once ``armed``, holds the
    next tick with inputs at its end, until ``gate`` is set."""

    def __init__(self, world: World) -> None:
        self.gate, self.in_tick, self.armed = threading.Event(), threading.Event(), False
        world.observe(self._hold)

    def _hold(self, report: object, inputs: list[tuple[int, object]]) -> None:
        if inputs and self.armed:
            self.in_tick.set()
            assert self.gate.wait(10)


def test_a_command_is_not_said_applied_by_an_earlier_one_of_the_same_kind_and_agent(state):
    # The first form matched an applied input by its type and agent: a tick applying an
    # earlier send to the same agent (held here mid-way by a host observer) let the reply
    # to a later one go, "applied" while it was still queued. A command's reply now waits
    # for its own sequence number. (A review's reproduction.)
    world = World(seed=1)
    world.spawn(sleeper, agent_id="sleeper")
    world.tick()
    holder = _TickHolder(world)  # observes before the server does
    server = ControlServer(world, state)
    ticker = threading.Thread(target=world.tick)
    try:
        server.start()
        world.send("sleeper", "x")  # the earlier send, queued
        holder.armed = True
        ticker.start()
        assert holder.in_tick.wait(10)  # the tick that applies "x" is under way
        with ControlClient(state, timeout=10) as client:
            thread, out = _in_thread(lambda: client.request("send", agent="sleeper", text="y"))
            # Its handler runs (its check of the agent waits for the tick's end).
            wait_for(lambda: None in server._clients.values(), what="the send to be handled")
            holder.gate.set()
            ticker.join(10)
            wait_for(lambda: len(world._inbox) == 1, what="'y' to be queued")
            thread.join(0.5)
            assert out == []  # "x" was applied, "y" is still queued
            world.tick()
            thread.join(10)
        [reply] = out
        assert reply["applied"] is True and len(world._inbox) == 0
    finally:
        holder.gate.set()
        server.close()
        world.close()


def test_in_lockstep_a_command_is_answered_at_once_and_judged_against_what_is_queued(state):
    # A lockstep world ticks once its lane work is done (a tool holding here): a reply
    # that waited for the tick would wait for the tool, up to `apply_timeout` (more than
    # the client waits here); and a resume after a pause, both queued, was refused as the
    # agent was not paused yet.
    tools = ToolRegistry()
    release = threading.Event()

    @tools.tool()
    def gate(args, ctx):
        release.wait(30)
        return "through"

    def worker(turn):
        yield CallTools(ToolCall("c1", "gate", {}))
        return "done"

    world = World(seed=1, clock=ManualClock(), tools=tools)
    assert world.lockstep
    world.spawn(worker, agent_id="w")
    server = ControlServer(world, state, apply_timeout=60)
    try:
        server.start()
        world.start()
        wait_for(lambda: world.lane.stats().busy == 1, what="the tool to run")
        with ControlClient(state, timeout=10) as client:
            reply = client.request("pause", agent="w")
            assert reply["applied"] is False
            # Judged against the pause still queued, not the agent as the last tick left it.
            with pytest.raises(ControlError, match="'w' has a pause queued already"):
                client.request("pause", agent="w")
            assert client.request("resume", agent="w")["applied"] is False
            with pytest.raises(ControlError, match="'w' has a resume queued already"):
                client.request("resume", agent="w")
            assert client.request("pause", agent="w")["applied"] is False
        release.set()
        wait_for(lambda: world.status("w").kind is StatusKind.PAUSED, what="the last pause")
        assert world.result("w") is None
    finally:
        release.set()
        server.close()
        world.close()


def test_the_cli_says_when_a_command_is_queued_but_not_yet_applied(monkeypatch, capsys):
    from runtime.cli import control

    class Client:
        def __init__(self, applied: bool, reason: str | None = None) -> None:
            self.applied = applied
            self.reason = {} if reason is None else {"reason": reason}

        def __enter__(self) -> Client:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def request(self, op: str, **fields: object) -> dict[str, object]:
            if op == "prompts":
                return {"ok": True, "prompts": [{"id": "a1/t1/p1", "agent": "a1", "kind": "text"}]}
            if op == "answer":
                fields = {"agent": "a1", "answered": fields["request_id"]}
            return {"ok": True, **fields, "applied": self.applied, **self.reason}

    died = "the world's tick loop died: JournalError('disk full\x1b[2J')"
    statuses = []
    for applied, reason in ((True, None), (False, None), (False, died)):
        client = Client(applied, reason)
        monkeypatch.setattr(control, "_client", lambda args, client=client: client)
        statuses += [
            control.cmd_steer(argparse.Namespace(op="pause", agent="a1")),
            control.cmd_send(argparse.Namespace(agent="a1", text="hi")),
            control.cmd_respond(
                argparse.Namespace(
                    id="a1", value="yes", choice=None, approve=False, deny=False, json=False
                )
            ),
        ]
    assert statuses == [0] * 6 + [1] * 3  # not confirmed, and never to be: exit 1
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == ["paused a1", "sent to a1", "answered a1/t1/p1 (a1)"]
    assert out[3:6] == [
        "pause a1: queued; the world has not applied it yet",
        "send to a1: queued; the world has not applied it yet",
        "answer a1/t1/p1 to a1: queued; the world has not applied it yet",
    ]
    # Why, when the server knows (the world's loop died), with control characters shown.
    why = ": not confirmed; the world's tick loop died: JournalError('disk full\\x1b[2J')"
    assert out[6:] == [f"pause a1{why}", f"send to a1{why}", f"answer a1/t1/p1 to a1{why}"]


def _parent_of_a_sleeper(turn):
    yield Spawn(sleeper, "below")
    yield Sleep(3600)
    return "done"


@contextlib.contextmanager
def _parent_and_child(state: Path) -> Iterator[tuple[World, str]]:
    """A world ticked by hand with agent ``p`` and its child, both live, served on
    ``state``: nothing ticks unless the test does, so every command stays queued (its
    reply says so after 0.05 s)."""
    world = World(seed=1)
    world.spawn(_parent_of_a_sleeper, agent_id="p")
    for _ in range(4):
        world.tick()
    [c] = world.children("p")
    assert world.status("p").kind is StatusKind.ACTIVE
    assert world.status(c).kind is StatusKind.ACTIVE
    with _serving(world, state, apply_timeout=0.05):
        yield world, c


def test_a_parents_queued_resume_is_queued_for_its_subtree_too(state):
    # A pause or resume reaches the subtree: judging the child's next pause against the
    # child's own older entry refused it ("has a pause queued already") though the
    # parent's resume, queued after, will have resumed it. (A review's reproduction.)
    with _parent_and_child(state) as (world, c), ControlClient(state, timeout=10) as client:
        client.request("pause", agent=c)
        client.request("pause", agent="p")
        client.request("resume", agent="p")  # resumes the subtree, c included
        client.request("pause", agent=c)
        world.tick()
        assert world.status(c).kind is StatusKind.PAUSED


def test_a_command_after_a_queued_cancel_is_refused(state):
    # A cancel ends the agent and its subtree for good: a pause, resume, send or interrupt
    # after one still queued does nothing, and was taken ("ok") all the same.
    with _parent_and_child(state) as (world, c):
        with ControlClient(state, timeout=10) as client:
            client.request("pause", agent=c)
            assert client.request("cancel", agent=c)["applied"] is False
            for op, fields in [
                ("pause", {}),
                ("interrupt", {}),
                ("send", {"text": "hi"}),
                ("resume", {}),  # (the pause before the cancel is no longer what is queued)
            ]:
                with pytest.raises(ControlError, match=f"'{c}' has a cancel queued: {op} does"):
                    client.request(op, agent=c, **fields)
            with pytest.raises(ControlError, match=f"'{c}' has a cancel queued already"):
                client.request("cancel", agent=c)
            # The parent's pause reaches c too, but the cancel queued there stays what
            # counts: a resume of c after it would do nothing either.
            client.request("pause", agent="p")
            with pytest.raises(ControlError, match=f"'{c}' has a cancel queued: resume does"):
                client.request("resume", agent=c)
            client.request("resume", agent="p")  # the parent's is taken: p is live
        world.tick()
        assert world.status(c).kind is StatusKind.CANCELLED
        assert world.status("p").kind is StatusKind.ACTIVE
        with ControlClient(state, timeout=10) as client:  # applied: judged by its status
            with pytest.raises(ControlError, match=f"'{c}' is cancelled: pause does nothing"):
                client.request("pause", agent=c)


def test_a_command_is_judged_against_what_the_host_queued_too(state):
    # The host's own pause (world.pause, not through the channel) was not counted: a
    # resume right after it was refused as the agent was not paused yet, and the agent
    # then stayed paused; a pause after the host's cancel was taken and did nothing.
    with _parent_and_child(state) as (world, c):
        world.pause("p")  # it reaches c
        with ControlClient(state, timeout=10) as client:
            with pytest.raises(ControlError, match=f"'{c}' has a pause queued already"):
                client.request("pause", agent=c)
            assert client.request("resume", agent=c)["applied"] is False
            world.cancel(c)
            with pytest.raises(ControlError, match=f"'{c}' has a cancel queued: pause does"):
                client.request("pause", agent=c)
        world.tick()
        assert world.status("p").kind is StatusKind.PAUSED
        assert world.status(c).kind is StatusKind.CANCELLED


def _ended_parent(world: World) -> str:
    world.spawn(_leaves_a_sleeper, agent_id="p")
    for _ in range(4):
        world.tick()
    assert world.status("p").kind is StatusKind.COMPLETE
    [c] = world.children("p")
    return c


def _live_parent(world: World) -> str:
    world.spawn(_parent_of_a_sleeper, agent_id="p")
    for _ in range(4):
        world.tick()
    [c] = world.children("p")
    return c


def _paused_child_parent_resumed(world: World) -> tuple[str, str]:
    # p live, its child paused; the host resumes p, which is not paused: a no-op.
    c = _live_parent(world)
    world.pause(c)
    world.tick()
    world.resume("p")
    return c, c


def _ended_parent_cancelled(world: World) -> tuple[str, str]:
    # p ended with its child live; the host cancels p: a no-op (a cancel of an agent that
    # has ended reaches nobody, in any format).
    c = _ended_parent(world)
    world.cancel("p")
    return c, c


def _parents_id_taken_then_cancelled(world: World) -> tuple[str, str]:
    # p ended and forgotten, its id taken by a new agent that is then cancelled: not the
    # child's parent, so nothing of the child's.
    c = _ended_parent(world)
    world.forget("p")
    world.tick()
    world.spawn(sleeper, agent_id="p")
    world.tick()
    world.cancel("p")
    return c, c


def _leaves_a_parent(turn):
    from runtime import Spawn

    yield Spawn(_leaves_a_sleeper, "middle")
    return "done"


def _ended_above_a_released_one(world: World) -> tuple[str, str]:
    # e (ended) > e.1 (ended, forgotten) > e.1.1 (live); the host pauses e, which reaches
    # e.1.1 through the released e.1 (from format 3): e's resume undoes it.
    world.spawn(_leaves_a_parent, agent_id="e")
    for _ in range(5):
        world.tick()
    [middle] = world.children("e")
    [leaf] = world.children(middle)
    world.forget(middle)
    world.tick()
    world.pause("e")
    return "e", leaf


def _child_paused_under_an_ended_parent(world: World) -> tuple[str, str]:
    # p ended, its child live; the host pauses the child: p's resume undoes it (format 3).
    c = _ended_parent(world)
    world.pause(c)
    return "p", c


def _parent_paused_child_resumed(world: World) -> tuple[str, str]:
    # p paused with its child, then the child resumed (queued, or applied): a pause of p,
    # "paused already", pauses the child again.
    c = _live_parent(world)
    world.pause("p")
    world.resume(c)
    return "p", c


def _parent_paused_child_resumed_applied(world: World) -> tuple[str, str]:
    agent, c = _parent_paused_child_resumed(world)
    world.tick()
    return agent, c


@pytest.mark.parametrize(
    ("setup", "journal_format", "op", "after"),
    [
        (_paused_child_parent_resumed, None, "resume", StatusKind.ACTIVE),
        (_ended_parent_cancelled, None, "send", StatusKind.ACTIVE),
        (_ended_parent_cancelled, 2, "pause", StatusKind.PAUSED),
        (_parents_id_taken_then_cancelled, None, "send", StatusKind.ACTIVE),
        (_parents_id_taken_then_cancelled, None, "pause", StatusKind.PAUSED),
        (_ended_above_a_released_one, None, "resume", StatusKind.ACTIVE),
        (_child_paused_under_an_ended_parent, None, "resume", StatusKind.ACTIVE),
        (_parent_paused_child_resumed, None, "pause", StatusKind.PAUSED),
        (_parent_paused_child_resumed_applied, None, "pause", StatusKind.PAUSED),
    ],
    ids=[
        "no-op-resume-above",
        "no-op-cancel-above",
        "no-op-cancel-above-format-2-pause",
        "reused-id",
        "reused-id-pause",
        "released-between",
        "queued-below",
        "child-resumed-queued",
        "child-resumed-applied",
    ],
)
def test_a_command_that_acts_is_taken_whatever_was_queued(setup, journal_format, op, after):
    # Judged by the agent's own status, or with every command queued above counted as
    # sure, these were refused though they act: a resume the agent needed (it stayed
    # paused), a send to a live child, a pause of a "paused" parent whose child was
    # resumed. The commands reach as the tick applies them: a subtree walked through
    # released agents, and never a new agent under a released id. (Two reviews'
    # reproductions: a fuzz of random trees and queues.)
    world = World(seed=1)
    if journal_format is not None:
        world._state.journal_format = journal_format
    try:
        agent, watched = setup(world)
        assert steer(world, agent, op, text="hi")["ok"] is True
        world.tick()
        assert world.status(watched).kind is after
    finally:
        world.close()


def test_a_pause_or_resume_of_an_ended_agent_with_nothing_below_is_refused():
    # Taken when the other of the two was queued, though it reaches nobody.
    world = World(seed=1)
    try:
        c = _live_parent(world)
        world.cancel(c)
        world.tick()
        world.pause(c)
        with pytest.raises(Refused, match=f"'{c}' is cancelled: resume does nothing"):
            steer(world, c, "resume")
        with pytest.raises(Refused, match=f"'{c}' is cancelled: pause does nothing"):
            steer(world, c, "pause")
    finally:
        world.close()


def test_a_format_2_resume_of_an_ended_agent_is_refused_with_a_pause_queued(state):
    # Format 2 resumes no ended agent's subtree: taking the resume as undoing the queued
    # pause said ok to a command that does nothing. (A review's reproduction.)
    world = World(seed=1)
    world._state.journal_format = 2
    world.spawn(_leaves_a_sleeper, agent_id="parent")
    for _ in range(4):
        world.tick()
    assert world.status("parent").kind is StatusKind.COMPLETE
    with _serving(world, state, apply_timeout=0.05):
        with ControlClient(state, timeout=10) as client:
            assert client.request("pause", agent="parent")["applied"] is False
            with pytest.raises(ControlError, match="resume does nothing"):
                client.request("resume", agent="parent")
        world.tick()
        assert world.status("parent.1").kind is StatusKind.PAUSED


def test_a_command_is_not_said_applied_by_a_tick_that_drained_before_its_post(state):
    # The tick drains "x" between the op's check and its post: only the command's own
    # number tells that "y" is not applied yet.
    world = World(seed=1)
    world.spawn(sleeper, agent_id="sleeper")
    world.tick()
    holder = _TickHolder(world)  # observes before the server does
    server = ControlServer(world, state)
    real_send = world.send
    ticker = threading.Thread(target=world.tick)

    def send(agent, text):  # the tick drains "x" between the op's check and its post
        if text == "y":
            holder.armed = True
            ticker.start()
            assert holder.in_tick.wait(10)
        return real_send(agent, text)

    world.send = send
    try:
        server.start()
        real_send("sleeper", "x")
        with ControlClient(state, timeout=10) as client:
            thread, out = _in_thread(lambda: client.request("send", agent="sleeper", text="y"))
            wait_for(lambda: len(server._posted) == 1, what="y to be watched")
            holder.gate.set()
            ticker.join(10)
            thread.join(0.5)
            assert out == []
            world.tick()
            thread.join(10)
        assert out[0]["applied"] is True
    finally:
        holder.gate.set()
        server.close()
        world.close()


def test_an_answer_is_not_said_applied_by_a_tick_of_other_inputs(state):
    world = World(seed=1, interaction_timeout_secs=0)
    world.spawn(asker, agent_id="asker")
    world.spawn(sleeper, agent_id="sleeper")
    world.tick()
    world.tick()
    [(_a, prompt)] = world.hub.pending()
    holder = _TickHolder(world)  # observes before the server does
    server = ControlServer(world, state)
    ticker = threading.Thread(target=world.tick)
    try:
        server.start()
        world.send("sleeper", "x")
        holder.armed = True
        ticker.start()
        assert holder.in_tick.wait(10)
        with ControlClient(state, timeout=10) as client:
            thread, out = _in_thread(
                lambda: client.request("answer", request_id=prompt.id, value="ada")
            )
            wait_for(lambda: not world.hub.pending(), what="the hub to settle")
            holder.armed = False
            holder.gate.set()
            ticker.join(10)
            thread.join(0.5)
            assert out == []  # the settlement is still queued
            world.tick()
            thread.join(10)
        assert out[0]["applied"] is True
    finally:
        holder.gate.set()
        server.close()
        world.close()


def test_a_command_applied_second_in_its_tick_is_said_applied(state):
    world = World(seed=1)
    world.spawn(sleeper, agent_id="sleeper")
    world.tick()
    with _serving(world, state, apply_timeout=2) as server:
        with ControlClient(state, timeout=10) as client:
            world.send("sleeper", "x")
            thread, out = _in_thread(lambda: client.request("pause", agent="sleeper"))
            wait_for(lambda: len(world._inbox) == 2, what="both queued")
            wait_for(lambda: len(server._posted) == 1, what="the pause watched")
            world.tick()
            thread.join(10)
        assert out[0]["applied"] is True


def test_a_command_applied_before_its_reply_watches_for_it_is_said_applied(state):
    world = World(seed=1)
    world.spawn(sleeper, agent_id="sleeper")
    world.tick()
    real_pause = world.pause

    def pause(agent):
        seq = real_pause(agent)
        world.tick()  # its tick ends before the server watches for it
        return seq

    world.pause = pause
    with _serving(world, state, apply_timeout=2):
        with ControlClient(state, timeout=10) as client:
            assert client.request("pause", agent="sleeper")["applied"] is True
