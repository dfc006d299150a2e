"""routines.sqlite: each routine's schedule cursor and the history of every fire.

One database file in the state directory, owned by the running scheduler: a single worker
thread holds the only writing connection and runs every statement, so the event loop never
waits on SQLite. Readers (``companyd jobs`` with no daemon, or beside one) open their own
read-only connection; WAL mode lets them read while the daemon writes.

Tables:

``routine_state`` — one row per enabled routine:
    ``trigger`` the schedule's identity (``repr`` of the APScheduler trigger, time zone
    included); ``cursor`` the latest fire time (epoch seconds) the scheduler has dealt with, or
    the moment the routine was armed when it has not fired yet — on start, every fire time
    after the cursor and not later than now was missed while the daemon was down;
    ``last_fire`` the latest fire time; ``memory_marker`` what the ``memory_changed``
    precondition compares against.

``fires`` — one row per fire (or, for a long outage, one row standing for ``fires`` fire
    times): routine, agent, kind (``scheduled`` | ``catch_up`` | ``manual``), scheduled fire
    time, when the scheduler dispatched it (``fired``), when the run started and ended,
    outcome (NULL while waiting or running), reason, cost, run id and task id.

Durability: WAL with ``synchronous=NORMAL``: a committed write survives a crash of the
process (it is in the OS's hands); the last few commits may be lost on power failure, which
at worst re-offers one catch-up decision. The cursor of a fire is committed *before* its
task is submitted, so a restart never runs the same fire time twice.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.request import pathname2url

from companyd.clock import utc_from_ts
from companyd.errors import CompanydError

__all__ = [
    "DB_NAME",
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
SCHEMA_VERSION = 1

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
CREATE INDEX IF NOT EXISTS fires_by_routine ON fires (routine, scheduled);
CREATE INDEX IF NOT EXISTS fires_open ON fires (outcome) WHERE outcome IS NULL;
"""

_FIRE_COLUMNS = (
    "fire_id, routine, agent, kind, scheduled, fired, started, ended, outcome, reason, "
    "cost_usd, run_id, task_id, fires"
)


class StoreError(CompanydError):
    """routines.sqlite cannot be opened, read or written."""


@dataclass(frozen=True, kw_only=True)
class RoutineState:
    """The persisted schedule position of one routine (see the module docstring)."""

    routine: str
    trigger: str
    cursor: float
    last_fire: float | None = None
    memory_marker: str | None = None
    updated: float = 0.0


@dataclass(frozen=True, kw_only=True)
class FireRecord:
    """One row of the history. Times are epoch seconds; ``outcome`` is None while the fire is
    waiting for its turn or running."""

    fire_id: str
    routine: str
    agent: str
    kind: str
    scheduled: float
    fired: float | None = None
    started: float | None = None
    ended: float | None = None
    outcome: str | None = None
    reason: str | None = None
    cost_usd: float = 0.0
    run_id: str | None = None
    task_id: str | None = None
    fires: int = 1

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: times as ISO 8601 in UTC."""

        def iso(ts: float | None) -> str | None:
            return None if ts is None else utc_from_ts(ts).isoformat()

        return {
            "fire_id": self.fire_id,
            "routine": self.routine,
            "agent": self.agent,
            "kind": self.kind,
            "scheduled": iso(self.scheduled),
            "fired": iso(self.fired),
            "started": iso(self.started),
            "ended": iso(self.ended),
            "outcome": self.outcome,
            "reason": self.reason,
            "cost_usd": self.cost_usd,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "fires": self.fires,
        }

    def _row(self) -> tuple[Any, ...]:
        return (
            self.fire_id,
            self.routine,
            self.agent,
            self.kind,
            self.scheduled,
            self.fired,
            self.started,
            self.ended,
            self.outcome,
            self.reason,
            self.cost_usd,
            self.run_id,
            self.task_id,
            self.fires,
        )


@dataclass(frozen=True, kw_only=True)
class RoutineStats:
    """Due runs and successes of one routine over a window (``idle`` and manual runs are not
    due runs)."""

    routine: str
    due: int
    ok: int

    @property
    def success_rate(self) -> float | None:
        """ok / due, or None when nothing was due."""
        return self.ok / self.due if self.due else None


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
    ``since`` that have finished (manual runs and ``idle`` fires excluded)."""
    rows = conn.execute(
        "SELECT routine, SUM(fires), SUM(CASE WHEN outcome = 'ok' THEN fires ELSE 0 END) "
        "FROM fires WHERE scheduled >= ? AND kind != 'manual' AND outcome IS NOT NULL "
        "AND outcome != 'idle' GROUP BY routine",
        (since,),
    ).fetchall()
    return {r[0]: RoutineStats(routine=r[0], due=int(r[1]), ok=int(r[2])) for r in rows}


