"""The control channel as a security boundary: state dir, symlinks, ownership, idle clients."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from pathlib import Path

import pytest

from runtime import World
from runtime.control import ControlClient, ControlServer
from runtime.errors import ControlError
from tests.control.test_control import read_reply, short_state_dir


@pytest.fixture
def state():
    path = short_state_dir()
    yield path
    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)
    shutil.rmtree(path.parent, ignore_errors=True)


def test_a_state_dir_others_can_write_is_refused_and_its_mode_left_alone(state):
    state.mkdir()
    os.chmod(state, 0o1777)
    with World() as world, pytest.raises(ControlError, match="can be written by others"):
        ControlServer(world, state).start()
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o1777
    assert not (state / "serve.lock").exists()


def test_an_existing_readable_state_dir_of_ours_is_used_as_it_is(state):
    state.mkdir()
    os.chmod(state, 0o755)
    with World() as world, ControlServer(world, state), ControlClient(state) as client:
        assert client.request("ping")["ok"] is True
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o755


def test_a_state_dir_tickwork_creates_is_0700(state):
    with World() as world, ControlServer(world, state):
        assert stat.S_IMODE(os.stat(state).st_mode) == 0o700


def test_a_state_dir_of_another_user_is_refused(monkeypatch, state):
    state.mkdir(mode=0o700)
    monkeypatch.setattr(os, "getuid", lambda: os.lstat(state).st_uid + 1)
    with World() as world, pytest.raises(ControlError, match="belongs to uid"):
        ControlServer(world, state).start()


def test_a_symlinked_state_dir_is_refused(state):
    real = state.parent / "real"
    real.mkdir(mode=0o700)
    state.symlink_to(real)
    with World() as world, pytest.raises(ControlError, match="is a symlink"):
        ControlServer(world, state).start()


def test_a_planted_serve_lock_symlink_is_not_followed(state):
    state.mkdir(mode=0o700)
    victim = state.parent / "victim"
    victim.write_text("precious\n")
    (state / "serve.lock").symlink_to(victim)
    with World() as world, pytest.raises(ControlError, match="symlink"):
        ControlServer(world, state).start()
    assert victim.read_text() == "precious\n"


def test_a_planted_token_or_socket_symlink_is_replaced_not_followed(state):
    state.mkdir(mode=0o700)
    victims = []
    for name in ("token", "control.sock"):
        victim = state.parent / f"victim-{name}"
        victim.write_text("precious\n")
        (state / name).symlink_to(victim)
        victims.append(victim)
    with World() as world, ControlServer(world, state), ControlClient(state) as client:
        assert client.request("ping")["ok"] is True
        assert not (state / "token").is_symlink()
    assert [victim.read_text() for victim in victims] == ["precious\n", "precious\n"]


def test_a_clean_close_removes_the_serve_lock(state):
    with World() as world, ControlServer(world, state):
        assert (state / "serve.lock").exists()
    assert sorted(os.listdir(state)) == []


def test_a_client_checks_ownership_before_it_sends_the_token(monkeypatch, state):
    with World() as world, ControlServer(world, state) as server:
        monkeypatch.setattr(os, "getuid", lambda: os.lstat(state).st_uid + 1)
        with pytest.raises(ControlError, match="not to you"):
            ControlClient(state)
        monkeypatch.undo()
        assert server.accepted == 0  # it never even connected


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_a_client_refuses_a_socket_that_belongs_to_another_user(state):
    with World() as world, ControlServer(world, state) as server:
        os.chown(state / "control.sock", 65534, 65534, follow_symlinks=False)
        with pytest.raises(ControlError, match=r"control socket .* belongs to uid 65534"):
            ControlClient(state)
        assert server.accepted == 0


def test_a_client_refuses_a_state_dir_others_can_write(state):
    with World() as world, ControlServer(world, state) as server:
        os.chmod(state, 0o777)
        with pytest.raises(ControlError, match="can be written by others"):
            ControlClient(state)
        assert server.accepted == 0


def _raw(state: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(state / "control.sock"))
    return sock


def test_a_client_that_sends_nothing_is_dropped_after_the_idle_deadline(state):
    with World() as world, ControlServer(world, state, idle_timeout=0.2) as server:
        with contextlib.closing(_raw(state)) as sock:
            reply = read_reply(sock)  # within the socket's 10 s timeout, or the test fails
            assert reply["code"] == "idle" and "sent no request" in reply["error"]
            assert sock.recv(1) == b""
        assert server.refused == 1


def test_a_client_trickling_a_request_is_dropped_though_it_keeps_sending(state):
    with World() as world, ControlServer(world, state, idle_timeout=0.3):
        with contextlib.closing(_raw(state)) as sock:
            stop = threading.Event()
            sent = []

            def trickle() -> None:
                for byte in b'{"op": "ping", "token": "' + b"0" * 400:
                    if stop.wait(0.02):
                        return
                    try:
                        sock.send(bytes([byte]))
                    except OSError:
                        return
                    sent.append(byte)

            thread = threading.Thread(target=trickle)
            started = time.monotonic()
            thread.start()
            try:
                reply = read_reply(sock)
            finally:
                stop.set()
                thread.join(timeout=10)
            assert reply["code"] == "idle" and "sent part of a request" in reply["error"]
            # Dropped for the whole line's deadline, not for a pause between bytes.
            assert time.monotonic() - started < 5 and len(sent) < 400


def test_a_client_between_requests_gets_a_fresh_deadline_for_each(state):
    with World() as world, ControlServer(world, state, idle_timeout=5) as server:
        with ControlClient(state) as client:
            for _ in range(3):
                assert client.request("ping")["ok"] is True
        assert server.refused == 0


def test_an_op_that_fails_inside_the_server_still_gets_a_reply(monkeypatch, state):
    from runtime.control import ops

    def broken(world, request, stats):
        raise RuntimeError("boom")

    monkeypatch.setitem(ops.OPS, "ping", broken)
    with World() as world, ControlServer(world, state), ControlClient(state) as client:
        with pytest.raises(ControlError, match="failed inside the server"):
            client.request("ping")
        reply = client.raw({"op": "stats", "token": client._token})
        assert reply["ok"] is True
    assert json.dumps(reply)


# -- the client's check of the server process (SO_PEERCRED) --------------------------------

needs_peercred = pytest.mark.skipif(
    not hasattr(socket, "SO_PEERCRED"), reason="SO_PEERCRED is Linux's (elsewhere: no check)"
)


@needs_peercred
def test_the_peer_check_passes_a_server_process_of_the_current_user():
    from runtime.control.client import _check_peer

    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        _check_peer(left)  # the kernel's credentials of the other end: this process's


@needs_peercred
def test_the_peer_check_refuses_a_server_process_of_another_user(monkeypatch):
    # One user cannot run a process as another, so the "current user" is moved instead:
    # the uid and pid in the refusal are the kernel's, read from the socket.
    from runtime.control.client import _check_peer

    real = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: real + 1)
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right, pytest.raises(ControlError) as refused:
        _check_peer(left)
    assert str(refused.value) == (
        f"the control server (pid {os.getpid()}) runs as uid {real}, not as you"
        f" (uid {real + 1}): refusing to send it the token"
    )


_NOBODY_SERVER = """
import os, socket, sys
os.setgid(65534)
os.setuid(65534)
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1])
listener.listen(1)
print("listening", flush=True)
conn, _ = listener.accept()
conn.settimeout(10)
got = b""
try:
    while chunk := conn.recv(4096):
        got += chunk
except OSError:
    pass
print(repr(got), flush=True)
"""


@needs_peercred
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a server as another user")
def test_a_client_never_sends_the_token_to_a_server_process_of_another_user(state, tmp_path):
    # Every file checks out (the dir, token and socket are ours) but the process listening
    # on the socket is uid 65534's: the client refuses before it sends anything.
    import subprocess
    import sys

    spot = Path(tempfile.mkdtemp(prefix="tw-", dir="/tmp"))  # short: AF_UNIX paths are
    os.chmod(spot, 0o777)  # for the other user to bind its socket in
    theirs = spot / "s"
    child = subprocess.Popen(
        [sys.executable, "-c", _NOBODY_SERVER, str(theirs)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "listening\n"
        with World() as world, ControlServer(world, state) as server:
            (state / "control.sock").unlink()
            os.rename(theirs, state / "control.sock")
            os.chown(state / "control.sock", os.getuid(), os.getgid())
            with pytest.raises(ControlError, match=r"runs as uid 65534, not as you"):
                ControlClient(state)
            assert server.accepted == 0
        out, _ = child.communicate(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=10)
        shutil.rmtree(spot, ignore_errors=True)
    assert out == "b''\n"  # the connection was closed with nothing sent: no token
