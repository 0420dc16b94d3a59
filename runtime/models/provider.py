"""What both HTTP providers share: settings, the key, limits, budgets, retries, streaming.

`OpenAIChat` and `AnthropicMessages` differ only in the request they send and how they read
the events that come back (their ``_body`` and ``_reader``); the call itself is here.
"""

from __future__ import annotations

import math
import os
import random
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from runtime.cancel import Cancelled, CancelToken
from runtime.errors import ConfigError, ProviderError
from runtime.models.base import ModelReply, ModelRequest
from runtime.models.http import make_client, open_events, redact
from runtime.models.limits import RateLimit, Sleep, cancellable_sleep
from runtime.models.messages import chat_messages, tool_specs
from runtime.models.retry import Backoff, with_retries
from runtime.models.streaming import Stream
from runtime.models.usage import Budget, Usage

if TYPE_CHECKING:
    import httpx

__all__ = ["HttpProvider", "ReplyReader"]


class ReplyReader(Protocol):
    """Reads one streamed reply's events, feeding text deltas to the stream."""

    def feed(self, event: str, data: str) -> bool:
        """Take one event; True when the reply is complete.

        Raises:
            ProviderError: a malformed event, or an error the provider sent in the stream.
        """
        ...

    def reply(self) -> ModelReply:
        """The reply read so far, once complete."""
        ...

    def spent(self) -> Usage | None:
        """What the call has cost so far, for a call that ends without a reply (stopped,
        cancelled, failed mid-stream): the counts the server reported, else estimated as
        ``reply`` estimates them; None while the server has not begun its reply (nothing
        was spent)."""
        ...


