"""routines.sqlite: each routine's schedule cursor and the history of every fire.

One database file in the state directory, owned by the running scheduler: a single worker
thread (a :class:`companyd._sqlite.Database`) holds the only writing connection and runs
every statement, so the event loop never waits on SQLite; schema versions are
``PRAGMA user_version`` (:data:`MIGRATIONS`). Readers (``companyd jobs`` with no daemon, or
beside one) open their own read-only connection; WAL mode lets them read while the daemon
writes. The values stored are :mod:`companyd.scheduler.records`.

Tables:

``routine_state`` — one row per enabled routine:
    ``trigger`` the schedule's identity (``repr`` of the APScheduler trigger, time zone
    included); ``cursor`` the latest fire time (epoch seconds) the scheduler has dealt with, or
    the moment the routine was armed when it has not fired yet — on start, every fire time
    after the cursor and not later than now was missed while the daemon was down;
    ``last_fire`` the latest fire time; ``memory_marker`` what the ``memory_changed``
    precondition compares against.

``clean_stop`` — at most one row, written when the daemon stops on purpose (SIGTERM,
    ``systemctl restart``) and removed by the next start, which thereby knows that the fire
    times since ``at`` fell in a planned stop, not in a crash.

``fires`` — one row per fire (or, for a long outage, one row standing for ``fires`` fire
    times): routine, agent, kind (``scheduled`` | ``catch_up`` | ``manual``), scheduled fire
    time, when the scheduler dispatched it (``fired``), when the run started and ended,
    outcome (NULL while waiting or running), reason, cost, run id and task id.

Durability: WAL with ``synchronous=NORMAL``: a committed write survives a crash of the
process (it is in the OS's hands); the last few commits may be lost on power failure, which
at worst re-offers one catch-up decision. The cursor of a fire is committed *before* its
task is submitted, so a restart never runs the same fire time twice; the fire's row follows
in the next batch, and a fire whose row a crash prevented is recorded at the next start
(:func:`close_unrecorded`), so none goes missing either.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import sqlite3
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from companyd._sqlite import (
    Database,
    DatabaseClosed,
    Migration,
    SchemaTooNew,
    check_version,
    connect_readonly,
)
from companyd.errors import CompanydError
from companyd.scheduler import _ids
from companyd.scheduler.records import FireRecord, RoutineState, RoutineStats

__all__ = [
    "DB_NAME",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "FireRecord",
    "RoutineState",
    "RoutineStats",
    "RoutineStore",
    "StoreError",
    "fires_between",
    "latest_fires",
    "load_states",
    "open_readonly",
    "recent_fires",
    "routine_stats",
]

log = logging.getLogger(__name__)

DB_NAME = "routines.sqlite"

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS routine_state (
    routine       TEXT PRIMARY KEY,
    trigger       TEXT NOT NULL,
    cursor        REAL NOT NULL,
    last_fire     REAL,
    memory_marker TEXT,
    updated       REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS fires (
    id        INTEGER PRIMARY KEY,
    fire_id   TEXT NOT NULL UNIQUE,
    routine   TEXT NOT NULL,
    agent     TEXT NOT NULL,
    kind      TEXT NOT NULL CHECK (kind IN ('scheduled', 'catch_up', 'manual')),
    scheduled REAL NOT NULL,
    fired     REAL,
    started   REAL,
    ended     REAL,
    outcome   TEXT,
    reason    TEXT,
    cost_usd  REAL NOT NULL DEFAULT 0,
    run_id    TEXT,
    task_id   TEXT,
    fires     INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS clean_stop (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    at     REAL NOT NULL,
    reason TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS fires_by_routine ON fires (routine, scheduled);
CREATE INDEX IF NOT EXISTS fires_open ON fires (outcome) WHERE outcome IS NULL;
"""

