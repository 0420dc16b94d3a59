"""`ScriptedModel`: a model that replays a fixed list of replies, for tests and scenarios."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeAlias

from runtime.cancel import Cancelled, CancelToken
from runtime.models.base import ModelReply, ModelRequest

__all__ = ["ScriptStep", "ScriptedModel"]


ScriptStep: TypeAlias = ModelReply | str | Callable[[ModelRequest], "ModelReply | str"]


class ScriptedModel:
    """A model that replays a fixed list of replies, for tests and scenarios.

    Each agent reads the script from the start, so replies do not depend on the order in
    which lane threads happen to run. A world's call reads the entry its number names
    (``ModelRequest.call``: the agent's calls dispatched before it), so a call abandoned
    by an interrupt holds its place whether its thread ran it or not; a request built by
    hand reads the agent's next entry. An entry may be a ``ModelReply``, a string (a reply
    with no tool calls) or a function of the request. ``cycle=True`` starts over when the
    script ends; otherwise running out is an error. ``delay`` seconds of real time pass
    before each reply (cancellable), to stand in for a slow model. ``virtual_duration`` is
    the world time a reply takes in a lockstep world (where real time takes none).
    """

    def __init__(
        self,
        replies: Sequence[ScriptStep],
        *,
        delay: float = 0.0,
        cycle: bool = False,
        virtual_duration: float = 0.0,
    ) -> None:
        if not replies:
            raise ValueError("`replies` must hold at least one reply, got none")
        if delay < 0:
            raise ValueError(f"`delay` must be >= 0, got {delay}")
        ok = isinstance(virtual_duration, int | float) and not isinstance(virtual_duration, bool)
        if not ok or not 0 <= virtual_duration < float("inf"):
            raise ValueError(
                f"`virtual_duration` must be a finite number >= 0, got {virtual_duration!r}"
            )
        self.virtual_duration = float(virtual_duration)
        self._replies = list(replies)
        self._delay = delay
        self._cycle = cycle
        self._lock = threading.Lock()
        self._cursor: dict[str, int] = {}
        self.calls = 0

    def seek(self, agent_id: str, index: int) -> None:
        """Make ``index`` the next reply ``agent_id`` reads (0 is the first) in a request
        built by hand (one without ``call``).

        `runtime.resume` calls it with the number of calls the journal shows the agent made,
        so a resumed run reads on where the killed one was, not from the start.
        """
        with self._lock:
            self._cursor[agent_id] = index

    def complete(self, request: ModelRequest, cancel: CancelToken) -> ModelReply:
        """Return the agent's next scripted reply.

        Raises:
            Cancelled: ``cancel`` fired during the delay.
            LookupError: the script ran out (and ``cycle`` is False).
        """
        with self._lock:
            index = request.call
            if index is None:  # built by hand: the agent's next reply
                index = self._cursor.get(request.agent_id, 0)
            self._cursor[request.agent_id] = index + 1
            self.calls += 1
        if self._delay and cancel.wait(self._delay):
            raise Cancelled(cancel.reason or "cancelled")
        cancel.raise_if_cancelled()
        if index >= len(self._replies):
            if not self._cycle:
                raise LookupError(
                    f"scripted model ran out of replies after {len(self._replies)}"
                    f" for agent {request.agent_id!r}"
                )
            index %= len(self._replies)
        step = self._replies[index]
        reply = step(request) if callable(step) else step
        return reply if isinstance(reply, ModelReply) else ModelReply(str(reply))
