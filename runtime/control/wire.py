"""The control channel's wire: request lines read against an idle deadline, replies sent,
and the bounded event queue of a subscribed client (`runtime.control.server` serves them).

A line must arrive whole within the idle deadline of the previous reply (or of connecting):
a client trickling a byte a second is as idle as one sending nothing. A line over
``MAX_LINE`` bytes ends the connection.
"""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = [
    "FULL",
    "MAX_LINE",
    "Dropped",
    "Subscriber",
    "hung_up",
    "idle_drop",
    "request_lines",
    "send",
    "send_quietly",
    "shut",
]

MAX_LINE = 64 * 1024
"""The longest request line accepted, in bytes (the newline not counted)."""
_SUBSCRIBER_BACKLOG = 10_000
_SUBSCRIBER_BYTES = 32 * 1024 * 1024  # of events' text queued for one subscriber, at most


class Subscriber:
    """A bounded queue of events for one subscribed client, in events and in bytes (10,000
    events of 60 KB messages held 600 MB for one slow watcher); overflowing either drops
    the client."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self._queue: queue.Queue[tuple[dict[str, Any], int]] = queue.Queue(_SUBSCRIBER_BACKLOG)
        self._dropped = False
        self._lock = threading.Lock()  # `_bytes`: pushed by the tick and lane threads
        self._bytes = 0

    def push(self, event: dict[str, Any], size: int = 0) -> None:
        """Queue ``event`` (about ``size`` bytes of text) without waiting; a full queue
        marks the subscriber dropped."""
        if self._dropped:
            return
        with self._lock:
            if self._bytes + size > _SUBSCRIBER_BYTES:
                self._dropped = True  # the tick thread never waits for a slow reader
                return
            try:
                self._queue.put_nowait((event, size))
            except queue.Full:
                self._dropped = True
                return
            self._bytes += size

    def get(self) -> dict[str, Any] | None:
        """The next event to send (a ``dropped`` event once a dropped queue is drained).

        None after half a second without one, so the caller can see if the client left.
        """
        try:
            event, size = self._queue.get(timeout=0.5)
        except queue.Empty:
            if self._dropped:
                return {"event": "dropped", "error": "subscriber too slow: events were lost"}
            return None
        with self._lock:
            self._bytes -= size
        return event


def hung_up(conn: socket.socket) -> bool:
    """Whether the client at a subscription's ``conn`` has closed its end, without waiting.

    What the client sent since it subscribed is read and dropped (a stream takes no more
    requests): peeked at instead, a byte it wrote hid its end for good, and its slot was
    never freed. The socket is non-blocking for the check: ``MSG_DONTWAIT`` on a socket
    with a timeout waits that timeout (CPython polls for it first), which made a quiet
    stream look hung up and held its events back meanwhile.
    """
    timeout = conn.gettimeout()
    conn.settimeout(0.0)
    try:
        # Bounded: a client that writes without end still gets its events.
        return any(not conn.recv(65536) for _ in range(_DRAIN_READS))
    except BlockingIOError:
        return False  # nothing more to read: still there
    except OSError:
        return True
    finally:
        conn.settimeout(timeout)


_DRAIN_READS = 16


class Dropped:
    """Why a connection's next line will never come: too long, idle or too slow."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message


FULL = object()
"""Every connection slot is busy handling a request or streaming: none can be evicted."""


def request_lines(conn: socket.socket, deadline: float) -> Iterator[bytes | Dropped]:
    """Yield each request line of ``conn``, or a ``Dropped`` (then stop).

    Each line must arrive whole within ``deadline`` seconds of the previous one being
    handled (or of connecting): a client trickling a byte a second is as idle as one
    sending nothing.
    """
    buf = b""
    started = time.monotonic()
    while True:
        newline = buf.find(b"\n", 0, MAX_LINE + 1)
        if newline >= 0:
            yield buf[:newline]
            buf = buf[newline + 1 :]
            started = time.monotonic()
            continue
        if len(buf) > MAX_LINE:
            yield Dropped("too_large", f"request line over {MAX_LINE} bytes")
            return
        left = started + deadline - time.monotonic()
        if left <= 0:
            yield idle_drop(deadline, buf)
            return
        conn.settimeout(left)
        try:
            chunk = conn.recv(65536)
        except TimeoutError:
            yield idle_drop(deadline, buf)
            return
        finally:
            conn.settimeout(deadline)  # for sending the reply
        if not chunk:
            if buf.strip():
                yield buf  # a last line without its newline is still a request
            return
        buf += chunk


def idle_drop(deadline: float, buf: bytes) -> Dropped:
    what = "sent part of a request" if buf else "sent no request"
    return Dropped("idle", f"dropped: {what} within {deadline:g} s")


def send(conn: socket.socket, reply: dict[str, Any]) -> None:
    conn.sendall(json.dumps(reply).encode() + b"\n")


def shut(socks: list[socket.socket]) -> None:
    """Shut sockets down, which wakes any thread blocked on one of them."""
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def send_quietly(conn: socket.socket, reply: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        send(conn, reply)