#: The schema, one entry per ``PRAGMA user_version`` (see companyd._sqlite).
MIGRATIONS: tuple[Migration, ...] = (_SCHEMA,)
SCHEMA_VERSION = len(MIGRATIONS)
_WHAT = "routine history"
_HINT = ", or move the file away to start a fresh routine history"

_FIRE_COLUMNS = (
    "fire_id, routine, agent, kind, scheduled, fired, started, ended, outcome, reason, "
    "cost_usd, run_id, task_id, fires"
)


class StoreError(CompanydError):
    """routines.sqlite cannot be opened, read or written."""


# ---------------------------------------------------------------------------------------
# Statements (run on whichever connection owns the call: the writer thread's or a reader's)


def _record(row: Sequence[Any]) -> FireRecord:
    return FireRecord(
        fire_id=row[0],
        routine=row[1],
        agent=row[2],
        kind=row[3],
        scheduled=row[4],
        fired=row[5],
        started=row[6],
        ended=row[7],
        outcome=row[8],
        reason=row[9],
        cost_usd=row[10],
        run_id=row[11],
        task_id=row[12],
        fires=row[13],
    )


_INSERT_FIRE = f"INSERT INTO fires ({_FIRE_COLUMNS}) VALUES ({', '.join('?' * 14)})"
_ADVANCE = (
    "UPDATE routine_state SET cursor = MAX(cursor, ?), "
    "last_fire = MAX(COALESCE(last_fire, ?), ?), updated = ? WHERE routine = ?"
)
_START = "UPDATE fires SET started = ?, task_id = ? WHERE fire_id = ?"
_FINISH = (
    "UPDATE fires SET outcome = ?, reason = ?, ended = ?, cost_usd = ?, "
    "run_id = COALESCE(?, run_id) WHERE fire_id = ?"
)

#: One SQL statement and its parameters (see :meth:`RoutineStore.execute`).
Stmt = tuple[str, tuple[Any, ...]]


def insert_fire_stmt(rec: FireRecord) -> Stmt:
    """Add ``rec`` to the history."""
    return (_INSERT_FIRE, rec._row())


def advance_cursor_stmt(routine: str, fire_time: float, now: float) -> Stmt:
    """Move ``routine``'s cursor (and last fire) forward to ``fire_time``; never back."""
    return (_ADVANCE, (fire_time, fire_time, fire_time, now, routine))


def start_fire_stmt(fire_id: str, started: float, task_id: str) -> Stmt:
    """Record that a fire's run started, with its task."""
    return (_START, (started, task_id, fire_id))


def finish_fire_stmt(
    fire_id: str,
    *,
    outcome: str,
    reason: str | None,
    ended: float,
    cost_usd: float = 0.0,
    run_id: str | None = None,
) -> Stmt:
    """Record how a fire ended."""
    return (_FINISH, (outcome, reason, ended, cost_usd, run_id, fire_id))


def load_states(conn: sqlite3.Connection) -> dict[str, RoutineState]:
    """Every routine's persisted state, by routine slug."""
    rows = conn.execute(
        "SELECT routine, trigger, cursor, last_fire, memory_marker, updated FROM routine_state"
    ).fetchall()
    return {
        r[0]: RoutineState(
            routine=r[0],
            trigger=r[1],
            cursor=r[2],
            last_fire=r[3],
            memory_marker=r[4],
            updated=r[5],
        )
        for r in rows
    }


def recent_fires(conn: sqlite3.Connection, routine: str, limit: int) -> list[FireRecord]:
    """The latest ``limit`` fires of ``routine``, newest first."""
    rows = conn.execute(
        f"SELECT {_FIRE_COLUMNS} FROM fires WHERE routine = ? "
        "ORDER BY scheduled DESC, id DESC LIMIT ?",
        (routine, limit),
    ).fetchall()
    return [_record(r) for r in rows]


