"""Ctrl-C inside a host's ``tick()``: the tick finishes, then ``KeyboardInterrupt`` is raised.

Python delivers SIGINT as a ``KeyboardInterrupt`` at whatever bytecode the main thread is
running. Landing inside a tick, it would stop the tick half way: inputs drained but not
applied, agents stepped after it stranded. So while the main thread ticks, SIGINT is
deferred: the first tick on the main thread finds Python's default handler installed and
swaps in `_on_sigint`, which outside a tick behaves exactly like the default (it raises at
once) and inside one notes the signal; ``leave()`` raises ``KeyboardInterrupt`` when the
tick is over. The world is then whole, and the host may tick on or ``close()`` it.

A host that installs a SIGINT handler of its own keeps it: the world never replaces a
handler that is not Python's default. A ``KeyboardInterrupt`` a behaviour raises itself on
the main thread (or a host handler raised inside one) fails that agent like any exception
and is raised again when the tick is over, so Ctrl-C still stops the host. Ticks on other
threads (``world.start()``) never see SIGINT: Python runs handlers on the main thread only.

A swap per tick was measured at ~30 µs (two ``sigaction`` calls), most of an idle tick, so
the handler stays installed; a tick pays one ``getsignal`` and a counter instead: the C
module's, since ``signal.getsignal`` converts the handler to an enum (~4 µs a call here,
against ~30 ns).
"""

from __future__ import annotations

import importlib
import signal
import threading
from collections.abc import Callable
from types import FrameType

__all__ = ["enter", "leave", "note_keyboard_interrupt", "pending"]

_MAIN = threading.main_thread().ident
_SIGINT = int(signal.SIGINT)
# `signal.getsignal` without its enum conversion (C `_signal` has no type stubs).
_getsignal: Callable[[int], object] = importlib.import_module("_signal").getsignal


class _Deferral:
    __slots__ = ("pending", "ticking")

    def __init__(self) -> None:
        self.ticking = 0  # main-thread ticks in progress (nested: a tick inside a tick)
        self.pending = False  # a SIGINT (or a behaviour's KeyboardInterrupt) to raise after


_state = _Deferral()


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    if _state.ticking:
        _state.pending = True
        return
    signal.default_int_handler(signum, frame)


def enter() -> bool:
    """Start deferring SIGINT if this is the main thread; returns whether it does."""
    if threading.get_ident() != _MAIN:
        return False
    if _getsignal(_SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)
    # Under a host's own handler (or SIG_IGN) the count still matters: a behaviour's
    # KeyboardInterrupt is raised again after the tick.
    _state.ticking += 1
    return True


def leave() -> None:
    """End a deferring tick; raise the ``KeyboardInterrupt`` noted during it, if any.

    Raises:
        KeyboardInterrupt: Ctrl-C was pressed, or a behaviour raised it, during the tick.
    """
    _state.ticking -= 1
    if _state.pending and not _state.ticking:
        _state.pending = False
        raise KeyboardInterrupt


def pending() -> bool:
    """Whether a Ctrl-C landed during the current deferring tick: a loop that runs many
    ticks under one deferral (the sleepers' fast path) stops at the next tick boundary."""
    return _state.pending


def note_keyboard_interrupt() -> None:
    """A behaviour raised ``KeyboardInterrupt``: raise it again after a main-thread tick."""
    if _state.ticking and threading.get_ident() == _MAIN:
        _state.pending = True
