"""The run journal's on-disk format: its tables and their migrations.

``runs.sqlite`` is versioned with ``PRAGMA user_version`` (:mod:`companyd._sqlite`): entry
*n* of :data:`MIGRATIONS` takes a file from version *n* to *n + 1*. A file from before
versions existed is at 0 and already has migration 1's tables, which migration 1 creates
only if missing. Add a migration at the end; never edit one that has shipped (a journal
written by an older companyd must open in a newer one).
"""

from __future__ import annotations

from companyd._sqlite import Migration

__all__ = ["MIGRATIONS"]

_SCHEMA = """
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
    kind TEXT NOT NULL,           -- llm | tool_start | tool_result | approval | review
    key TEXT,                     -- tool_use id for tool steps
    payload TEXT NOT NULL,
    ts REAL NOT NULL,
    PRIMARY KEY (run_id, seq)
);
"""

#: Version 2: the thread of runs (``reply_to``), who asked (``asked_by`` run, ``asked_in``
#: tool call) and the indexes the transcript, the filters and the retention read by.
_THREADS = """
ALTER TABLE runs ADD COLUMN reply_to TEXT;
ALTER TABLE runs ADD COLUMN asked_by TEXT;
ALTER TABLE runs ADD COLUMN asked_in TEXT;
CREATE INDEX runs_by_started ON runs(started);
CREATE INDEX runs_by_routine ON runs(routine, started);
CREATE INDEX runs_by_ended ON runs(ended);
DROP INDEX IF EXISTS runs_by_state;
CREATE INDEX runs_by_state_started ON runs(state, started);
CREATE INDEX runs_by_reply ON runs(reply_to) WHERE reply_to IS NOT NULL;
CREATE INDEX runs_by_asker ON runs(asked_by) WHERE asked_by IS NOT NULL;
CREATE INDEX tasks_by_state_updated ON tasks(state, updated);
"""

#: The journal's schema, one entry per ``PRAGMA user_version`` (see companyd._sqlite).
MIGRATIONS: tuple[Migration, ...] = (_SCHEMA, _THREADS)
