"""`AnthropicMessages`: the Anthropic Messages API, streamed."""

from __future__ import annotations

import json
from typing import Any, ClassVar

from components import ToolCall
from runtime.errors import ProviderError
from runtime.models.base import ModelReply, ModelRequest
from runtime.models.messages import chat_messages
from runtime.models.openai import parse_arguments
from runtime.models.provider import HttpProvider
from runtime.models.retry import is_retryable_status
from runtime.models.streaming import Stream
from runtime.models.usage import Usage, token_count

__all__ = ["ANTHROPIC_VERSION", "AnthropicMessages"]

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 1024  # the API requires max_tokens on every request

# Errors Anthropic sends inside a stream, by type, and the HTTP status they stand for.
_STREAM_ERRORS = {"overloaded_error": 529, "api_error": 500, "rate_limit_error": 429}


class AnthropicMessages(HttpProvider):
    """A model behind the Anthropic ``/v1/messages`` endpoint.

    Takes the settings `OpenAIChat` takes (``api_key_env`` defaults to
    ``ANTHROPIC_API_KEY``, ``base_url`` to ``https://api.anthropic.com``); ``max_tokens``
    defaults to 1024 since the API requires one. History ``system`` entries become user
    messages (the API has one system prompt, not entries), and consecutive messages of one
    role are joined, as the API wants them alternating.
    """

    provider: ClassVar[str] = "anthropic"
    default_base_url: ClassVar[str] = "https://api.anthropic.com"
    default_key_env: ClassVar[str] = "ANTHROPIC_API_KEY"

    def _url(self) -> str:
        base = self.base_url
        return f"{base}/messages" if base.endswith("/v1") else f"{base}/v1/messages"

    def _headers(self, key: str | None) -> dict[str, str]:
        headers = {"accept": "text/event-stream", "anthropic-version": ANTHROPIC_VERSION}
        if key:
            headers["x-api-key"] = key
        return headers

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": _alternating(chat_messages(request)),
            "max_tokens": self.max_tokens or DEFAULT_MAX_TOKENS,
            "stream": True,
        }
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.tools:
            body["tools"] = [
                {
                    "name": t["name"],
                    "description": t["description"],
                    "input_schema": t["parameters"],
                }
                for t in self.tools
            ]
        return body

    def _reader(self, stream: Stream, body: dict[str, Any]) -> _EventReader:
        return _EventReader(stream)


def _alternating(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for message in messages:
        role = "assistant" if message["role"] == "assistant" else "user"
        content = message["content"]
        if message["role"] == "system":
            content = f"[system] {content}"
        if out and out[-1]["role"] == role:
            out[-1] = {"role": role, "content": f"{out[-1]['content']}\n\n{content}"}
        else:
            out.append({"role": role, "content": content})
    if out and out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": "(conversation so far)"})
    return out


class _EventReader:
    """Reads ``message_start`` ... ``message_stop``: text and tool-use blocks, usage."""

    def __init__(self, stream: Stream) -> None:
        self._stream = stream
        self._started = False  # `message_start` came: the server began its reply
        self._input = 0
        self._output = 0
        self._deltas = 0  # text deltas so far: the output a stopped reply had spent
        self._finish: str | None = None
        self._blocks: dict[int, dict[str, str]] = {}  # tool_use blocks: id, name, json so far

    def feed(self, event: str, data: str) -> bool:
        if event == "ping":
            return False
        payload = _json(data)
        kind = payload.get("type", event)
        if kind == "error":
            error = payload.get("error") or {}
            error_type = str(error.get("type", "error"))
            status = _STREAM_ERRORS.get(error_type)
            raise ProviderError(
                "anthropic",
                f"{error_type}: {error.get('message', 'no message')}",
                status,
                retryable=status is not None and is_retryable_status(status),
            )
        if kind == "message_start":
            self._started = True
            usage = (payload.get("message") or {}).get("usage") or {}
            self._input = token_count(usage.get("input_tokens"))
            self._output = token_count(usage.get("output_tokens"))
        elif kind == "content_block_start":
            block = payload.get("content_block") or {}
            if block.get("type") == "tool_use":
                self._blocks[int(payload.get("index", 0))] = {
                    "id": str(block.get("id", "")),
                    "name": str(block.get("name", "")),
                    "json": "",
                }
        elif kind == "content_block_delta":
            delta = payload.get("delta") or {}
            if delta.get("type") == "text_delta":
                text = str(delta.get("text", ""))
                if text:
                    self._deltas += 1
                    if not self._stream.delta(text):
                        return True  # stopped: the caller sees it and drops the call
            elif delta.get("type") == "input_json_delta":
                block = self._blocks.get(int(payload.get("index", 0)))
                if block is not None:
                    block["json"] += str(delta.get("partial_json", ""))
        elif kind == "message_delta":
            stop = (payload.get("delta") or {}).get("stop_reason")
            if stop:
                self._finish = str(stop)
            usage = payload.get("usage") or {}
            if usage.get("output_tokens") is not None:
                self._output = token_count(usage["output_tokens"])
        elif kind == "message_stop":
            return True
        return False

    def reply(self) -> ModelReply:
        calls = tuple(
            ToolCall(b["id"], b["name"], parse_arguments("anthropic", b["name"], b["json"]))
            for _, b in sorted(self._blocks.items())
        )
        usage = Usage(self._input, self._output)
        return ModelReply(self._stream.text, calls, usage, self._finish)

    def spent(self) -> Usage | None:
        # The prompt's tokens from `message_start`; the reply's as last reported (the
        # final count comes with `message_delta`), at least one per text delta seen.
        if not self._started:
            return None
        return Usage(self._input, max(self._output, self._deltas))


def _json(data: str) -> dict[str, Any]:
    try:
        payload = json.loads(data)
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        raise ProviderError("anthropic", f"malformed event in the stream: {data!r}"[:300])
    return payload
