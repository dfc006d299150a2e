"""The routine history's tables and the SQL that reads and writes them, on either backend.

routines.sqlite: each routine's schedule cursor and the history of every fire.

One database file in the state directory — or, with ``state.backend: postgres``, the
``routines`` tables of the company's PostgreSQL schema (docs/storage.md) — owned by the
running scheduler through :class:`companyd.scheduler._store.RoutineStore` (its one writer);
schema versions are one list for both backends (:data:`STEPS`). The functions here take
the connection they run on (the writer's, or a reader's) and are written in the SQL both
backends read (:mod:`companyd.storage._dialect`). Readers (``companyd jobs`` with no
daemon, or beside one) open their own read-only connection (:func:`read_history`); WAL mode
lets them read while the daemon writes. The values stored are :mod:`companyd.scheduler._records`.

Tables:

``routine_state`` — one row per enabled routine:
    ``trigger`` the schedule's identity (``repr`` of the APScheduler trigger, time zone
    included); ``cursor`` the latest fire time (epoch seconds) the scheduler has dealt with, or
    the moment the routine was armed when it has not fired yet — on start, every fire time
    after the cursor and not later than now was missed while the daemon was down;
    ``last_fire`` the latest fire time; ``memory_marker`` what the ``memory_changed``
    precondition compares against.

``routine_guard`` — a routine's runaway guards (:mod:`companyd.scheduler._guards`): paused
    after failures in a row, its last resume, the day its daily limit was last told.

``clean_stop`` — at most one row, written when the daemon stops on purpose (SIGTERM,
    ``systemctl restart``) and removed by the next start, which thereby knows that the fire
    times since ``at`` fell in a planned stop, not in a crash.

``fires`` — one row per fire (or, for a long outage, one row standing for ``fires`` fire
    times): routine, agent, kind (``scheduled`` | ``catch_up`` | ``manual`` | ``webhook``), fire
    time, when the scheduler dispatched it (``fired``), when the run started and ended,
    outcome (NULL while waiting or running), reason, cost, run id and task id.

Durability: WAL with ``synchronous=NORMAL``: a committed write survives a crash of the
process (it is in the OS's hands); the last few commits may be lost on power failure, which
at worst re-offers one catch-up decision. The cursor of a fire is committed *before* its
task is submitted (:func:`claim_fire`), so a restart never runs the same fire time twice;
the fire's row follows in the next batch, and a fire whose row a crash prevented is
recorded at the next start (:func:`close_unrecorded`), so none goes missing either.

Claiming a fire: before a scheduled or catch-up fire runs, :func:`claim_fire` moves the
routine's cursor to its fire time only if the cursor is still before it — under the store's
``BEGIN IMMEDIATE`` (the file's write lock; on PostgreSQL the store's advisory lock, taken
by every daemon of the company). Two schedulers racing for the same fire time (a leader and
one that believes it leads, on one database) therefore see exactly one claim succeed; the
other does not run the fire and writes nothing about it. Only the winner queues the fire's
row (in the next batch, as before).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from companyd._sqlite import Migration, SchemaTooNew, check_version, connect_readonly, store_errors
from companyd.errors import CompanydError
from companyd.scheduler import _ids
from companyd.scheduler._records import FireRecord, RoutineState, RoutineStats
from companyd.storage import (
    SQLITE,
    Backend,
    Connection,
    Dialects,
    open_database,
    sqlite_migrations,
)

__all__ = [
    "DB_NAME",
    "HINT",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "STEPS",
    "STORE",
    "STORE_STEPS",
    "WEBHOOK_ID_KEEP_S",
    "WHAT",
    "FireRecord",
    "RoutineState",
    "RoutineStats",
    "Stmt",
    "StoreError",
    "advance_cursor",
    "advance_cursor_stmt",
    "claim_fire",
    "claim_webhook_id",
    "clean_stop",
    "clear_clean_stop",
    "close_interrupted",
    "close_unrecorded",
    "delete_states",
    "finish_fire",
    "finish_fire_stmt",
    "fires_between",
    "insert_fire_stmt",
    "insert_fires",
    "latest_fires",
    "latest_scheduled",
    "load_states",
    "mark_clean_stop",
    "open_fires",
    "open_readonly",
    "prune_idle",
    "put_state",
    "read_history",
    "recent_fires",
    "routine_stats",
    "set_marker",
    "start_fire_stmt",
]

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

# The same tables on PostgreSQL: times and money DOUBLE PRECISION (PostgreSQL's REAL is
# four bytes: epoch seconds would lose their minutes), counts BIGINT, the id an identity.
_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS routine_state (
    routine       TEXT PRIMARY KEY,
    trigger       TEXT NOT NULL,
    cursor        DOUBLE PRECISION NOT NULL,
    last_fire     DOUBLE PRECISION,
    memory_marker TEXT,
    updated       DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS fires (
    id        BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    fire_id   TEXT NOT NULL UNIQUE,
    routine   TEXT NOT NULL,
    agent     TEXT NOT NULL,
    kind      TEXT NOT NULL CHECK (kind IN ('scheduled', 'catch_up', 'manual')),
    scheduled DOUBLE PRECISION NOT NULL,
    fired     DOUBLE PRECISION,
    started   DOUBLE PRECISION,
    ended     DOUBLE PRECISION,
    outcome   TEXT,
    reason    TEXT,
    cost_usd  DOUBLE PRECISION NOT NULL DEFAULT 0,
    run_id    TEXT,
    task_id   TEXT,
    fires     BIGINT NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS clean_stop (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    at     DOUBLE PRECISION NOT NULL,
    reason TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS fires_by_routine ON fires (routine, scheduled);
CREATE INDEX IF NOT EXISTS fires_open ON fires (outcome) WHERE outcome IS NULL;
"""

