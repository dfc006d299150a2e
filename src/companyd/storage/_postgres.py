"""A store's database on PostgreSQL: the same contract as :class:`companyd._sqlite.Database`.

A store written for :mod:`companyd._sqlite` runs here unchanged in shape: its work is
``fn(conn)`` run on one worker thread of its own, in submission order, so the event loop
never waits on the database; ``conn`` (:class:`PgConnection`) answers the part of
``sqlite3.Connection`` the stores use — ``execute``/``executemany`` with ``?``
placeholders, cursors that iterate and fetch, ``in_transaction`` — over a psycopg 3
connection lent by a psycopg-pool pool (one connection per store: the work is serial;
the pool replaces a connection the server or the network broke).

What the translation means (docs/storage.md):

* ``BEGIN`` / ``BEGIN IMMEDIATE`` starts a transaction and takes a transaction-scoped
  advisory lock named after the store (:func:`lock_key`), so the writers of one store
  take turns across every daemon of the company, as SQLite's file lock makes them do on
  one host (a budget check and its reservation stay one atomic step). Reads outside a
  transaction are autocommit statements and never wait for that lock.
* With a :class:`~companyd.storage._fence.Fence` that holds an epoch (the daemon has led),
  that ``BEGIN`` also checks the epoch is still the current leader's (``SELECT … FROM
  companyd_leader … FOR SHARE``) and raises :class:`~companyd.storage._fence.Fenced` if not;
  a write statement outside a transaction is then wrapped in ``BEGIN`` … ``COMMIT`` so it
  is checked too. Reads are never fenced.
* ``PRAGMA …`` is a no-op: PostgreSQL's durability is the server's (``synchronous_commit``
  is on by default: a commit is on the server's disk when it returns).
* ``lastrowid`` does not exist: statements that need an id say ``RETURNING id``.

Migrations: the same ordered list the SQLite file versions with ``PRAGMA user_version``;
here the version is a row of ``companyd_migrations (store, version)`` in the company's
schema. Each missing step runs in one transaction holding the store's lock, which also
sets the version, so two daemons starting at once apply each step once.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from companyd._sqlite import SchemaTooNew, statements, transaction
from companyd._worker import DatabaseClosed, StoreWorker
from companyd.storage._absent import StoreAbsent
from companyd.storage._dialect import Dialects, to_pyformat
from companyd.storage._fence import Fence, Fenced

__all__ = ["PgConnection", "PgCursor", "PgDatabase", "StoreAbsent", "lock_key"]

T = TypeVar("T")

#: A migration step as the stores declare them (see :mod:`companyd._sqlite`): SQL both
#: backends read, a :class:`Dialects` pair, or a function of the connection.
PgMigration = str | Dialects | Callable[[Any], None]


def lock_key(schema: str, store: str) -> int:
    """The advisory-lock key of ``store`` in ``schema``: a stable signed 64-bit number
    (``crc32`` of each part; the same in every process and every release).
    """
    hi = zlib.crc32(f"companyd:{schema}".encode())
    lo = zlib.crc32(store.encode())
    key = (hi << 32) | lo
    return key - (1 << 64) if key >= (1 << 63) else key


class PgCursor:
    """The part of ``sqlite3.Cursor`` the stores use, over a psycopg cursor."""

    def __init__(self, cur: psycopg.Cursor[Any] | None) -> None:
        self._cur = cur

    def fetchone(self) -> Any:
        """The next row, or None (also for a statement that returns no rows)."""
        return None if self._cur is None or self._cur.description is None else self._cur.fetchone()

    def fetchall(self) -> list[Any]:
        """The remaining rows ([] for a statement that returns none)."""
        if self._cur is None or self._cur.description is None:
            return []
        return self._cur.fetchall()

    def __iter__(self) -> Iterator[Any]:
        """The remaining rows, one by one."""
        return iter(self.fetchall())

    @property
    def description(self) -> Any:
        """Psycopg's columns (each indexes as ``(name, …)``, as sqlite3's do), or None."""
        return None if self._cur is None else self._cur.description

    @property
    def rowcount(self) -> int:
        """The rows the statement changed, -1 when not known."""
        return -1 if self._cur is None else self._cur.rowcount

    @property
    def lastrowid(self) -> int:
        """Not on PostgreSQL: the stores write ``RETURNING id`` instead."""
        raise NotImplementedError("PostgreSQL has no lastrowid: write RETURNING id")


#: Statements that write (a write outside a transaction is fenced as one of its own).
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "UPSERT", "MERGE")


class PgConnection:
    """The part of ``sqlite3.Connection`` the stores use, over one psycopg connection in
    autocommit mode (the store writes its own ``BEGIN`` … ``COMMIT``, as on SQLite).

    ``fence``: the leadership epoch every write transaction must still hold (module
    docstring); None or an epoch of None: writes are not checked.
    """

    def __init__(
        self, conn: psycopg.Connection[Any], *, lock: int, fence: Fence | None = None
    ) -> None:
        self.raw = conn
        self._lock = lock
        self._fence = fence

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open on the server side."""
        return self.raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    def execute(self, statement: str, parameters: Sequence[Any] = (), /) -> PgCursor:
        """Run one statement of the stores' dialect (see the module docstring)."""
        verb = statement.lstrip()[:16].upper()
        if verb.startswith("PRAGMA"):
            return PgCursor(None)
        if verb.startswith("BEGIN"):
            self.raw.execute("BEGIN")
            try:
                self.raw.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock,))
                self._check_fence()
            except BaseException:
                self._rollback()
                raise
            return PgCursor(None)
        with self._fenced_write(verb):
            cur = self.raw.cursor()
            cur.execute(to_pyformat(statement), tuple(parameters))
        return PgCursor(cur)

    def executemany(self, statement: str, seq: Sequence[Sequence[Any]], /) -> PgCursor:
        """Run one statement once per row of ``seq`` (one round trip: a pipeline)."""
        rows = [tuple(p) for p in seq]
        with self._fenced_write(statement.lstrip()[:16].upper()):
            cur = self.raw.cursor()
            if rows:
                cur.executemany(to_pyformat(statement), rows)
        return PgCursor(cur)

    def _check_fence(self) -> None:
        """Inside ``BEGIN``: raise Fenced unless the fence's epoch still leads; the row
        lock taken holds off the next epoch until this transaction ends.
        """
        fence = self._fence
        if fence is None or fence.epoch is None:
            return
        epoch = fence.epoch
        if fence.deposed:
            raise Fenced(epoch)
        held = self.raw.execute(
            "SELECT 1 FROM companyd_leader WHERE epoch = %s FOR SHARE", (epoch,)
        ).fetchone()
        if held is None:
            row = self.raw.execute("SELECT epoch, node FROM companyd_leader").fetchone()
            if row is None:
                raise Fenced(epoch)
            raise Fenced(epoch, int(row[0]), str(row[1]))

    @contextlib.contextmanager
    def _fenced_write(self, verb: str) -> Iterator[None]:
        """A write outside a transaction, under a fence with an epoch: its own checked
        ``BEGIN`` … ``COMMIT``; anything else as it is.
        """
        fence = self._fence
        if (
            fence is None
            or fence.epoch is None
            or self.in_transaction
            or not verb.startswith(_WRITES)
        ):
            yield
            return
        with transaction(self, immediate=False):  # checked by its BEGIN, as any transaction
            yield

    def _rollback(self) -> None:
        """After a failure inside a transaction this class opened: end it, keeping the
        first error (a broken connection has nothing to roll back).
        """
        with contextlib.suppress(psycopg.Error):
            if self.in_transaction:
                self.raw.execute("ROLLBACK")


