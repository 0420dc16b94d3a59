"""A hand-rolled prompt registry: a dict of open requests, a lock, an ``Event`` each.

What a user writes when an agent thread must wait for a person's answer: ``open`` files the
request under a lock with an ``Event`` for its asker, ``answer`` pops it, stores the answer
and sets the event, ``ask`` opens and waits. The critical sections are as small as they can
be, ids come from a counter, and nothing else is kept (no deadlines, no history, no change
events): the floor the interaction hub is measured against.
"""

from __future__ import annotations

import itertools
import threading

__all__ = ["DictHub", "LeanDictHub"]


class _Request:
    __slots__ = ("agent_id", "answer", "done", "prompt")

    def __init__(self, agent_id: str, prompt: str) -> None:
        self.agent_id = agent_id
        self.prompt = prompt
        self.done = threading.Event()
        self.answer: str | None = None


class DictHub:
    """Open requests in a dict under a lock; each request has an Event for its asker."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, _Request] = {}
        self._ids = itertools.count(1)

    def open(self, agent_id: str, prompt: str) -> str:
        """File a request and return its id (non-blocking)."""
        request = _Request(agent_id, prompt)
        with self._lock:
            request_id = f"{agent_id}-{next(self._ids)}"
            self._open[request_id] = request
        return request_id

    def answer(self, request_id: str, value: str) -> bool:
        """Settle an open request; False if unknown or already settled."""
        with self._lock:
            request = self._open.pop(request_id, None)
        if request is None:
            return False
        request.answer = value
        request.done.set()
        return True

    def ask(self, agent_id: str, prompt: str, timeout: float | None = None) -> str | None:
        """Open a request and wait for its answer (None on timeout)."""
        request_id = self.open(agent_id, prompt)
        with self._lock:
            request = self._open.get(request_id)
        if request is None:  # answered already
            return None
        request.done.wait(timeout)
        return request.answer

    def pending(self) -> list[tuple[str, str, str]]:
        """``(request_id, agent_id, prompt)`` of every open request."""
        with self._lock:
            return [(rid, r.agent_id, r.prompt) for rid, r in self._open.items()]


class LeanDictHub:
    """The registry for askers that never block: a dict under a lock, no ``Event``.

    What a tick-driven host writes when the asker learns of the answer by polling or by a
    callback, as tickwork's agents do (they never wait on a per-request ``Event``): ``open``
    files the prompt under an id from a counter, ``answer`` pops it and stores the value.
    The floor for ``hub_throughput``, whose tickwork side builds no ``Event`` either.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, tuple[str, str]] = {}
        self._ids = itertools.count(1)
        self.answers: dict[str, str] = {}

    def open(self, agent_id: str, prompt: str) -> str:
        """File a request and return its id."""
        with self._lock:
            request_id = f"{agent_id}-{next(self._ids)}"
            self._open[request_id] = (agent_id, prompt)
        return request_id

    def answer(self, request_id: str, value: str) -> bool:
        """Settle an open request; False if unknown or already settled."""
        with self._lock:
            if self._open.pop(request_id, None) is None:
                return False
        self.answers[request_id] = value
        return True

    def pending(self) -> list[tuple[str, str, str]]:
        """``(request_id, agent_id, prompt)`` of every open request."""
        with self._lock:
            return [(rid, a, p) for rid, (a, p) in self._open.items()]