#: Version 2: the runaway guards of routines (scheduler/_guards.py): a routine paused after
#: failures in a row (``reason``, ``paused_since``), its last resume (``resumed_at``) and the
#: day its daily run limit was last told (``limit_day``). SQL both backends read.
_GUARDS = """
CREATE TABLE IF NOT EXISTS routine_guard (
    routine      TEXT PRIMARY KEY,
    reason       TEXT,
    paused_since DOUBLE PRECISION,
    resumed_at   DOUBLE PRECISION,
    limit_day    TEXT
);
"""

#: Version 3: fires started by a routine's webhook (kind ``webhook``) and the webhook ids
#: already accepted (``webhook_ids``: a replay of the same ``webhook-id`` runs nothing twice;
#: docs/triggers.md). SQLite cannot change a CHECK constraint in place: the table is rebuilt
#: (same columns, same order, same ids).
_WEBHOOKS_SQLITE = """
CREATE TABLE fires_v3 (
    id        INTEGER PRIMARY KEY,
    fire_id   TEXT NOT NULL UNIQUE,
    routine   TEXT NOT NULL,
    agent     TEXT NOT NULL,
    kind      TEXT NOT NULL CHECK (kind IN ('scheduled', 'catch_up', 'manual', 'webhook')),
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
INSERT INTO fires_v3 SELECT * FROM fires;
DROP TABLE fires;
ALTER TABLE fires_v3 RENAME TO fires;
CREATE INDEX IF NOT EXISTS fires_by_routine ON fires (routine, scheduled);
CREATE INDEX IF NOT EXISTS fires_open ON fires (outcome) WHERE outcome IS NULL;
CREATE TABLE IF NOT EXISTS webhook_ids (
    routine    TEXT NOT NULL,
    webhook_id TEXT NOT NULL,
    received   REAL NOT NULL,
    fire_id    TEXT NOT NULL,
    PRIMARY KEY (routine, webhook_id)
);
"""
_WEBHOOKS_PG = """
ALTER TABLE fires DROP CONSTRAINT IF EXISTS fires_kind_check;
ALTER TABLE fires ADD CONSTRAINT fires_kind_check
    CHECK (kind IN ('scheduled', 'catch_up', 'manual', 'webhook'));
CREATE TABLE IF NOT EXISTS webhook_ids (
    routine    TEXT NOT NULL,
    webhook_id TEXT NOT NULL,
    received   DOUBLE PRECISION NOT NULL,
    fire_id    TEXT NOT NULL,
    PRIMARY KEY (routine, webhook_id)
);
"""

