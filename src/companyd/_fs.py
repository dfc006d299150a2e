"""Low-level file plumbing shared by every store: private modes and the atomic writer.

The state holds prompts, answers, memory and spend, so it is private whatever the umask the
daemon was started with (docs/daemon.md "Private state, whatever the umask"):

* :func:`private_dir` creates a directory ``0700`` (and tightens an existing one);
* :func:`private_file` creates a file ``0600`` before a library opens it (SQLite gives its
  ``-wal``/``-shm`` files the mode of the database file, so they follow);
* :func:`write_atomic` replaces a file whole (temporary file, fsync, rename, directory
  fsync); the new file is ``0600``.

Modes are set with ``fchmod``/``chmod`` after creation, so the umask cannot widen or narrow
them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

__all__ = [
    "DISK_ERRNOS",
    "PRIVATE_DIR",
    "PRIVATE_FILE",
    "DiskAlarm",
    "FileTooLarge",
    "NotRegularFile",
    "credential_path",
    "fsync_directory",
    "is_disk_failure",
    "make_dirs",
    "private_dir",
    "private_file",
    "private_sqlite",
    "read_credential",
    "read_regular_file",
    "tmp_name",
    "write_all",
    "write_atomic",
]

#: Mode of every file holding state.
PRIVATE_FILE = 0o600
#: Mode of every state directory.
PRIVATE_DIR = 0o700


def make_dirs(path: Path) -> None:
    """``mkdir -p`` where every directory created is 0700 (``Path.mkdir(parents=True)``
    creates the parents with the umask's mode); existing ones are left alone.
    """
    missing: list[Path] = []
    for d in (path, *path.parents):
        if d.exists():
            break
        missing.append(d)
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):  # created meanwhile by another process
            d.mkdir(mode=PRIVATE_DIR)


def private_dir(path: Path) -> int | None:
    """Create ``path`` (and missing parents) with mode 0700; tighten an existing ``path``
    that grants the group or others anything. Returns the old mode when it was tightened,
    else None. Parents that already exist are left as they are (they may be shared, e.g.
    ``/var/lib``).
    """
    make_dirs(path)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        os.chmod(path, mode & PRIVATE_DIR | PRIVATE_DIR)
        return mode
    return None


def private_file(path: Path) -> None:
    """Make sure ``path`` exists with no group or other bits (create it empty, 0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK, PRIVATE_FILE)
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_mode & 0o077:
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & PRIVATE_FILE)
    finally:
        os.close(fd)


def private_sqlite(path: Path) -> None:
    """Before ``sqlite3.connect(path)``: create missing directories 0700 and the database
    file 0600, and tighten an existing database and its ``-wal``/``-shm`` (an older companyd
    created them with the umask's mode). SQLite creates ``-wal``/``-shm`` with the mode of
    the database file, so they are 0600 too.
    """
    make_dirs(path.parent)
    private_file(path)
    for suffix in ("-wal", "-shm", "-journal"):
        side = path.with_name(path.name + suffix)
        with contextlib.suppress(FileNotFoundError):
            mode = stat.S_IMODE(side.stat().st_mode)
            if mode & 0o077:
                os.chmod(side, mode & PRIVATE_FILE)