def latest_fires(conn: sqlite3.Connection) -> dict[str, FireRecord]:
    """Each routine's most recently recorded *finished* fire."""
    rows = conn.execute(
        f"SELECT {_FIRE_COLUMNS} FROM fires WHERE id IN ("
        "  SELECT MAX(id) FROM fires WHERE outcome IS NOT NULL GROUP BY routine)"
    ).fetchall()
    return {r[1]: _record(r) for r in rows}


def open_fires(conn: sqlite3.Connection) -> list[FireRecord]:
    """Fires that are waiting or running (outcome not yet known)."""
    rows = conn.execute(
        f"SELECT {_FIRE_COLUMNS} FROM fires WHERE outcome IS NULL ORDER BY id"
    ).fetchall()
    return [_record(r) for r in rows]


def fires_between(
    conn: sqlite3.Connection, start: float, end: float, routine: str | None = None
) -> list[FireRecord]:
    """Fires scheduled in ``[start, end]``, oldest first."""
    sql = f"SELECT {_FIRE_COLUMNS} FROM fires WHERE scheduled >= ? AND scheduled <= ?"
    args: list[Any] = [start, end]
    if routine is not None:
        sql += " AND routine = ?"
        args.append(routine)
    rows = conn.execute(sql + " ORDER BY scheduled, id", args).fetchall()
    return [_record(r) for r in rows]


def routine_stats(conn: sqlite3.Connection, since: float) -> dict[str, RoutineStats]:
    """Per routine: due runs and ``ok`` runs among scheduled and catch-up fires at or after
    ``since`` that have finished (manual runs, ``idle`` fires and fire times that fell in a
    planned stop excluded).
    """
    rows = conn.execute(
        "SELECT routine, SUM(fires), SUM(CASE WHEN outcome = 'ok' THEN fires ELSE 0 END) "
        "FROM fires WHERE scheduled >= ? AND kind != 'manual' AND outcome IS NOT NULL "
        "AND outcome NOT IN ('idle', 'stopped') GROUP BY routine",
        (since,),
    ).fetchall()
    return {r[0]: RoutineStats(routine=r[0], due=int(r[1]), ok=int(r[2])) for r in rows}


def insert_fires(conn: sqlite3.Connection, records: Iterable[FireRecord]) -> None:
    conn.executemany(_INSERT_FIRE, [r._row() for r in records])


def finish_fire(
    conn: sqlite3.Connection,
    fire_id: str,
    *,
    outcome: str,
    reason: str | None,
    ended: float,
    cost_usd: float = 0.0,
    run_id: str | None = None,
) -> None:
    sql, params = finish_fire_stmt(
        fire_id, outcome=outcome, reason=reason, ended=ended, cost_usd=cost_usd, run_id=run_id
    )
    conn.execute(sql, params)


def advance_cursor(conn: sqlite3.Connection, routine: str, fire_time: float, now: float) -> None:
    """Move ``routine``'s cursor (and last fire) forward to ``fire_time``; never back."""
    conn.execute(*advance_cursor_stmt(routine, fire_time, now))


def put_state(conn: sqlite3.Connection, state: RoutineState) -> None:
    conn.execute(
        "INSERT INTO routine_state (routine, trigger, cursor, last_fire, memory_marker, updated) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (routine) DO UPDATE SET trigger = excluded.trigger,"
        " cursor = excluded.cursor, last_fire = excluded.last_fire,"
        " memory_marker = excluded.memory_marker, updated = excluded.updated",
        (
            state.routine,
            state.trigger,
            state.cursor,
            state.last_fire,
            state.memory_marker,
            state.updated,
        ),
    )


def set_marker(conn: sqlite3.Connection, routine: str, marker: str, now: float) -> None:
    conn.execute(
        "UPDATE routine_state SET memory_marker = ?, updated = ? WHERE routine = ?",
        (marker, now, routine),
    )


def mark_clean_stop(conn: sqlite3.Connection, at: float, reason: str) -> None:
    """Record that the daemon stops on purpose at ``at`` (see ``clean_stop`` above)."""
    conn.execute(
        "INSERT OR REPLACE INTO clean_stop (id, at, reason) VALUES (1, ?, ?)", (at, reason)
    )