#: The schema on both backends, one entry per version (companyd.storage).
STEPS: tuple[Dialects | str, ...] = (
    Dialects(sqlite=_SCHEMA, postgres=_PG_SCHEMA),
    _GUARDS,
    Dialects(sqlite=_WEBHOOKS_SQLITE, postgres=_WEBHOOKS_PG),
)
#: The SQLite text of :data:`STEPS`, one entry per ``PRAGMA user_version``.
MIGRATIONS: tuple[Migration, ...] = sqlite_migrations(STEPS)
SCHEMA_VERSION = len(MIGRATIONS)
#: The store's name on PostgreSQL (its migration row and advisory lock).
STORE = "routines"
WHAT = "routine history"
HINT = ", or move the file away to start a fresh routine history"


#: This store's file in the state directory → the schema steps this code knows (what
#: ``companyd run`` checks before any store opens: companyd.ops._upgrade, docs/upgrade.md).
STORE_STEPS: dict[str, int] = {DB_NAME: len(STEPS)}

_FIRE_COLUMNS = (
    "fire_id, routine, agent, kind, scheduled, fired, started, ended, outcome, reason, "
    "cost_usd, run_id, task_id, fires"
)


class StoreError(CompanydError):
    """routines.sqlite (or the routine history's PostgreSQL tables) cannot be opened, read
    or written.
    """


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
# CASE, not SQLite's two-argument MAX (PostgreSQL has GREATEST instead; neither reads both)
_ADVANCE = (
    "UPDATE routine_state SET cursor = CASE WHEN cursor > ? THEN cursor ELSE ? END, "
    "last_fire = CASE WHEN last_fire > ? THEN last_fire ELSE ? END, updated = ? "
    "WHERE routine = ?"
)
_CLAIM = (
    "UPDATE routine_state SET cursor = ?, "
    "last_fire = CASE WHEN last_fire > ? THEN last_fire ELSE ? END, updated = ? "
    "WHERE routine = ? AND cursor < ?"
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
    return (_ADVANCE, (fire_time, fire_time, fire_time, fire_time, now, routine))


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


def load_states(conn: Connection) -> dict[str, RoutineState]:
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


def recent_fires(conn: Connection, routine: str, limit: int) -> list[FireRecord]:
    """The latest ``limit`` fires of ``routine``, newest first."""
    rows = conn.execute(
        f"SELECT {_FIRE_COLUMNS} FROM fires WHERE routine = ? "
        "ORDER BY scheduled DESC, id DESC LIMIT ?",
        (routine, limit),
    ).fetchall()
    return [_record(r) for r in rows]


def latest_fires(conn: Connection) -> dict[str, FireRecord]:
    """Each routine's most recently recorded *finished* fire."""
    rows = conn.execute(
        f"SELECT {_FIRE_COLUMNS} FROM fires WHERE id IN ("
        "  SELECT MAX(id) FROM fires WHERE outcome IS NOT NULL GROUP BY routine)"
    ).fetchall()
    return {r[1]: _record(r) for r in rows}


def latest_scheduled(conn: Connection, routines: Iterable[str]) -> dict[str, FireRecord]:
    """Each of ``routines``' latest scheduled or catch-up fire (by fire time, then id), for
    those that have one (a backup routine's retake at start reads it).
    """
    found = {}
    for routine in routines:
        row = conn.execute(
            f"SELECT {_FIRE_COLUMNS} FROM fires WHERE routine = ? "
            "AND kind IN ('scheduled', 'catch_up') ORDER BY scheduled DESC, id DESC LIMIT 1",
            (routine,),
        ).fetchone()
        if row is not None:
            found[routine] = _record(row)
    return found


def open_fires(conn: Connection) -> list[FireRecord]:
    """Fires that are waiting or running (outcome not yet known)."""
    rows = conn.execute(
        f"SELECT {_FIRE_COLUMNS} FROM fires WHERE outcome IS NULL ORDER BY id"
    ).fetchall()
    return [_record(r) for r in rows]


def fires_between(
    conn: Connection, start: float, end: float, routine: str | None = None
) -> list[FireRecord]:
    """Fires scheduled in ``[start, end]``, oldest first."""
    sql = f"SELECT {_FIRE_COLUMNS} FROM fires WHERE scheduled >= ? AND scheduled <= ?"
    args: list[Any] = [start, end]
    if routine is not None:
        sql += " AND routine = ?"
        args.append(routine)
    rows = conn.execute(sql + " ORDER BY scheduled, id", args).fetchall()
    return [_record(r) for r in rows]


def routine_stats(conn: Connection, since: float) -> dict[str, RoutineStats]:
    """Per routine: due runs and ``ok`` runs among scheduled and catch-up fires at or after
    ``since`` that have finished (manual runs, ``idle`` fires and fire times that fell in a
    planned stop excluded).
    """
    rows = conn.execute(
        "SELECT routine, SUM(fires), SUM(CASE WHEN outcome = 'ok' THEN fires ELSE 0 END), "
        "SUM(CASE WHEN outcome = 'unverified' THEN fires ELSE 0 END) "
        "FROM fires WHERE scheduled >= ? AND kind != 'manual' AND outcome IS NOT NULL "
        "AND outcome NOT IN ('idle', 'stopped') GROUP BY routine",
        (since,),
    ).fetchall()
    return {
        r[0]: RoutineStats(routine=r[0], due=int(r[1]), ok=int(r[2]), unverified=int(r[3]))
        for r in rows
    }


def unverified_in_a_row(conn: Connection, routine: str) -> int:
    """How many of ``routine``'s latest finished runs in a row ended ``unverified`` (fires
    that ran no task — idle, skipped, missed, stopped — neither break nor extend the row).
    """
    n = 0
    for (outcome,) in conn.execute(
        "SELECT outcome FROM fires WHERE routine = ? AND outcome IS NOT NULL AND outcome NOT IN "
        "('idle', 'skipped', 'missed', 'stopped') ORDER BY ended DESC, id DESC LIMIT 100",
        (routine,),
    ):
        if outcome != "unverified":
            break
        n += 1
    return n


def insert_fires(conn: Connection, records: Iterable[FireRecord]) -> None:
    """Add ``records`` to the history."""
    conn.executemany(_INSERT_FIRE, [r._row() for r in records])


def finish_fire(
    conn: Connection,
    fire_id: str,
    *,
    outcome: str,
    reason: str | None,
    ended: float,
    cost_usd: float = 0.0,
    run_id: str | None = None,
) -> None:
    """Record how a fire ended (:func:`finish_fire_stmt`, at once)."""
    sql, params = finish_fire_stmt(
        fire_id, outcome=outcome, reason=reason, ended=ended, cost_usd=cost_usd, run_id=run_id
    )
    conn.execute(sql, params)


def advance_cursor(conn: Connection, routine: str, fire_time: float, now: float) -> None:
    """Move ``routine``'s cursor (and last fire) forward to ``fire_time``; never back."""
    conn.execute(*advance_cursor_stmt(routine, fire_time, now))


def claim_fire(conn: Connection, routine: str, fire_time: float, now: float) -> bool:
    """Claim ``routine``'s fire at ``fire_time``: move its cursor (and last fire) to it, only
    if the cursor is still before it; whether it was claimed.

    Run it under the store's ``BEGIN IMMEDIATE`` (every :class:`RoutineStore` batch is):
    of two schedulers claiming the same fire time on one database, exactly one gets True.
    False also when the routine has no state row (it was removed meanwhile).
    """
    t = fire_time
    return bool(conn.execute(_CLAIM, (t, t, t, now, routine, t)).rowcount == 1)


_PUT_STATE = (
    "INSERT INTO routine_state (routine, trigger, cursor, last_fire, memory_marker, updated) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (routine) DO UPDATE SET trigger = excluded.trigger,"
    " cursor = {cursor}, last_fire = {last_fire},"
    " memory_marker = excluded.memory_marker, updated = excluded.updated"
)
#: the stored value when it is ahead under the same trigger (a claim committed meanwhile)
_AHEAD = (
    "CASE WHEN routine_state.trigger = excluded.trigger AND routine_state.{col} > "
    "COALESCE(excluded.{col}, routine_state.{col} - 1) THEN routine_state.{col} "
    "ELSE excluded.{col} END"
)
_PUT = _PUT_STATE.format(cursor="excluded.cursor", last_fire="excluded.last_fire")
_PUT_FORWARD = _PUT_STATE.format(
    cursor=_AHEAD.format(col="cursor"), last_fire=_AHEAD.format(col="last_fire")
)


def put_state(conn: Connection, state: RoutineState, *, forward: bool = False) -> None:
    """Write ``state`` as its routine's row (replacing the one there).

    ``forward``: a stored cursor (and last fire) ahead of ``state``'s under the same
    trigger is kept — a start writes what it planned from the history it read, and a claim
    another scheduler committed since (docs/ha.md) must not be undone, or the fire time it
    claimed could be claimed again.
    """
    conn.execute(
        _PUT_FORWARD if forward else _PUT,
        (
            state.routine,
            state.trigger,
            state.cursor,
            state.last_fire,
            state.memory_marker,
            state.updated,
        ),
    )


def set_marker(conn: Connection, routine: str, marker: str, now: float) -> None:
    """Set the memory marker ``routine``'s ``memory_changed`` precondition compares against."""
    conn.execute(
        "UPDATE routine_state SET memory_marker = ?, updated = ? WHERE routine = ?",
        (marker, now, routine),
    )


#: How long an accepted ``webhook-id`` is remembered: far beyond the 5 minutes a signed
#: request is valid for (an older replay fails its signature's timestamp check anyway).
WEBHOOK_ID_KEEP_S = 7 * 86400.0


def claim_webhook_id(
    conn: Connection, routine: str, webhook_id: str, fire_id: str, now: float
) -> str | None:
    """Remember ``webhook_id`` for ``routine`` as fire ``fire_id``; None if it is new, else
    the fire id it was first accepted as (a replay: nothing is to run). Ids older than
    :data:`WEBHOOK_ID_KEEP_S` are forgotten on the way.
    """
    conn.execute("DELETE FROM webhook_ids WHERE received < ?", (now - WEBHOOK_ID_KEEP_S,))
    cur = conn.execute(
        "INSERT INTO webhook_ids (routine, webhook_id, received, fire_id) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (routine, webhook_id) DO NOTHING",
        (routine, webhook_id, now, fire_id),
    )
    if cur.rowcount == 1:
        return None
    row = conn.execute(
        "SELECT fire_id FROM webhook_ids WHERE routine = ? AND webhook_id = ?",
        (routine, webhook_id),
    ).fetchone()
    return str(row[0]) if row else fire_id


def mark_clean_stop(conn: Connection, at: float, reason: str) -> None:
    """Record that the daemon stops on purpose at ``at`` (see ``clean_stop`` above)."""
    conn.execute(
        "INSERT INTO clean_stop (id, at, reason) VALUES (1, ?, ?) "
        "ON CONFLICT (id) DO UPDATE SET at = excluded.at, reason = excluded.reason",
        (at, reason),
    )


def clean_stop(conn: Connection) -> tuple[float, str] | None:
    """The planned stop recorded by the last run, ``(at, reason)``, or None (a crash, a
    kill -9, or a first start).
    """
    row = conn.execute("SELECT at, reason FROM clean_stop WHERE id = 1").fetchone()
    return (float(row[0]), str(row[1])) if row else None


def clear_clean_stop(conn: Connection) -> None:
    """Remove the planned-stop marker (the start that read it decided on it)."""
    conn.execute("DELETE FROM clean_stop")


def delete_states(conn: Connection, routines: Iterable[str]) -> None:
    """Forget the cursors of ``routines`` (removed or disabled)."""
    conn.executemany("DELETE FROM routine_state WHERE routine = ?", [(r,) for r in routines])


def prune_idle(conn: Connection, before: float) -> int:
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
    conn: Connection,
    now: float,
    reason: str,
    *,
    keep: Collection[str] = (),
    reasons: Mapping[str, str] | None = None,
) -> list[FireRecord]:
    """Mark every fire left waiting or running by a previous run of the scheduler as
    ``cancelled``, except the fire ids in ``keep`` (their runs were resumed). ``reasons``
    gives some routines (backup routines) a reason of their own instead of ``reason``.
    """
    why = reasons or {}
    left = [r for r in open_fires(conn) if r.fire_id not in keep]
    conn.executemany(
        "UPDATE fires SET outcome = 'cancelled', reason = ?, ended = ? WHERE fire_id = ?",
        [(why.get(r.routine, reason), now, r.fire_id) for r in left],
    )
    return left


