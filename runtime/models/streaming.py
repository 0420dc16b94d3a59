"""Streams of model deltas: what a streaming model reports while a reply arrives.

Each model call the world starts gets a `Stream`. The model feeds it deltas with
``delta(text)`` on its lane thread; the world's `StreamHub` hands each one to the hooks a
host registered (``world.on_stream(fn)``, the live view, the control channel) and keeps the
text so far. Deltas are never inputs: only the final reply is, or, at an interrupt, the
text the stream held when it was stopped, so journals replay tick-exact with no provider.

A stream ends exactly once, under its lock (its hub's, shared by all the hub's streams),
either ``finish``ed by the call that completed
or ``stop``ped by an interrupt. Whichever comes first wins: a stopped stream refuses every
later delta (a late chunk is never applied) and its call's reply is dropped, because the
interrupt already carries the partial text; a finished stream cannot be stopped, because
its reply is already on its way.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["Stream", "StreamHook", "StreamHub"]

log = logging.getLogger("tickwork.models")

StreamHook = Callable[[str, str], object]
"""``fn(agent_id, delta_text)``, called on the lane thread as each delta arrives."""

_OPEN, _FINISHED, _STOPPED = 0, 1, 2
_RECENT = 1024  # agents whose latest streamed line a live view can show


class Stream:
    """One model call's deltas: the text so far, and how to stop the call."""

    __slots__ = ("_closers", "_hub", "_lock", "_parts", "_state", "agent_id", "ref")

    def __init__(self, agent_id: str, ref: str = "", hub: StreamHub | None = None) -> None:
        self.agent_id = agent_id
        self.ref = ref
        self._hub = hub
        # A hub's streams share its lock: every section under it is a few attribute updates
        # and none calls out, and a model call then costs one lock object fewer (every call
        # in flight holds its stream) and one round trip fewer at its end (`StreamHub.end`).
        self._lock = threading.Lock() if hub is None else hub._lock
        # Both lists are made by their first item: most calls stream nothing and register
        # no closer, and every call in flight holds its stream (two tracked objects less
        # per call for the collector to walk).
        self._parts: list[str] | None = None
        # Invariant: `_state` leaves _OPEN once, under `_lock`; `_closers` is emptied then.
        self._state = _OPEN
        self._closers: list[Callable[[], object]] | None = None

    @property
    def text(self) -> str:
        """Everything received so far."""
        with self._lock:
            return "".join(self._parts) if self._parts else ""

    @property
    def stopped(self) -> bool:
        """Whether an interrupt stopped the stream (its call's reply will be dropped)."""
        return self._state == _STOPPED

    def delta(self, text: str) -> bool:
        """Add a piece of the reply; False once stopped (the caller should stop reading)."""
        if not text:
            return self._state != _STOPPED
        with self._lock:
            if self._state == _STOPPED:
                return False  # a late chunk after an interrupt is never applied
            if self._parts is None:
                self._parts = [text]
            else:
                self._parts.append(text)
        if self._hub is not None:
            self._hub.emit(self, text)
        return True

    def on_stop(self, closer: Callable[[], object]) -> None:
        """Call ``closer()`` when the stream is stopped (at once if it already is)."""
        with self._lock:
            if self._state == _OPEN:
                if self._closers is None:
                    self._closers = [closer]
                else:
                    self._closers.append(closer)
                return
            if self._state == _FINISHED:
                return
        _run(closer)

    def stop(self) -> str | None:
        """Stop the stream and close its call; the text so far, or None if it had ended."""
        with self._lock:
            if self._state != _OPEN:
                return None
            self._state = _STOPPED
            text = "".join(self._parts) if self._parts else ""
            closers, self._closers = self._closers, None
        for closer in closers or ():
            _run(closer)
        return text

    def finish(self) -> bool:
        """Mark the call complete; False if an interrupt stopped it first."""
        with self._lock:
            return self._finish_locked()

    def _finish_locked(self) -> bool:
        if self._state == _STOPPED:
            return False
        self._state = _FINISHED
        self._closers = None
        return True

    def __repr__(self) -> str:
        state = ("open", "finished", "stopped")[self._state]
        return f"<Stream {self.agent_id}/{self.ref} {state}>"


class StreamHub:
    """A world's open streams by agent, the hooks that see their deltas, and each agent's
    latest streamed line. Thread-safe: lane threads emit, any thread stops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, Stream] = {}
        self._hooks: tuple[StreamHook, ...] = ()  # copied on write: emit takes no lock
        self._lines: OrderedDict[str, str] = OrderedDict()

    def add_hook(self, fn: StreamHook) -> None:
        """Call ``fn(agent_id, delta_text)`` for every delta of every stream."""
        with self._lock:
            self._hooks = (*self._hooks, fn)

    def remove_hook(self, fn: StreamHook) -> bool:
        """Stop calling ``fn``; returns whether it was registered."""
        with self._lock:
            if fn not in self._hooks:
                return False
            hooks = list(self._hooks)
            hooks.remove(fn)
            self._hooks = tuple(hooks)
            return True

    def open(self, agent_id: str, ref: str) -> Stream:
        """A new stream for the agent's call ``ref`` (replacing any stream it had open)."""
        stream = Stream(agent_id, ref, self)
        with self._lock:
            self._open[agent_id] = stream
        return stream

    def release(self, stream: Stream) -> None:
        """Forget an ended stream."""
        with self._lock:
            if self._open.get(stream.agent_id) is stream:
                del self._open[stream.agent_id]

    def end(self, stream: Stream) -> bool:
        """``stream.finish()`` and ``release(stream)`` under one hold of the lock: the end
        of a model call. False if an interrupt stopped the stream first."""
        with self._lock:
            if self._open.get(stream.agent_id) is stream:
                del self._open[stream.agent_id]
            return stream._finish_locked()

    def stop(self, agent_id: str) -> tuple[str, str] | None:
        """Stop the agent's open stream: ``(ref, text so far)``, or None if it has none."""
        with self._lock:
            stream = self._open.pop(agent_id, None)
        if stream is None:
            return None
        text = stream.stop()
        return None if text is None else (stream.ref, text)

    def emit(self, stream: Stream, text: str) -> None:
        """Hand a delta to every hook and note the agent's latest line."""
        agent_id = stream.agent_id
        with self._lock:
            tail = self._lines.pop(agent_id, "") + text
            self._lines[agent_id] = tail[-400:]  # enough to hold the latest line
            while len(self._lines) > _RECENT:
                self._lines.popitem(last=False)
            hooks = self._hooks
        for hook in hooks:
            try:
                hook(agent_id, text)
            except Exception:
                log.exception("stream hook %r raised", hook)

    def latest_lines(self) -> dict[str, str]:
        """Each recently streaming agent's latest line of text."""
        with self._lock:
            tails = list(self._lines.items())
        latest = {}
        for agent_id, tail in tails:
            lines = [line for line in tail.splitlines() if line.strip()]
            latest[agent_id] = lines[-1].strip() if lines else ""
        return latest


def _run(closer: Callable[[], object]) -> None:
    try:
        closer()
    except Exception:
        log.exception("stream closer %r raised", closer)
