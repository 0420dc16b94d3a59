"""What runs a world's tool jobs: the backend protocol and the snapshot a live view shows.

Kept apart from `runtime.cluster` (the Dask glue) so that the world depends only on this
small protocol, never on an optional package.
"""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .errors import ConfigError
from .lane import ToolLane

__all__ = ["BackendInfo", "ToolBackend", "check_count", "describe_tool_backend"]


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
