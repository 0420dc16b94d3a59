"""Running a subprocess that can be stopped: its whole process group, at once.

A command runs in a new session (so in its own process group). Its output is captured with
the head and the tail kept when it is long. On cancel or timeout the **whole process group**
is killed, grandchildren included, and the result says which happened. On a clean exit
nothing is killed, so a background job the command started (``cmd &``) survives it.

The wait is one ``selectors`` loop on the caller's thread: the output pipes, a pidfd that
becomes readable when the child exits (Linux), and a self-pipe that the cancel token writes
to. A cancel or an exit therefore wakes the loop at once, with no polling and no helper
threads, and a background job holding the pipes open cannot make the wait hang.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from components._enum import IdentityEnum
from runtime.cancel import CancelToken

__all__ = ["ProcessEnd", "ProcessResult", "run_process"]

DEFAULT_MAX_OUTPUT = 64 * 1024
# How often to re-check the child when the platform has no pidfd to wake us.
_POLL_WITHOUT_PIDFD = 0.05
_READ_CHUNK = 65536


class ProcessEnd(IdentityEnum):
    """How a process run ended."""

    EXITED = "exited"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class ProcessResult:
    """What a finished run returns; ``exit_code`` is negative when killed by a signal."""

    argv: tuple[str, ...]
    ended: ProcessEnd
    exit_code: int | None
    stdout: str
    stderr: str
    elapsed: float
    pid: int

    @property
    def ok(self) -> bool:
        """Whether the command exited by itself with status 0."""
        return self.ended is ProcessEnd.EXITED and self.exit_code == 0


class _Capture:
    """Keeps the first and last ``limit // 2`` bytes of a stream and counts the rest."""

    __slots__ = ("_head", "_head_room", "_tail", "_tail_len", "_tail_room", "cut")

    def __init__(self, limit: int) -> None:
        self._head = bytearray()
        self._head_room = limit - limit // 2
        self._tail: deque[bytes] = deque()
        self._tail_len = 0
        self._tail_room = limit // 2
        self.cut = 0

    def add(self, data: bytes) -> None:
        take = min(len(data), self._head_room - len(self._head))
        if take > 0:
            self._head += data[:take]
            data = data[take:]
        if not data:
            return
        self._tail.append(data)
        self._tail_len += len(data)
        while self._tail_len > self._tail_room:
            excess = self._tail_len - self._tail_room
            first = self._tail[0]
            if len(first) <= excess:
                self._tail.popleft()
                self._tail_len -= len(first)
                self.cut += len(first)
            else:
                self._tail[0] = first[excess:]
                self._tail_len -= excess
                self.cut += excess

    def text(self) -> str:
        head = self._head.decode("utf-8", errors="replace")
        tail = b"".join(self._tail).decode("utf-8", errors="replace")
        if self.cut:
            return f"{head}\n[... {self.cut} bytes cut ...]\n{tail}"
        return head + tail