class HttpProvider:
    """A chat model behind an HTTP API that streams its replies as server-sent events.

    Usable wherever a `Model` is. The API key is ``api_key`` or, when that is None, the
    environment variable ``api_key_env`` read at each call (a missing one sends no key, as
    local servers want); it never appears in a repr, an error or a log line. ``tools`` are
    declarations (``{"name", "description", "parameters"}``) sent with every request.
    ``sleep`` (``sleep(seconds, cancel)``) is the retry wait, for tests in virtual time.

    Raises:
        ConfigError: a setting is out of range (the message names it and its value).
    """

    provider: ClassVar[str] = "http"
    default_base_url: ClassVar[str] = ""
    default_key_env: ClassVar[str] = ""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 4,
        temperature: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        rate_limit: RateLimit | None = None,
        budget: Budget | None = None,
        tools: Sequence[dict[str, Any]] = (),
        backoff: Backoff | None = None,
        sleep: Sleep | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ConfigError(f"`model` must be a non-empty string, got {model!r}")
        base_url = self.default_base_url if base_url is None else base_url
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"`base_url` must be an http:// or https:// URL, got {base_url!r}")
        if not _positive(timeout):
            raise ConfigError(f"`timeout` must be a number > 0, got {timeout!r}")
        _check_int("max_retries", max_retries, 0)
        if temperature is not None and not (_number(temperature) and 0 <= temperature <= 2):
            raise ConfigError(f"`temperature` must be a number from 0 to 2, got {temperature!r}")
        if max_tokens is not None:
            _check_int("max_tokens", max_tokens, 1)
        if seed is not None:
            _check_int("seed", seed, None)
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key_env = self.default_key_env if api_key_env is None else api_key_env
        self._api_key = api_key
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.seed = seed
        self.rate_limit = rate_limit
        self.budget = budget
        self.tools = tool_specs(tools)
        self._backoff = backoff if backoff is not None else Backoff()
        self._sleep = sleep if sleep is not None else cancellable_sleep
        self._rng = random.Random()  # jitter only: never part of a world's determinism
        self._lock = threading.Lock()
        self._client: httpx.Client | None = None

    def complete(self, request: ModelRequest, cancel: CancelToken) -> ModelReply:
        """Stream the model's reply to ``request``, feeding ``request.stream`` as it arrives.

        Raises:
            BudgetExceeded: the agent has used its ``budget``.
            ProviderError: the provider refused or failed (after the retries it allows).
            Cancelled: ``cancel`` fired or the stream was stopped (the response is closed).
        """
        if self.budget is not None:
            self.budget.check(request.agent_id, self.model)
        stream = request.stream if request.stream is not None else Stream(request.agent_id)
        body = self._body(request)
        key = self._key()
        client = self._http()

        def attempt() -> ModelReply:
            if self.rate_limit is not None:
                self.rate_limit.acquire(cancel)
            reader = self._reader(stream, body)
            try:
                return self._stream_once(client, body, key, stream, cancel, reader)
            except BaseException:
                # Ended without a reply once the server began one (stopped, cancelled,
                # cut off): its tokens were spent, retried or not.
                self._charge(request.agent_id, reader.spent())
                raise

        reply = with_retries(
            attempt,
            max_retries=self.max_retries,
            cancel=cancel,
            sleep=self._sleep,
            backoff=self._backoff,
            rng=self._rng,
            can_retry=lambda: not stream.text,  # a reply already shown must not restart
        )
        self._charge(request.agent_id, reply.usage)
        return reply

    def _charge(self, agent_id: str, usage: Usage | None) -> None:
        """Count tokens a call spent against the token rate and the agent's budget."""
        if self.rate_limit is not None:
            self.rate_limit.record(usage)
        if self.budget is not None:
            self.budget.charge(agent_id, usage)

    def request_key(self, request: ModelRequest) -> dict[str, Any]:
        """What identifies a request for a cassette: the model, the messages, the tools."""
        return {
            "model": self.model,
            "messages": chat_messages(request),
            "tools": [dict(t) for t in self.tools],
        }

    def close(self) -> None:
        """Close the HTTP connection pool (a new one opens at the next call)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _stream_once(
        self,
        client: httpx.Client,
        body: dict[str, Any],
        key: str | None,
        stream: Stream,
        cancel: CancelToken,
        reader: ReplyReader,
    ) -> ModelReply:
        secrets = (key,) if key else ()
        done = False
        with open_events(
            client,
            self._url(),
            headers=self._headers(key),
            body=body,
            provider=self.provider,
            cancel=cancel,
            stream=stream,
            secrets=secrets,
        ) as events:
            data = ""
            try:
                for event, data in events:
                    if not data:
                        continue  # no data (an `id:` or `retry:` alone): SSE dispatches none
                    if reader.feed(event, data):
                        done = True
                        break
            except _MALFORMED as exc:  # a field of the wrong shape: the server's fault
                raise self._malformed(exc, data, secrets) from None
        if cancel.cancelled or stream.stopped:
            raise Cancelled(cancel.reason or "interrupted by user")
        if not done:
            raise ProviderError(
                self.provider,
                f"the stream ended before the reply was complete ({len(stream.text)} chars in)",
                retryable=True,
            )
        try:
            return reader.reply()
        except _MALFORMED as exc:  # a tool call a `ToolCall` cannot be
            raise self._malformed(exc, "", secrets) from None

    def _malformed(self, exc: Exception, data: str, secrets: Sequence[str]) -> ProviderError:
        """The error for a stream whose event ``data`` the reader could not take."""
        shown = f": {data!r}" if data else ""
        text = f"malformed event in the stream ({type(exc).__name__}: {exc}){shown}"
        return ProviderError(self.provider, redact(text, secrets)[:300])

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = make_client(self.timeout, self.provider)
            return self._client

    def _key(self) -> str | None:
        """The API key, without the whitespace around it (a ``.env`` file with CRLF line
        ends leaves a CR on it).

        Raises:
            ProviderError: the key holds a character a header cannot carry (the message
                names where the key comes from, never the key); not retried.
        """
        key: str | None
        if self._api_key is not None:
            key, where = self._api_key, "`api_key`"
        elif self.api_key_env:
            key, where = os.environ.get(self.api_key_env), f"${self.api_key_env}"
        else:
            return None
        if key is None:
            return None
        key = key.strip()
        if not (key.isascii() and key.isprintable()):
            raise ProviderError(
                self.provider,
                f"the API key in {where} holds a control or non-ASCII character, which no"
                " HTTP header carries: check its value",
            )
        return key

    def _url(self) -> str:
        raise NotImplementedError

    def _headers(self, key: str | None) -> dict[str, str]:
        raise NotImplementedError

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        raise NotImplementedError

    def _reader(self, stream: Stream, body: dict[str, Any]) -> ReplyReader:
        raise NotImplementedError

    def __repr__(self) -> str:
        # Never the key: only where it would come from.
        return (
            f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r},"
            f" api_key_env={self.api_key_env!r})"
        )


# What reading a field of the wrong shape raises (a string where an object belongs, a
# null index, an infinite count); the readers check only what they use, as they use it.
_MALFORMED = (AttributeError, KeyError, OverflowError, TypeError, ValueError)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value: object) -> bool:
    return _number(value) and value > 0  # type: ignore[operator]


def _check_int(name: str, value: object, minimum: int | None) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"`{name}` must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"`{name}` must be >= {minimum}, got {value}")
