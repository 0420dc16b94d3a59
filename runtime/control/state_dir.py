"""The state directory where ``tickwork serve`` and its clients meet.

It holds the control socket (``control.sock``, 0600), the token file (``token``, 0600) and
the serve lock (``serve.lock``, an ``flock`` that the kernel drops if the process dies, so
a crashed server never blocks the next one). The directory itself is 0700 and must belong
to the user running tickwork.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

from runtime.errors import ControlError

__all__ = ["StateDir", "default_state_dir"]

_SUN_PATH_MAX = 104  # the smallest sockaddr_un.sun_path in use (macOS); Linux allows 108


class StateDir:
    """The files of a state directory: the socket, the token and the serve lock."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.socket = self.path / "control.sock"
        self.token = self.path / "token"
        self.lock = self.path / "serve.lock"
        self._lock_fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the serve lock."""
        return self._lock_fd is not None

    def acquire(self) -> None:
        """Take the serve lock (an ``flock`` the kernel drops if the process dies).

        Raises:
            ControlError: another ``tickwork serve`` holds it.
        """
        if self._lock_fd is not None:
            return
        try:
            fd = os.open(self.lock, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise ControlError(f"cannot open {str(self.lock)!r}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise ControlError(
                f"another `tickwork serve` is already running on state dir {str(self.path)!r}"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def release(self) -> None:
        """Drop the serve lock if held. Idempotent."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def prepare(self) -> None:
        """Create the directory 0700 (or tighten it) and check that it is ours.

        Raises:
            ControlError: it is not a directory, belongs to another user, or the socket
                path is too long for a Unix socket.
        """
        try:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = os.lstat(self.path)
        except OSError as exc:
            raise ControlError(f"cannot create state dir {str(self.path)!r}: {exc}") from exc
        if not self.path.is_dir() or self.path.is_symlink():
            raise ControlError(f"state dir {str(self.path)!r} is not a directory")
        if info.st_uid != os.getuid():
            raise ControlError(f"state dir {str(self.path)!r} belongs to another user")
        if info.st_mode & 0o077:
            os.chmod(self.path, 0o700)
        if len(os.fsencode(self.socket)) >= _SUN_PATH_MAX:
            raise ControlError(
                f"state dir {str(self.path)!r} is too deep for a Unix socket path"
                f" (at most {_SUN_PATH_MAX - 14} bytes): pass a shorter --state-dir"
            )


def default_state_dir() -> Path:
    """Where ``serve`` and the client commands meet when no ``--state-dir`` is given.

    ``$TICKWORK_STATE_DIR`` if set, else ``$XDG_RUNTIME_DIR/tickwork``, else
    ``tickwork-<uid>`` under the temp dir.
    """
    explicit = os.environ.get("TICKWORK_STATE_DIR")
    if explicit:
        return Path(explicit)
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        return Path(runtime_dir) / "tickwork"
    return Path(tempfile.gettempdir()) / f"tickwork-{os.getuid()}"