def insert_fires(conn: sqlite3.Connection, records: Iterable[FireRecord]) -> None:
    conn.executemany(
        f"INSERT INTO fires ({_FIRE_COLUMNS}) VALUES ({', '.join('?' * 14)})",
        [r._row() for r in records],
    )


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
    conn.execute(
        "UPDATE fires SET outcome = ?, reason = ?, ended = ?, cost_usd = ?, "
        "run_id = COALESCE(?, run_id) WHERE fire_id = ?",
        (outcome, reason, ended, cost_usd, run_id, fire_id),
    )


def start_fire(conn: sqlite3.Connection, fire_id: str, started: float, task_id: str) -> None:
    conn.execute(
        "UPDATE fires SET started = ?, task_id = ? WHERE fire_id = ?",
        (started, task_id, fire_id),
    )


def advance_cursor(conn: sqlite3.Connection, routine: str, fire_time: float, now: float) -> None:
    """Move ``routine``'s cursor (and last fire) forward to ``fire_time``; never back."""
    conn.execute(
        "UPDATE routine_state SET cursor = MAX(cursor, ?), "
        "last_fire = MAX(COALESCE(last_fire, ?), ?), updated = ? WHERE routine = ?",
        (fire_time, fire_time, fire_time, now, routine),
    )


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


def delete_states(conn: sqlite3.Connection, routines: Iterable[str]) -> None:
    conn.executemany("DELETE FROM routine_state WHERE routine = ?", [(r,) for r in routines])


def prune_idle(conn: sqlite3.Connection, before: float) -> int:
    """Delete ``idle`` fires scheduled before ``before``; returns how many."""
    return conn.execute(
        "DELETE FROM fires WHERE outcome = 'idle' AND scheduled < ?", (before,)
    ).rowcount


def close_interrupted(conn: sqlite3.Connection, now: float, reason: str) -> list[FireRecord]:
    """Mark every fire left waiting or running by a previous process as ``cancelled``."""
    left = open_fires(conn)
    conn.executemany(
        "UPDATE fires SET outcome = 'cancelled', reason = ?, ended = ? WHERE fire_id = ?",
        [(reason, now, r.fire_id) for r in left],
    )
    return left


def open_readonly(path: Path) -> sqlite3.Connection | None:
    """A read-only connection to ``path``, or None when the file does not exist yet.

    Raises:
        StoreError: the file exists but cannot be read as a routines database.
    """
    if not path.exists():
        return None
    try:
        conn = sqlite3.connect(f"file:{pathname2url(str(path))}?mode=ro", uri=True)
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.Error as exc:
        raise StoreError(
            f"cannot read {str(path)!r}: {exc}; check the file's permissions (the CLI needs "
            "read access to the state directory) or pass the right --state-dir"
        ) from exc
    _check_version(path, version)
    return conn


def _check_version(path: Path, version: int) -> None:
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{str(path)!r} has schema version {version}, newer than this companyd "
            f"understands ({SCHEMA_VERSION}); upgrade companyd, or move the file away to "
            "start a fresh routine history"
        )


# ---------------------------------------------------------------------------------------
# The owning writer


_Job = tuple[Callable[[sqlite3.Connection], Any], "concurrent.futures.Future[Any]"]


