"""The spend ledger: one SQLite row per LLM call, with running totals.

``<state dir>/spend.sqlite`` (WAL). Tables:

* ``calls`` — one row per settled call: time, local day and month, agent, routine, run,
  model, the five token counts, cost and the provider's request id.
* ``totals`` — running aggregates per (dimension, period, key), updated in the same
  transaction as the row: dimension ``company`` / ``agent`` / ``model`` / ``routine``, period
  a day ``YYYY-MM-DD`` or a month ``YYYY-MM``. Budgets and reports read these, so their cost
  does not grow with the number of calls.
* ``inflight`` — reservations of calls in flight, with the owning process id. Only the
  daemon writes them; on start it removes every row (they belong to a process that is gone)
  and reports them. The CLI shows rows of a live process as "reserved".
* ``markers`` — threshold / exhaustion events already published per scope and period, so a
  restart does not publish them again.
* ``raises`` — one-off raises of today's budget.
* ``meta`` — time zone, last period seen, and the schema version of before the stores
  shared :mod:`companyd._sqlite` (``schema``, still checked); the version now is
  ``PRAGMA user_version`` (:data:`MIGRATIONS`).

Money is stored as integer **picodollars** (10⁻¹² USD). A call's cost at prices with up to
six decimals per million tokens is a whole number of picodollars, so sums are exact; a cost
finer than that (only possible with an exotic price override) is rounded *up*.

Durability: ``synchronous=FULL`` for settled calls, markers and raises (a power cut after
the commit keeps the row: the ledger is money), ``NORMAL`` for ``inflight`` rows, which
are dropped on start anyway. This class is synchronous: each method runs on the thread
that owns its :class:`companyd._sqlite.Database`, at once when called there. The
:class:`~companyd.spend._book.SpendBook` runs all its ledger work on the database's worker
thread; a ledger opened on its own (the CLI, a script) takes the synchronous path: it
belongs to the thread that opened it, like a plain SQLite connection.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from companyd._frozen import Frozen
from companyd._sqlite import Database, Migration, SchemaTooNew, store_errors, transaction
from companyd.admin import one_usd
from companyd.errors import CompanydError
from companyd.llm import Usage
from companyd.storage import (
    SQLITE,
    Backend,
    Connection,
    Dialects,
    open_database,
    sqlite_migrations,
)

if TYPE_CHECKING:
    from companyd.admin import SpendTotals  # a TypedDict: its module imports pydantic
    from companyd.storage import StoreDatabase  # imports PostgreSQL's driver (issue 31)

__all__ = [
    "DIMENSIONS",
    "MIGRATIONS",
    "PUSD",
    "STORE_STEPS",
    "CallRow",
    "InflightRow",
    "Ledger",
    "LedgerError",
    "Totals",
    "from_pusd",
    "to_pusd",
    "usd_str",
]

#: Picodollars per dollar.
PUSD = 10**12
_PUSD_DEC = Decimal(PUSD)

#: Dimensions with running totals.
DIMENSIONS = ("company", "agent", "model", "routine")

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS calls (
    id INTEGER PRIMARY KEY,
    ts REAL NOT NULL,
    day TEXT NOT NULL,
    month TEXT NOT NULL,
    agent TEXT NOT NULL,
    routine TEXT,
    run_id TEXT,
    model TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    cache_write_5m_tokens INTEGER NOT NULL,
    cache_write_1h_tokens INTEGER NOT NULL,
    cache_read_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cost_pusd INTEGER NOT NULL,
    request_id TEXT,
    price_known INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS calls_ts ON calls (ts);
CREATE INDEX IF NOT EXISTS calls_run ON calls (run_id);
CREATE TABLE IF NOT EXISTS totals (
    dim TEXT NOT NULL,
    period TEXT NOT NULL,
    key TEXT NOT NULL,
    calls INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL,
    cache_write_5m_tokens INTEGER NOT NULL,
    cache_write_1h_tokens INTEGER NOT NULL,
    cache_read_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cost_pusd INTEGER NOT NULL,
    PRIMARY KEY (dim, period, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS inflight (
    id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    run_id TEXT,
    routine TEXT,
    model TEXT NOT NULL,
    amount_pusd INTEGER NOT NULL,
    created REAL NOT NULL,
    pid INTEGER NOT NULL,
    boot TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS markers (
    scope TEXT NOT NULL,
    period TEXT NOT NULL,
    marker TEXT NOT NULL,
    ts REAL NOT NULL,
    PRIMARY KEY (scope, period, marker)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS raises (
    id INTEGER PRIMARY KEY,
    scope TEXT NOT NULL,
    day TEXT NOT NULL,
    amount_pusd INTEGER NOT NULL,
    ts REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS raises_day ON raises (day, scope);
INSERT INTO meta VALUES ('schema', '1') ON CONFLICT DO NOTHING;
"""

