"""Files written by companyd before the stores shared one SQLite owner open unchanged.

Each store's file is created here exactly as the code before companyd._sqlite created it
(the schemas below are copied from that code: ``git show 17215ca:<module>``): the ledger
and the run journal had no ``user_version`` (0), the routine history and the alert outbox
were at 1. The new code opens each one, reads what was in it, writes to it, and leaves it
at version 1 with the same schema (migration 1 creates only what is missing). The
proposal store's case is in tests/desk/test_improver.py.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from companyd.alerts._outbox import MIGRATIONS as OUTBOX_MIGRATIONS
from companyd.alerts._outbox import AlertStore
from companyd.runs import Journal, Task
from companyd.runs._journal import MIGRATIONS as JOURNAL_MIGRATIONS
from companyd.scheduler import _store as routines
from companyd.scheduler._store import RoutineStore
from companyd.spend._ledger import Ledger

pytestmark = pytest.mark.anyio

OLD_LEDGER = """
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
"""

OLD_JOURNAL = """
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    payload TEXT NOT NULL,
    state TEXT NOT NULL,          -- queued | running | done | quarantined
    crashes INTEGER NOT NULL DEFAULT 0,
    errors TEXT NOT NULL DEFAULT '[]',
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_by_agent_state ON tasks(agent, state);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    routine TEXT,
    attempt INTEGER NOT NULL DEFAULT 1,
    state TEXT NOT NULL,          -- running | one of RunStatus
    reason TEXT,
    answer TEXT NOT NULL DEFAULT '',
    started REAL NOT NULL,
    ended REAL,
    cost TEXT NOT NULL DEFAULT '0',
    steps INTEGER NOT NULL DEFAULT 0,
    models TEXT NOT NULL DEFAULT '[]',
    offline INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_by_agent ON runs(agent, started);