def close_unrecorded(
    conn: Connection,
    now: float,
    reason: str,
    agents: Mapping[str, str],
    reasons: Mapping[str, str] | None = None,
) -> list[FireRecord]:
    """Add a ``cancelled`` row for each routine whose last fire has no row.

    A scheduled fire commits its cursor (and ``last_fire``) first and its row in the next
    batch, so a process that died between the two left the cursor ahead of the history: the
    fire was dispatched — and is not run again — but not recorded. ``agents`` maps routine
    slugs to assignees (a routine no longer in company.yaml gets ``"?"``); ``reasons`` gives
    some routines (backup routines, whose backup is taken again) a reason of their own.
    """
    why = reasons or {}
    rows = conn.execute(
        "SELECT s.routine, s.last_fire FROM routine_state s WHERE s.last_fire IS NOT NULL "
        "AND NOT EXISTS (SELECT 1 FROM fires f WHERE f.routine = s.routine "
        "AND f.scheduled = s.last_fire AND f.kind NOT IN ('manual', 'webhook'))"
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
            reason=why.get(routine, reason),
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
        check_version(path, version, SCHEMA_VERSION, what=WHAT, hint=HINT)
    except SchemaTooNew as exc:
        conn.close()
        raise StoreError(str(exc)) from None
    return conn


#: PostgreSQL's "undefined_table": the schema has no routine history yet.
_UNDEFINED_TABLE = "42P01"


def read_history(
    path: Path, fn: Callable[[Connection], T], *, backend: Backend = SQLITE
) -> T | None:
    """``fn(conn)`` on a read-only connection to the routine history, or None when there
    is none yet: the file ``path`` (:func:`open_readonly`) on ``sqlite``, the company's
    schema on ``postgres`` (read-only: no migration, nothing created).

    Raises:
        StoreError: the history exists but cannot be read, or is from a newer companyd.
    """
    if backend.kind == "sqlite":
        conn = open_readonly(path)
        if conn is None:
            return None
        with contextlib.closing(conn):
            return fn(conn)
    from companyd.storage import StoreAbsent  # PostgreSQL only: its driver is loaded

    database = open_database(
        backend,
        path=None,
        store=STORE,
        migrations=STEPS,
        what=WHAT,
        readonly=True,
        hint="",  # HINT is about the file
        worker=False,
    )
    try:
        return database.run_sync(fn)
    except StoreAbsent:
        return None  # no daemon has written this company's history yet
    except SchemaTooNew as exc:
        raise StoreError(str(exc)) from None
    except store_errors() as exc:
        if getattr(exc, "sqlstate", None) == _UNDEFINED_TABLE:
            return None  # no daemon has written this company's history yet
        raise StoreError(
            f"cannot read the routine history in {database.path}: {exc}; check that the "
            "database is reachable and that the URL in the company's state.dsn_env (or "
            "state.dsn_credential) names it"
        ) from exc
    finally:
        database.close_sync()
