"""OpenAI- and Anthropic-compatible stub servers: threaded, on 127.0.0.1, a free port.

A test scripts the replies in order (``server.script(...)``): streamed events, HTTP errors,
slow streams, dropped connections, malformed chunks. The server records every request and
notices when a client closes a stream early (``server.closed``).
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted response.

    ``frames`` are written one by one, ``interval`` seconds apart; a ``threading.Event``
    among them holds the stream until it is set. ``hold`` keeps the stream open after the
    frames until the client goes; ``drop`` cuts the connection after them without ending
    the body. A ``status`` of 400 or more sends ``body`` as a JSON error instead.
    ``before`` holds the response's headers until it is set (a server slow to answer).
    """

    frames: tuple[Any, ...] = ()
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    interval: float = 0.0
    hold: bool = False
    drop: bool = False
    before: threading.Event | None = None


def error(status: int, message: str, **headers: str) -> Reply:
    return Reply(status=status, body={"error": {"message": message}}, headers=headers)


def openai_chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return "data: " + json.dumps({"object": "chat.completion.chunk", "choices": [choice]}) + "\n\n"


def openai_text(*pieces: str, usage: tuple[int, int] | None = (7, 3), finish: str = "stop"):
    frames = [openai_chunk({"role": "assistant", "content": ""})]
    frames += [
        piece if isinstance(piece, threading.Event) else openai_chunk({"content": piece})
        for piece in pieces
    ]
    frames.append(openai_chunk({}, finish))
    if usage is not None:
        body = {"choices": [], "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1]}}
        frames.append("data: " + json.dumps(body) + "\n\n")
    frames.append("data: [DONE]\n\n")
    return tuple(frames)


def openai_tool_call(call_id: str, name: str, args: str, usage=(11, 5)):
    half = len(args) // 2
    frames = [
        openai_chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": call_id, "function": {"name": name, "arguments": ""}}
                ]
            }
        ),
        openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[:half]}}]}),
        openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[half:]}}]}),
        openai_chunk({}, "tool_calls"),
        "data: "
        + json.dumps(
            {"choices": [], "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1]}}
        )
        + "\n\n",
        "data: [DONE]\n\n",
    ]
    return tuple(frames)


def anthropic_event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n"


def anthropic_text(*pieces: str, usage: tuple[int, int] = (9, 4), stop: str = "end_turn"):
    frames = [
        anthropic_event(
            "message_start", {"message": {"usage": {"input_tokens": usage[0], "output_tokens": 1}}}
        ),
        anthropic_event(
            "content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}
        ),
        'event: ping\ndata: {"type": "ping"}\n\n',
    ]
    frames += [
        p
        if isinstance(p, threading.Event)
        else anthropic_event(
            "content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": p}}
        )
        for p in pieces
    ]
    frames += [
        anthropic_event("content_block_stop", {"index": 0}),
        anthropic_event(
            "message_delta", {"delta": {"stop_reason": stop}, "usage": {"output_tokens": usage[1]}}
        ),
        anthropic_event("message_stop", {}),
    ]
    return tuple(frames)


def anthropic_tool_use(call_id: str, name: str, args: str, text: str = "Let me look."):
    half = len(args) // 2
    return (
        anthropic_event(
            "message_start", {"message": {"usage": {"input_tokens": 20, "output_tokens": 1}}}
        ),
        anthropic_event(
            "content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}
        ),
        anthropic_event(
            "content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}}
        ),
        anthropic_event("content_block_stop", {"index": 0}),
        anthropic_event(
            "content_block_start",
            {
                "index": 1,
                "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
            },
        ),
        anthropic_event(
            "content_block_delta",
            {"index": 1, "delta": {"type": "input_json_delta", "partial_json": args[:half]}},
        ),
        anthropic_event(
            "content_block_delta",
            {"index": 1, "delta": {"type": "input_json_delta", "partial_json": args[half:]}},
        ),
        anthropic_event("content_block_stop", {"index": 1}),
        anthropic_event(
            "message_delta", {"delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}}
        ),
        anthropic_event("message_stop", {}),
    )


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hangs up mid-stream is what these tests do on purpose


class StubServer:
    """A scripted model server; use as a context manager. ``url`` is its API base."""

    def __init__(self, kind: str = "openai") -> None:
        self.kind = kind
        self.requests: list[dict[str, Any]] = []
        self.closed = threading.Event()  # a client closed a stream before its end
        self.arrived = threading.Condition()
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with stub.arrived:
                    stub.requests.append(
                        {
                            "path": self.path,
                            "headers": dict(self.headers),
                            "body": body,
                            "at": time.monotonic(),
                            "peer": self.client_address[1],  # one port per connection
                        }
                    )
                    stub.arrived.notify_all()
                with stub._lock:
                    reply = (
                        stub._replies.popleft()
                        if stub._replies
                        else error(500, "no scripted reply")
                    )
                stub._serve(self, reply)

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}" + ("/v1" if self.kind == "openai" else "")

    def script(self, *replies: Reply | tuple[Any, ...]) -> None:
        with self._lock:
            for reply in replies:
                self._replies.append(reply if isinstance(reply, Reply) else Reply(frames=reply))

    def wait_requests(self, n: int, timeout: float = 10.0) -> None:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.requests) >= n, timeout), (
                f"the stub saw {len(self.requests)} requests, wanted {n}"
            )

    def _serve(self, handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        if reply.before is not None:
            deadline = time.monotonic() + 10.0
            while not reply.before.wait(0.01) and time.monotonic() < deadline:
                if self._client_gone(handler.connection, 0.0):
                    handler.close_connection = True
                    return
        if reply.status >= 400 and reply.interval:  # an error body trickling in, chunked
            data = json.dumps(reply.body).encode()
            handler.send_response(reply.status)
            handler.send_header("content-type", "application/json")
            handler.send_header("transfer-encoding", "chunked")
            handler.end_headers()
            try:
                for byte in data:
                    if self._client_gone(handler.connection, reply.interval):
                        return
                    handler.wfile.write(b"1\r\n%c\r\n" % byte)
                    handler.wfile.flush()
                handler.wfile.write(b"0\r\n\r\n")
            except OSError:
                handler.close_connection = True
            return
        if reply.status >= 400:
            data = json.dumps(reply.body).encode()
            handler.send_response(reply.status)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(data)))
            for name, value in reply.headers.items():
                handler.send_header(name.replace("_", "-"), value)
            handler.end_headers()
            handler.wfile.write(data)
            return
        handler.send_response(200)
        handler.send_header("content-type", reply.headers.get("content_type", "text/event-stream"))
        handler.send_header("transfer-encoding", "chunked")
        handler.end_headers()
        sock = handler.connection
        try:
            for frame in reply.frames:
                if isinstance(frame, threading.Event):
                    deadline = time.monotonic() + 10.0
                    while not frame.wait(0.01) and time.monotonic() < deadline:
                        if self._client_gone(sock, 0.0):
                            return
                    continue
                if reply.interval and self._client_gone(sock, reply.interval):
                    return
                data = frame.encode()
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                handler.wfile.flush()
            if reply.drop:
                sock.shutdown(socket.SHUT_RDWR)
                handler.close_connection = True
                return
            while reply.hold:
                if self._client_gone(sock, 0.05):
                    return
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()
        except OSError:
            self.closed.set()
            handler.close_connection = True

    def _client_gone(self, sock: socket.socket, wait: float) -> bool:
        readable, _, _ = select.select([sock], [], [], wait)
        if readable:
            try:
                gone = sock.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                gone = True
            if gone:
                self.closed.set()
                return True
        return False

    def __enter__(self) -> StubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)
