"""One daemon per state directory, and one per company.yaml.

The daemon holds an exclusive ``flock(2)`` on ``<state_dir>/daemon.lock`` for its whole
life and writes its pid into the file. A second daemon on the same directory fails at
once with :class:`~companyd.errors.StateLocked` naming the holder's pid and the directory.

Why ``flock`` on an open file: the kernel drops the lock when the holder dies in any way
(SIGKILL, OOM, watchdog abort), so there are no stale locks to clean up and no pid-file
races; the pid in the file is only for the message. The file is never deleted — unlinking
a lock file lets a third process lock a fresh inode while the second still holds the old
one. We use ``fcntl`` directly rather than ``filelock`` because we also want the holder's
pid in the same file and a lock that is never released on a timeout.

One daemon per company.yaml (:class:`CompanyLock`): ``--state-dir`` or ``$STATE_DIRECTORY``
choose where a company keeps its state, not a second copy of it — two daemons of one file
would poll the same Telegram bot and spend the same budget twice. The daemon binds a Linux
*abstract* Unix socket named after the SHA-256 of the file's real path (symlinks resolved).
Like ``flock``, the name is released by the kernel however the holder dies; unlike a lock
file it needs no directory writable by every user who may run ``companyd run`` (root by
hand next to the unit's dynamic user), and the holder's pid comes from ``SO_PEERCRED``. A
holder is believed only if it runs as the same user or as root (or we are root): another
local user cannot keep a company from starting by squatting on the name.

All of this is a handful of non-blocking syscalls (``LOCK_NB``), done once at start-up
before the event loop runs the tree, so it is called synchronously.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import struct
from pathlib import Path
from typing import TYPE_CHECKING

from companyd._fs import is_disk_failure
from companyd.errors import StateLocked

if TYPE_CHECKING:
    import logging
    import threading
    from types import TracebackType

__all__ = ["LOCK_NAME", "CompanyLock", "StateLock", "locate", "read_holder"]


def _sha256_hex(data: bytes) -> str:
    """SHA-256 of ``data`` in hex, by CPython's own implementation where there is one:
    hashlib would start OpenSSL, ~2 ms of every CLI command, which finds its daemon by this
    name (issue 31). The digest is the same either way.
    """
    try:
        import _sha256  # type: ignore[import-not-found]
    except ImportError:  # an interpreter built without it
        import hashlib

        return hashlib.sha256(data).hexdigest()
    return str(_sha256.sha256(data).hexdigest())


def _log() -> logging.Logger:
    """This module's logger; logging is imported on the daemon's paths only (issue 31)."""
    import logging

    return logging.getLogger("companyd.daemon.lock")


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
                "with a different --state-dir",
                holder=holder,
                directory=str(directory),
            ) from None
        # We own it now: replace whatever an earlier holder wrote with our pid.
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:
            if not is_disk_failure(exc):
                os.close(fd)
                raise
            # The lock is the flock, not the pid: a full disk must not keep the daemon from
            # coming up (degraded); only a second daemon's message lacks our pid.
            _log().warning("cannot write the pid into %s (%s); the lock is held anyway", path, exc)
        return cls(path, fd)

    @property
    def held(self) -> bool:
        """Whether this process still holds the lock (until :meth:`release`)."""
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


class CompanyLock:
    """The claim on one company.yaml, held until :meth:`release` (or exit).

    Attributes:
        config: the file's real path.
    """

    def __init__(self, config: Path, sock: socket.socket | None) -> None:
        self.config = config
        self._sock = sock
        self._answerer: threading.Thread | None = None

    @staticmethod
    def address(config: str | os.PathLike[str]) -> bytes:
        """The abstract socket name for ``config`` (its real path, hashed)."""
        real = os.path.realpath(config)
        digest = _sha256_hex(os.fsencode(real))[:40]
        return b"\0companyd/company/" + digest.encode()

    @classmethod
    def acquire(
        cls, config: str | os.PathLike[str], *, control_socket: Path | None = None
    ) -> CompanyLock:
        """Claim ``config`` for this process.

        ``control_socket`` is told to whoever connects (one JSON line), so that a CLI
        command given only ``--config`` finds this daemon whatever its state directory
        (:func:`locate`).

        Raises:
            StateLocked: a daemon of the same user (or root) already runs this file; the
                message names its pid and the file.
        """
        real = Path(os.path.realpath(config))
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # A second daemon connects to learn our pid (SO_PEERCRED), a CLI command to learn our
        # control socket; a thread answers and closes at once, so the backlog never fills.
        try:
            sock.bind(cls.address(real))
            sock.listen(16)
        except OSError as exc:
            sock.close()
            if exc.errno != errno.EADDRINUSE:
                # no abstract sockets here (not Linux, or forbidden): the state lock is all
                _log().warning("cannot claim %s for this daemon: %s", real, exc)
                return cls(real, None)
            pid, uid = _peer(cls.address(real))
            trusted = uid is None or uid in (os.getuid(), 0) or os.getuid() == 0
            if not trusted:
                _log().warning(
                    "another user (uid %s, pid %s) holds the claim on %s; going on with the "
                    "state directory's lock only",
                    uid,
                    pid,
                    real,
                )
                return cls(real, None)
            who = f"pid {pid}" if pid is not None else "pid unknown"
            raise StateLocked(
                f"companyd is already running, {who}, for {str(real)!r} (one daemon per "
                f"company.yaml, whatever its state directory); stop it first (`systemctl stop "
                f"companyd` or `kill {pid if pid is not None else '<pid>'}`), or run a copy "
                "of the file"
            ) from None
        line = json.dumps({"pid": os.getpid(), "socket": str(control_socket or "")}) + "\n"
        claim = cls(real, sock)
        import threading  # here: the CLI's `locate` is all most commands use of this module

        claim._answerer = threading.Thread(
            target=_answer_every_connection,
            args=(sock, line.encode()),
            name="companyd-claim",
            daemon=True,
        )
        claim._answerer.start()
        return claim

    @property
    def held(self) -> bool:
        """Whether this process holds the claim: False after :meth:`release`, and when the claim
        could not be made but the daemon goes on with the state directory's lock alone.
        """
        return self._sock is not None

    def release(self) -> None:
        """Give the claim up (idempotent)."""
        sock, self._sock = self._sock, None
        answerer, self._answerer = self._answerer, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread up
            if answerer is not None:
                # The name is free only when no syscall holds the socket: close() while the
                # thread is still inside accept() would leave it bound until that returns
                # (seen under load: the next claim refused as "already running").
                answerer.join(timeout=5.0)
            sock.close()

    def __enter__(self) -> CompanyLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def _answer_every_connection(sock: socket.socket, line: bytes) -> None:
    """Accept, send ``line``, close — until ``sock`` is shut down (a plain thread: blocking
    accept() off the event loop, ended by :meth:`CompanyLock.release`).
    """
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        with contextlib.suppress(OSError):
            conn.setblocking(False)  # one small line; a client that does not read loses it
            conn.send(line)
        conn.close()


def locate(config: str | os.PathLike[str], timeout: float = 2.0) -> tuple[int, Path] | None:
    """(pid, control socket) of the daemon running ``config``, or None.

    Only a daemon of the same user or root is believed (another user could squat the name
    and point the CLI at a socket of its own).
    """
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(timeout)
    try:
        probe.connect(CompanyLock.address(config))
        creds = probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        if uid not in (os.getuid(), 0):
            return None
        data = b""
        while not data.endswith(b"\n") and len(data) < 4096:
            chunk = probe.recv(4096)
            if not chunk:
                break
            data += chunk
        answer = json.loads(data)
        pid, path = answer.get("pid"), answer.get("socket")
        if not isinstance(pid, int) or not isinstance(path, str) or not path:
            return None
        return pid, Path(path)
    except (OSError, ValueError, AttributeError):
        return None
    finally:
        probe.close()


def _peer(address: bytes) -> tuple[int | None, int | None]:
    """(pid, uid) of the process listening on ``address``, or Nones if it cannot be asked."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.setblocking(False)
    try:
        probe.connect(address)
        creds = probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _gid = struct.unpack("3i", creds)
        return (pid or None), uid
    except OSError:
        return None, None
    finally:
        probe.close()
