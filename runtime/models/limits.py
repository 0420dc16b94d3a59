"""`RateLimit`: requests and tokens per minute, shared by every agent using a model."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from runtime.cancel import Cancelled, CancelToken
from runtime.clock import Clock, MonotonicClock
from runtime.errors import ConfigError
from runtime.models.usage import Usage

__all__ = ["RateLimit", "Sleep", "cancellable_sleep"]

Sleep = Callable[[float, CancelToken], None]
"""``sleep(seconds, cancel)``: wait, raising ``Cancelled`` as soon as ``cancel`` fires."""

_WINDOW = 60.0


def cancellable_sleep(seconds: float, cancel: CancelToken) -> None:
    """Wait ``seconds`` of real time, or raise ``Cancelled`` the moment ``cancel`` fires.

    Raises:
        Cancelled: the token fired during the wait.
    """
    if cancel.wait(seconds) or cancel.cancelled:
        raise Cancelled(cancel.reason or "cancelled")


class RateLimit:
    """A model's request and token rate, shared by every agent that uses the model object.

    ``requests_per_minute`` spaces requests evenly: at 120 a minute, one every 0.5 s,
    whichever agents make them (each caller reserves the next free slot, so the spacing
    does not depend on which lane thread runs first). ``tokens_per_minute`` holds a
    request back while the tokens of the replies finished in the last minute reach it.
    Waits are cancellable. ``clock`` and ``sleep`` are for tests (virtual time).

    Raises:
        ConfigError: a rate is not a number > 0.
    """

    def __init__(
        self,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        *,
        clock: Clock | None = None,
        sleep: Sleep | None = None,
    ) -> None:
        for name, value in (
            ("requests_per_minute", requests_per_minute),
            ("tokens_per_minute", tokens_per_minute),
        ):
            ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
            if value is not None and not (ok and value < float("inf")):
                raise ConfigError(f"`{name}` must be a number > 0, got {value!r}")
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self._clock: Clock = clock if clock is not None else MonotonicClock()
        self._sleep: Sleep = sleep if sleep is not None else cancellable_sleep
        self._lock = threading.Lock()
        self._next_slot = float("-inf")
        self._spent: deque[tuple[float, int]] = deque()  # (finished at, tokens), oldest first
        self._spent_total = 0

    def acquire(self, cancel: CancelToken) -> None:
        """Wait until a request may go out.

        Raises:
            Cancelled: ``cancel`` fired while waiting.
        """
        while (delay := self._token_delay()) > 0:
            self._sleep(delay, cancel)
        if self.requests_per_minute is None:
            return
        with self._lock:
            now = self._clock.now()
            slot = max(now, self._next_slot)
            self._next_slot = slot + _WINDOW / self.requests_per_minute
        if slot > now:
            self._sleep(slot - now, cancel)
        cancel.raise_if_cancelled()

    def record(self, usage: Usage | None) -> None:
        """Count a finished reply's tokens against the per-minute token rate."""
        if usage is None or self.tokens_per_minute is None:
            return
        with self._lock:
            self._spent.append((self._clock.now(), usage.total))
            self._spent_total += usage.total

    def _token_delay(self) -> float:
        if self.tokens_per_minute is None:
            return 0.0
        with self._lock:
            now = self._clock.now()
            while self._spent and self._spent[0][0] <= now - _WINDOW:
                self._spent_total -= self._spent.popleft()[1]
            if self._spent_total < self.tokens_per_minute:
                return 0.0
            return self._spent[0][0] + _WINDOW - now

    def __repr__(self) -> str:
        return (
            f"RateLimit(requests_per_minute={self.requests_per_minute!r},"
            f" tokens_per_minute={self.tokens_per_minute!r})"
        )
