"""The control server: newline-delimited JSON over a Unix socket, one thread per client.

Every request is one JSON object on one line and carries the token from the state dir's
token file; every reply is one JSON object on one line, ``{"ok": true, ...}`` or
``{"ok": false, "code": ..., "error": ...}``. A bad request gets an error reply and the
server goes on serving everyone else: malformed JSON (nested too deep too), an unknown op or
a missing field keep the connection; a wrong token or a line over ``MAX_LINE`` bytes closes
it. A client must finish each request line within ``idle_timeout`` seconds of the last reply
(or of connecting), and take each reply within it, or it is dropped; and when all
``MAX_CLIENTS`` slots are taken, a new client takes the slot of the one that has been
waiting longest without a request, so idle or trickling connections never lock a person's
``tickwork respond`` out. The token is
checked before anything else is looked at, so an unauthorised request never acts, and is
compared in constant time. Everything a request does goes through the world's thread-safe
API (commands, hub, reads that take whole ticks).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from components import PromptSettled
from runtime.control.ops import OPS, Op, Refused, error_reply
from runtime.control.state_dir import StateDir
from runtime.control.wire import (
    FULL,
    MAX_LINE,
    Dropped,
    Subscriber,
    hung_up,
    request_lines,
    send,
    send_quietly,
    shut,
)
from runtime.errors import ControlError, TickworkError, UnknownAgentError, WorldClosedError
from runtime.journal.codec import encode_input
from runtime.world import TickReport, World

__all__ = ["MAX_CLIENTS", "MAX_LINE", "ControlServer", "StateDir"]

log = logging.getLogger("tickwork.control")

MAX_CLIENTS = 32
"""Connections served at once; one more evicts the longest-idle one (``busy`` if none is)."""
IDLE_TIMEOUT = 10.0
"""Seconds a client has to send a whole request line (and to take a reply) before it is dropped."""
APPLY_TIMEOUT = 5.0
"""Seconds a command's reply waits for the tick that applies it (see `ControlServer`)."""

# The ops that change the world. A command's reply gives its input's sequence number,
# applied once a tick has applied that number (the inbox hands inputs out in order, without
# gaps); an answer's settlement is matched by its request id (unique while it is open).
_COMMANDS = frozenset({"send", "pause", "resume", "cancel", "interrupt"})
_SETTLING = frozenset({"answer", "cancel_prompt"})


class _Posted:
    """An op a client's reply waits on: its input's sequence number (a command's) or the
    request id it settles (an answer's), whether a tick has applied it, and the event its
    reply waits on (set by that tick, or by the server's close)."""

    __slots__ = ("applied", "done", "request_id", "seq")

    def __init__(self, seq: int = 0, request_id: str = "") -> None:
        self.seq = seq
        self.request_id = request_id
        self.applied = False
        self.done = threading.Event()


def _said_why(reply: dict[str, Any], world: World) -> dict[str, Any]:
    """``reply`` (not applied) with a ``"reason"`` when the world's loop has died."""
    died = world.loop_error
    if died is not None:
        reply["reason"] = f"the world's tick loop died: {died!r}"
    return reply