class PgDatabase(StoreWorker[PgConnection]):
    """One store's tables in a company's PostgreSQL schema, and the one thread that uses
    them. The contract is :class:`companyd._sqlite.Database`'s (``run``, ``run_sync``,
    ``submit``, ``call``, ``open``, ``close``…); ``fn`` receives a :class:`PgConnection`.

    Args:
        dsn: the libpq connection string (a secret: it may hold a password).
        schema: the company's schema (created if missing).
        store: the store's name (``spend``, ``runs``…): its migration row and lock key.
        migrations: the store's schema steps, the same list its SQLite file uses.
        what: how errors name the store ("the spend ledger").
        timeout: seconds to wait for a connection (and to connect).
        readonly: no migration; a newer version is still refused.
        hint: appended to the "newer than this companyd" message.
        thread_name: the worker thread's name prefix.
        worker: False: no worker thread; the caller's thread does the work (the CLI).
        fence: the leadership epoch every write transaction must still hold (see
            :class:`PgConnection`); None: writes are not checked.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str,
        store: str,
        migrations: Sequence[PgMigration] = (),
        what: str = "database",
        timeout: float = 10.0,
        readonly: bool = False,
        hint: str = "",
        thread_name: str = "companyd-pg",
        worker: bool = True,
        fence: Fence | None = None,
    ) -> None:
        super().__init__(what=what, thread_name=thread_name, worker=worker)
        self.path = f"postgres schema {schema!r} ({store})"
        self.schema = schema
        self.store = store
        self.migrations = tuple(migrations)
        self.timeout = timeout
        self.readonly = readonly
        self.hint = hint
        self._dsn = dsn
        self._lock = lock_key(schema, store)
        self._fence = fence
        self._pool: ConnectionPool[psycopg.Connection[Any]] | None = None
        self._conn: PgConnection | None = None

    @property
    def version(self) -> int:
        """The schema version this code writes (the number of migrations)."""
        return len(self.migrations)

    @property
    def connection(self) -> PgConnection:
        """The connection lent to the current job; only inside work given to the worker."""
        if self._conn is None:
            raise DatabaseClosed(f"{self.what} ({self.path}) is not open")
        return self._conn

    def _name(self) -> str:
        return self.path

    def _job(self, fn: Callable[[PgConnection], T]) -> T:
        if self._closed and self._pool is None:
            raise DatabaseClosed(f"{self.what} ({self.path}) is closed")
        if self._conn is not None:  # nested: run_sync from inside a job
            return fn(self._conn)
        pool = self._open_pool()
        with pool.connection(timeout=self.timeout) as raw:
            self._conn = PgConnection(raw, lock=self._lock, fence=self._fence)
            try:
                return fn(self._conn)
            finally:
                self._conn = None

    @contextlib.contextmanager
    def session(self) -> Iterator[PgConnection]:
        """The connection for a span of work that is not one function: for an owner that
        already runs on its own thread (the memory owner) and holds a transaction across
        several of its own steps. On the synchronous path (``worker=False``) or inside a job.
        """
        if self._conn is not None:  # nested in a job or a session: the same connection
            yield self._conn
            return
        self._claim_thread()
        pool = self._open_pool()
        with pool.connection(timeout=self.timeout) as raw:
            self._conn = PgConnection(raw, lock=self._lock, fence=self._fence)
            try:
                yield self._conn
            finally:
                self._conn = None

    # -- lifecycle --------------------------------------------------------------------------

    def _open_pool(self) -> ConnectionPool[psycopg.Connection[Any]]:
        if self._pool is not None:
            return self._pool
        schema = self.schema

        def configure(conn: psycopg.Connection[Any]) -> None:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))

        pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            self._dsn,
            min_size=1,
            max_size=1,
            kwargs={"autocommit": True, "connect_timeout": max(1, int(self.timeout))},
            configure=configure,
            timeout=self.timeout,
            name=f"companyd-{self.store}",
            open=False,
        )
        try:
            pool.open(wait=True, timeout=self.timeout)
            with pool.connection(timeout=self.timeout) as raw:
                self._migrate(raw)
        except BaseException:
            pool.close()
            raise
        self._pool = pool
        return pool

    def _migrate(self, raw: psycopg.Connection[Any]) -> None:
        ident = sql.Identifier(self.schema)
        known = len(self.migrations)
        if not self.readonly:
            with raw.transaction():
                # one lock for every store's first step in this schema: CREATE … IF NOT
                # EXISTS is not safe against a concurrent twin
                raw.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(self.schema, ""),))
                raw.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
                raw.execute(
                    sql.SQL(
                        "CREATE TABLE IF NOT EXISTS {}.companyd_migrations "
                        "(store TEXT PRIMARY KEY, version INTEGER NOT NULL)"
                    ).format(ident)
                )
        conn = PgConnection(raw, lock=self._lock, fence=self._fence)
        current = self._version(raw)
        self._check(current, known)
        if self.readonly:
            if current == 0:
                raise StoreAbsent(f"{self.what}: {self.path} has no tables yet")
            return
        for target in range(current + 1, known + 1):
            with transaction(conn, immediate=False):  # the store's lock (and the fence)
                now = self._version(raw)
                self._check(now, known)
                if now < target:
                    step = self.migrations[target - 1]
                    if isinstance(step, Dialects):
                        step = step.postgres
                    if isinstance(step, str):
                        for statement in statements(step):
                            raw.execute(statement)  # DDL: no placeholders
                    else:
                        step(conn)
                    raw.execute(
                        "INSERT INTO companyd_migrations (store, version) VALUES (%s, %s) "
                        "ON CONFLICT (store) DO UPDATE SET version = excluded.version",
                        (self.store, target),
                    )

    def _version(self, raw: psycopg.Connection[Any]) -> int:
        try:
            row = raw.execute(
                "SELECT version FROM companyd_migrations WHERE store = %s", (self.store,)
            ).fetchone()
        except psycopg.errors.UndefinedTable:  # a reader before any daemon made the schema
            return 0
        return 0 if row is None else int(row[0])

    def _check(self, version: int, known: int) -> None:
        if version > known:
            raise SchemaTooNew(self.path, version, known, self.what, self.hint)

    async def open(self) -> None:
        """Connect, create the schema if missing and apply the missing migrations."""
        await self.run(lambda conn: None)

    def open_sync(self, *, memory: bool = False) -> None:
        """:meth:`open`, waiting. There is no in-memory fallback on PostgreSQL."""
        if memory:
            raise NotImplementedError("a PostgreSQL store has no in-memory fallback")
        self.run_sync(lambda conn: None)

    def reset(self) -> None:
        """On the worker: drop the pool so the next work connects anew."""
        self._drop()

    def _drop(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close(timeout=self.timeout)