def clean_stop(conn: sqlite3.Connection) -> tuple[float, str] | None:
    """The planned stop recorded by the last run, ``(at, reason)``, or None (a crash, a
    kill -9, or a first start).
    """
    row = conn.execute("SELECT at, reason FROM clean_stop WHERE id = 1").fetchone()
    return (float(row[0]), str(row[1])) if row else None


def clear_clean_stop(conn: sqlite3.Connection) -> None:
    conn.execute("DELETE FROM clean_stop")


def delete_states(conn: sqlite3.Connection, routines: Iterable[str]) -> None:
    conn.executemany("DELETE FROM routine_state WHERE routine = ?", [(r,) for r in routines])


def prune_idle(conn: sqlite3.Connection, before: float) -> int:
    """Delete ``idle`` fires scheduled before ``before``; returns how many.

    A routine's latest fire (its ``last_fire``) is kept however old: :func:`close_unrecorded`
    takes a ``last_fire`` without a row for a fire whose row a crash prevented.
    """
    return conn.execute(
        "DELETE FROM fires WHERE outcome = 'idle' AND scheduled < ? AND NOT EXISTS ("
        "  SELECT 1 FROM routine_state s WHERE s.routine = fires.routine"
        "  AND s.last_fire = fires.scheduled)",
        (before,),
    ).rowcount


def close_interrupted(
    conn: sqlite3.Connection, now: float, reason: str, *, keep: Collection[str] = ()
) -> list[FireRecord]:
    """Mark every fire left waiting or running by a previous run of the scheduler as
    ``cancelled``, except the fire ids in ``keep`` (their runs were resumed).
    """
    left = [r for r in open_fires(conn) if r.fire_id not in keep]
    conn.executemany(
        "UPDATE fires SET outcome = 'cancelled', reason = ?, ended = ? WHERE fire_id = ?",
        [(reason, now, r.fire_id) for r in left],
    )
    return left


def close_unrecorded(
    conn: sqlite3.Connection, now: float, reason: str, agents: Mapping[str, str]
) -> list[FireRecord]:
    """Add a ``cancelled`` row for each routine whose last fire has no row.

    A scheduled fire commits its cursor (and ``last_fire``) first and its row in the next
    batch, so a process that died between the two left the cursor ahead of the history: the
    fire was dispatched — and is not run again — but not recorded. ``agents`` maps routine
    slugs to assignees (a routine no longer in company.yaml gets ``"?"``).
    """
    rows = conn.execute(
        "SELECT s.routine, s.last_fire FROM routine_state s WHERE s.last_fire IS NOT NULL "
        "AND NOT EXISTS (SELECT 1 FROM fires f WHERE f.routine = s.routine "
        "AND f.scheduled = s.last_fire AND f.kind != 'manual')"
    ).fetchall()
    added = [
        FireRecord(
            fire_id=_ids.new_id("fire"),
            routine=routine,
            agent=agents.get(routine, "?"),
            kind="scheduled",
            scheduled=last_fire,
            ended=now,
            outcome="cancelled",
            reason=reason,
        )
        for routine, last_fire in rows
    ]
    insert_fires(conn, added)
    return added


def open_readonly(path: Path) -> sqlite3.Connection | None:
    """A read-only connection to ``path``, or None when the file does not exist yet.

    Raises:
        StoreError: the file exists but cannot be read as a routines database.
    """
    if not path.exists():
        return None
    try:
        conn = connect_readonly(path)
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.Error as exc:
        raise StoreError(
            f"cannot read {str(path)!r}: {exc}; check the file's permissions (the CLI needs "
            "read access to the state directory) or pass the right --state-dir"
        ) from exc
    try:
        check_version(path, version, SCHEMA_VERSION, what=_WHAT, hint=_HINT)
    except SchemaTooNew as exc:
        conn.close()
        raise StoreError(str(exc)) from None
    return conn


