"""Where the durable stores keep their rows: SQLite files (the default) or PostgreSQL.

Every store (the spend ledger, and in turn the run journal, routine history, alert
outbox, the founder's desk, the memory journal) is written once, in the SQL both backends
read (:mod:`companyd.storage.dialect`), against the contract of
:class:`companyd._sqlite.Database`. :func:`open_database` picks the backend from the
company's :class:`Backend`: a file in the state directory, or the store's tables in the
company's PostgreSQL schema (:class:`companyd.storage.postgres.PgDatabase`).

docs/storage.md has the decisions and their reasons.
"""

from __future__ import annotations

import asyncio
import importlib
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import psycopg

from companyd._sqlite import Database, Migration
from companyd.storage.dialect import Dialects, to_pyformat
from companyd.storage.fence import Fence, Fenced
from companyd.storage.postgres import PgConnection, PgDatabase, PgMigration, StoreAbsent

if TYPE_CHECKING:
    from companyd.storage._probe import probe
    from companyd.storage.dialect import Connection
    from companyd.storage.leadership import LeaderInfo, Leadership


__all__ = [
    "DB_ERRORS",
    "SQLITE",
    "Backend",
    "Connection",
    "Dialects",
    "Fence",
    "Fenced",
    "LeaderInfo",
    "Leadership",
    "PgConnection",
    "PgDatabase",
    "StoreAbsent",
    "StoreDatabase",
    "connection_lost",
    "dsn_password",
    "open_database",
    "probe",
    "sqlite_migrations",
    "store_present",
    "to_pyformat",
]

#: What a store's database raises for a failing database, file or connection.
DB_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error, psycopg.Error, OSError)

#: Either backend's database, as a store holds it.
StoreDatabase = Database | PgDatabase


@dataclass(frozen=True)
class Backend:
    """Where a company's stores live.

    Attributes:
        kind: ``sqlite`` (files in the state directory) or ``postgres``.
        dsn: the libpq connection string for ``postgres`` (a secret: never printed).
        schema: the company's schema on ``postgres`` (one schema per company).
        fence: the leadership epoch every write must still hold on ``postgres``
            (:class:`companyd.storage.leadership.Leadership` owns it); None: writes are not
            fenced (a single daemon, or SQLite).
    """

    kind: Literal["sqlite", "postgres"] = "sqlite"
    dsn: str | None = field(default=None, repr=False)
    schema: str = "companyd"
    fence: Fence | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind == "postgres" and not self.dsn:
            raise ValueError("a postgres backend needs a dsn")

    def describe(self) -> str:
        """Where the stores are, for status and logs: ``sqlite`` or ``postgres schema
        'acme'`` (never the URL, which may hold a password).
        """
        return self.kind if self.kind == "sqlite" else f"postgres schema {self.schema!r}"


async def store_present(
    backend: Backend, path: Path, readonly: Callable[[], StoreDatabase]
) -> bool:
    """Whether anything has written a store yet — its file at ``path`` exists (SQLite), or
    its tables do (PostgreSQL: a read-only open of ``readonly()`` succeeds) — so that a
    reader can ask first and reading never creates the store (the CLI without a daemon).
    """
    if backend.kind == "sqlite":
        return await asyncio.to_thread(path.exists)
    probe = readonly()
    try:
        await probe.open()
    except StoreAbsent:
        return False
    finally:
        await probe.close()
    return True


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is a database connection that broke or could not be made (the
    server restarted, the network dropped, ``pg_terminate_backend``): the work may be
    retried on a new connection, as a write a full disk refused may be retried on space.
    """
    return isinstance(exc, psycopg.OperationalError)


def dsn_password(dsn: str) -> str | None:
    """The password a libpq connection string (URL or ``key=value`` form) carries, if any;
    None for a string libpq cannot parse (the connection attempt will say why).
    """
    try:
        password = psycopg.conninfo.conninfo_to_dict(dsn).get("password")
    except psycopg.ProgrammingError:
        return None
    return str(password) if password else None


#: The default: every store a file in the state directory.
SQLITE = Backend()


def sqlite_migrations(steps: Sequence[PgMigration]) -> tuple[Migration, ...]:
    """``steps`` as :mod:`companyd._sqlite` applies them (the SQLite text of each pair)."""
    return tuple(s.sqlite if isinstance(s, Dialects) else s for s in steps)


def open_database(
    backend: Backend,
    *,
    path: Path | None,
    store: str,
    migrations: Sequence[PgMigration],
    what: str,
    synchronous: str = "NORMAL",
    timeout: float = 5.0,
    readonly: bool = False,
    hint: str = "",
    thread_name: str = "companyd-db",
    worker: bool = True,
) -> StoreDatabase:
    """The (not yet opened) database of ``store``: the file ``path`` on ``sqlite``, the
    store's tables in ``backend.schema`` on ``postgres``. The arguments are those of
    :class:`companyd._sqlite.Database`; ``synchronous`` applies to SQLite only.
    """
    if backend.kind == "postgres":
        assert backend.dsn is not None  # Backend checks it
        return PgDatabase(
            backend.dsn,
            schema=backend.schema,
            store=store,
            migrations=migrations,
            what=what,
            timeout=max(timeout, 5.0),
            readonly=readonly,
            hint=hint,
            thread_name=thread_name,
            worker=worker,
            fence=backend.fence,
        )
    return Database(
        path,
        migrations=sqlite_migrations(migrations),
        what=what,
        synchronous=synchronous,
        timeout=timeout,
        readonly=readonly,
        hint=hint,
        thread_name=thread_name,
        worker=worker,
    )


_HOMES: dict[str, str] = {
    "Connection": "companyd.storage.dialect",
    "LeaderInfo": "companyd.storage.leadership",
    "Leadership": "companyd.storage.leadership",
    "probe": "companyd.storage._probe",
}


def __getattr__(name: str) -> Any:
    """Import a face name from its module on first use (keeps start-up imports cheap)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
