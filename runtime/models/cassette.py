"""`Cassette`: record model calls once, replay them in tests, keyed by the request.

A journal replays a whole run; a cassette serves model calls to a run that may differ,
as long as each request (the model, the messages, the tool declarations) is one it has a
recording for. A request it has none for fails with `CassetteMiss`, which names the
request, instead of reaching a provider.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from runtime.cancel import CancelToken
from runtime.errors import CassetteMiss, ConfigError
from runtime.models.base import Model, ModelReply, ModelRequest, decode_reply, encode_reply
from runtime.models.messages import chat_messages
from runtime.models.usage import Budget

__all__ = ["Cassette", "CassetteModel", "request_key"]

_VERSION = 1


def request_key(model: Model, request: ModelRequest) -> dict[str, Any]:
    """What identifies ``request`` to ``model``: its own ``request_key`` if it has one."""
    own = getattr(model, "request_key", None)
    if callable(own):
        key: dict[str, Any] = own(request)
        return key
    return {"model": request.model, "messages": chat_messages(request), "tools": []}


def _digest(key: dict[str, Any]) -> str:
    canonical = json.dumps(key, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.blake2b(canonical.encode(), digest_size=16).hexdigest()


class Cassette:
    """A JSON file of model replies by request: ``Cassette(path, record=False)``.

    ``cassette.wrap(model)`` gives a model that answers from the file. With
    ``record=True`` a request the file has no reply for goes to ``model`` and the reply is
    saved (at once, so a test that dies keeps what it recorded). A replayed reply's text is
    streamed as one delta, so stream hooks see it.

    Raises:
        ConfigError: the file exists but is not a cassette, or one of its recordings holds
            no reply a model could give (naming it).
    """

    def __init__(self, path: str | os.PathLike[str], *, record: bool = False) -> None:
        self.path = Path(path)
        self.record = record
        self._lock = threading.Lock()
        self._entries: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                entries = data["recordings"] if data.get("version") == _VERSION else None
            except (ValueError, KeyError, TypeError, AttributeError):
                entries = None
            if not isinstance(entries, dict):
                raise ConfigError(f"`path` {str(self.path)!r} is not a tickwork cassette")
            for digest, entry in entries.items():  # a hand-edited file fails here, not mid-run
                try:
                    decode_reply(entry["reply"])
                except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
                    raise ConfigError(
                        f"`path` {str(self.path)!r}: recording {digest!r} has no readable reply"
                        f" ({type(exc).__name__}: {exc})"
                    ) from None
            self._entries = entries

    def wrap(self, model: Model) -> CassetteModel:
        """A model that answers from this cassette (and records through ``model``)."""
        return CassetteModel(self, model)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def lookup(self, key: dict[str, Any]) -> ModelReply | None:
        """The recorded reply for a request key, or None."""
        with self._lock:
            entry = self._entries.get(_digest(key))
        return None if entry is None else decode_reply(entry["reply"])

    def store(self, key: dict[str, Any], reply: ModelReply) -> None:
        """Record ``reply`` for a request key and save the file."""
        with self._lock:
            self._entries[_digest(key)] = {"request": key, "reply": encode_reply(reply)}
            data = {"version": _VERSION, "recordings": self._entries}
            text = json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False)
            partial = self.path.with_name(self.path.name + ".tmp")
            partial.write_text(text + "\n", encoding="utf-8")
            partial.replace(self.path)

    def __repr__(self) -> str:
        return f"Cassette({str(self.path)!r}, record={self.record})"


class CassetteModel:
    """A model that answers from a `Cassette`; see there."""

    def __init__(self, cassette: Cassette, model: Model) -> None:
        self.cassette = cassette
        self.model = model

    def complete(self, request: ModelRequest, cancel: CancelToken) -> ModelReply:
        """The recorded reply to ``request`` (recording it first when the cassette records).

        A reply played back goes through the wrapped model's ``budget`` as a live call
        would (checked before, charged after), so a test on a cassette meets the same
        `BudgetExceeded` the live run met.

        Raises:
            CassetteMiss: no recording for the request, and the cassette does not record.
            BudgetExceeded: the wrapped model's budget is spent for the agent.
        """
        key = request_key(self.model, request)
        reply = self.cassette.lookup(key)
        if reply is None:
            if not self.cassette.record:
                last = key["messages"][-1]["content"] if key["messages"] else ""
                raise CassetteMiss(
                    f"cassette {str(self.cassette.path)!r} has no recording for the request"
                    f" {_digest(key)} (model {key['model']!r},"
                    f" {len(key['messages'])} messages, the last {last[:80]!r});"
                    " record it with Cassette(path, record=True)"
                )
            reply = self.model.complete(request, cancel)
            self.cassette.store(key, reply)
            return reply
        budget = getattr(self.model, "budget", None)
        if isinstance(budget, Budget):
            budget.check(request.agent_id, str(key["model"]))
        cancel.raise_if_cancelled()
        if request.stream is not None and reply.text:
            request.stream.delta(reply.text)
        if isinstance(budget, Budget):
            budget.charge(request.agent_id, reply.usage)
        return reply

    def request_key(self, request: ModelRequest) -> dict[str, Any]:
        """The wrapped model's request key."""
        return request_key(self.model, request)

    def __repr__(self) -> str:
        return f"<CassetteModel {self.model!r} from {self.cassette!r}>"
