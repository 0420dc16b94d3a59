"""The inbox: inputs numbered on arrival, drained in sequence order, without a lock."""

from __future__ import annotations

import signal
import threading

import pytest

from runtime.wake import Wake
from runtime.world.inputs import Inbox


def test_inputs_are_numbered_in_arrival_order_and_nudge_the_wake():
    wake = Wake()
    inbox = Inbox(wake)
    assert [inbox.put(x) for x in "abc"] == [1, 2, 3]
    assert wake.notifies == 3 and len(inbox) == 3
    assert inbox.drain() == [(1, "a"), (2, "b"), (3, "c")]
    assert inbox.drain() == [] and len(inbox) == 0


def test_an_input_numbered_but_not_yet_queued_holds_the_later_ones_back():
    inbox = Inbox()
    late = next(inbox._numbers)  # a put preempted between taking its number and queueing
    inbox.put("b")
    assert inbox.drain() == []
    assert len(inbox) == 1  # held back, still pending: the loop must not park on it
    inbox._arrived.append((late, "a"))
    assert inbox.drain() == [(1, "a"), (2, "b")]


def test_queued_lists_what_is_not_handed_out_yet_held_back_inputs_included():
    # `World.no_effect` judges commands by it: an input drained but held back
    # behind a missing number is still to come.
    inbox = Inbox()
    inbox.put("a")
    late = next(inbox._numbers)  # a put preempted between taking its number and queueing
    inbox.put("c")
    assert inbox.queued() == [(1, "a"), (3, "c")]
    assert inbox.drain() == [(1, "a")]  # "c" is held back behind the missing 2
    inbox.put("d")
    assert inbox.queued() == [(3, "c"), (4, "d")]
    inbox._arrived.append((late, "b"))
    assert inbox.queued() == [(2, "b"), (3, "c"), (4, "d")]
    assert inbox.drain() == [(2, "b"), (3, "c"), (4, "d")]
    assert inbox.queued() == []


def test_inputs_put_from_many_threads_drain_in_sequence_order_without_gaps():
    inbox = Inbox()
    threads, per_thread = 8, 2_000
    start = threading.Barrier(threads + 1)
    done = threading.Event()
    drained: list[tuple[int, object]] = []

    def producer(index: int) -> None:
        start.wait(10)
        for i in range(per_thread):
            inbox.put((index, i))

    workers = [threading.Thread(target=producer, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    start.wait(10)
    while not done.is_set():
        drained += inbox.drain()
        if all(not w.is_alive() for w in workers):
            done.set()
    for worker in workers:
        worker.join(10)
    drained += inbox.drain()
    assert [seq for seq, _ in drained] == list(range(1, threads * per_thread + 1))
    for index in range(threads):  # each producer's inputs keep their own order
        mine = [item for _, item in drained if item[0] == index]  # type: ignore[index]
        assert mine == [(index, i) for i in range(per_thread)]


def test_a_drain_with_a_limit_takes_the_first_inputs_and_leaves_the_rest_first_in_line():
    inbox = Inbox()
    for x in "abcde":
        inbox.put(x)
    assert inbox.drain(limit=2) == [(1, "a"), (2, "b")]
    assert len(inbox) == 3
    inbox.put("f")
    assert inbox.drain(limit=2) == [(3, "c"), (4, "d")]
    assert inbox.drain() == [(5, "e"), (6, "f")]
    assert inbox.drain(limit=1) == []


def test_a_drain_limit_below_one_is_refused_with_its_value():
    inbox = Inbox()
    with pytest.raises(ValueError, match="`limit` must be >= 1 or None, got 0"):
        inbox.drain(limit=0)


class _Interrupt(Exception):
    """What a signal handler raises (Ctrl-C's default raises KeyboardInterrupt)."""


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer (POSIX)")
def test_an_exception_landing_inside_put_never_leaves_a_gap_that_holds_inputs_back():
    # A Ctrl-C lands wherever the main thread is: inside `put` (a host's `spawn` or
    # `send`), between taking a number and queueing the input under it, the number was
    # burnt and every later input was held back for good. A timer fires every 50 µs and
    # raises only while `put` runs.
    inbox = Inbox()

    def raise_inside_put(signum: int, frame: object) -> None:
        if frame is not None and frame.f_code.co_name == "put":  # type: ignore[attr-defined]
            raise _Interrupt

    interrupted = 0
    previous = signal.signal(signal.SIGALRM, raise_inside_put)
    signal.setitimer(signal.ITIMER_REAL, 0.00005, 0.00005)
    try:
        for item in range(100_000):
            try:
                inbox.put(item)
            except _Interrupt:
                interrupted += 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, previous)
    assert interrupted > 0  # the handler did land inside `put`
    drained = inbox.drain()
    assert len(inbox) == 0, f"{len(inbox)} inputs held back behind a lost number"
    assert [seq for seq, _item in drained] == list(range(1, len(drained) + 1))