def run_process(
    argv: Sequence[str],
    *,
    timeout: float | None = None,
    cancel: CancelToken | None = None,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    max_output: int = DEFAULT_MAX_OUTPUT,
) -> ProcessResult:
    """Run ``argv`` (no shell) until it exits, times out or ``cancel`` fires.

    ``argv`` items are strings or paths (``os.PathLike``), as ``subprocess`` takes them.

    Raises:
        ValueError: ``argv`` is a string or empty, or an item is neither a string nor a
            path (``None``, bytes, a number: each used to run as its ``str()``, ``"None"``
            or ``"b'echo'"``), ``timeout`` is not a number > 0, or ``max_output`` is not
            an integer >= 2.
        OSError: the command cannot be started (e.g. ``FileNotFoundError``).
    """
    if isinstance(argv, str | bytes):  # a str is a sequence too: "echo hi" ran `e`
        raise ValueError(
            f"`argv` must be a list of strings, one per argument, got the string {argv!r}"
            " (shlex.split makes one from a command line)"
        )
    if not argv:
        raise ValueError("`argv` must name a command, got an empty list")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0
    ):
        raise ValueError(f"`timeout` must be > 0 or None, got {timeout!r}")
    if isinstance(max_output, bool) or not isinstance(max_output, int) or max_output < 2:
        raise ValueError(f"`max_output` must be an integer >= 2, got {max_output!r}")
    items = []
    for index, given in enumerate(argv):
        item = os.fspath(given) if isinstance(given, os.PathLike) else given
        if not isinstance(item, str):
            raise ValueError(
                f"`argv` items must be strings, got {given!r} at index {index} of {argv!r}"
            )
        items.append(item)
    argv = tuple(items)
    if cancel is not None and cancel.cancelled:
        return ProcessResult(argv, ProcessEnd.CANCELLED, None, "", "", 0.0, 0)

    started = time.monotonic()
    # The wake pipe first: once the child runs, nothing may fail before the wait that
    # bounds it (a pipe refused for want of descriptors left it running, its timeout
    # never applied).
    wake_r, wake_w = os.pipe()
    try:
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=None if env is None else dict(env),
            start_new_session=True,  # its own process group: killpg reaches grandchildren
        )
    except BaseException:
        os.close(wake_r)
        os.close(wake_w)
        raise
    # A callback already running as the run ends (the canceller's thread, between two
    # callbacks) must not write once the pipe is closed: the descriptor may be another
    # file's by then (another tool's wake pipe: a spurious kill).
    wake_lock = threading.Lock()
    wake_open = [True]

    def on_cancel(_token: CancelToken) -> None:
        with wake_lock:
            if wake_open[0]:
                with contextlib.suppress(OSError):
                    os.write(wake_w, b"x")

    if cancel is not None:
        cancel.add_callback(on_cancel)
    try:
        ended, out, err = _wait(proc, wake_r, timeout, started, max_output)
    except BaseException:
        _kill_group(proc)  # a Ctrl-C, or any error in the wait: no child left running
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        raise
    finally:
        if cancel is not None:
            cancel.remove_callback(on_cancel)
        with wake_lock:
            wake_open[0] = False
            os.close(wake_r)
            os.close(wake_w)
    return ProcessResult(
        argv=argv,
        ended=ended,
        exit_code=proc.returncode,
        stdout=out.text(),
        stderr=err.text(),
        elapsed=time.monotonic() - started,
        pid=proc.pid,
    )


_LONGEST_SELECT = 86_400.0  # one slice of a longer wait; the loop goes round again


def _wait(
    proc: subprocess.Popen[bytes],
    wake_r: int,
    timeout: float | None,
    started: float,
    max_output: int,
) -> tuple[ProcessEnd, _Capture, _Capture]:
    assert proc.stdout is not None
    assert proc.stderr is not None
    out, err = _Capture(max_output), _Capture(max_output)
    captures = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    sel = selectors.DefaultSelector()  # before the pidfd, which the `finally` closes
    pidfd = _pidfd_open(proc.pid)
    try:
        for fd in captures:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        sel.register(wake_r, selectors.EVENT_READ)
        if pidfd is not None:
            sel.register(pidfd, selectors.EVENT_READ)
        deadline = None if timeout is None else started + timeout
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if wait is not None:
                wait = min(wait, _LONGEST_SELECT)  # a 1e300 s timeout overflows select()
            if pidfd is None:
                wait = _POLL_WITHOUT_PIDFD if wait is None else min(wait, _POLL_WITHOUT_PIDFD)
            for key, _ in sel.select(wait):
                fd = int(key.fd)
                if fd in captures and not _drain(fd, captures[fd]):
                    sel.unregister(fd)
            if _woken(wake_r):
                _kill_group(proc)
                ended = ProcessEnd.CANCELLED
                break
            if proc.poll() is not None:
                ended = ProcessEnd.EXITED
                break
            if deadline is not None and time.monotonic() >= deadline:
                _kill_group(proc)
                ended = ProcessEnd.TIMEOUT
                break
        # Take what is already in the pipes, but never wait for EOF: a background job
        # (`cmd &`) may hold them open for as long as it lives.
        for fd, capture in captures.items():
            _drain(fd, capture)
        return ended, out, err
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)
        proc.stdout.close()
        proc.stderr.close()


def _drain(fd: int, capture: _Capture) -> bool:
    """Read what ``fd`` has without blocking; returns False at EOF."""
    while True:
        try:
            data = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data:
            return False
        capture.add(data)


def _woken(wake_r: int) -> bool:
    try:
        return bool(os.read(wake_r, 64))
    except BlockingIOError:
        return False


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's whole process group and reap the child."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # pgid == pid: start_new_session
    proc.wait()


def _pidfd_open(pid: int) -> int | None:
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd: int = opener(pid)
    except OSError:
        return None
    return fd
