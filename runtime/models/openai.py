"""`OpenAIChat`: the OpenAI-compatible chat-completions API, streamed.

Speaks to OpenAI and to the servers that copy its API: vLLM, llama.cpp, Ollama, LM Studio,
OpenRouter. Point ``base_url`` at the server's ``/v1``.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from components import ToolCall
from runtime.errors import ProviderError
from runtime.models.base import ModelReply, ModelRequest
from runtime.models.messages import chat_messages
from runtime.models.provider import HttpProvider
from runtime.models.streaming import Stream
from runtime.models.usage import Usage, token_count

__all__ = ["OpenAIChat"]


class OpenAIChat(HttpProvider):
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    ``OpenAIChat(model, *, base_url="https://api.openai.com/v1", api_key=None,
    api_key_env="OPENAI_API_KEY", timeout=60.0, max_retries=4, temperature=None,
    max_tokens=None, seed=None, rate_limit=None, budget=None, tools=())``; see
    `HttpProvider` for what each does. It asks for usage in the stream
    (``stream_options.include_usage``); a server that sends none gets its usage counted
    instead: a token per content delta, and the prompt at four characters a token.
    """

    provider: ClassVar[str] = "openai"
    default_base_url: ClassVar[str] = "https://api.openai.com/v1"
    default_key_env: ClassVar[str] = "OPENAI_API_KEY"

    def _url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def _headers(self, key: str | None) -> dict[str, str]:
        headers = {"accept": "text/event-stream"}
        if key:
            headers["authorization"] = f"Bearer {key}"
        return headers

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": chat_messages(request),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.seed is not None:
            body["seed"] = self.seed
        if self.tools:
            body["tools"] = [{"type": "function", "function": dict(t)} for t in self.tools]
        return body

    def _reader(self, stream: Stream, body: dict[str, Any]) -> _ChunkReader:
        chars = sum(len(m["content"]) for m in body["messages"])
        return _ChunkReader(stream, chars)


class _ChunkReader:
    """Reads ``chat.completion.chunk`` events up to ``data: [DONE]``."""

    def __init__(self, stream: Stream, prompt_chars: int = 0) -> None:
        self._stream = stream
        self._prompt_chars = prompt_chars
        self._started = False  # a chunk came: the server began its reply
        self._deltas = 0
        self._finish: str | None = None
        self._usage_in: int | None = None  # the server's counts, when it gives them
        self._usage_out: int | None = None
        self._calls: dict[int, dict[str, str]] = {}  # index -> id, name, arguments so far

    def feed(self, event: str, data: str) -> bool:
        if data.strip() == "[DONE]":
            return True
        chunk = _json(data)
        if "error" in chunk:  # refused before a reply began, or cut short: as it came
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else error
            raise ProviderError("openai", f"error in the stream: {message}")
        self._started = True
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            # A count the server left out is estimated below, as with no usage at all: an
            # empty `usage: {}` read as 0 tokens in and out, which no budget saw.
            prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
            self._usage_in = token_count(prompt) if prompt is not None else self._usage_in
            self._usage_out = token_count(completion) if completion is not None else self._usage_out
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._deltas += 1
                if not self._stream.delta(content):
                    return True  # stopped: the caller sees it and drops the call
            for part in delta.get("tool_calls") or ():
                self._tool_delta(part)
            if choice.get("finish_reason"):
                self._finish = str(choice["finish_reason"])
        return False

    def _tool_delta(self, part: Any) -> None:
        if not isinstance(part, dict):
            raise ProviderError("openai", f"malformed tool call delta: {part!r}"[:300])
        call = self._calls.setdefault(int(part.get("index", 0)), {"arguments": ""})
        if part.get("id"):
            call["id"] = str(part["id"])
        function = part.get("function") or {}
        if function.get("name"):
            call["name"] = str(function["name"])
        if function.get("arguments"):
            call["arguments"] += str(function["arguments"])

    def reply(self) -> ModelReply:
        calls = []
        for index in sorted(self._calls):
            call = self._calls[index]
            name = call.get("name", "")
            args = parse_arguments("openai", name, call["arguments"])
            calls.append(ToolCall(call.get("id") or f"call_{index}", name, args))
        return ModelReply(self._stream.text, tuple(calls), self._usage(), self._finish)

    def spent(self) -> Usage | None:
        return self._usage() if self._started else None

    def _usage(self) -> Usage:
        # Counts the server did not stream (llama-cpp-python ignores include_usage, and a
        # reply cut short never gets to its usage chunk): the deltas counted (such servers
        # send one token each), the prompt estimated at four characters a token, so
        # budgets and token rates still hold.
        tokens_in = self._usage_in
        tokens_out = self._usage_out
        return Usage(
            -(-self._prompt_chars // 4) if tokens_in is None else tokens_in,
            self._deltas + len(self._calls) if tokens_out is None else tokens_out,
        )


def parse_arguments(provider: str, name: str, text: str) -> dict[str, Any]:
    """A tool call's JSON arguments as a dict.

    Raises:
        ProviderError: the arguments are not a JSON object.
    """
    if not text.strip():
        return {}
    try:
        args = json.loads(text)
    except ValueError:
        args = None
    if not isinstance(args, dict):
        raise ProviderError(
            provider, f"tool call {name!r} has arguments that are not a JSON object: {text!r}"[:300]
        )
    return args


def _json(data: str) -> dict[str, Any]:
    try:
        chunk = json.loads(data)
    except ValueError:
        chunk = None
    if not isinstance(chunk, dict):
        raise ProviderError("openai", f"malformed chunk in the stream: {data!r}"[:300])
    return chunk
