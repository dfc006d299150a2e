"""One daemon per state directory.

The daemon holds an exclusive ``flock(2)`` on ``<state_dir>/daemon.lock`` for its whole
life and writes its pid into the file. A second daemon on the same directory fails at
once with :class:`~companyd.errors.StateLocked` naming the holder's pid and the directory.

Why ``flock`` on an open file: the kernel drops the lock when the holder dies in any way
(SIGKILL, OOM, watchdog abort), so there are no stale locks to clean up and no pid-file
races; the pid in the file is only for the message. The file is never deleted — unlinking
a lock file lets a third process lock a fresh inode while the second still holds the old
one. We use ``fcntl`` directly rather than ``filelock`` because we also want the holder's
pid in the same file and a lock that is never released on a timeout.

All of this is a handful of non-blocking syscalls (``LOCK_NB``), done once at start-up
before the event loop runs the tree, so it is called synchronously.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path
from types import TracebackType

from companyd.errors import StateLocked

__all__ = ["LOCK_NAME", "StateLock", "read_holder"]

LOCK_NAME = "daemon.lock"


class StateLock:
    """The exclusive lock on one state directory, held until :meth:`release` (or exit).

    Use :meth:`acquire`; the lock is also a context manager that releases on exit.

    Attributes:
        path: the lock file.
        state_dir: the directory it protects.
        pid: the process that holds it (this one).
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.state_dir = path.parent
        self.pid = os.getpid()
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, state_dir: str | os.PathLike[str]) -> StateLock:
        """Lock ``state_dir`` (created with mode 0700 if missing) for this process.

        Raises:
            StateLocked: another live process holds the lock; the message names its pid.
            OSError: the directory or lock file cannot be created (permissions, read-only
                file system) — the message of the OSError names the path.
        """
        directory = Path(state_dir).absolute()
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = directory / LOCK_NAME
        # O_CLOEXEC: agent subprocesses must not inherit (and so prolong) the lock.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = read_holder(directory)
            who = f"pid {holder}" if holder is not None else "pid not yet written (it is starting)"
            raise StateLocked(
                f"companyd is already running, {who}, on state directory "
                f"{str(directory)!r}; stop it first (`systemctl stop companyd` or "
                f"`kill {holder if holder is not None else '<pid>'}`), or start this one "
                "with a different --state-dir"
            ) from None
        # We own it now: replace whatever an earlier holder wrote with our pid.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(path, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Drop the lock (idempotent). The file stays; its pid line is cleared."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)  # closing the last descriptor releases the flock

    def __enter__(self) -> StateLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"StateLock({str(self.path)!r}, pid={self.pid}, held={self.held})"


def read_holder(state_dir: str | os.PathLike[str]) -> int | None:
    """The pid written in ``<state_dir>/daemon.lock``, or None (no file, empty, garbage).

    This only reads what the last holder wrote; whether that process still holds the lock
    is answered by :meth:`StateLock.acquire`.
    """
    try:
        text = (Path(state_dir) / LOCK_NAME).read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    first = text.strip().split("\n", 1)[0]
    return int(first) if first.isdigit() else None
