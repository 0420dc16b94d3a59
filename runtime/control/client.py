"""The control client: what ``tickwork ps``, ``respond`` and the rest use to reach a ``serve``."""

from __future__ import annotations

import json
import os
import socket
import struct
from collections.abc import Iterator
from typing import Any

from runtime.control.state_dir import StateDir, default_state_dir
from runtime.errors import ControlError

__all__ = ["ControlClient"]

_MAX_REPLY = 256 * 1024 * 1024  # a client reads big replies (every agent of a big world)


def _check_peer(sock: socket.socket) -> None:
    """Refuse a server process run by another user (Linux: ``SO_PEERCRED``).

    Raises:
        ControlError: the process at the other end belongs to another user.
    """
    peercred = getattr(socket, "SO_PEERCRED", None)
    if peercred is None:  # macOS and the BSDs: the socket's owner was checked instead
        return
    pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, peercred, 12))
    if uid != os.getuid():
        raise ControlError(
            f"the control server (pid {pid}) runs as uid {uid}, not as you"
            f" (uid {os.getuid()}): refusing to send it the token"
        )


class ControlClient:
    """A connection to a running ``tickwork serve``; usable as a context manager.

    Raises:
        ControlError: no server is running on ``state_dir`` (no token or socket there,
            or nothing listening), or the state dir, token, socket or server process is
            not the current user's (or others can write the state dir).
    """

    def __init__(self, state_dir: str | os.PathLike[str] | None = None, *, timeout: float = 10.0):
        self.state = StateDir(state_dir if state_dir is not None else default_state_dir())
        # The token is a secret: check who owns the directory, the token and the socket
        # before reading it or sending it anywhere (a server run by another user in a
        # directory they own must never receive it).
        self.state.check()
        self._token = self.state.read_token()
        self.state.check_socket()
        where = str(self.state.path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(str(self.state.socket))
        except (FileNotFoundError, ConnectionRefusedError):
            self._sock.close()
            raise ControlError(f"no `tickwork serve` is running on state dir {where!r}") from None
        except OSError as exc:
            self._sock.close()
            raise ControlError(f"cannot connect to {str(self.state.socket)!r}: {exc}") from exc
        try:
            _check_peer(self._sock)
        except ControlError:
            self._sock.close()
            raise
        self._buf = b""

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request and return the reply.

        Raises:
            ControlError: the server refused it (the message is the server's) or went away.
        """
        reply = self.raw({**fields, "op": op, "token": self._token})
        if not reply.get("ok"):
            raise ControlError(str(reply.get("error") or reply))
        return reply

    def raw(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send ``request`` exactly as given (no token added) and return the reply as is.

        Raises:
            ControlError: the server went away or did not answer in time.
        """
        try:
            self._sock.sendall(json.dumps(request).encode() + b"\n")
        except OSError as exc:
            # A server that refuses a client (too many clients, a bad token) replies and
            # closes at once; a send racing that close fails, but the reply that explains
            # why is already waiting: prefer it to a bare "went away".
            try:
                return self._read()
            except ControlError:
                raise ControlError(f"the control server went away: {exc}") from exc
        return self._read()

    def subscribe(self) -> Iterator[dict[str, Any]]:
        """Subscribe and yield events until the server closes the stream.

        Raises:
            ControlError: the server refused the subscription or went away.
        """
        self.request("subscribe")
        self._sock.settimeout(None)
        while True:
            try:
                event = self._read()
            except ControlError:
                return
            yield event
            if event.get("event") in ("closed", "dropped"):
                return

    def _read(self) -> dict[str, Any]:
        while b"\n" not in self._buf:
            try:
                chunk = self._sock.recv(1 << 16)
            except TimeoutError:
                raise ControlError("the control server did not answer in time") from None
            except OSError as exc:
                raise ControlError(f"the control server went away: {exc}") from exc
            if not chunk:
                raise ControlError("the control server closed the connection")
            self._buf += chunk
            if len(self._buf) > _MAX_REPLY:
                raise ControlError("the control server's reply is too large")
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            reply = json.loads(line)
        except ValueError as exc:
            raise ControlError(f"the control server sent malformed JSON: {exc}") from exc
        if not isinstance(reply, dict):
            raise ControlError(f"the control server sent {reply!r}, not an object")
        return reply

    def close(self) -> None:
        """Close the connection."""
        self._sock.close()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