def fsync_directory(directory: Path) -> None:
    """Make a rename or file creation in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def tmp_name(path: Path) -> Path:
    """A fresh hidden temporary name next to ``path``."""
    import secrets  # here: hashlib, hmac and random, which the readers of files skip

    return path.with_name(f".{path.name}.companyd-{secrets.token_hex(8)}.tmp")


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until all of ``data`` is written (raises on ENOSPC/EIO)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def write_atomic(
    path: Path, data: bytes, *, sync_dir: bool = True, like_existing: bool = False
) -> None:
    """Replace ``path`` with ``data``: temporary file in the same directory, fsync,
    ``os.replace``, then fsync the directory. A crash leaves the old file or the new one;
    a failed write (e.g. a full disk) leaves the old file and no temporary file.

    The new file is private (0600), as every state file is. With ``like_existing`` — a
    file that is the operator's, such as company.yaml — a symlink is written through (the
    link stays, its target changes) and the file keeps its mode, and its owner and group
    where the process may set them (root); a new file gets 0644.
    """
    mode = PRIVATE_FILE
    owner: tuple[int, int] | None = None
    if like_existing:
        path = Path(os.path.realpath(path))
        try:
            st = path.stat()
        except FileNotFoundError:
            mode = 0o644
        else:
            mode, owner = stat.S_IMODE(st.st_mode), (st.st_uid, st.st_gid)
    tmp = tmp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE)
    try:
        try:
            if owner is not None:
                with contextlib.suppress(OSError):  # not ours to give away: it stays ours
                    os.fchown(fd, *owner)
            os.fchmod(fd, mode)  # whatever the umask
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync_dir:
        fsync_directory(path.parent)


#: errno values that mean "the state disk cannot take writes": full, over quota, a file
#: over its size limit, or an I/O error.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS})
#: SQLite's result codes for the same (SQLITE_FULL, SQLITE_IOERR and its extended codes,
#: SQLITE_READONLY): Python 3.11 sets ``sqlite_errorname`` on its exceptions.
_SQLITE_DISK = ("SQLITE_FULL", "SQLITE_IOERR", "SQLITE_READONLY")


def is_disk_failure(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is the state disk refusing a
    write: ENOSPC/EIO/EDQUOT/EFBIG/EROFS, or SQLite's SQLITE_FULL/SQLITE_IOERR*. Such a
    failure is the environment's, not the run's: it pauses work instead of crashing.
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:
            return True
        name = getattr(exc, "sqlite_errorname", None)
        if isinstance(name, str) and name.startswith(_SQLITE_DISK):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class DiskAlarm:
    """One critical alert per outage of the state disk, shared by every store of a daemon.

    It tracks *which* stores are failing (by name: "run journal", "spend ledger", "routine
    history", "memory", "alert outbox"), not one flag: :meth:`failed` publishes
    ``state_disk_full`` ("state disk full: writes failing", naming that store) when the
    first store fails; later failures, of it or of others, are only counted. :meth:`recovered`
    takes one store off the list, and publishes ``state_disk_recovered`` only when the last
    failing store recovered. So a store whose write succeeds mid-outage (a small row fits
    where a large one did not) does not clear the others' failure, and an outage seen by one
    store only clears when that store's next write succeeds. Contract for the stores: every
    store that reports :meth:`failed` under a name reports :meth:`recovered` under the same
    name when its next write succeeds. One alarm per event bus (:meth:`of`). Loop thread
    only (it publishes on the bus).
    """

    _by_bus: ClassVar[weakref.WeakKeyDictionary[Any, DiskAlarm]] = weakref.WeakKeyDictionary()

    def __init__(self, emit: Callable[..., Any]) -> None:
        self._emit = emit
        self._failing: dict[str, None] = {}  # an ordered set: the first store first
        self.failures = 0

    @classmethod
    def of(cls, bus: Any) -> DiskAlarm:
        """The alarm of ``bus`` (an :class:`companyd.events.EventBus`)."""
        alarm = cls._by_bus.get(bus)
        if alarm is None:
            alarm = cls._by_bus[bus] = cls(bus.emit)
        return alarm

    @property
    def failing(self) -> frozenset[str]:
        """The stores whose last write failed on the disk (empty: no outage)."""
        return frozenset(self._failing)

    def failed(self, what: str, path: Path | str, exc: BaseException) -> None:
        """A write of ``what`` (e.g. "spend ledger") to ``path`` failed on the disk."""
        self.failures += 1
        first = not self._failing
        self._failing[what] = None
        if not first:
            return
        self._emit(
            "state_disk_full",
            "companyd",
            what=what,
            path=str(path),
            error=f"{type(exc).__name__}: {exc}",
            message=(
                f"state disk full: writes failing ({what} {str(path)!r}: {exc}); runs fail "
                "and their agents are paused, the daemon stays up and records what was "
                "already paid for once writes succeed again. Free space on that disk (`companyd "
                "doctor` names what takes the most room in the state directory), then "
                "resume the paused agents (`companyd resume <agent>`)"
            ),
        )

    def recovered(self, what: str) -> None:
        """A write of ``what`` succeeded again (nothing happens if it was not failing)."""
        if what not in self._failing:
            return
        del self._failing[what]
        if self._failing:
            return
        failures, self.failures = self.failures, 0
        self._emit(
            "state_disk_recovered",
            "companyd",
            what=what,
            failures=failures,
            message=f"state disk writes succeed again ({failures} failed meanwhile)",
        )


# -- reading a file that must be a regular file --------------------------------------


class FileTooLarge(OSError):
    """A file is larger than its reader's limit (the rest was not read)."""


class NotRegularFile(OSError):
    """A path names a FIFO, a device or a socket where a file was expected.

    ``kind`` says which (``"a FIFO (named pipe)"``, ``"a character device"``, …).
    """

    def __init__(self, path: Path, kind: str) -> None:
        super().__init__(errno.EINVAL, f"not a regular file ({kind})", str(path))
        self.kind = kind


def _file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``; refused at once, before any read, when it is
    anything else, so that no caller can hang on it.

    A FIFO with no writer blocks a plain ``open()`` forever and a device may never end, so
    the file is opened with ``O_NONBLOCK`` (which makes ``open`` of a FIFO return at once)
    and checked with ``fstat`` on the descriptor actually opened (no stat-then-open race).

    Raises:
        IsADirectoryError: ``path`` is a directory.
        NotRegularFile: a FIFO, a device or a socket (``kind`` says which).
        FileTooLarge: more than ``limit`` bytes (the rest is not read).
        OSError: whatever else ``open`` or ``read`` raise.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = 0  # let open() report it, with its own errno
    if mode and stat.S_ISSOCK(mode):
        raise NotRegularFile(path, _file_kind(mode))  # open() would fail with ENXIO
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, _file_kind(mode))
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise FileTooLarge(errno.EFBIG, f"larger than {limit} bytes", str(path))
    return data


#: The most of a systemd credential (an API key, a bot token) that is read.
MAX_CREDENTIAL_BYTES = 64 * 1024


def credential_path(name: str, environ: Mapping[str, str]) -> Path | None:
    """Where systemd put the credential ``name`` (``LoadCredential=``):
    ``$CREDENTIALS_DIRECTORY/name``, or None when that variable is unset or empty (not
    started by systemd with credentials). systemd sets one absolute directory.
    """
    directory = environ.get("CREDENTIALS_DIRECTORY", "")
    return Path(directory) / name if directory else None


def read_credential(path: Path) -> str:
    """The credential in ``path``, stripped, decoded as UTF-8 (bad bytes replaced). A
    bounded read of a regular file only: a FIFO there would block a start (and a stop)
    forever. A few bytes read once: too small to need a thread.

    Raises:
        as :func:`read_regular_file` (``ValueError`` for a NUL byte in the path).
    """
    raw = read_regular_file(path, MAX_CREDENTIAL_BYTES)
    return raw.decode("utf-8", errors="replace").strip()
