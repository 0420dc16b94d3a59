"""The models room: the `Model` protocol a ``Think`` runs, and the models tickwork ships.

`ScriptedModel` replays a fixed list; `OpenAIChat` and `AnthropicMessages` are real
providers (streamed, interruptible, retried, rate-limited; they need the ``providers``
extra, imported only at their first call); `Cassette` records and replays model calls.
"""

from runtime.models.anthropic import AnthropicMessages
from runtime.models.base import Model, ModelReply, ModelRequest
from runtime.models.cassette import Cassette
from runtime.models.limits import RateLimit
from runtime.models.openai import OpenAIChat
from runtime.models.retry import Backoff
from runtime.models.scripted import ScriptedModel
from runtime.models.streaming import Stream, StreamHub
from runtime.models.usage import Budget, Usage

__all__ = [
    "AnthropicMessages",
    "Backoff",
    "Budget",
    "Cassette",
    "Model",
    "ModelReply",
    "ModelRequest",
    "OpenAIChat",
    "RateLimit",
    "ScriptedModel",
    "Stream",
    "StreamHub",
    "Usage",
]
