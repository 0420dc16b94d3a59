"""Clocks: virtual time moves only when told to; real time is monotonic."""

import math

import pytest

from runtime import Clock, ManualClock, MonotonicClock


def test_a_manual_clock_stands_still_until_advanced():
    clock = ManualClock(start=5.0)
    assert clock.now() == 5.0
    assert clock.now() == 5.0
    assert clock.advance(2.5) == 7.5
    assert clock.now() == 7.5
    assert clock.virtual is True


def test_a_negative_step_is_a_value_error_naming_the_value():
    clock = ManualClock()
    with pytest.raises(ValueError, match=r"-0\.5"):
        clock.advance(-0.5)
    with pytest.raises(ValueError, match="nan"):
        clock.advance(math.nan)
    assert clock.now() == 0.0


def test_set_moves_forward_only():
    clock = ManualClock(10)
    assert clock.set(12) == 12
    with pytest.raises(ValueError, match="11"):
        clock.set(11)


def test_the_monotonic_clock_never_goes_back_and_is_real():
    clock = MonotonicClock(start=100.0)
    first = clock.now()
    assert 100.0 <= first < 101.0
    assert clock.now() >= first
    assert clock.virtual is False


def test_both_clocks_satisfy_the_protocol():
    assert isinstance(ManualClock(), Clock)
    assert isinstance(MonotonicClock(), Clock)