# ---------------------------------------------------------------------------------------
# The owning writer


_Fn = Callable[[sqlite3.Connection], Any]
_Item = _Fn | tuple[Stmt, ...]  # a function, or statements applied in the bulk phase
_Entry = tuple[_Item, "asyncio.Future[Any] | None"]


class RoutineStore:
    """The scheduler's handle on routines.sqlite: one worker thread, one connection.

    Work is a function of the connection (:meth:`call` runs one and returns its result,
    :meth:`post` queues one without waiting), or, for the hot path of every fire, plain
    statements (:meth:`execute`, :meth:`post_execute`). A failed posted write is reported to
    ``on_error``.

    Group commit: everything submitted during one turn of the event loop is handed to the
    worker as one batch and committed as one transaction, and the results come back to the
    loop in one callback. A burst of a thousand fires therefore costs one commit and two
    thread crossings, not a thousand of each (each crossing hands the GIL over). If a
    function in a batch raises, the batch is rolled back and its functions are re-run one
    transaction each, so one failure never undoes its neighbours. A future resolves only
    after its work has committed.

    Within a batch, statements come first, grouped by SQL text (one ``executemany`` each):
    INSERTs, then the others, each in first-submission order; then functions, in submission
    order. So statements must commute with what else may share their batch — inserts of new
    rows and idempotent or monotonic updates (the cursor only moves forward). Anything else
    is a function.

    :meth:`post_execute_next` queues statements behind the batch being gathered: that batch
    is handed over without them (a caller awaiting a small write does not wait for them),
    and they go, with everything submitted meanwhile, in the batch handed over once it has
    been committed and reported back. Order is kept: nothing submitted after them is
    committed before them (so an UPDATE posted later still finds the row they insert).

    Args:
        path: the database file (created with its directory if missing).
        on_error: called (on the event loop) with the exception of a failed :meth:`post`.
    """

    def __init__(self, path: Path, on_error: Callable[[BaseException], None] | None = None) -> None:
        self.path = path
        self._on_error = on_error
        # At interpreter exit Python joins the worker after the work queued on it, so queued
        # history rows are written even if the loop stopped before awaiting them.
        self._db = Database(
            path,
            migrations=MIGRATIONS,
            what=_WHAT,
            timeout=10.0,
            hint=_HINT,
            thread_name="routines.sqlite",
        )
        self._opened = False
        self._loop: asyncio.AbstractEventLoop | None = None
        # Work and, for call/execute, the future its caller awaits (None: posted).
        self._gathering: list[_Entry] = []
        self._next: list[_Entry] = []  # for the batch after the one being gathered
        self._flush_soon = False
        # While set, nothing is handed over: ``_gathering`` starts with work posted behind
        # the batch whose report this is, and waits for it.
        self._hold: asyncio.Future[None] | None = None
        self._in_flight = 0  # entries handed to the worker and not yet reported back
        self._batches: set[asyncio.Future[None]] = set()  # resolved when reported back
        self._dead = False
        self._death: StoreError | None = None  # why the worker stopped, for later callers

    @property
    def pending(self) -> int:
        """Work (called or posted) not yet committed and reported back to the loop."""
        return len(self._gathering) + len(self._next) + self._in_flight

    async def open(self) -> None:
        """Start the worker thread and create or check the schema.

        Raises:
            StoreError: the file cannot be opened or was written by a newer companyd.
        """
        self._loop = asyncio.get_running_loop()
        self._opened = True
        try:
            await self._db.open()
        except SchemaTooNew as exc:
            self._die(StoreError(str(exc)))
        except (sqlite3.Error, OSError) as exc:
            death = StoreError(
                f"cannot open {str(self.path)!r}: {exc}; check that the state directory "
                "is writable by the daemon's user and the disk is not full"
            )
            death.__cause__ = exc  # a full disk is told apart by its cause
            self._die(death)

    def _die(self, death: StoreError) -> None:
        """The file cannot be used: every caller from now on learns why."""
        self._dead = True
        self._death = death
        raise death

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` in the worker thread; return its result once committed.

        If the caller is cancelled, ``fn`` still runs (history writes are not abandoned
        half-way); only its result is dropped.
        """
        fut = self._submit(fn, wait=True)
        assert fut is not None
        try:
            result: T = await fut
        except (sqlite3.Error, OSError) as exc:
            # e.g. the connection could not be opened (a full disk): told as the store's
            # error, with the cause kept so a full disk is told apart
            raise StoreError(
                f"routines.sqlite at {str(self.path)!r}: {exc}; check free disk space and "
                "the file's permissions"
            ) from exc
        return result

    def post(self, fn: Callable[[sqlite3.Connection], Any]) -> None:
        """Queue ``fn(conn)`` without waiting; must be called on the event loop's thread."""
        self._submit(fn)

    async def execute(self, *stmts: Stmt) -> None:
        """Apply ``stmts`` (in the bulk phase of a batch; see the class docstring)."""
        fut = self._submit(stmts, wait=True)
        assert fut is not None
        await fut

    def post_execute(self, *stmts: Stmt) -> None:
        """:meth:`execute` without waiting."""
        self._submit(stmts)

    def post_execute_next(self, *stmts: Stmt) -> None:
        """:meth:`post_execute` into the batch after the one being gathered (see the class
        docstring): for writes that must follow soon but that nobody should wait for.
        """
        self._submit(stmts, later=True)

    def _submit(
        self, fn: _Item, *, later: bool = False, wait: bool = False
    ) -> asyncio.Future[Any] | None:
        # Posted work gets no future of its own (its failure goes to on_error): in a burst of
        # a thousand fires, a future and two callbacks per history write were a third of the
        # event loop's work.
        if self._dead:
            raise self._death or StoreError(f"routines.sqlite at {str(self.path)!r} is closed")
        loop = self._loop
        if not self._opened or loop is None:
            raise StoreError(f"routines.sqlite at {str(self.path)!r} is not open")
        fut: asyncio.Future[Any] | None = loop.create_future() if wait else None
        (self._next if later else self._gathering).append((fn, fut))
        if not self._flush_soon:
            self._flush_soon = True
            loop.call_soon(self._flush)
        return fut

    def _flush(self) -> None:
        """Hand everything gathered this loop turn to the worker as one batch; what was
        posted behind it starts the next one, held until this one is reported back.
        """
        loop = self._loop
        assert loop is not None
        self._flush_soon = False
        if self._hold is not None:
            return  # _deliver flushes when the held-on batch is reported back
        gathered, self._gathering = self._gathering, []
        if not gathered:
            gathered, self._next = self._next, []  # nothing to be behind
        if not gathered:
            return
        reported: asyncio.Future[None] = loop.create_future()
        self._batches.add(reported)
        self._in_flight += len(gathered)
        if self._next:
            self._gathering, self._next = self._next, []
            self._hold = reported
        items = [fn for fn, _ in gathered]
        done: concurrent.futures.Future[list[tuple[bool, Any]]]
        try:
            done = self._db.submit(lambda conn: self._batch(conn, items))
        except DatabaseClosed:  # closed meanwhile: fail the batch, on the loop
            done = concurrent.futures.Future()
            done.set_exception(self._death or StoreError(f"{str(self.path)!r} is closed"))

        def back(f: concurrent.futures.Future[list[tuple[bool, Any]]]) -> None:
            # Runs in the worker thread: hop to the loop once for the whole batch.
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                loop.call_soon_threadsafe(self._deliver, gathered, f, reported)

        done.add_done_callback(back)

    def _deliver(
        self,
        gathered: list[_Entry],
        done: concurrent.futures.Future[list[tuple[bool, Any]]],
        reported: asyncio.Future[None],
    ) -> None:
        exc = done.exception()
        results = [(False, exc)] * len(gathered) if exc is not None else done.result()
        try:
            for (_fn, fut), (ok, value) in zip(gathered, results, strict=True):
                if fut is None:
                    if not ok:
                        log.error("routines.sqlite write failed: %r", value)
                        if self._on_error is not None:
                            self._on_error(value)
                elif fut.done():
                    continue
                elif ok:
                    fut.set_result(value)
                else:
                    fut.set_exception(value)
        finally:
            self._in_flight -= len(gathered)
            self._batches.discard(reported)
            reported.set_result(None)
            if self._hold is reported:
                self._hold = None
                # Scheduled after the wakeups of the callers just answered, so what they
                # write next joins the held work in one batch.
                if (self._gathering or self._next) and not self._flush_soon:
                    self._flush_soon = True
                    asyncio.get_running_loop().call_soon(self._flush)

    async def drain(self) -> None:
        """Wait until every called or posted function has run."""
        while self.pending:
            if self._batches:
                await asyncio.wait(set(self._batches))
            else:
                await asyncio.sleep(0)  # what was gathered is handed over on this turn

    async def close(self) -> None:
        """Finish queued work, close the connection and stop the thread."""
        if not self._opened:
            return
        while self._gathering or self._next or self._hold is not None:
            if self._hold is not None:
                await asyncio.shield(self._hold)
            self._flush()
        self._opened = False
        await self._db.close()  # after the batches queued before it
        self._dead = True
        self._death = self._death or StoreError(f"routines.sqlite at {str(self.path)!r} is closed")
        await asyncio.sleep(0)  # let the last batch's results reach their futures

    def close_nowait(self) -> None:
        """:meth:`close` without waiting: hand the worker everything not yet handed over
        (in order: the queue is first in, first out, so nothing needs to wait for a held
        batch's report), then the connection's close. The worker commits it and ends by
        itself; results still reach their futures if the loop runs. A no-op once closed.
        """
        if not self._opened:
            return
        while self._gathering or self._next:
            self._hold = None
            self._flush()
        self._hold = None
        self._opened = False
        self._db.close_nowait()
        self._dead = True
        self._death = self._death or StoreError(f"routines.sqlite at {str(self.path)!r} is closed")

    # -- worker thread ----------------------------------------------------------------

    def _batch(self, conn: sqlite3.Connection, items: list[_Item]) -> list[tuple[bool, Any]]:
        try:
            return self._run_batch(conn, items)
        except sqlite3.Error as exc:
            error = StoreError(
                f"routines.sqlite at {str(self.path)!r}: {exc}; check free disk "
                "space and the file's permissions"
            )
            raise error from exc  # a full disk is told apart by its cause

    @staticmethod
    def _run_batch(conn: sqlite3.Connection, items: list[_Item]) -> list[tuple[bool, Any]]:
        inserts: dict[str, list[tuple[Any, ...]]] = {}
        others: dict[str, list[tuple[Any, ...]]] = {}
        for item in items:
            if isinstance(item, tuple):
                for sql, params in item:
                    group = inserts if sql.startswith("INSERT") else others
                    group.setdefault(sql, []).append(params)
        try:
            conn.execute("BEGIN IMMEDIATE")
            for group in (inserts, others):
                for sql, rows in group.items():
                    conn.executemany(sql, rows)
            values = [None if isinstance(item, tuple) else item(conn) for item in items]
            conn.execute("COMMIT")
            return [(True, v) for v in values]
        except Exception:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        # Something failed: run each item in its own transaction to isolate the failure.
        results: list[tuple[bool, Any]] = []
        for item in items:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if isinstance(item, tuple):
                    for sql, params in item:
                        conn.execute(sql, params)
                    value = None
                else:
                    value = item(conn)
            except Exception as exc:
                conn.execute("ROLLBACK")
                results.append((False, exc))
            else:
                conn.execute("COMMIT")
                results.append((True, value))
        return results
