"""The wake stores one permit: nudges are never lost and bursts merge."""

import threading
import time

import pytest

from runtime import Wake


def test_a_notify_before_the_wait_is_kept():
    wake = Wake()
    wake.notify()
    assert wake.pending()
    assert wake.wait(timeout=0) is True


def test_many_notifies_make_one_wakeup():
    wake = Wake()
    for _ in range(100):
        wake.notify()
    assert wake.wait(timeout=0) is True
    assert wake.wait(timeout=0) is False
    assert wake.notifies == 100
    assert wake.wakeups == 1


def test_a_timeout_returns_false():
    wake = Wake()
    started = time.monotonic()
    assert wake.wait(timeout=0.05) is False
    assert time.monotonic() - started >= 0.04


def test_a_notify_from_another_thread_wakes_a_waiting_thread_promptly():
    wake = Wake()
    parked = threading.Event()
    woke_after: list[float] = []

    def waiter() -> None:
        parked.set()
        started = time.monotonic()
        assert wake.wait(timeout=10)
        woke_after.append(time.monotonic() - started)

    thread = threading.Thread(target=waiter)
    thread.start()
    assert parked.wait(timeout=5)
    time.sleep(0.05)  # let the waiter reach the condition wait
    wake.notify()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert woke_after and woke_after[0] < 1.0


def test_a_notify_that_lands_between_waits_is_not_lost():
    # The tick loop: wait, then tick; a nudge arriving mid-tick must wake the next wait.
    wake = Wake()
    wake.notify()
    assert wake.wait(timeout=0)
    wake.notify()  # "mid-tick"
    assert wake.wait(timeout=0)


def test_a_negative_timeout_is_refused_with_its_value():
    with pytest.raises(ValueError, match="-1"):
        Wake().wait(timeout=-1)


def test_racing_notifies_store_exactly_one_permit_and_every_park_is_woken():
    wake = Wake()
    barrier = threading.Barrier(4)

    def burst() -> None:
        barrier.wait(5.0)
        for _ in range(2_000):
            wake.notify()

    threads = [threading.Thread(target=burst) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5.0)
    assert wake.notifies <= 8_000
    assert wake.wait(0) is True  # the bursts stored a permit...
    assert wake.wait(0) is False  # ...one, however many notifies raced for it
    for _ in range(200):  # park, get woken by another thread, again and again
        notifier = threading.Timer(0.0, wake.notify)
        notifier.start()
        assert wake.wait(5.0) is True
        notifier.join(5.0)
