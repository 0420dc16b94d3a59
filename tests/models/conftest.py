"""Fixtures for the provider tests: stub servers, and a virtual sleep that records waits."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("httpx")
pytest.importorskip("httpx_sse")

from runtime import Cancelled, CancelToken

from .stub_server import StubServer


@pytest.fixture(autouse=True)
def _close_providers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close every provider's connection pool at the end of the test (no socket leaks)."""
    from runtime.models.provider import HttpProvider

    made: list[HttpProvider] = []
    original = HttpProvider._http

    def tracked(self: HttpProvider) -> Any:
        made.append(self)
        return original(self)

    monkeypatch.setattr(HttpProvider, "_http", tracked)
    yield
    for provider in made:
        provider.close()


@pytest.fixture
def openai_server() -> Iterator[StubServer]:
    with StubServer("openai") as server:
        yield server


@pytest.fixture
def anthropic_server() -> Iterator[StubServer]:
    with StubServer("anthropic") as server:
        yield server


class VirtualSleep:
    """A ``sleep(seconds, cancel)`` that only records the waits (and honours the token)."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self._lock = threading.Lock()

    def __call__(self, seconds: float, cancel: CancelToken) -> None:
        with self._lock:
            self.waits.append(round(seconds, 6))
        if cancel.cancelled:
            raise Cancelled(cancel.reason or "cancelled")


@pytest.fixture
def virtual_sleep() -> VirtualSleep:
    return VirtualSleep()
