"""Shared fixtures: worlds that are always closed, and helpers for waiting with timeouts."""

from __future__ import annotations

import concurrent.futures
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runtime import CancelToken, ManualClock, World
from runtime.lane import BackendInfo


def callbacks_of(token: CancelToken) -> list[object]:
    """The callbacks ``token`` keeps, as a list (it keeps none, one, or a list of them)."""
    kept = token._callbacks
    if kept is None:
        return []
    return list(kept) if kept.__class__ is list else [kept]  # type: ignore[arg-type]


TICKWORK = str(Path(sys.executable).parent / "tickwork")
"""The `tickwork` command of the interpreter running the tests: found next to
``sys.executable``, so tests need no activated venv (no ``PATH`` lookup)."""


@pytest.fixture
def make_world() -> Iterator[Callable[..., World]]:
    """Build worlds (virtual clock by default) and close them at the end of the test."""
    worlds: list[World] = []

    def make(**kwargs: object) -> World:
        kwargs.setdefault("clock", ManualClock())
        world = World(**kwargs)  # type: ignore[arg-type]
        worlds.append(world)
        return world

    yield make
    for world in worlds:
        world.close()


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """Python's own Ctrl-C handling for a test that sends itself SIGINT.

    A test runner started with SIGINT ignored (a background job of a non-interactive shell,
    ``nohup``, some CI runners) hands Python ``SIG_IGN``, and Python then installs no
    handler: the test's Ctrl-C would vanish. Another runner may have a handler of its own.
    The test gets ``signal.default_int_handler``, what an interactive start gives (the
    world's deferring handler, which chains to it, is kept as it is), and the runner's
    handler is put back after the test.
    """
    previous = signal.getsignal(signal.SIGINT)
    ours = previous is signal.default_int_handler or getattr(previous, "__module__", "").startswith(
        "runtime."
    )
    if not ours:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if not ours:
            signal.signal(signal.SIGINT, previous)


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``predicate`` until it holds; fail the test (never hang) after ``timeout``,
    with every thread's stack in the message (a wait that times out only under load
    says where the threads it waited on were)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}\n{thread_stacks()}")
        time.sleep(0.002)


class CountingBackend:
    """A tool backend handed to a world or a resume (a stand-in for a Dask backend): what
    `ToolBackend` asks, and how many times it was closed."""

    def __init__(self) -> None:
        self.executor = concurrent.futures.ThreadPoolExecutor(1)
        self.closed = 0

    def info(self) -> BackendInfo:
        return BackendInfo("executor")

    def close(self) -> None:
        self.closed += 1
        self.executor.shutdown()


def thread_stacks() -> str:
    """Every live thread's name and stack, innermost call last."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        stack = "".join(traceback.format_stack(frame))
        parts.append(f"--- thread {names.get(ident, ident)}\n{stack}")
    return "\n".join(parts)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--real-model",
        action="store_true",
        default=False,
        help="run the tests marked real_model (they start a llama-cpp-python server)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A real model server takes minutes to build and seconds to start: never in the
    # default run (CI), only when asked for with --real-model.
    if config.getoption("--real-model"):
        return
    skip = pytest.mark.skip(reason="a real model server: run with --real-model")
    for item in items:
        if "real_model" in item.keywords:
            item.add_marker(skip)
