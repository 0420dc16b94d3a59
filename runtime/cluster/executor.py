"""`DaskExecutor`: a `concurrent.futures.Executor` over a Dask client, fit for a tool lane.

Needs no import of ``distributed``: it only calls the client it is given.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections.abc import Callable
from typing import Any

from runtime.lane.backend import BackendInfo, check_count

__all__ = ["DaskExecutor", "describe_client"]


class DaskExecutor(concurrent.futures.Executor):
    """A `concurrent.futures.Executor` that runs each call as one impure task on a Dask client.

    It does what ``client.get_executor(pure=False, retries=retries)`` does, with fixes the
    tool lane needs, each traced to distributed's ``cfexecutor.py``:

    - Every task is impure (``pure=False``): tools have side effects, and Dask's default
      ``pure=True`` would merge two identical calls into one.
    - A cancel reaches the scheduler from any thread, without blocking the caller. Dask's
      executor cancels through a sync client call, which on the client's event-loop thread
      returns a coroutine nobody awaits (RuntimeWarning, and the task runs on); the lane
      makes exactly that call when it launches a job from a done callback and the job's
      token fired meanwhile.
    - A task that finishes just as its future is cancelled is dropped quietly: the future
      settles once, guarded by ``set_running_or_notify_cancel`` (Dask's executor calls
      ``set_result`` on the cancelled future and tornado logs ``InvalidStateError``).

    Like Dask's executor, futures settle on the client's event-loop thread, so their done
    callbacks run there: they must only hand work off, never wait on the client (the lane's
    callbacks take its lock briefly, post to the inbox, and submit the next job, which
    ``Client.submit`` allows on that thread).

    Cancellation is best effort: a task still waiting on the scheduler never runs; one
    already running on a worker runs to its end (or its tool's timeout), and its outcome is
    dropped. The lane frees the job's permit at the cancel.
    """

    def __init__(
        self,
        client: Any,
        *,
        retries: int = 0,
        describe: Callable[[], BackendInfo] | None = None,
    ) -> None:
        """Submit to ``client`` (a connected ``distributed.Client``).

        ``retries`` re-runs a task whose tool raised out of the job (Dask's ``retries``);
        ``describe`` answers `info`.

        Raises:
            ConfigError: ``retries`` is not an integer >= 0.
        """
        self._client = client
        self._retries = check_count("retries", retries, 0)
        self._describe = describe
        self._lock = threading.Lock()
        # Every submitted future not yet settled, with its Dask future: holding the Dask
        # future keeps the task alive (dropping the last reference releases it).
        self._tasks: dict[concurrent.futures.Future[Any], Any] = {}
        self._shutdown = False

    @property
    def client(self) -> Any:
        """The ``distributed.Client`` the tasks go to."""
        return self._client

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        """Run ``fn(*args, **kwargs)`` as one task on the cluster; never merged with another.

        Raises:
            RuntimeError: the executor has been shut down.
        """
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
        task = self._client.submit(fn, *args, pure=False, retries=self._retries, **kwargs)
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            self._tasks[future] = task
        future.add_done_callback(self._forward_cancel)
        self._client.loop.add_callback(self._settle, task, future)
        return future

    def info(self) -> BackendInfo:
        """What runs the tasks, for a live view (see `DaskBackend.info`)."""
        if self._describe is not None:
            return self._describe()
        return describe_client(self._client, "dask")

    def in_flight(self) -> int:
        """How many submitted tasks have not settled yet."""
        with self._lock:
            return len(self._tasks)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Refuse new tasks, then wait for the pending ones, or (``cancel_futures``, or
        ``wait=False``) fail them at once and cancel their tasks.

        Failed, not cancelled: a lane drops a cancelled job's outcome but turns a failed one
        into error results, so no agent waits forever on a backend that went away. The
        client is left open: whoever made it closes it (`DaskBackend.close`).
        """
        with self._lock:
            self._shutdown = True
            if wait and not cancel_futures:
                pending, tasks = list(self._tasks), []
            else:
                pending, tasks = [], list(self._tasks.items())
                self._tasks.clear()
        if pending:
            concurrent.futures.wait(pending)
        for future, task in tasks:
            self._client.loop.add_callback(self._cancel_task, task)
            if future.set_running_or_notify_cancel():
                future.set_exception(RuntimeError("the dask executor was shut down"))

    async def _settle(self, task: Any, future: concurrent.futures.Future[Any]) -> None:
        """On the event loop: wait for ``task`` and settle ``future`` once with its outcome."""
        value: Any = None
        error: BaseException | None = None
        try:
            value = await self._client.gather(task, asynchronous=True)
        except BaseException as exc:  # the job's error, KilledWorker, or a cancelled task
            error = exc
        with self._lock:  # whoever takes the future out of `_tasks` settles it
            if self._tasks.pop(future, None) is None:
                return  # cancelled (see `_forward_cancel`) or failed by `shutdown`
        # A cancel may have landed just before its callback took the future: then drop
        # the outcome. Once RUNNING the future cannot be cancelled any more.
        if not future.set_running_or_notify_cancel():
            return
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)

    def _forward_cancel(self, future: concurrent.futures.Future[Any]) -> None:
        """Done callback: a future cancelled before it settled cancels its task too."""
        if not future.cancelled():
            return
        with self._lock:
            task = self._tasks.pop(future, None)
        if task is not None:  # from any thread: never a sync call, never a wait
            self._client.loop.add_callback(self._cancel_task, task)

    async def _cancel_task(self, task: Any) -> None:
        with contextlib.suppress(Exception):  # a closed client has nothing left to cancel
            await self._client.cancel([task], asynchronous=True)


def describe_client(client: Any, kind: str) -> BackendInfo:
    """Ask the scheduler how many workers and threads it has (one round trip)."""
    try:
        identity = client.scheduler_info(n_workers=0)
        return BackendInfo(
            kind,
            str(identity.get("address", "")),
            int(identity.get("n_workers", 0)),
            int(identity.get("total_threads", 0)),
        )
    except Exception:  # a closed or unreachable client: nothing is running the jobs
        return BackendInfo(kind, "", 0, 0)