class RoutineStore:
    """The scheduler's handle on routines.sqlite: one worker thread, one connection.

    Work is a function of the connection. :meth:`call` runs one and returns its result;
    :meth:`post` queues one without waiting (its failure is reported to ``on_error``). The
    thread runs queued work in batches, each batch one transaction with a savepoint per
    function, so a burst of a thousand fires costs one commit and one failing statement does
    not undo its neighbours. A future resolves only after its batch has committed.

    Args:
        path: the database file (created with its directory if missing).
        on_error: called (on the event loop) with the exception of a failed :meth:`post`.
    """

    def __init__(self, path: Path, on_error: Callable[[BaseException], None] | None = None) -> None:
        self.path = path
        self._on_error = on_error
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._pending: set[asyncio.Future[Any]] = set()
        self._dead = False
        self._death: StoreError | None = None  # why the worker stopped, for later callers

    @property
    def pending(self) -> int:
        """Work (called or posted) not yet committed and reported back to the loop."""
        return len(self._pending)

    async def open(self) -> None:
        """Start the worker thread and create or check the schema.

        Raises:
            StoreError: the file cannot be opened or was written by a newer companyd.
        """
        # Not a daemon thread: at interpreter exit Python joins it, so queued history rows are
        # written even if the loop stopped before awaiting them.
        self._thread = threading.Thread(target=self._work, name="routines.sqlite", daemon=False)
        self._thread.start()
        await self.call(self._init)

    def _init(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        _check_version(self.path, version)
        # One statement at a time: executescript() would COMMIT the batch's transaction.
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    async def call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` in the worker thread; return its result once committed.

        If the caller is cancelled, ``fn`` still runs (history writes are not abandoned
        half-way); only its result is dropped.
        """
        result: T = await self._submit(fn)
        return result

    def post(self, fn: Callable[[sqlite3.Connection], Any]) -> None:
        """Queue ``fn(conn)`` without waiting; must be called on the event loop's thread."""
        self._submit(fn).add_done_callback(self._posted_done)

    def _submit(self, fn: Callable[[sqlite3.Connection], Any]) -> asyncio.Future[Any]:
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._put(fn, fut)
        afut = asyncio.wrap_future(fut)
        self._pending.add(afut)
        afut.add_done_callback(self._pending.discard)
        return afut

    def _posted_done(self, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            log.error("routines.sqlite write failed: %r", exc)
            if self._on_error is not None:
                self._on_error(exc)

    async def drain(self) -> None:
        """Wait until every called or posted function has run."""
        while self._pending:
            await asyncio.wait(set(self._pending))

    async def close(self) -> None:
        """Finish queued work, close the connection and stop the thread."""
        if self._thread is None:
            return
        self._queue.put(None)
        thread, self._thread = self._thread, None
        await asyncio.to_thread(thread.join)
        self._pending.clear()

    def _put(
        self, fn: Callable[[sqlite3.Connection], Any], fut: concurrent.futures.Future[Any]
    ) -> None:
        if self._dead and self._death is not None:
            raise self._death
        if self._thread is None or self._dead:
            raise StoreError(f"routines.sqlite at {str(self.path)!r} is not open")
        self._queue.put((fn, fut))
        if self._is_dead():  # the worker died between the check and the put: fail it here
            self._fail_all(self._death or StoreError(f"{str(self.path)!r} is closed"))

    def _is_dead(self) -> bool:
        # A method, not the attribute: the worker thread flips it concurrently.
        return self._dead

    # -- worker thread ----------------------------------------------------------------

    def _work(self) -> None:
        try:
            conn = self._connect()
        except Exception as exc:
            self._death = StoreError(
                f"cannot open {str(self.path)!r}: {exc}; check that the state directory "
                "is writable by the daemon's user and the disk is not full"
            )
            self._dead = True
            self._fail_all(self._death)
            return
        try:
            while True:
                item = self._queue.get()
                if item is None:
                    break
                batch = [item]
                stop = False
                while len(batch) < 1000:
                    try:
                        nxt = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None:
                        stop = True
                        break
                    batch.append(nxt)
                self._run_batch(conn, batch)
                if stop:
                    break
        finally:
            conn.close()
            self._dead = True
            self._fail_all(StoreError(f"routines.sqlite at {str(self.path)!r} is closed"))

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: transactions are explicit (BEGIN/COMMIT in _run_batch).
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=10.0)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Job]) -> None:
        results: list[tuple[concurrent.futures.Future[Any], bool, Any]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for fn, fut in batch:
                conn.execute("SAVEPOINT op")
                try:
                    value = fn(conn)
                except Exception as exc:
                    conn.execute("ROLLBACK TO op")
                    conn.execute("RELEASE op")
                    results.append((fut, False, exc))
                else:
                    conn.execute("RELEASE op")
                    results.append((fut, True, value))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            err = StoreError(
                f"routines.sqlite at {str(self.path)!r}: {exc}; check free disk space and the "
                "file's permissions"
            )
            for _fn, fut in batch:
                _settle(fut, False, err)
            return
        for fut, ok, value in results:
            _settle(fut, ok, value)

    def _fail_all(self, err: BaseException) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                _settle(item[1], False, err)


def _settle(fut: concurrent.futures.Future[Any], ok: bool, value: Any) -> None:
    # A caller cancelled while waiting has cancelled its future; the work was done anyway.
    try:
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)
    except concurrent.futures.InvalidStateError:
        pass
