"""Where the durable stores keep their rows: SQLite files (the default) or PostgreSQL.

Every store (the spend ledger, and in turn the run journal, routine history, alert
outbox, the founder's desk, the memory journal) is written once, in the SQL both backends
read (:mod:`companyd.storage._dialect`), against the contract of
:class:`companyd._sqlite.Database`. :func:`open_database` picks the backend from the
company's :class:`Backend`: a file in the state directory, or the store's tables in the
company's PostgreSQL schema (:class:`companyd.storage._postgres.PgDatabase`).

docs/storage.md has the decisions and their reasons.
"""

from __future__ import annotations

import functools
import importlib
import re
import sys
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from companyd._frozen import Frozen
from companyd._sqlite import Database
from companyd.storage._dialect import Dialects, to_pyformat
from companyd.storage._fence import Fence, Fenced

if TYPE_CHECKING:
    from companyd._sqlite import Migration
    from companyd.storage._absent import StoreAbsent
    from companyd.storage._dialect import Connection
    from companyd.storage._leadership import LeaderInfo, Leadership
    from companyd.storage._pg import DB_ERRORS, StoreDatabase
    from companyd.storage._postgres import PgConnection, PgDatabase, PgMigration
    from companyd.storage._probe import probe

# psycopg (and psycopg_pool) are imported when PostgreSQL is used, or a store binds
# DB_ERRORS: `companyd validate` and the config of a SQLite company import this face
# without them (~26 MB and ~0.2 s of CPU, issue 31). The names that need the driver are
# in _HOMES below; the functions import it where they use it.


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
    "dsn_problem",
    "dsn_secrets",
    "open_database",
    "probe",
    "sqlite_migrations",
    "store_present",
    "to_pyformat",
]


class Backend(Frozen):
    """Where a company's stores live.

    Attributes:
        kind: ``sqlite`` (files in the state directory) or ``postgres``.
        dsn: the libpq connection string for ``postgres`` (a secret: never printed).
        schema: the company's schema on ``postgres`` (one schema per company).
        fence: the leadership epoch every write must still hold on ``postgres``
            (:class:`companyd.storage._leadership.Leadership` owns it); None: writes are not
            fenced (a single daemon, or SQLite).
        connect_wait: seconds every store waits for PostgreSQL (to connect, and for its
            connection) before it gives up with a clear error; None: the store's own
            timeout, at least 5 s. No company.yaml key: the product always uses None; a
            test whose claim is the error, not how long it takes, sets it shorter.
    """

    kind: Literal["sqlite", "postgres"] = "sqlite"
    dsn: str | None = field(default=None, repr=False)
    schema: str = "companyd"
    fence: Fence | None = field(default=None, compare=False, repr=False)
    connect_wait: float | None = field(default=None, compare=False, repr=False)

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
        import asyncio  # here: the face is imported by commands that never wait on a loop

        return await asyncio.to_thread(path.exists)
    from companyd.storage._absent import StoreAbsent

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
    if "psycopg" not in sys.modules:
        return False  # no connection was ever made: nothing of it can have broken
    import psycopg

    return isinstance(exc, psycopg.OperationalError)


def dsn_password(dsn: str) -> str | None:
    """The password a libpq connection string (URL or ``key=value`` form) carries, if any;
    None for a string libpq cannot parse (the connection attempt will say why).
    """
    if not dsn.strip():
        return None  # libpq's reading of nothing; and no driver to import for it
    import psycopg

    try:
        password = psycopg.conninfo.conninfo_to_dict(dsn).get("password")
    except psycopg.ProgrammingError:
        return None
    return str(password) if password else None


# Both patterns are compiled at their first use: only a PostgreSQL company's DSN needs them
# (issue 31: a SQLite company's start does not pay for them).


@functools.cache
def _cuts() -> re.Pattern[str]:
    """Where a parser may cut a password that holds them unencoded: each piece it could
    print (a "host" after a stray ``@``, a "port" after a stray ``:``) is a secret too.
    """
    return re.compile(r"[@/?#:\s]+")


