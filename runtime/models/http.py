"""HTTP and server-sent events for model providers, on ``httpx`` and ``httpx-sse``.

Both come from the ``providers`` extra and are imported only when a provider first makes a
call, so the core install works without them. A streamed response is closed the moment the
call's cancel token fires or its `Stream` is stopped: the closer shuts the socket down (which
wakes a reader blocked in ``recv`` on another thread), and that reader closes the response.
"""

from __future__ import annotations

import codecs
import contextlib
import datetime
import email.utils
import json
import math
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from runtime.cancel import Cancelled, CancelToken
from runtime.errors import ConfigError, ProviderError
from runtime.models.retry import is_retryable_status
from runtime.models.streaming import Stream

if TYPE_CHECKING:
    import httpx

__all__ = ["SseEvent", "make_client", "open_events", "redact"]

SseEvent = tuple[str, str]
"""An event's name (``message`` when the server gave none) and its data."""


def make_client(timeout: float, provider: str) -> httpx.Client:
    """An ``httpx.Client`` for one provider object (a pool shared by its lane threads).

    Raises:
        ConfigError: the ``providers`` extra is not installed.
    """
    try:
        import httpx
    except ImportError:
        raise ConfigError(
            f"the {provider} provider needs httpx and httpx-sse: pip install 'tickwork[providers]'"
        ) from None
    # No kept-alive connections: a call's closer shuts its own connection (see `_Closer`),
    # which must never be one the pool hands to another call afterwards. A finished
    # stream's connection was not kept anyway (a reply ends at its `[DONE]` event, before
    # the body's end), so this costs the error replies' reuse alone.
    return httpx.Client(
        timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
        limits=httpx.Limits(max_keepalive_connections=0),
    )


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret (an API key) blotted out, also as a ``repr`` shows it
    (an error quoting the header's bytes writes a CR as the two characters ``\\r``)."""
    for secret in secrets:
        if not secret:
            continue
        for form in {secret, repr(secret)[1:-1], repr(secret.encode("utf-8", "replace"))[2:-1]}:
            if form:
                text = text.replace(form, "[redacted]")
    return text


@contextlib.contextmanager
def open_events(
    client: httpx.Client,
    url: str,
    *,
    headers: dict[str, str],
    body: dict[str, Any],
    provider: str,
    cancel: CancelToken,
    stream: Stream,
    secrets: Sequence[str],
) -> Iterator[Iterator[SseEvent]]:
    """POST ``body`` and yield the response's server-sent events as they arrive.

    Raises:
        ProviderError: an HTTP error status (with the provider's message), a connection
            that failed or dropped, or a response that is not an event stream.
        Cancelled: the token fired or the stream was stopped.
    """
    import httpx
    from httpx_sse import EventSource, SSEError

    def stopped() -> bool:
        return cancel.cancelled or stream.stopped

    if stopped():
        raise Cancelled(cancel.reason or "interrupted by user")
    # Armed before the request goes out: a stop or cancel while the server has not
    # answered yet (the headers can take the whole read timeout) shuts the connection the
    # trace extension hands over as it is made, so the call ends at once, not at the
    # timeout, holding its lane meanwhile.
    closer = _Closer()
    cancel.add_callback(closer.on_cancel)
    stream.on_stop(closer)
    extensions = {"trace": closer.trace}
    try:
        with client.stream(
            "POST", url, headers=headers, json=body, extensions=extensions
        ) as response:
            closer.responded(response)
            try:
                if response.status_code >= 400:
                    text = _error_body(response, client.timeout.read)
                    raise _status_error(provider, response, text, secrets)
                source = EventSource(_Utf8Events(response))  # type: ignore[arg-type]
                yield ((sse.event or "message", sse.data) for sse in source.iter_sse())
            finally:
                # Before the response lets its connection go: a stop after this (the
                # stream keeps its closers) must not reach the socket of another request
                # (another agent's, were the connection reused).
                closer.disarm()
    except (httpx.TransportError, httpx.StreamError, httpx.DecodingError, SSEError) as exc:
        if stopped():
            raise Cancelled(cancel.reason or "interrupted by user") from None
        if isinstance(exc, SSEError):
            raise ProviderError(provider, f"not an event stream: {exc}") from None
        if isinstance(exc, httpx.DecodingError):  # a body its content-encoding does not fit
            message = redact(f"the response could not be decoded: {exc}", secrets)
            raise ProviderError(provider, message) from None
        # A local protocol error (a header this side cannot send) fails every attempt alike.
        retryable = not isinstance(exc, httpx.LocalProtocolError)
        message = redact(f"connection failed: {type(exc).__name__}: {exc}", secrets)
        raise ProviderError(provider, message.rstrip(": "), retryable=retryable) from None
    finally:
        cancel.remove_callback(closer.on_cancel)
        closer.disarm()
    if stopped():
        raise Cancelled(cancel.reason or "interrupted by user")


class _Utf8Events:
    """A response as `httpx_sse.EventSource` reads it (its headers, its text), its text
    decoded as the SSE spec decodes an event stream: UTF-8 whatever charset the headers
    name, a byte-order mark at the very start dropped. httpx decodes by the charset (a
    server's ``charset=iso-8859-1`` turned every accented letter into two) and keeps the
    mark, where the first line's field then read ``\ufeffdata``, matching nothing: the
    stream's first event was lost."""

    __slots__ = ("_response", "headers")

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.headers = response.headers

    def iter_text(self) -> Iterator[str]:
        # `utf-8-sig` drops the mark at the start only (split over chunks too), as the
        # spec's UTF-8 decode does; bad bytes become U+FFFD, as httpx's own decoder makes.
        decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
        for chunk in self._response.iter_bytes():  # content-encoding already undone
            text = decoder.decode(chunk)
            if text:
                yield text
        text = decoder.decode(b"", True)
        if text:
            yield text


class _Closer:
    """Ends a streamed call from any thread, at once, from the moment it connects.

    It shuts the socket down, which wakes the reader blocked in ``recv`` (closing the fd
    would not) and tells the server; the reader's thread then closes the response itself
    as it leaves the ``with`` block. Closing the ``httpx.Response`` here as well raced that
    close inside httpcore and could hang the closing thread (the tick thread, on cancel);
    a response without a socket to reach is closed here as the only way to end it.

    The socket comes from httpcore's ``trace`` extension as the connection is made
    (`trace`), so a stop before the response's headers (a server that takes its time to
    answer) ends the call too; a stop before the connection is made shuts it as it is
    made. Every call connects afresh (`make_client`: no kept-alive connections), so the
    trace always sees its socket. `disarm` ends all of it: nothing after the call is done
    with its response reaches a socket.
    """

    __slots__ = ("_fired", "_lock", "_response", "_sock", "_spent")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._response: httpx.Response | None = None
        self._fired = False  # stopped or cancelled: the connection is to be shut
        self._spent = False  # fired and acted on, or disarmed: nothing more to do

    def trace(self, name: str, info: dict[str, Any]) -> None:
        """httpcore's trace extension: keep the socket of the connection as it is made."""
        if name != "connection.connect_tcp.complete":
            return
        network = info.get("return_value")
        sock = None if network is None else network.get_extra_info("socket")
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            if self._spent:
                return
            self._sock = sock
            if self._fired:  # stopped while connecting: end it now
                self._spent = True
                _shut(sock)

    def responded(self, response: httpx.Response) -> None:
        """The response's headers are in: it is what a stop without a socket closes."""
        with self._lock:
            self._response = response
            if self._sock is None:
                network = response.extensions.get("network_stream")
                sock = None if network is None else network.get_extra_info("socket")
                if isinstance(sock, socket.socket):
                    self._sock = sock
            late = self._fired and not self._spent and self._sock is None
        if late:
            self()

    def on_cancel(self, _token: CancelToken) -> None:
        self()

    def disarm(self) -> None:
        """The call is done with its response: from now on the closer does nothing. Waits
        for a shutdown in progress, so none lands after the connection is let go."""
        with self._lock:
            self._spent = True

    def __call__(self) -> None:
        with self._lock:
            if self._spent:
                return
            self._fired = True
            sock, response = self._sock, self._response
            if sock is not None:
                self._spent = True
                _shut(sock)  # under the lock: see `disarm`
                return
            if response is None:
                return  # not connected yet: `trace` shuts the connection as it is made
            self._spent = True
        with contextlib.suppress(Exception):
            response.close()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


_ERROR_BODY = 64 * 1024  # what an error's message is read from, at most


def _error_body(response: httpx.Response, timeout: float | None) -> str:
    """The start of an error response's body, read within ``timeout`` seconds in all.

    An error's message is in its first bytes; ``response.read()`` read the whole body, and
    httpx's timeout bounds each read, not all of them: a body trickling a byte a second
    never ended the call.
    """
    deadline = time.monotonic() + (60.0 if timeout is None else timeout)
    parts: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        parts.append(chunk)
        size += len(chunk)
        if size >= _ERROR_BODY or time.monotonic() > deadline:
            break
    data = b"".join(parts)[:_ERROR_BODY]
    try:
        return data.decode(response.encoding or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return data.decode("utf-8", errors="replace")


def _status_error(
    provider: str, response: httpx.Response, text: str, secrets: Sequence[str]
) -> ProviderError:
    status = response.status_code
    message = _provider_message(text) or response.reason_phrase or "no message"
    if status == 401:
        message += " (check the API key's environment variable)"
    return ProviderError(
        provider,
        redact(message, secrets),
        status,
        retryable=is_retryable_status(status),
        retry_after=_retry_after(response.headers),
    )


def _provider_message(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:300]
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])[:300]
    if isinstance(error, str):
        return error[:300]
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])[:300]
    return " ".join(text.split())[:300]


def _retry_after(headers: httpx.Headers) -> float | None:
    """Seconds from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date); None
    when neither is there or readable (``nan`` and ``inf`` are not a wait)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        with contextlib.suppress(ValueError):
            seconds = float(millis) / 1000.0
            if math.isfinite(seconds):
                return max(0.0, seconds)
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError):  # a year past datetime's range
        return None
    if when.tzinfo is None:  # "-0000" in the date: RFC 5322's UTC of unknown origin
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - time.time())
