"""What runs a world's tool jobs: the backend protocol and the snapshot a live view shows.

Kept apart from `runtime.cluster` (the Dask glue) so that the world depends only on this
small protocol, never on an optional package.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from runtime.errors import ConfigError
from runtime.lane.tool_lane import ToolLane

__all__ = [
    "BackendInfo",
    "SupportsToolLookup",
    "ToolBackend",
    "check_count",
    "describe_tool_backend",
    "take_tool_executor",
]


@dataclass(frozen=True, slots=True)
class BackendInfo:
    """A snapshot of what runs a world's tool jobs, for a live view.

    ``kind`` is ``"threads"`` (the lane's own threads), ``"executor"`` (some other
    `concurrent.futures.Executor`), ``"dask"`` or ``"dask-local"``. ``workers`` counts
    worker processes for Dask and live lane threads for ``"threads"``; ``threads`` counts
    the task slots they offer. Either is None when unknown.
    """

    kind: str
    address: str = ""
    workers: int | None = None
    threads: int | None = None


@runtime_checkable
class ToolBackend(Protocol):
    """Something that runs tool jobs away from the lane's threads and must be shut down."""

    @property
    def executor(self) -> concurrent.futures.Executor:
        """The executor the tool lane submits jobs to."""
        ...

    def info(self) -> BackendInfo:
        """A snapshot for a live view."""
        ...

    def close(self) -> None:
        """Release the backend (idempotent)."""
        ...


class SupportsToolLookup(Protocol):
    """What `take_tool_executor` needs of a tool registry (`runtime.ToolRegistry` has it)."""

    def names(self) -> Iterable[str]:
        """Every registered tool's name."""
        ...

    def try_get(self, name: str) -> object | None:
        """The tool registered under ``name``, or None."""
        ...


def describe_tool_backend(lane: ToolLane, executor: object) -> BackendInfo:
    """Describe what runs ``lane``'s jobs: its threads, or ``executor`` (the world's own).

    An executor with an ``info()`` method (`DaskExecutor`) describes itself.
    """
    if executor is None:
        threads = lane.stats().threads
        return BackendInfo("threads", "", threads, threads)
    info = getattr(executor, "info", None)
    if callable(info):
        described = info()
        if isinstance(described, BackendInfo):
            return described
    return BackendInfo("executor")


def check_count(name: str, value: object, minimum: int) -> int:
    """Return ``value`` if it is an integer >= ``minimum``.

    Raises:
        ConfigError: it is not (the message names ``name`` and the value).
    """
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"`{name}` must be an integer >= {minimum}, got {value!r}")
    return value


def take_tool_executor(
    given: concurrent.futures.Executor | ToolBackend | None, tools: SupportsToolLookup
) -> tuple[ToolBackend | None, concurrent.futures.Executor | None]:
    """Split ``tool_executor`` into the backend the world owns (if handed one) and the
    executor its tool lane submits to, refusing tools that must stay in this process.

    A backend handed over is the world's to close, even when refused here (never leak its
    workers); a bare executor is only borrowed. A ``local_only`` tool asks a person through
    this process's hub: an executor lane's jobs get no hub, and could not step off the lane
    while they wait (DESIGN.md: a job waiting on a person must not hold lane capacity).

    Raises:
        ConfigError: there is an executor and ``tools`` has a ``local_only`` tool.
    """
    # None (the usual case) is no backend: asked first, since a runtime-checkable
    # Protocol's isinstance walks its members in Python (~19 us at every World made).
    backend, executor = (
        (given, given.executor)
        if given is not None and isinstance(given, ToolBackend)
        else (None, given)
    )
    local = [name for name in tools.names() if getattr(tools.try_get(name), "local_only", False)]
    if executor is not None and local:
        if backend is not None:
            backend.close()
        raise ConfigError(
            f"local_only tools cannot run on `tool_executor`: {', '.join(map(repr, local))} "
            "(they ask a person through this process's hub); ask with the `Ask` action "
            "instead, or drop `tool_executor` to run tools on the lane's threads"
        )
    return backend, executor
