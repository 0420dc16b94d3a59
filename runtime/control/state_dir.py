"""The state directory where ``tickwork serve`` and its clients meet.

It holds the control socket (``control.sock``, 0600), the token file (``token``, 0600) and
the serve lock (``serve.lock``, an ``flock`` that the kernel drops if the process dies, so
a crashed server never blocks the next one). The directory must be a real directory that
belongs to the user running tickwork and that nobody else can write: tickwork creates it
0700, refuses any other, and never changes the mode of a directory it did not create. The
server opens all three files without following symlinks; a client checks the directory,
the token and the socket belong to the user before it sends the token anywhere.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
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

        The lock file is opened without following a symlink: in a directory someone else
        could once write, a planted ``serve.lock`` link must not get its target truncated.

        Raises:
            ControlError: another ``tickwork serve`` holds it, it is not a plain file of
                ours, or it cannot be written (a full disk).
        """
        if self._lock_fd is not None:
            return
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            fd = os.open(self.lock, flags, 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ControlError(
                    f"{str(self.lock)!r} is a symlink: refusing to follow it (remove it)"
                ) from None
            raise ControlError(f"cannot open {str(self.lock)!r}: {exc}") from exc
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            os.close(fd)
            raise ControlError(f"{str(self.lock)!r} is not a plain file of yours: remove it")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise ControlError(
                f"another `tickwork serve` is already running on state dir {str(self.path)!r}"
            ) from None
        if not _same_file(fd, self.lock):
            # The lock file was removed (a server exiting cleanly) between our open and
            # our flock: the lock we hold guards nothing. Take the new file's instead.
            os.close(fd)
            return self.acquire()
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as exc:  # a full disk: the lock must not outlive the refusal
            os.close(fd)
            raise ControlError(f"cannot write {str(self.lock)!r}: {exc}") from exc
        self._lock_fd = fd

    def release(self, *, remove: bool = False) -> None:
        """Drop the serve lock if held (``remove``: delete the lock file first). Idempotent.

        The file is removed while the lock is still held, so no other server can have
        taken it in between.
        """
        if self._lock_fd is not None:
            if remove:
                with contextlib.suppress(OSError):
                    self.lock.unlink()
            os.close(self._lock_fd)
            self._lock_fd = None

    def prepare(self) -> None:
        """Create the directory 0700, or check that an existing one is safe to serve from.

        An existing directory is never chmodded (tickwork did not create it): it must be a
        real directory (not a symlink), belong to the current user and be writable by
        nobody else, or it is refused.

        Raises:
            ControlError: it is not a directory, belongs to another user, others can write
                it, or the socket path is too long for a Unix socket.
        """
        where = str(self.path)
        if len(os.fsencode(self.socket)) >= _SUN_PATH_MAX:  # before anything is made
            raise ControlError(
                f"state dir {where!r} is too deep for a Unix socket path"
                f" (at most {_SUN_PATH_MAX - 14} bytes): pass a shorter --state-dir"
            )
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.mkdir(self.path, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise ControlError(f"cannot create state dir {where!r}: {exc}") from exc
        self.check()

    def check(self) -> None:
        """Check that the directory is a real directory of ours that nobody else can write.

        Raises:
            ControlError: it is missing, a symlink, not a directory, another user's, or
                group- or world-writable.
        """
        where = str(self.path)
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            raise ControlError(f"no `tickwork serve` is running on state dir {where!r}") from None
        except OSError as exc:
            raise ControlError(f"cannot read state dir {where!r}: {exc}") from exc
        if stat.S_ISLNK(info.st_mode):
            raise ControlError(f"state dir {where!r} is a symlink: refusing to use it")
        if not stat.S_ISDIR(info.st_mode):
            raise ControlError(f"state dir {where!r} is not a directory")
        _check_owner(where, "state dir", info)
        if info.st_mode & 0o022:
            mode = oct(stat.S_IMODE(info.st_mode))
            raise ControlError(
                f"state dir {where!r} can be written by others (mode {mode}): refusing to use"
                " it; pass a --state-dir only you can write (tickwork creates it 0700)"
            )

    def check_socket(self) -> None:
        """Check that the control socket is a socket of ours (before a client trusts it).

        Raises:
            ControlError: it is missing, not a socket, or another user's.
        """
        where = str(self.socket)
        try:
            info = os.lstat(self.socket)
        except FileNotFoundError:
            raise ControlError(
                f"no `tickwork serve` is running on state dir {str(self.path)!r}"
            ) from None
        except OSError as exc:
            raise ControlError(f"cannot read {where!r}: {exc}") from exc
        if not stat.S_ISSOCK(info.st_mode):
            raise ControlError(f"{where!r} is not a socket: refusing to use it")
        _check_owner(where, "control socket", info)

    def read_token(self) -> str:
        """The token, read without following a symlink from a 0600 file of ours.

        Raises:
            ControlError: there is no token (no server), or it is not a private file of ours.
        """
        where = str(self.token)
        try:
            fd = os.open(self.token, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            raise ControlError(
                f"no `tickwork serve` is running on state dir {str(self.path)!r} (no token file)"
            ) from None
        except OSError as exc:
            raise ControlError(f"cannot read the token {where!r}: {exc}") from exc
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ControlError(f"token {where!r} is not a plain file: refusing to use it")
            _check_owner(where, "token", info)
            if info.st_mode & 0o077:
                mode = oct(stat.S_IMODE(info.st_mode))
                raise ControlError(f"token {where!r} is readable by others (mode {mode})")
            return os.read(fd, 4096).decode("ascii", "replace").strip()
        finally:
            os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        now = os.lstat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)


def _check_owner(where: str, what: str, info: os.stat_result) -> None:
    uid = os.getuid()
    if info.st_uid != uid:
        raise ControlError(
            f"{what} {where!r} belongs to uid {info.st_uid}, not to you (uid {uid}):"
            " refusing to use it"
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
