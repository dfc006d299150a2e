"""The one SQLite owner: a database file, its pragmas, its schema versions and its thread.

Every store in the state directory (the spend ledger, the run journal, the routine history,
the alert outbox, the improver's proposals) holds a :class:`Database`:

* **one worker thread** (an executor with ``max_workers=1``) opens the only connection and
  runs all of the store's work, in submission order, so the event loop never waits on
  SQLite. :meth:`Database.run` awaits ``fn(conn)`` from the loop; :meth:`Database.run_sync`
  waits for it from any other thread (and runs it at once when called *on* the worker,
  which is how the synchronous spend ledger serves the spend book); :meth:`Database.submit`
  hands back a ``concurrent.futures.Future`` for an owner that schedules its own jobs. The
  synchronous path (``worker=False``) has no thread of its own: the connection belongs to
  the thread that opens it, as a plain ``sqlite3.connect`` would (a one-thread script: the
  CLI's read-only ledger), so its calls cost no thread crossing;
* **the project's pragmas**: WAL, ``synchronous`` as the store chooses (``NORMAL`` unless a
  stronger guarantee is documented: the ledger uses ``FULL``), a busy timeout;
* **private files**: the file (and its ``-wal``/``-shm``) is ``0600`` and missing
  directories ``0700`` whatever the umask (:func:`companyd._fs.private_sqlite`);
* **migrations**: an ordered list of SQL scripts (or functions of the connection) keyed by
  ``PRAGMA user_version``: version N means the first N migrations have been applied. On
  open the missing ones run, each in one ``BEGIN IMMEDIATE`` transaction that also sets the
  new version, so a crash leaves the file at a whole version. A file whose version is
  higher than the code knows is refused (:class:`SchemaTooNew`) and left untouched;
* **write transactions**: every store's change that spans statements runs in
  ``with transaction(conn):`` (:func:`transaction`), on SQLite and on PostgreSQL alike.

Errors are SQLite's and the OS's own (``sqlite3.Error``, ``OSError``), raised from the
worker with their codes intact, so :func:`companyd._fs.is_disk_failure` tells a full or
failing disk apart in the store's own error, which keeps the original as its cause.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol, TypeVar
from urllib.parse import quote

from companyd._fs import private_sqlite
from companyd._worker import DatabaseClosed, StoreWorker

__all__ = [
    "Database",
    "DatabaseClosed",
    "Migration",
    "SchemaTooNew",
    "Transactional",
    "apply_migrations",
    "check_version",
    "connect_readonly",
    "statements",
    "store_errors",
    "transaction",
    "user_version",
]

T = TypeVar("T")

_WITHOUT_PSYCOPG: tuple[type[BaseException], ...] = (sqlite3.Error, OSError)


def store_errors() -> tuple[type[BaseException], ...]:
    """What a store's database raises for a failing database, file or connection — the
    storage face's ``DB_ERRORS`` — without importing PostgreSQL's driver: ``sqlite3.Error``
    and ``OSError``, and ``psycopg.Error`` once psycopg is loaded. Before psycopg is loaded
    no psycopg error can exist, so a SQLite company never loads the driver (~10 MB, ~0.1 s
    of CPU at the daemon's start, issue 31) just to name what it cannot raise. Call it where
    the error is caught (``except store_errors():``), not at import.
    """
    psycopg = sys.modules.get("psycopg")
    error = getattr(psycopg, "Error", None)
    if not isinstance(error, type):  # not loaded (or half-way through its import)
        return _WITHOUT_PSYCOPG
    return (sqlite3.Error, error, OSError)


class Transactional(Protocol):
    """What :func:`transaction` uses of a connection: ``sqlite3.Connection`` and the
    PostgreSQL wrapper (``companyd.storage.PgConnection``) both are one.
    """

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open."""

    def execute(self, sql: str, /) -> object:
        """Run one statement."""


@contextlib.contextmanager
def transaction(conn: Transactional, *, immediate: bool = True) -> Iterator[None]:
    """One write transaction around the block: the stores' ``BEGIN`` … ``COMMIT``.

    The contract, on SQLite and on PostgreSQL (through ``PgConnection``) alike:

    * the write lock is taken at once, before the block runs: ``BEGIN IMMEDIATE`` (SQLite's
      lock on the file, waiting up to the busy timeout; on PostgreSQL the store's advisory
      lock, with the fencing epoch checked), so what the block reads stays true until its
      writes are committed. ``immediate=False`` says ``BEGIN`` instead: on SQLite the lock
      is then taken by the block's first write (a store whose block reads nothing it must
      keep true); on PostgreSQL both are the same;
    * committed when the block ends (also by ``return`` or ``break`` out of it);
    * rolled back when the block raises — any ``BaseException``, a cancelled thread job's
      ``CancelledError`` or a ``KeyboardInterrupt`` included — and when the ``COMMIT``
      itself fails (as ``with sqlite3.Connection`` does: the next transaction must be able
      to start), then the error is raised again: nothing is half-written. A failing
      ``ROLLBACK`` (a lost connection: the server rolls back by itself) is not raised over
      the first error. A failing ``BEGIN`` raises with nothing opened.

    The connection is autocommit (``isolation_level=None``) and no transaction is open on
    it when the block starts; a store that needs more (a savepoint, a retry) writes it
    around or inside this, saying why.
    """
    conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            with contextlib.suppress(*store_errors()):
                conn.execute("ROLLBACK")
        raise


#: One schema step: an SQL script (statements separated by ``;``) or a function that
#: changes the schema through the connection it is given (inside the step's transaction).
Migration = str | Callable[[sqlite3.Connection], None]

SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")


class SchemaTooNew(sqlite3.DatabaseError):
    """The file was written by a newer companyd (its ``user_version`` is past the code's).

    A ``sqlite3.DatabaseError``: a store that sets an unreadable file aside treats this one
    the same way it did before the versions were shared.
    """

    def __init__(self, path: Path | str, version: int, known: int, what: str, hint: str) -> None:
        super().__init__(
            f"{what} {str(path)!r} has schema version {version}, newer than this companyd "
            f"understands ({known}); upgrade companyd{hint}"
        )
        self.path = path
        self.version = version
        self.known = known


def statements(script: str) -> list[str]:
    """The complete statements of ``script``, in order (``executescript`` would commit the
    transaction a migration runs in, so they are executed one by one).
    """
    out: list[str] = []
    pending = ""
    for part in script.split(";"):
        pending += part + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \t\r\n;"):
                out.append(pending.strip())
            pending = ""
    if pending.strip(" \t\r\n;"):
        out.append(pending.strip())
    return out


def check_version(
    path: Path | str, version: int, known: int, *, what: str = "database", hint: str = ""
) -> None:
    """Refuse a file at ``version`` when this code knows ``known`` versions.

    Raises:
        SchemaTooNew: ``version > known``.
    """
    if version > known:
        raise SchemaTooNew(path, version, known, what, hint)


def user_version(conn: sqlite3.Connection) -> int:
    """The file's ``PRAGMA user_version``."""
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def apply_migrations(
    conn: sqlite3.Connection,
    migrations: Sequence[Migration],
    *,
    path: Path | str = ":memory:",
    what: str = "database",
    hint: str = "",
) -> int:
    """Bring ``conn`` (autocommit: ``isolation_level=None``) to ``len(migrations)``.

    Each missing migration runs in its own ``BEGIN IMMEDIATE`` transaction together with
    the ``user_version`` it reaches; the version is read again inside the transaction, so a
    second process opening the same file at the same moment skips what the first applied.
    Returns the version the file had before.

    Raises:
        SchemaTooNew: the file is newer than ``migrations``.
    """
    known = len(migrations)
    before = user_version(conn)
    check_version(path, before, known, what=what, hint=hint)
    for target in range(before + 1, known + 1):
        with transaction(conn):
            current = user_version(conn)
            check_version(path, current, known, what=what, hint=hint)
            if current < target:
                step = migrations[target - 1]
                if isinstance(step, str):
                    for statement in statements(step):
                        conn.execute(statement)
                else:
                    step(conn)
                conn.execute(f"PRAGMA user_version = {int(target)}")
    return before


def connect_readonly(path: Path, *, timeout: float = 5.0) -> sqlite3.Connection:
    """A read-only connection to an existing ``path`` (for readers beside the owner: WAL
    lets them read while it writes). The caller checks the version (:func:`check_version`).
    """
    return sqlite3.connect(
        # quote(), what pathname2url is on POSIX: urllib.request (http.client, email, …)
        # would cost ~1.4 MB of the daemon's start for this one call (issue 31)
        f"file:{quote(str(path))}?mode=ro",
        uri=True,
        isolation_level=None,
        timeout=timeout,
        check_same_thread=False,
    )


class Database(StoreWorker[sqlite3.Connection]):
    """One SQLite file and the one thread that uses it.

    The connection is opened on the worker thread at :meth:`open` (or by the first piece of
    work), with WAL, ``synchronous``, ``busy timeout`` and, unless ``readonly``, the file
    created ``0600`` and the migrations applied. It is used only on that thread
    (``check_same_thread`` stays on) and is autocommit (``isolation_level=None``): the
    store writes its own ``BEGIN`` / ``COMMIT`` where a change spans statements. Where work
    runs and how it is closed: :class:`companyd._worker.StoreWorker`.

    Args:
        path: the database file; None for an in-memory database.
        migrations: the schema, in order (see the module docstring).
        what: how errors name the file ("the spend ledger").
        synchronous: the ``PRAGMA synchronous`` level (``NORMAL`` or ``FULL``).
        timeout: seconds to wait for another process's lock (the busy timeout).
        readonly: open an existing file for reading only (no migration; a newer version is
            still refused).
        hint: appended to the "newer than this companyd" message (what else one can do).
        thread_name: the worker thread's name prefix.
        worker: False for the synchronous path: no worker thread; only :meth:`run_sync`
            (and :meth:`open_sync`, :meth:`close_sync`), from the thread that opened it.
    """

    def __init__(
        self,
        path: Path | None,
        *,
        migrations: Sequence[Migration] = (),
        what: str = "database",
        synchronous: str = "NORMAL",
        timeout: float = 5.0,
        readonly: bool = False,
        hint: str = "",
        thread_name: str = "companyd-sqlite",
        worker: bool = True,
    ) -> None:
        if synchronous not in SYNCHRONOUS:
            raise ValueError(f"synchronous={synchronous!r}; expected one of {SYNCHRONOUS}")
        super().__init__(what=what, thread_name=thread_name, worker=worker)
        self.path = path
        self.migrations = tuple(migrations)
        self.synchronous = synchronous
        self.timeout = timeout
        self.readonly = readonly
        self.hint = hint
        self._conn: sqlite3.Connection | None = None

    @property
    def version(self) -> int:
        """The schema version this code writes (the number of migrations)."""
        return len(self.migrations)

    @property
    def connection(self) -> sqlite3.Connection:
        """The open connection; only on the worker thread (inside work given to it).

        Raises:
            DatabaseClosed: not open (closed, or not opened yet).
        """
        if self._conn is None:
            raise DatabaseClosed(f"{self.what} {self._name()!r} is not open")
        return self._conn

    def _job(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._conn is None:
            if self._closed:
                raise DatabaseClosed(f"{self.what} {self._name()!r} is closed")
            self._conn = self._connect(memory=self.path is None)
        return fn(self._conn)

    # -- lifecycle ------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the file and bring its schema up to date (idempotent).

        Raises:
            SchemaTooNew: the file was written by a newer companyd.
            sqlite3.Error, OSError: the file cannot be opened or migrated.
        """
        await self.run(lambda conn: None)

    def open_sync(self, *, memory: bool = False) -> None:
        """:meth:`open`, waiting (or at once on the worker). ``memory``: open an in-memory
        database instead of the file (for a store that degrades rather than stop), closing
        any connection already open.
        """
        if not memory:
            self.run_sync(lambda conn: None)
            return

        def to_memory() -> None:
            self._drop()
            self._conn = self._connect(memory=True)

        self._claim_thread()
        if self.on_worker:
            to_memory()
        else:
            self.executor.submit(to_memory).result()

    def reset(self) -> None:
        """On the worker: close the connection, so that the next work opens the file anew
        (after the store moved a damaged file aside).
        """
        self._drop()

    def _connect(self, *, memory: bool) -> sqlite3.Connection:
        if memory:
            conn = sqlite3.connect(":memory:", isolation_level=None)
        elif self.path is None:
            raise DatabaseClosed(f"{self.what}: no file")
        elif self.readonly:
            conn = connect_readonly(self.path, timeout=self.timeout)
        else:
            private_sqlite(self.path)
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=self.timeout)
        try:
            # busy_timeout as a pragma too: a read-only URI connection gets it the same way
            conn.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
            if self.readonly and not memory:
                check_version(
                    self._name(), user_version(conn), self.version, what=self.what, hint=self.hint
                )
                return conn
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            apply_migrations(
                conn, self.migrations, path=self._name(), what=self.what, hint=self.hint
            )
        except BaseException:
            conn.close()
            raise
        return conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _name(self) -> str:
        return ":memory:" if self.path is None else str(self.path)
