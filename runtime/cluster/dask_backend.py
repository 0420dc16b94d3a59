"""`DaskBackend`: tool jobs on a Dask cluster, local or joined, and `tool_backend` by name."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from types import TracebackType
from typing import Any

from runtime.cluster.executor import DaskExecutor, describe_client
from runtime.errors import ConfigError
from runtime.lane.backend import BackendInfo, check_count

__all__ = ["BACKENDS", "DaskBackend", "tool_backend"]

log = logging.getLogger(__name__)

BACKENDS = ("threads", "dask", "dask-local")
"""The values ``tool_backend`` (and a scenario's ``[world] lane_backend``) accepts."""


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError as exc:
        raise ConfigError(
            "the dask tool backend needs the `distributed` package "
            "(pip install 'tickwork[dask]'), which cannot be imported: "
            f"{exc}"
        ) from None
    return distributed


class DaskBackend:
    """A Dask client (and the `LocalCluster` it started, if any) running a world's tool jobs.

    Make one with `DaskBackend.local` or `DaskBackend.connect`. ``World(tool_executor=
    backend)`` hands it over (the world closes it on ``close()``); ``World(tool_executor=
    backend.executor)`` only borrows it. Usable as a context manager.
    """

    def __init__(self, client: Any, *, kind: str, cluster: Any = None, retries: int = 0) -> None:
        """Wrap a connected ``client``; prefer `local` and `connect`.

        ``cluster`` (a ``LocalCluster``) is closed with the backend.

        Raises:
            ConfigError: ``retries`` is not an integer >= 0.
        """
        self._client = client
        self._cluster = cluster
        self._kind = kind
        self._executor = DaskExecutor(client, retries=retries, describe=self.info)
        self._closed = False
        self._close_lock = threading.Lock()
        self._info_lock = threading.Lock()
        self._info: tuple[float, BackendInfo] | None = None

    @classmethod
    def local(
        cls,
        workers: int = 2,
        *,
        threads_per_worker: int = 1,
        retries: int = 0,
        allowed_failures: int = 0,
        timeout: float = 60.0,
        silence_logs: int = logging.ERROR,
    ) -> DaskBackend:
        """Start a `LocalCluster` of ``workers`` processes on loopback and connect to it.

        No dashboard; the scheduler's HTTP port is picked at random (never 8787), and
        ``distributed``'s logs below ``silence_logs`` are dropped while the cluster runs.
        ``allowed_failures`` is how many worker deaths a task survives by being run again
        elsewhere: 0 (the default) turns a worker dying mid-job into an error result at
        once, so a tool with side effects never runs twice. ``retries`` re-runs a job that
        raised. Returns once every worker has joined.

        Raises:
            ConfigError: ``distributed`` is missing, a count is out of range, or the
                cluster did not start within ``timeout`` seconds.
        """
        distributed = _import_distributed()
        import dask

        check_count("workers", workers, 1)
        check_count("threads_per_worker", threads_per_worker, 1)
        check_count("allowed_failures", allowed_failures, 0)
        check_count("retries", retries, 0)
        cluster = client = None
        try:
            # Saturation 1.0: the scheduler hands a worker only as many tasks as it has
            # threads, so a worker that dies takes only its running jobs with it (Dask's
            # 1.1 queues extra tasks on workers, and those would fail with it too).
            with dask.config.set({"distributed.scheduler.worker-saturation": 1.0}):
                cluster = distributed.LocalCluster(
                    n_workers=workers,
                    threads_per_worker=threads_per_worker,
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address=None,
                    silence_logs=silence_logs,
                    # An HTTP server starts even without a dashboard, on 8787 by default: a
                    # busy 8787 (another cluster) would raise a UserWarning. Port 0 never does.
                    scheduler_kwargs={
                        "dashboard_address": "127.0.0.1:0",
                        "allowed_failures": allowed_failures,
                    },
                )
            client = distributed.Client(cluster, set_as_default=False, timeout=timeout)
            client.wait_for_workers(workers, timeout=timeout)
        except BaseException as exc:
            # Ctrl-C while the workers start too: their processes must not outlive it.
            for part in (client, cluster):
                if part is not None:
                    with contextlib.suppress(Exception):
                        part.close()
            if not isinstance(exc, Exception):
                raise
            raise ConfigError(
                f"a local dask cluster of `workers`={workers} did not start: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return cls(client, kind="dask-local", cluster=cluster, retries=retries)

    @classmethod
    def connect(cls, address: str, *, retries: int = 0, timeout: float = 30.0) -> DaskBackend:
        """Connect to the Dask scheduler at ``address`` (e.g. ``"tcp://10.0.0.5:8786"``).

        The scheduler's own ``distributed.scheduler.allowed-failures`` (Dask's default: 3)
        decides whether a task whose worker died runs again elsewhere; set it to 0 there
        for at-most-once tools. Workers need tickwork and your tools importable.

        Raises:
            ConfigError: ``distributed`` is missing, ``address`` is empty, ``retries`` is
                out of range, or no scheduler answered at ``address`` within ``timeout``.
        """
        distributed = _import_distributed()
        if not isinstance(address, str) or not address:
            raise ConfigError(f"`scheduler_address` must be a non-empty string, got {address!r}")
        check_count("retries", retries, 0)
        try:
            client = distributed.Client(address, set_as_default=False, timeout=timeout)
        except Exception as exc:
            raise ConfigError(
                f"cannot reach the dask scheduler at `scheduler_address`={address!r}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return cls(client, kind="dask", retries=retries)

    @property
    def executor(self) -> DaskExecutor:
        """The executor for ``World(tool_executor=...)`` or ``ToolLane(executor=...)``."""
        return self._executor

    @property
    def client(self) -> Any:
        """The ``distributed.Client``."""
        return self._client

    @property
    def kind(self) -> str:
        """``"dask-local"`` for a cluster this backend started, ``"dask"`` otherwise."""
        return self._kind

    def info(self, max_age: float = 1.0) -> BackendInfo:
        """Workers and threads now, asked of the scheduler at most once per ``max_age`` s.

        A query is one round trip to the scheduler: call this from a view's thread, not the
        tick thread. A closed or unreachable backend reports 0 workers.
        """
        if self._closed:
            return BackendInfo(self._kind, "", 0, 0)
        now = time.monotonic()
        with self._info_lock:
            if self._info is not None and now - self._info[0] < max_age:
                return self._info[1]
        info = describe_client(self._client, self._kind)
        with self._info_lock:
            self._info = (now, info)
        return info

    def wait_for_workers(self, n: int, timeout: float = 30.0) -> None:
        """Block until the scheduler has ``n`` workers (after a restart, say).

        Raises:
            TimeoutError: fewer than ``n`` workers after ``timeout`` seconds.
        """
        self._client.wait_for_workers(n, timeout=timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Cancel pending tasks, close the client and any cluster it started (idempotent)."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._executor.shutdown(wait=False)
        for part in (self._client, self._cluster):
            if part is None:
                continue
            try:
                part.close(timeout=timeout)
            except Exception:  # closing must finish: the world is going away
                log.exception("closing dask %s failed", type(part).__name__)

    def __enter__(self) -> DaskBackend:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<DaskBackend {self._kind} {state}>"


def tool_backend(
    kind: str,
    *,
    scheduler_address: str | None = None,
    workers: int = 2,
    retries: int = 0,
) -> DaskBackend | None:
    """Build the backend a ``[world] lane_backend`` setting names; None for ``"threads"``.

    ``"dask"`` connects to ``scheduler_address``; ``"dask-local"`` starts ``workers``
    local worker processes. The caller owns the result (pass it to ``World(tool_executor=
    ...)`` to hand it over).

    Raises:
        ConfigError: ``kind`` is unknown, a setting is missing or out of range, or the
            backend cannot be started or reached.
    """
    if kind == "threads":
        return None
    if kind == "dask":
        if scheduler_address is None:
            raise ConfigError('`lane_backend` = "dask" needs `scheduler_address`')
        return DaskBackend.connect(scheduler_address, retries=retries)
    if kind == "dask-local":
        return DaskBackend.local(workers, retries=retries)
    raise ConfigError(f"`lane_backend` must be one of {', '.join(BACKENDS)}; got {kind!r}")