# The same tables on PostgreSQL: money and token counts are BIGINT (picodollars pass 2³¹
# at $0.002), times DOUBLE PRECISION (PostgreSQL's REAL is 4 bytes), ids an identity.
_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS calls (
    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    ts DOUBLE PRECISION NOT NULL,
    day TEXT NOT NULL,
    month TEXT NOT NULL,
    agent TEXT NOT NULL,
    routine TEXT,
    run_id TEXT,
    model TEXT NOT NULL,
    input_tokens BIGINT NOT NULL,
    cache_write_5m_tokens BIGINT NOT NULL,
    cache_write_1h_tokens BIGINT NOT NULL,
    cache_read_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    cost_pusd BIGINT NOT NULL,
    request_id TEXT,
    price_known INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS calls_ts ON calls (ts);
CREATE INDEX IF NOT EXISTS calls_run ON calls (run_id);
CREATE TABLE IF NOT EXISTS totals (
    dim TEXT NOT NULL,
    period TEXT NOT NULL,
    key TEXT NOT NULL,
    calls BIGINT NOT NULL,
    input_tokens BIGINT NOT NULL,
    cache_write_5m_tokens BIGINT NOT NULL,
    cache_write_1h_tokens BIGINT NOT NULL,
    cache_read_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    cost_pusd BIGINT NOT NULL,
    PRIMARY KEY (dim, period, key)
);
CREATE TABLE IF NOT EXISTS inflight (
    id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    run_id TEXT,
    routine TEXT,
    model TEXT NOT NULL,
    amount_pusd BIGINT NOT NULL,
    created DOUBLE PRECISION NOT NULL,
    pid INTEGER NOT NULL,
    boot TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS markers (
    scope TEXT NOT NULL,
    period TEXT NOT NULL,
    marker TEXT NOT NULL,
    ts DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (scope, period, marker)
);
CREATE TABLE IF NOT EXISTS raises (
    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    scope TEXT NOT NULL,
    day TEXT NOT NULL,
    amount_pusd BIGINT NOT NULL,
    ts DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS raises_day ON raises (day, scope);
INSERT INTO meta VALUES ('schema', '1') ON CONFLICT DO NOTHING;
"""

#: The ledger's schema on both backends, one entry per version (companyd.storage). A
#: SQLite ledger from before the versions were shared is at 0 with every table of
#: migration 1 (which creates only what is missing).
STEPS: tuple[Dialects, ...] = (Dialects(sqlite=_SCHEMA, postgres=_PG_SCHEMA),)


#: This store's file in the state directory → the schema steps this code knows (what
#: ``companyd run`` checks before any store opens: companyd.ops._upgrade, docs/upgrade.md).
STORE_STEPS: dict[str, int] = {"spend.sqlite": len(STEPS)}

#: The SQLite text of :data:`STEPS` (``PRAGMA user_version``; see companyd._sqlite).
MIGRATIONS: tuple[Migration, ...] = sqlite_migrations(STEPS)

P = ParamSpec("P")
R = TypeVar("R")


def _on_worker(method: Callable[Concatenate[Ledger, P], R]) -> Callable[Concatenate[Ledger, P], R]:
    """Run ``method`` on the ledger's database thread (at once when already there)."""

    @functools.wraps(method)
    def wrapper(self: Ledger, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.database.run_sync(lambda _conn: method(self, *args, **kwargs))

    return wrapper


class LedgerError(CompanydError):
    """The ledger file cannot be opened, read or written."""

    #: Set when a settled call's row was held in memory (the state disk refused it): the
    #: call's exact cost, which already counts in the budgets.
    held_cost: Decimal | None = None


def to_pusd(usd: Decimal | int | float | str) -> int:
    """Picodollars for a USD amount, rounded up (a charge is never under-recorded)."""
    d = usd if isinstance(usd, Decimal) else Decimal(str(usd))
    return int((d * _PUSD_DEC).to_integral_value(rounding=ROUND_CEILING))


def from_pusd(pusd: int) -> Decimal:
    """The exact USD amount of ``pusd`` picodollars."""
    return Decimal(pusd) / _PUSD_DEC


def usd_str(usd: Decimal) -> str:
    """An exact USD amount as plain decimal text (``"0.0123"``, ``"10"``), no exponent."""
    return format(usd.normalize(), "f") if usd else "0"


def usd_said(usd: Decimal | float, minimum: int = 2) -> str:
    """Dollars in a message the founder reads (a refusal, a pause's reason, an alert):
    exact to a millionth, at least ``minimum`` decimals, thousands separated
    (:func:`companyd.admin.one_usd`) — a budget of $0.0068 is never "$0.01".
    """
    return one_usd(usd, minimum)


class CallRow(Frozen):
    """One settled LLM call."""

    ts: float
    day: str
    month: str
    agent: str
    routine: str | None
    run_id: str | None
    model: str
    usage: Usage
    cost_pusd: int
    request_id: str | None = None
    price_known: bool = True


class InflightRow(Frozen):
    """A reservation recorded while its call is in flight."""

    id: str
    agent: str
    run_id: str | None
    routine: str | None
    model: str
    amount_pusd: int
    created: float
    pid: int
    boot: str


class Totals(Frozen):
    """Aggregates of one key over a period."""

    key: str
    calls: int = 0
    input_tokens: int = 0
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0
    cache_read_tokens: int = 0
    output_tokens: int = 0
    cost_pusd: int = 0

    @classmethod
    def of_row(cls, r: Sequence[Any]) -> Totals:
        """From a row ``(key, calls, the five token counts, cost)`` — ``_TOTAL_COLS`` after
        the key (sums arrive as numerics on PostgreSQL: made ints).
        """
        return cls(
            key=str(r[0]),
            calls=int(r[1]),
            input_tokens=int(r[2]),
            cache_write_5m_tokens=int(r[3]),
            cache_write_1h_tokens=int(r[4]),
            cache_read_tokens=int(r[5]),
            output_tokens=int(r[6]),
            cost_pusd=int(r[7]),
        )

    @property
    def cost_usd(self) -> Decimal:
        """The cost in USD, exact (a Decimal of the stored picodollars)."""
        return from_pusd(self.cost_pusd)

    def to_dict(self) -> SpendTotals:
        """The totals as a JSON-serialisable dict: ``cost_usd`` a float rounded to 9 decimals for
        display, ``cost_usd_exact`` the exact decimal string.
        """
        return {
            "key": self.key,
            "calls": self.calls,
            "input_tokens": self.input_tokens,
            "cache_write_5m_tokens": self.cache_write_5m_tokens,
            "cache_write_1h_tokens": self.cache_write_1h_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": float(round(self.cost_usd, 9)),
            "cost_usd_exact": usd_str(self.cost_usd),
        }


_TOTAL_COLS = (
    "calls, input_tokens, cache_write_5m_tokens, cache_write_1h_tokens, cache_read_tokens, "
    "output_tokens, cost_pusd"
)


class Ledger:
    """Synchronous access to ``spend.sqlite``; use from one thread only.

    Args:
        path: the database file.
        readonly: open for reading only (the CLI, while a daemon may be writing); the file
            must exist.

    Raises:
        LedgerError: the file cannot be opened or is not a companyd ledger.
    """

    def __init__(
        self,
        path: Path,
        *,
        readonly: bool = False,
        database: StoreDatabase | None = None,
        backend: Backend = SQLITE,
    ) -> None:
        self.path = path
        self.readonly = readonly
        # Standalone (the CLI, a script): the synchronous path, on the caller's thread.
        self.database = database or self.open_database(
            path, readonly=readonly, worker=False, backend=backend
        )
        try:
            self.database.open_sync()
            if not readonly:
                self._check_meta()
        except SchemaTooNew as exc:
            self.database.close_sync()
            raise LedgerError(str(exc)) from exc
        except store_errors() as exc:
            self.database.close_sync()
            raise LedgerError(
                f"cannot open the spend ledger {self.database.path!s}: {exc}; check the file's "
                "permissions and free disk space (or move a damaged file aside to start a "
                "new ledger)"
            ) from exc
        except BaseException:
            self.database.close_sync()
            raise

    @staticmethod
    def open_database(
        path: Path, *, readonly: bool = False, worker: bool = True, backend: Backend = SQLITE
    ) -> StoreDatabase:
        """The (not yet opened) database of a ledger at ``path`` (on ``sqlite``; the
        ``spend`` tables of the company's schema on ``postgres``): ``synchronous=FULL`` (see
        the module docstring); a 10 s busy timeout. Its thread is where a ledger built on it
        is used (``Ledger(path, database=...)``); ``worker=False``: the caller's thread.
        """
        return open_database(
            backend,
            path=path,
            store="spend",
            migrations=STEPS,
            what="spend ledger",
            synchronous="FULL",
            timeout=10.0,
            readonly=readonly,
            hint=", or move the file aside to start a new ledger",
            thread_name="companyd-spend",
            worker=worker,
        )

    @property
    def _db(self) -> Connection:
        return self.database.connection

    @_on_worker
    def _check_meta(self) -> None:
        row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if row is not None and int(row[0]) > SCHEMA_VERSION:
            raise LedgerError(
                f"the spend ledger {str(self.path)!r} has schema {row[0]!r}, newer than this "
                f"companyd understands ({SCHEMA_VERSION}); upgrade companyd"
            )

    def close(self) -> None:
        """Close the database (idempotent); work queued before still runs."""
        self.database.close_sync()

    # -- meta -----------------------------------------------------------------------------

    @_on_worker
    def get_meta(self, key: str) -> str | None:
        """The ``meta`` value stored under ``key``, or None."""
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else str(row[0])

    @_on_worker
    def set_meta(self, items: dict[str, str]) -> None:
        """Store every key → value of ``items`` in ``meta`` (replacing existing keys), in one
        transaction.
        """
        with self._txn(full=False):
            self._db.executemany(
                "INSERT INTO meta VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                list(items.items()),
            )

    # -- writes ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _txn(self, *, full: bool) -> Iterator[None]:
        """One write transaction (:func:`companyd._sqlite.transaction`) with the requested
        durability, set by ``PRAGMA synchronous`` before its ``BEGIN IMMEDIATE``: ``FULL``
        where a recorded cost must survive a power cut, ``NORMAL`` elsewhere (a no-op on
        PostgreSQL, whose commits are durable).
        """
        self._db.execute(f"PRAGMA synchronous={'FULL' if full else 'NORMAL'}")
        with transaction(self._db):
            yield

    @_on_worker
    def record_call(
        self,
        row: CallRow,
        *,
        inflight_id: str | None = None,
        markers: Iterable[tuple[str, str, str]] = (),
    ) -> int:
        """Insert ``row``, update the running totals, drop its reservation and store the
        event markers it caused — all in one transaction. Returns the row id.
        """
        u = row.usage
        with self._txn(full=True):
            cur = self._db.execute(
                "INSERT INTO calls (ts, day, month, agent, routine, run_id, model, "
                "input_tokens, cache_write_5m_tokens, cache_write_1h_tokens, "
                "cache_read_tokens, output_tokens, cost_pusd, request_id, price_known) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (
                    row.ts,
                    row.day,
                    row.month,
                    row.agent,
                    row.routine,
                    row.run_id,
                    row.model,
                    u.input_tokens,
                    u.cache_write_5m_tokens,
                    u.cache_write_1h_tokens,
                    u.cache_read_tokens,
                    u.output_tokens,
                    row.cost_pusd,
                    row.request_id,
                    int(row.price_known),
                ),
            )
            row_id = int(cur.fetchone()[0])
            vals = (
                u.input_tokens,
                u.cache_write_5m_tokens,
                u.cache_write_1h_tokens,
                u.cache_read_tokens,
                u.output_tokens,
                row.cost_pusd,
            )
            keys = {
                "company": "",
                "agent": row.agent,
                "model": row.model,
                "routine": row.routine or "",
            }
            self._db.executemany(
                f"INSERT INTO totals (dim, period, key, {_TOTAL_COLS}) "
                "VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, ?) "
                # the target table named: PostgreSQL finds a bare column ambiguous here
                "ON CONFLICT(dim, period, key) DO UPDATE SET calls = totals.calls + 1, "
                "input_tokens = totals.input_tokens + excluded.input_tokens, "
                "cache_write_5m_tokens = totals.cache_write_5m_tokens "
                "+ excluded.cache_write_5m_tokens, "
                "cache_write_1h_tokens = totals.cache_write_1h_tokens "
                "+ excluded.cache_write_1h_tokens, "
                "cache_read_tokens = totals.cache_read_tokens + excluded.cache_read_tokens, "
                "output_tokens = totals.output_tokens + excluded.output_tokens, "
                "cost_pusd = totals.cost_pusd + excluded.cost_pusd",
                [
                    (dim, period, key, *vals)
                    for dim, key in keys.items()
                    for period in (row.day, row.month)
                ],
            )
            if inflight_id is not None:
                self._db.execute("DELETE FROM inflight WHERE id=?", (inflight_id,))
            self._db.executemany(
                "INSERT INTO markers VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                [(s, p, m, row.ts) for s, p, m in markers],
            )
        return row_id

    @_on_worker
    def add_inflight(self, row: InflightRow) -> None:
        """Record a reservation in flight (replacing a row with the same id);
        ``synchronous=NORMAL``, since these rows are dropped on start anyway.
        """
        with self._txn(full=False):
            self._db.execute(
                "INSERT INTO inflight VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET agent=excluded.agent, run_id=excluded.run_id, "
                "routine=excluded.routine, model=excluded.model, "
                "amount_pusd=excluded.amount_pusd, created=excluded.created, "
                "pid=excluded.pid, boot=excluded.boot",
                (
                    row.id,
                    row.agent,
                    row.run_id,
                    row.routine,
                    row.model,
                    row.amount_pusd,
                    row.created,
                    row.pid,
                    row.boot,
                ),
            )

    @_on_worker
    def delete_inflight(self, reservation_id: str) -> None:
        """Delete the in-flight row of ``reservation_id`` (nothing if there is none)."""
        with self._txn(full=False):
            self._db.execute("DELETE FROM inflight WHERE id=?", (reservation_id,))

    @_on_worker
    def take_inflight(self) -> list[InflightRow]:
        """Remove and return every ``inflight`` row (on start: they are all stale)."""
        with self._txn(full=True):
            rows = self.inflight()
            self._db.execute("DELETE FROM inflight")
        return rows

    @_on_worker
    def inflight(self, *, alive_only: bool = False) -> list[InflightRow]:
        """Reservations recorded as in flight. ``alive_only``: of running processes — on a
        file ledger, those whose pid runs on this host (its one daemon runs here); on a
        shared PostgreSQL ledger every row, since the leader holding them may run on
        another host and a pid says nothing here (a new leader drops a dead one's rows).
        """
        rows = [
            InflightRow(
                id=r[0],
                agent=r[1],
                run_id=r[2],
                routine=r[3],
                model=r[4],
                amount_pusd=int(r[5]),
                created=float(r[6]),
                pid=int(r[7]),
                boot=r[8],
            )
            for r in self._db.execute(
                "SELECT id, agent, run_id, routine, model, amount_pusd, created, pid, boot "
                "FROM inflight ORDER BY created"
            )
        ]
        if alive_only and isinstance(self.database, Database):
            rows = [r for r in rows if _pid_alive(r.pid)]
        return rows

    @_on_worker
    def add_markers(self, markers: Iterable[tuple[str, str, str]], ts: float) -> None:
        """Record ``(scope, period, marker)`` events as published at ``ts`` so a restart does not
        publish them again; markers already stored are kept. Durable (``synchronous=FULL``).
        """
        with self._txn(full=True):
            self._db.executemany(
                "INSERT INTO markers VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                [(s, p, m, ts) for s, p, m in markers],
            )

    @_on_worker
    def add_raise(self, scope: str, day: str, amount_pusd: int, ts: float) -> None:
        """Record a one-off raise of ``amount_pusd`` picodollars to ``scope``'s budget for
        ``day`` at ``ts``; raises on the same day add up. Durable (``synchronous=FULL``).
        """
        with self._txn(full=True):
            self._db.execute(
                "INSERT INTO raises (scope, day, amount_pusd, ts) VALUES (?, ?, ?, ?)",
                (scope, day, amount_pusd, ts),
            )

    # -- reads ----------------------------------------------------------------------------

    @_on_worker
    def markers(self, periods: Sequence[str]) -> set[tuple[str, str, str]]:
        """Markers stored for any of ``periods``."""
        if not periods:
            return set()
        q = ",".join("?" * len(periods))
        return {
            (str(s), str(p), str(m))
            for s, p, m in self._db.execute(
                f"SELECT scope, period, marker FROM markers WHERE period IN ({q})",
                tuple(periods),
            )
        }

    @_on_worker
    def raises(self, day: str, since: float = 0.0) -> dict[str, int]:
        """Scope → picodollars of one-off raises for ``day`` made at or after ``since``
        (the day's start in the company's zone: a raise made for the same date in another
        zone, before ``company.timezone`` changed, is not today's).
        """
        return {
            str(s): int(a)
            for s, a in self._db.execute(
                "SELECT scope, SUM(amount_pusd) FROM raises WHERE day=? AND ts >= ? GROUP BY scope",
                (day, since),
            )
        }

    @_on_worker
    def used(self, period: str) -> dict[str, int]:
        """Scope (``company``, ``agent:<slug>``) → picodollars spent in ``period``."""
        out: dict[str, int] = {}
        for dim, key, cost in self._db.execute(
            "SELECT dim, key, cost_pusd FROM totals WHERE dim IN ('company', 'agent') AND period=?",
            (period,),
        ):
            out["company" if dim == "company" else f"agent:{key}"] = int(cost)
        return out

    @_on_worker
    def totals(self, dim: str, periods: Sequence[str]) -> list[Totals]:
        """Aggregates of ``dim`` summed over ``periods`` (day or month keys), by key,
        most expensive first.
        """
        if dim not in DIMENSIONS:
            raise ValueError(f"unknown dimension {dim!r}; expected one of {DIMENSIONS}")
        if not periods:
            return []
        q = ",".join("?" * len(periods))
        return [
            Totals.of_row(r)
            for r in self._db.execute(
                "SELECT key, SUM(calls), SUM(input_tokens), SUM(cache_write_5m_tokens), "
                "SUM(cache_write_1h_tokens), SUM(cache_read_tokens), SUM(output_tokens), "
                f"SUM(cost_pusd) FROM totals WHERE dim=? AND period IN ({q}) "
                "GROUP BY key ORDER BY SUM(cost_pusd) DESC, key",
                (dim, *periods),
            )
        ]

    @_on_worker
    def days_between(self, first: str, last: str) -> list[Totals]:
        """Company totals per day from ``first`` to ``last`` (inclusive), by date."""
        return [
            Totals.of_row(r)
            for r in self._db.execute(
                f"SELECT period, {_TOTAL_COLS} FROM totals WHERE dim='company' "
                "AND length(period)=10 AND period BETWEEN ? AND ? ORDER BY period",
                (first, last),
            )
        ]

    @_on_worker
    def per_day_between(self, dim: str, first: str, last: str) -> list[tuple[str, Totals]]:
        """``(day, totals)`` of each key of ``dim`` on each day from ``first`` to ``last``
        (inclusive) with any spend, by date, then most expensive first.
        """
        if dim not in DIMENSIONS:
            raise ValueError(f"unknown dimension {dim!r}; expected one of {DIMENSIONS}")
        return [
            (
                str(r[0]),
                Totals.of_row(r[1:]),
            )
            for r in self._db.execute(
                f"SELECT period, key, {_TOTAL_COLS} FROM totals WHERE dim=? "
                "AND length(period)=10 AND period BETWEEN ? AND ? "
                "ORDER BY period, cost_pusd DESC, key",
                (dim, first, last),
            )
        ]

    @_on_worker
    def simulated_between(self, dim: str, first: str, last: str) -> dict[str, int]:
        """Picodollars of the offline model's calls (simulated spend: no money was spent)
        from day ``first`` to ``last`` (inclusive), by key of ``dim`` (``company``: the one
        key ``""``; ``day``: by date). The offline model's calls are told by their request
        ids (``offline-…``, :mod:`companyd.llm._offline`), so no column marks them.
        """
        column = {
            "company": "''",
            "agent": "agent",
            "model": "model",
            "routine": "COALESCE(routine, '')",
            "day": "day",
        }.get(dim)
        if column is None:
            raise ValueError(f"unknown dimension {dim!r}; expected one of {DIMENSIONS} or 'day'")
        return {
            str(k): int(c)
            for k, c in self._db.execute(
                f"SELECT {column}, SUM(cost_pusd) FROM calls WHERE day BETWEEN ? AND ? "
                "AND request_id LIKE 'offline-%' GROUP BY 1",
                (first, last),
            )
        }

    @_on_worker
    def day_keys_between(self, first: str, last: str) -> list[str]:
        """Day keys with any spend from ``first`` to ``last`` (inclusive)."""
        return [
            str(r[0])
            for r in self._db.execute(
                "SELECT period FROM totals WHERE dim='company' AND length(period)=10 "
                "AND period BETWEEN ? AND ? ORDER BY period",
                (first, last),
            )
        ]

    @_on_worker
    def run_cost(self, run_id: str) -> int:
        """The cost (pusd) of every call recorded under ``run_id``."""
        row = self._db.execute(
            "SELECT COALESCE(SUM(cost_pusd), 0) FROM calls WHERE run_id = ?", (run_id,)
        ).fetchone()
        return int(row[0])

    @_on_worker
    def spend_since(self, since_ts: float) -> list[tuple[str, float, int]]:
        """``(agent, ts, cost_pusd)`` of every call at or after ``since_ts``, oldest first."""
        return [
            (str(a), float(t), int(c))
            for a, t, c in self._db.execute(
                "SELECT agent, ts, cost_pusd FROM calls WHERE ts >= ? ORDER BY ts", (since_ts,)
            )
        ]

    @_on_worker
    def calls(self, *, limit: int | None = None) -> list[dict[str, Any]]:
        """Rows of ``calls``, oldest first (for audits and tests)."""
        sql = (
            "SELECT id, ts, day, month, agent, routine, run_id, model, input_tokens, "
            "cache_write_5m_tokens, cache_write_1h_tokens, cache_read_tokens, output_tokens, "
            "cost_pusd, request_id, price_known FROM calls ORDER BY id"
        )
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        cur = self._db.execute(sql)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True
