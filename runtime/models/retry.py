"""Retries of model calls: exponential backoff with full jitter, honouring ``Retry-After``."""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from runtime.cancel import CancelToken
from runtime.errors import ConfigError, ProviderError
from runtime.models.limits import Sleep

__all__ = ["RETRYABLE_STATUSES", "Backoff", "is_retryable_status", "with_retries"]

log = logging.getLogger("tickwork.models")

T = TypeVar("T")

# 408 timeout, 409 conflict (a lock held briefly), 429 rate limited; and every 5xx.
RETRYABLE_STATUSES = frozenset({408, 409, 429})


def is_retryable_status(status: int) -> bool:
    """Whether a response with this HTTP status is worth trying again."""
    return status in RETRYABLE_STATUSES or status >= 500


@dataclass(frozen=True, slots=True)
class Backoff:
    """How long to wait before retry ``n``: a wait drawn uniformly from
    ``[0, min(cap, base * 2**n)]`` ("full jitter", which spreads a crowd of retrying
    agents best), or exactly what the provider's ``Retry-After`` asked for.

    A ``Retry-After`` longer than ``max_retry_after`` is not waited for: the call fails at
    once (see `with_retries`). A provider asking for an hour has run out of quota, and the
    wait would hold a lane permit all that time (a ``Retry-After: 1e300`` overflowed the
    wait itself).
    """

    base: float = 0.5
    cap: float = 30.0
    max_retry_after: float = 60.0

    def __post_init__(self) -> None:
        for name in ("base", "cap", "max_retry_after"):
            value: object = getattr(self, name)
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            # A wait past TIMEOUT_MAX overflows `threading`'s wait instead of waiting.
            if not (ok and 0 <= value <= threading.TIMEOUT_MAX):  # type: ignore[operator]
                raise ConfigError(
                    f"`Backoff.{name}` must be a number of seconds from 0 to"
                    f" {threading.TIMEOUT_MAX:g}, got {value!r}"
                )

    def delay(self, attempt: int, rng: random.Random, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (0 for the first retry)."""
        if retry_after is not None:
            return max(0.0, retry_after)
        return rng.uniform(0.0, min(self.cap, self.base * 2.0**attempt))


def with_retries(
    call: Callable[[], T],
    *,
    max_retries: int,
    cancel: CancelToken,
    sleep: Sleep,
    backoff: Backoff,
    rng: random.Random,
    can_retry: Callable[[], bool] = lambda: True,
) -> T:
    """Run ``call``, retrying a retryable `ProviderError` up to ``max_retries`` times.

    ``can_retry()`` is asked before each retry (a stream that already showed text must not
    start over). The waits are ``sleep(seconds, cancel)``: cancellable.

    Raises:
        ProviderError: the last error, the first one that is not retryable, or one whose
            ``Retry-After`` asks for more than ``backoff.max_retry_after`` (its message then
            says how long the provider asked for).
        Cancelled: ``cancel`` fired during a wait.
    """
    if max_retries < 0:
        raise ConfigError(f"`max_retries` must be >= 0, got {max_retries}")
    attempt = 0
    while True:
        try:
            return call()
        except ProviderError as exc:
            if not exc.retryable or attempt >= max_retries or not can_retry():
                raise
            asked = exc.retry_after
            if asked is not None and asked > backoff.max_retry_after:
                raise ProviderError(
                    exc.provider,
                    f"{exc.message} (the provider asked to retry after {asked:g} s, more than"
                    f" max_retry_after={backoff.max_retry_after:g} s)",
                    exc.status,
                    retry_after=asked,
                ) from None
            wait = backoff.delay(attempt, rng, exc.retry_after)
            log.warning("%s; retry %d of %d in %.2fs", exc, attempt + 1, max_retries, wait)
            attempt += 1
            sleep(wait, cancel)
