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

**Abandoning a tick (opt-in).** A tick of 200,000 agents takes seconds; a host that would
rather stop at once than wait for it (``tickwork run``) opts in with ``abandoning()``: within
the block, Ctrl-C (through `_on_sigint`, or the host's own handler calling
``interrupt_now()``) raises ``KeyboardInterrupt`` at once, inside the tick. The tick is
abandoned: the agents' catch-alls pass the interrupt on instead of failing an agent with it,
the lane jobs a journaled tick holds are dropped, never started (``abandoned()``, asked by
`LiveEffects.release`), and the journal's open transaction is rolled back, so the journal
ends at the last committed tick and replays. The world is left half ticked: close it,
never tick it again (``tickwork resume`` carries on from the journal). Python code that C
calls (a ``__del__``, a gc callback, a generator finalized mid-tick) swallows exceptions,
so a handler running there loses the interrupt: until the tick is left, a thread sends
SIGINT again every 50 ms, which a handler recognises with ``rekicked()``; it raises again
only where the interrupt is not being handled (an unwinding that takes longer than 50 ms,
a journal rolling back under load, is left to finish). One case no handler can reach: a
SIGINT that lands just before the main thread enters a blocking C call (after Python's last
check for signals, before the system call starts) is noted in C and handled only when the
call returns, since CPython looks again only after a call the signal interrupted. A tick
in Python code is stopped at its next bytecode; one inside a single long call (a two-minute
``time.sleep``) waits for it, or for a second Ctrl-C, which interrupts the call.