CREATE INDEX IF NOT EXISTS runs_by_state ON runs(state);
CREATE INDEX IF NOT EXISTS runs_by_task ON runs(task_id);
CREATE TABLE IF NOT EXISTS paused (
    agent TEXT PRIMARY KEY,
    reason TEXT NOT NULL,
    budget INTEGER NOT NULL DEFAULT 0,
    since REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS steps (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,           -- llm | tool_start | tool_result
    key TEXT,                     -- tool_use id for tool steps
    payload TEXT NOT NULL,
    ts REAL NOT NULL,
    PRIMARY KEY (run_id, seq)
);
"""

OLD_ROUTINES = """
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

OLD_ALERTS = """
CREATE TABLE IF NOT EXISTS alerts (
    id          INTEGER PRIMARY KEY,
    key         TEXT NOT NULL,
    window_end  REAL NOT NULL,
    settled     INTEGER NOT NULL,
    created     REAL NOT NULL,
    body        TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS alerts_active ON alerts (settled, window_end);
"""


def old_file(
    path: Path, schema: str, user_version: int, *rows: tuple[str, tuple[object, ...]]
) -> None:
    """What the old code left: WAL, its schema, its version, and some rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(schema)
    if user_version:
        conn.execute(f"PRAGMA user_version={user_version}")
    for sql, params in rows:
        conn.execute(sql, params)
    conn.close()


def version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def migrated_keeping(path: Path, before: list[tuple[str, str]], migrations: int) -> bool:
    """``path`` is at the latest version, and every table it had is still there as it was
    (later migrations add tables, columns or indexes; ALTER TABLE … ADD COLUMN rewrites the
    stored CREATE statement, so a table whose columns grew is compared by name).
    """
    after = schema_of(path)
    names_after = {name for name, sql in after if sql and sql.startswith("CREATE TABLE")}
    names_before = {name for name, sql in before if sql and sql.startswith("CREATE TABLE")}
    return version(path) == migrations and names_before <= names_after


def schema_of(path: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
    finally:
        conn.close()


def test_an_old_spend_ledger(tmp_path: Path) -> None:
    path = tmp_path / "spend.sqlite"
    old_file(
        path,
        OLD_LEDGER,
        0,
        ("INSERT INTO meta VALUES ('schema', '1')", ()),
        ("INSERT INTO meta VALUES ('day', '2026-11-20')", ()),
        (
            "INSERT INTO raises (scope, day, amount_pusd, ts) VALUES (?, ?, ?, ?)",
            ("company", "2026-11-20", 5, 1.0),
        ),
    )
    before = schema_of(path)
    reader = Ledger(path, readonly=True)  # the CLI beside an old daemon
    assert reader.raises("2026-11-20") == {"company": 5}
    reader.close()
    led = Ledger(path)
    try:
        assert led.get_meta("day") == "2026-11-20"
        assert led.raises("2026-11-20") == {"company": 5}
        led.add_raise("company", "2026-11-20", 7, 2.0)
        assert led.raises("2026-11-20") == {"company": 12}
    finally:
        led.close()
    assert version(path) == 1 and schema_of(path) == before


async def test_an_old_run_journal(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    task = Task(id="task-1", agent="ceo", prompt="p", source="operator", created=1.0)
    old_file(
        path,
        OLD_JOURNAL,
        0,
        (
            "INSERT INTO tasks (id, agent, payload, state, created, updated) "
            "VALUES (?, ?, ?, 'queued', 1.0, 1.0)",
            (task.id, task.agent, json.dumps(task.to_dict())),
        ),
    )
    before = schema_of(path)
    journal = Journal(path)
    async with asyncio.timeout(10):
        await journal.open()
        assert [t.id for t in await journal.queued_tasks("ceo")] == ["task-1"]
        await journal.set_paused("ceo", "why", False, 2.0)
        assert await journal.paused() == {"ceo": ("why", False)}
        await journal.close()
    # migrated to the latest version (2 added the threads of runs), nothing of it lost
    assert migrated_keeping(path, before, len(JOURNAL_MIGRATIONS))


async def test_an_old_routine_history(tmp_path: Path) -> None:
    path = tmp_path / routines.DB_NAME
    old_file(
        path,
        OLD_ROUTINES,
        1,
        (
            "INSERT INTO fires (fire_id, routine, agent, kind, scheduled, outcome) "
            "VALUES ('fire-1', 'r', 'coo', 'scheduled', 10.0, 'ok')",
            (),
        ),
    )
    before = schema_of(path)
    store = RoutineStore(path)
    async with asyncio.timeout(10):
        await store.open()
        got = await store.call(lambda c: [r.fire_id for r in routines.recent_fires(c, "r", 5)])
        await store.close()
    assert got == ["fire-1"]
    # migrated to the latest version (2 added the routines' runaway guards), nothing lost
    assert migrated_keeping(path, before, len(routines.MIGRATIONS))


async def test_an_old_alert_outbox_is_not_set_aside(tmp_path: Path) -> None:
    path = tmp_path / "alerts.sqlite"
    body = {"kind": "k", "severity": "info", "source": "s", "first_ts": 1.0, "last_ts": 1.0}
    old_file(
        path,
        OLD_ALERTS,
        1,
        (
            "INSERT INTO alerts (id, key, window_end, settled, created, body) "
            "VALUES (3, 'k', 5.0, 0, 1.0, ?)",
            (json.dumps(body),),
        ),
    )
    before = schema_of(path)
    store = AlertStore(path)
    async with asyncio.timeout(10):
        assert await store.open() is None  # no note: the file is the outbox
        records, next_id = await store.load_active(0.0)
        await store.close()
    assert [r.id for r in records] == [3] and next_id == 4
    assert sorted(p.name for p in tmp_path.iterdir() if "corrupt" in p.name) == []
    # migrated to the latest version (2 added the delivery threads), nothing of it lost
    assert migrated_keeping(path, before, len(OUTBOX_MIGRATIONS))