@functools.cache
def _kv_password() -> re.Pattern[str]:
    r"""``password=`` in key=value form or a URL's query: a quoted value (with ``\\``
    escapes), else everything up to the next ``key=`` (an unquoted value with spaces is
    still all password to the one who wrote it) or ``&``.
    """
    return re.compile(
        r"(?:^|[\s?&])password\s*=\s*(?:'((?:[^'\\]|\\.)*)'?|(.*?))(?=\s+[A-Za-z_]+\s*=|&|$)",
        re.DOTALL,
    )


def dsn_secrets(dsn: str) -> list[str]:
    """Every text in ``dsn`` that is or may be (a piece of) its password, however it is
    written, for the redactor: libpq's reading; in a URL, everything between the user's
    ``:`` and the *last* ``@`` (a password with an unencoded ``@``, ``/``, ``#``, ``?`` or
    space, which libpq reads differently or refuses while quoting it), as written and
    percent-decoded; a ``password=`` value (quoted, escaped or not); and each piece of
    those up to or from a place a parser may cut it (``@ / ? # :`` or a space): libpq's
    "failed to resolve host 'ss@word@db'" quotes a suffix, a misread port a prefix.
    Values shorter than the redactor's minimum are dropped by the redactor, not here.
    """
    found: list[str] = []
    if (libpq := dsn_password(dsn)) is not None:
        found.append(libpq)
    scheme, sep, rest = dsn.strip().partition("://")
    if sep and scheme.lower() in ("postgresql", "postgres"):
        userinfo, at, _ = rest.rpartition("@")
        if at and ":" in userinfo:
            written = userinfo.partition(":")[2]
            found += [written, urllib.parse.unquote(written)]
    for m in _kv_password().finditer(dsn):
        quoted, bare = m.group(1), m.group(2)
        value = quoted if quoted is not None else (bare or "")
        found += [value, re.sub(r"\\(.)", r"\1", value), urllib.parse.unquote(value)]
    pieces: list[str] = []
    for value in found:
        cuts = [m.span() for m in _cuts().finditer(value)]
        pieces += [value[:a] for a, _ in cuts] + [value[b:] for _, b in cuts]
    return list(dict.fromkeys(v for v in found + pieces if v.strip()))


def dsn_problem(dsn: str) -> str | None:
    """None when libpq can read ``dsn``; else what is wrong with it in words that never
    quote it (libpq's own message quotes the part it stumbled on, often the password).
    """
    encode = (
        "a password (or user) with a space, @, /, #, ? or : in it must be percent-encoded "
        "in a URL (%20 %40 %2F %23 %3F %3A)"
    )
    import psycopg

    try:
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        if "://" in dsn:
            return f"is not a URL libpq can read (not shown: it holds the password); {encode}"
        return (
            "is not a key=value connection string libpq can read (not shown: it holds "
            "the password); a value with spaces or quotes in it must be written in single "
            r"quotes, with \' and \\ inside them"
        )
    # libpq reads a URL's credentials up to its first "@" or "/": a password with an
    # unencoded one is read as (part of) the host, port or database instead, and the
    # connection goes to a host named after the password — refuse it before that
    head = dsn.partition("://")[2].partition("?")[0]
    host, port = str(parts.get("host") or ""), str(parts.get("port") or "")
    if "://" in dsn and (
        head.count("@") > 1
        or ("@" in head and not parts.get("user"))
        or "@" in host
        or re.search(r"\s", host)
        or not re.fullmatch(r"[0-9,]*", port)
    ):
        return (
            "is read by libpq with part of its password as the host, port or database "
            f"(not shown: it holds the password); {encode}"
        )
    return None


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
        from companyd.storage._postgres import PgDatabase

        assert backend.dsn is not None  # Backend checks it
        return PgDatabase(
            backend.dsn,
            schema=backend.schema,
            store=store,
            migrations=migrations,
            what=what,
            timeout=max(timeout, 5.0) if backend.connect_wait is None else backend.connect_wait,
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
    "DB_ERRORS": "companyd.storage._pg",
    "PgConnection": "companyd.storage._postgres",
    "PgDatabase": "companyd.storage._postgres",
    "StoreAbsent": "companyd.storage._absent",
    "StoreDatabase": "companyd.storage._pg",
    "Connection": "companyd.storage._dialect",
    "LeaderInfo": "companyd.storage._leadership",
    "Leadership": "companyd.storage._leadership",
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