A swap per tick was measured at ~30 µs (two ``sigaction`` calls), most of an idle tick, so
the handler stays installed; a tick pays one ``getsignal`` and a counter instead: the C
module's, since ``signal.getsignal`` converts the handler to an enum (~4 µs a call here,
against ~30 ns).
"""

from __future__ import annotations

import contextlib
import importlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

__all__ = [
    "abandoned",
    "abandoning",
    "enter",
    "flags",
    "interrupt_now",
    "leave",
    "note_keyboard_interrupt",
    "pending",
    "rekicked",
    "ticks_abandoned",
]

_MAIN = threading.main_thread().ident
_SIGINT = int(signal.SIGINT)
# `signal.getsignal` without its enum conversion (C `_signal` has no type stubs).
_getsignal: Callable[[int], object] = importlib.import_module("_signal").getsignal


class _Deferral:
    __slots__ = ("abandoned", "abandoning", "abandons", "kicked", "pending", "ticking")

    def __init__(self) -> None:
        self.ticking = 0  # main-thread ticks in progress (nested: a tick inside a tick)
        self.pending = False  # a SIGINT (or a behaviour's KeyboardInterrupt) to raise after
        self.abandoning = 0  # `abandoning()` blocks open on the main thread
        self.abandoned = False  # the main thread's tick in progress is being abandoned
        self.abandons = 0  # ticks abandoned so far in this process
        self.kicked = False  # the SIGINT on its way is `_rekick`'s, not the user's


_state = _Deferral()


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    if rekicked():
        return
    if _state.ticking and not _state.abandoning:
        _state.pending = True
        return
    interrupt_now()
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
    if _state.ticking:
        return
    raise_it = _state.pending or _state.abandoned
    _state.pending = _state.abandoned = False
    if raise_it:  # an abandoning one is on its way already, unless a catch-all ate it
        raise KeyboardInterrupt


def pending() -> bool:
    """Whether a Ctrl-C landed during the current deferring tick: a loop that runs many
    ticks under one deferral (the sleepers' fast path) stops at the next tick boundary."""
    return _state.pending


def flags() -> _Deferral:
    """The deferral's state, for a hot loop to read ``.pending`` on every tick without a
    call (`pending` is the same read); read-only for callers."""
    return _state


def note_keyboard_interrupt() -> None:
    """A behaviour raised ``KeyboardInterrupt``: raise it again after a main-thread tick.

    Raises:
        KeyboardInterrupt: at once, when the tick is being abandoned (``abandoning()``):
            the interrupt was Ctrl-C, not the agent's failure, and ends the tick.
    """
    if _state.ticking and threading.get_ident() == _MAIN:
        if _state.abandoned:
            raise KeyboardInterrupt
        _state.pending = True


@contextlib.contextmanager
def abandoning() -> Iterator[None]:
    """Within the block (main thread), Ctrl-C stops at once, abandoning a tick in progress.

    See the module docstring. ``_on_sigint`` raises at once in the block; a host with a
    SIGINT handler of its own calls ``interrupt_now()`` from it. Elsewhere a no-op.
    """
    if threading.get_ident() != _MAIN:
        yield
        return
    _state.abandoning += 1
    try:
        yield
    finally:
        _state.abandoning -= 1


def interrupt_now() -> None:
    """From a signal handler: inside ``abandoning()``, raise ``KeyboardInterrupt`` now.

    A main-thread tick in progress is abandoned (see the module docstring). Outside the
    block it returns: the caller's handler goes on as it would have.

    Raises:
        KeyboardInterrupt: inside ``abandoning()`` on the main thread.
    """
    if not _state.abandoning or threading.get_ident() != _MAIN:
        return
    if _state.ticking and not _state.abandoned:
        _state.abandoned = True
        _state.abandons += 1
        kicker = threading.Thread(
            target=_rekick, args=(_state.abandons,), name="tickwork-sigint", daemon=True
        )
        kicker.start()
    raise KeyboardInterrupt


_REKICK_SECS = 0.05


def _rekick(abandon: int) -> None:
    # Python code that C calls (a `__del__`, a gc or weakref callback, a generator being
    # finalized) swallows an exception, and a signal handler may run inside it: then the
    # tick would go on to its end. So while the abandoned tick is not left, SIGINT is
    # raised again (`rekicked` tells the handler it is this, not the user's second).
    # `abandon` numbers the abandon this thread is for: one that outlived its tick (it
    # sleeps between kicks) must never kick the next abandon, which has its own thread.
    # It did: its kick landed in the gc callback a later abandon's own allocations set
    # off, before that abandon's interrupt was raised, and was lost there.
    while True:
        time.sleep(_REKICK_SECS)
        if not _kick(abandon):
            return


def _kick(abandon: int) -> bool:
    """Send SIGINT to the main thread again if ``abandon`` is still in progress; whether
    it was (once it is not, the thread for it ends)."""
    if not _state.abandoned or _state.abandons != abandon:
        return False
    _state.kicked = True
    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
    return True


def rekicked() -> bool:
    """For a SIGINT handler, first thing: whether this SIGINT is the world's own, sent
    again to end an abandoned tick whose ``KeyboardInterrupt`` was swallowed; then the
    handler returns. Raises that ``KeyboardInterrupt`` again while the tick is not left.

    Raises:
        KeyboardInterrupt: the abandoned tick is still in progress.
    """
    if not _state.kicked:
        return False
    _state.kicked = False
    # While the interrupt is being handled (an `except`, a `finally` or `__exit__` it runs:
    # a journal rolling back, say) it was not lost: the abandon is under way, and raising
    # again would cut that clean-up short. Only a tick that went on without it is stopped.
    if _state.abandoned and _state.ticking and not _unwinding():
        raise KeyboardInterrupt
    return True


def _unwinding() -> bool:
    """Whether the calling thread handles a ``KeyboardInterrupt`` now, or an exception
    raised while one was handled (its ``__context__`` chain: a clean-up's own ``except``)."""
    exc = sys.exc_info()[1]
    for _ in range(64):  # the chain has no cycles, but it is not ours to trust
        if exc is None:
            return False
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc = exc.__context__
    return False


def abandoned() -> bool:
    """Whether the calling thread's tick is being abandoned (main thread only): its held
    lane jobs must be dropped, never started."""
    return _state.abandoned and threading.get_ident() == _MAIN


def ticks_abandoned() -> int:
    """How many main-thread ticks Ctrl-C has abandoned in this process so far (a host
    compares two counts: a world ticked in between is half ticked, its digest meaningless)."""
    return _state.abandons