class ControlServer:
    """Serves the control channel of ``world`` from ``state_dir`` until ``close()``.

    ``stats`` adds fields to the ``stats`` reply (a run's latencies, say). An op that
    changes the world (``send``, ``pause``, ``resume``, ``cancel``, ``interrupt``, each
    replied to with its input's ``seq``; ``answer`` and ``cancel_prompt``, whose settlement
    is an input too) is replied to once the tick that applies it has ended, so the next
    request sees what it did (a ``resume`` right after a ``pause`` found the agent not
    paused yet, and was refused); its reply says ``"applied": false`` if no tick applied
    it within ``apply_timeout`` seconds (a world that is not ticking), the command still
    queued. A lockstep world's ticks wait for its lane work, so there the reply comes at
    once, ``"applied": false``; so it does when ``start()``'s loop has died
    (`World.loop_error`), with a ``"reason"`` naming the error.
    """

    def __init__(
        self,
        world: World,
        state_dir: StateDir | str | os.PathLike[str],
        *,
        stats: Callable[[], dict[str, Any]] | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
        apply_timeout: float = APPLY_TIMEOUT,
    ) -> None:
        if not idle_timeout > 0:
            raise ValueError(f"`idle_timeout` must be > 0, got {idle_timeout!r}")
        if not apply_timeout >= 0:
            raise ValueError(f"`apply_timeout` must be >= 0, got {apply_timeout!r}")
        self.idle_timeout = idle_timeout
        self.apply_timeout = apply_timeout
        self.world = world
        self.state = state_dir if isinstance(state_dir, StateDir) else StateDir(state_dir)
        self._stats = stats
        self._token = ""
        self._owns_lock = False
        self._listener: socket.socket | None = None
        self._closing = threading.Event()
        self._clients_lock = threading.Lock()
        # Each connection, and since when it has waited for a request line (None while a
        # request is handled or the connection streams events: those are never evicted).
        self._clients: dict[socket.socket, float | None] = {}
        self._subscribers: set[Subscriber] = set()
        self._replying: set[socket.socket] = set()  # connections taking their reply now
        self._posted: list[_Posted] = []  # commands whose replies wait for their tick
        self._applied_through = 0  # every input up to this sequence number is applied
        self._steering = threading.Lock()  # a command judged and posted at a time
        self._threads: list[threading.Thread] = []
        self.refused = 0  # requests that got an error reply (for tests and stats)
        self.accepted = 0  # connections accepted
        self.dropped = 0  # connections dropped as idle or slow, or evicted

    def start(self) -> None:
        """Take the state dir's lock, write the token, open the socket and start serving.

        Raises:
            ControlError: another server holds the state dir, or it cannot be set up.
        """
        self.state.prepare()
        if not self.state.held:
            self.state.acquire()
            self._owns_lock = True
        try:
            self._token = secrets.token_hex(32)
            self._write_token()
            self._listener = self._bind()
            self.world.observe(self._on_tick)
            self.world.on_stream(self._on_delta)
        except BaseException:
            self._unstart()
            raise
        accept = threading.Thread(target=self._accept_loop, name="tickwork-control", daemon=True)
        try:
            accept.start()
        except RuntimeError:  # no thread to be had: nothing is left behind
            self._unstart()
            raise
        finally:  # listed once started (a Ctrl-C in `start()` may land after): close() joins it
            if accept.ident is not None:
                self._threads.append(accept)

    def _unstart(self) -> None:
        """Undo a `start` that failed: the observers, socket, token and lock."""
        self.world.unobserve(self._on_tick)
        self.world.streams.remove_hook(self._on_delta)
        self._release()

    def _write_token(self) -> None:
        path = self.state.token
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, (self._token + "\n").encode())
        finally:
            os.close(fd)

    def _bind(self) -> socket.socket:
        path = self.state.socket
        path.unlink(missing_ok=True)  # a stale socket: we hold the lock, so nobody serves it
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket is born 0600: no window where others can connect
        try:
            sock.bind(str(path))
        except OSError as exc:
            sock.close()
            raise ControlError(f"cannot open control socket {str(path)!r}: {exc}") from exc
        finally:
            os.umask(old)
        try:
            os.chmod(path, 0o600)
            sock.listen(socket.SOMAXCONN)
        except OSError as exc:
            sock.close()
            raise ControlError(f"cannot open control socket {str(path)!r}: {exc}") from exc
        sock.settimeout(0.2)  # accept wakes up to notice close()
        return sock

    def close(self) -> None:
        """Stop serving: close every connection, remove the socket and token, drop the lock."""
        with self._clients_lock:
            # Set under the lock the accept loop registers a connection under: a connection
            # is in the snapshot below, or the loop sees the flag and closes it.
            if self._closing.is_set():
                return
            self._closing.set()
            clients, subscribers = list(self._clients), list(self._subscribers)
            # Shut at once: connections waiting for their next request. One handling a
            # request or taking its reply finishes it first (it was shut mid-way: a
            # `tickwork cancel` whose command acted got "the server closed the connection").
            idle = [
                conn
                for conn, since in self._clients.items()
                if since is not None and conn not in self._replying
            ]
            threads = list(self._threads)
            posted, self._posted = self._posted, []
        for command in posted:
            command.done.set()  # a reply waiting for its tick goes now
        self.world.unobserve(self._on_tick)
        self.world.streams.remove_hook(self._on_delta)
        for sub in subscribers:
            sub.push({"event": "closed"})  # its stream thread sends it, then hangs up
        listener = [self._listener] if self._listener is not None else []
        shut([*listener, *idle])
        _join_all(threads, 2.0)  # two seconds in all, not each: Ctrl-C waits on this
        shut(clients)  # a subscriber too slow to take its last event, a slow reply
        _join_all(threads, 2.0)
        self._release()

    def _release(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for path in (self.state.socket, self.state.token):
            with contextlib.suppress(OSError):
                path.unlink()
        if self._owns_lock:
            self.state.release(remove=True)
            self._owns_lock = False

    def __enter__(self) -> ControlServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        while not self._closing.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._closing.is_set():
                    return
                log.exception("control socket accept failed")
                continue
            conn.settimeout(self.idle_timeout)
            thread = threading.Thread(
                target=self._serve_client, args=(conn,), name="tickwork-client", daemon=True
            )
            with self._clients_lock:
                if self._closing.is_set():  # accepted as close() took its snapshot
                    conn.close()
                    return
                self.accepted += 1
                evicted = self._make_room()
                if evicted is not FULL:
                    # Started under the lock, and only a started one listed: close() joins
                    # what is listed. One that cannot start (no thread to be had) refuses
                    # this client; the loop goes on serving (it died, and close() with it).
                    try:
                        thread.start()
                    except RuntimeError:
                        refused = "cannot start a thread for this client: try again later"
                    else:
                        refused = ""
                        self._clients[conn] = time.monotonic()
                        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            if evicted is FULL:
                refused = f"too many clients (at most {MAX_CLIENTS})"
            if refused:
                send_quietly(conn, error_reply("busy", refused))
                conn.close()
                if isinstance(evicted, socket.socket):
                    shut([evicted])
                continue
            if isinstance(evicted, socket.socket):
                shut([evicted])  # its thread wakes, sees the hang-up and exits

    def _make_room(self) -> socket.socket | object | None:
        """Free a slot if all are taken (call with ``_clients_lock`` held).

        Returns None when a slot is free, the evicted connection (the one waiting longest
        for a request line), or ``FULL`` when every slot is busy handling or streaming.
        """
        if len(self._clients) < MAX_CLIENTS:
            return None
        waiting = [(since, conn) for conn, since in self._clients.items() if since is not None]
        if not waiting:
            return FULL
        _, oldest = min(waiting, key=lambda item: item[0])
        del self._clients[oldest]
        self.dropped += 1
        return oldest

    def _serve_client(self, conn: socket.socket) -> None:
        try:
            for line in request_lines(conn, self.idle_timeout):
                if isinstance(line, Dropped):
                    self._count_refused()
                    send(conn, error_reply(line.code, line.message))
                    return
                if not self._set_waiting(conn, None) or self._closing.is_set():
                    return  # evicted meanwhile, or the server is closing: no more requests
                reply, then = self._handle(line)
                if not reply["ok"]:
                    self._count_refused()
                # Taking its reply, a client is as evictable as one yet to send its next
                # request: one that never reads held its slot for the send's whole
                # deadline, and 32 of them locked everyone out.
                if not self._set_waiting(conn, time.monotonic(), replying=True):
                    return
                send(conn, reply)
                if then == "close" or self._closing.is_set():
                    return
                if then == "subscribe":
                    if not self._set_waiting(conn, None):  # a stream: never evicted
                        return
                    self._stream(conn)
                    return
                if not self._set_waiting(conn, time.monotonic()):  # from its reply on
                    return
        except OSError:
            pass  # the client went away, or was too slow to take its reply
        except Exception:
            log.exception("control client handler failed")
        finally:
            with self._clients_lock:
                self._clients.pop(conn, None)
                self._replying.discard(conn)
            with contextlib.suppress(OSError):
                conn.close()

    def _set_waiting(
        self, conn: socket.socket, since: float | None, *, replying: bool = False
    ) -> bool:
        """Mark ``conn`` waiting for a request (or busy with None), ``replying`` while it
        takes its reply (a closing server lets that end); False if it was evicted."""
        with self._clients_lock:
            if conn not in self._clients:
                return False
            self._clients[conn] = since
            if replying:
                self._replying.add(conn)
            else:
                self._replying.discard(conn)
            return True

    def _count_refused(self) -> None:
        with self._clients_lock:
            self.refused += 1

    def _handle(self, line: bytes) -> tuple[dict[str, Any], str]:
        """The reply to one request line, and what to do next: keep, close or subscribe."""
        try:
            request = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            return error_reply("bad_json", f"malformed JSON request: {exc}"), "keep"
        except RecursionError:  # `[[[[...`: the decoder's C stack limit, not a crash
            return error_reply("bad_json", "malformed JSON request: nested too deep"), "keep"
        if not isinstance(request, dict):
            return error_reply("bad_request", "a request must be a JSON object"), "keep"
        reply, then = self._authorised(request)
        if "id" in request and isinstance(request["id"], str | int):
            reply["id"] = request["id"]  # lets a client match replies to requests
        return reply, then

    def _authorised(self, request: dict[str, Any]) -> tuple[dict[str, Any], str]:
        token = request.get("token")
        given = token.encode("utf-8", "surrogatepass") if isinstance(token, str) else b""
        if not hmac.compare_digest(given, self._token.encode()):
            return error_reply("unauthorized", "missing or wrong token"), "close"
        op = request.get("op")
        try:
            if not isinstance(op, str):
                raise Refused("missing_field", "missing field 'op' (a string)")
            handler = OPS.get(op)
            if handler is None:
                known = ", ".join(sorted(OPS))
                raise Refused("unknown_op", f"unknown op {op!r} (known: {known})")
            if op in _COMMANDS or op in _SETTLING:
                reply = self._command(op, handler, request)
            else:
                reply = handler(self.world, request, self._stats)
        except Refused as refused:
            return error_reply(refused.code, refused.message), "keep"
        except UnknownAgentError as exc:
            return error_reply("unknown_agent", str(exc)), "keep"
        except WorldClosedError as exc:
            return error_reply("closed", str(exc)), "keep"
        except TickworkError as exc:
            return error_reply("refused", str(exc)), "keep"
        except Exception:  # a bug in an op must not cost the client its reply
            log.exception("control op %r failed", op)
            return error_reply("internal", f"op {op!r} failed inside the server"), "keep"
        return reply, "subscribe" if op == "subscribe" else "keep"

    def _command(self, op: str, handler: Op, request: dict[str, Any]) -> dict[str, Any]:
        """Run an op that changes the world and reply once a tick has applied what it did,
        or once ``apply_timeout`` has passed (``"applied": false``)."""
        settling = op in _SETTLING
        # An answer is watched for before it settles (its tick may come at once); a
        # command by the number its op returns, which a tick may have passed already.
        posted: _Posted | None = None
        if settling:
            request_id = request.get("request_id")
            if not isinstance(request_id, str):
                return handler(self.world, request, self._stats)  # refused: names the field
            posted = _Posted(request_id=request_id)
            with self._clients_lock:
                self._posted.append(posted)
        try:
            if op in _COMMANDS:
                # Judged against what is queued, and posted, one at a time: two clients'
                # commands are judged one after the other.
                with self._steering:
                    reply = handler(self.world, request, self._stats)
            else:
                reply = handler(self.world, request, self._stats)
            if self.world.lockstep:
                reply["applied"] = False  # its ticks wait for lane work: no reply waits
                return _said_why(reply, self.world)
            if posted is None:
                posted = _Posted(seq=reply["seq"])
                with self._clients_lock:
                    if posted.seq <= self._applied_through:
                        posted.applied = True
                    else:
                        self._posted.append(posted)
            deadline = time.monotonic() + self.apply_timeout
            # In slices: a world closed meanwhile never applies it, and says nothing; a
            # server closing after `close()` let the waiting replies go does not either.
            # A `start()` loop that died ticks it no more: no wait (`World.loop_error`).
            while (
                not posted.applied
                and self.world.loop_error is None
                and not posted.done.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            ):
                if self.world.closed or self._closing.is_set() or time.monotonic() >= deadline:
                    break
            reply["applied"] = posted.applied
            return reply if posted.applied else _said_why(reply, self.world)
        finally:
            if posted is not None:
                with self._clients_lock, contextlib.suppress(ValueError):
                    self._posted.remove(posted)

    # -- subscriptions -------------------------------------------------------------------

    def _stream(self, conn: socket.socket) -> None:
        sub = Subscriber(conn)
        with self._clients_lock:
            self._subscribers.add(sub)
        try:
            while True:
                event = sub.get()
                if event is None:
                    if hung_up(conn):
                        return  # a watcher that went away frees its slot
                    continue
                send(conn, event)
                if event.get("event") in ("closed", "dropped"):
                    return
        finally:
            with self._clients_lock:
                self._subscribers.discard(sub)

    def _on_tick(self, report: TickReport, inputs: list[tuple[int, object]]) -> None:
        if inputs:
            self._note_applied(inputs)
        if not self._subscribers or not inputs or self._closing.is_set():
            return
        events = []
        for seq, item in inputs:
            try:
                kind, payload = encode_input(item)
            except TickworkError:
                continue
            data = json.loads(payload)
            event = {"event": "input", "tick": report.tick, "seq": seq, "kind": kind, "data": data}
            events.append((event, len(payload)))
        with self._clients_lock:
            subscribers = list(self._subscribers)
        for sub in subscribers:
            for event, size in events:
                sub.push(event, size)

    def _note_applied(self, inputs: list[tuple[int, object]]) -> None:
        # The tick thread, at the end of a tick: what it applied lets replies go. Inputs
        # come in sequence order, without gaps: the last one's number is the new mark.
        with self._clients_lock:
            self._applied_through = max(self._applied_through, inputs[-1][0])
            for posted in self._posted:
                if posted.request_id:
                    if not any(
                        item.__class__ is PromptSettled and item.request_id == posted.request_id
                        for _seq, item in inputs
                    ):
                        continue
                elif posted.seq > self._applied_through:
                    continue
                posted.applied = True
                posted.done.set()

    def _on_delta(self, agent_id: str, delta: str) -> None:
        # A lane thread, as each streamed model delta arrives: never an input, so it has
        # no tick or seq; pushing never blocks (a slow subscriber is dropped).
        if not self._subscribers or self._closing.is_set():
            return
        event = {"event": "delta", "agent_id": agent_id, "text": delta}
        with self._clients_lock:
            subscribers = list(self._subscribers)
        for sub in subscribers:
            sub.push(event, len(delta))


def _join_all(threads: list[threading.Thread], seconds: float) -> None:
    """Join ``threads`` within ``seconds`` in all (each waited for with what is left)."""
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
