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
    with pytest.raises(ValueError, match=r"11\.5"):
        clock.set(11.5)  # a float takes the short path, and is refused there too


@pytest.mark.parametrize("when", [math.inf, math.nan, -math.inf])
def test_set_refuses_a_time_that_is_not_finite_naming_it(when: float) -> None:
    clock = ManualClock(10)
    with pytest.raises(ValueError, match=str(when)):
        clock.set(when)
    assert clock.now() == 10.0


def test_set_to_now_or_to_an_int_keeps_time_a_float():
    clock = ManualClock(10)
    assert clock.set(10.0) == 10.0
    assert type(clock.set(13)) is float and clock.now() == 13.0


def test_the_monotonic_clock_never_goes_back_and_is_real():
    clock = MonotonicClock(start=100.0)
    first = clock.now()
    assert 100.0 <= first < 101.0
    assert clock.now() >= first
    assert clock.virtual is False


def test_both_clocks_satisfy_the_protocol():
    assert isinstance(ManualClock(), Clock)
    assert isinstance(MonotonicClock(), Clock)
