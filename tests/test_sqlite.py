"""The one SQLite owner (src/companyd/_sqlite.py): migrations keyed by PRAGMA user_version,
a newer file refused, one worker thread for all the work, errors that keep their SQLite
codes (so a full disk is told apart), private files whatever the umask.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from companyd._fs import is_disk_failure
from companyd._sqlite import (
    Database,
    DatabaseClosed,
    Migration,
    SchemaTooNew,
    apply_migrations,
    statements,
)

V1 = """
CREATE TABLE a (id INTEGER PRIMARY KEY, text TEXT NOT NULL);  -- a comment; with a semicolon
CREATE INDEX a_text ON a (text);
"""
V2 = "ALTER TABLE a ADD COLUMN extra TEXT; INSERT INTO a (text, extra) VALUES ('x;y', 'v2')"


def version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def tables(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()


def test_statements_split_on_whole_statements_only() -> None:
    assert statements(V2) == [
        "ALTER TABLE a ADD COLUMN extra TEXT;",
        "INSERT INTO a (text, extra) VALUES ('x;y', 'v2');",
    ]
    assert len(statements(V1)) == 2


@pytest.mark.anyio
async def test_migrations_apply_in_order_once_each(tmp_path: Path) -> None:
    path = tmp_path / "state" / "x.sqlite"
    db = Database(path, migrations=[V1])
    async with asyncio.timeout(10):
        await db.open()
        await db.run(lambda c: c.execute("INSERT INTO a (text) VALUES ('one')"))
        mode = await db.run(lambda c: c.execute("PRAGMA journal_mode").fetchone()[0])
        sync = await db.run(lambda c: c.execute("PRAGMA synchronous").fetchone()[0])
        await db.close()
    assert (version(path), mode, sync) == (1, "wal", 1)  # NORMAL by default

    def v3(conn: sqlite3.Connection) -> None:
        conn.execute("UPDATE a SET extra = 'v3' WHERE extra IS NULL")

    later: list[Migration] = [V1, V2, v3]
    db = Database(path, migrations=later, synchronous="FULL")
    async with asyncio.timeout(10):
        rows = await db.run(lambda c: c.execute("SELECT text, extra FROM a ORDER BY id").fetchall())
        sync = await db.run(lambda c: c.execute("PRAGMA synchronous").fetchone()[0])
        await db.close()
    assert rows == [("one", "v3"), ("x;y", "v2")] and sync == 2  # FULL
    assert version(path) == 3
    # opening again applies nothing (V2's INSERT would add a row)
    db = Database(path, migrations=later)
    db.open_sync()
    assert db.run_sync(lambda c: c.execute("SELECT COUNT(*) FROM a").fetchone()[0]) == 2
    db.close_sync()


def test_each_migration_is_one_transaction(tmp_path: Path) -> None:
    path = tmp_path / "x.sqlite"
    broken = "CREATE TABLE b (id INTEGER); INSERT INTO nowhere VALUES (1)"
    db = Database(path, migrations=[V1, broken])
    with pytest.raises(sqlite3.OperationalError, match="nowhere"):
        db.open_sync()
    db.close_sync()
    # migration 1 stayed applied, migration 2 left nothing behind
    assert version(path) == 1 and tables(path) == {"a"}


def test_a_file_from_a_newer_companyd_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "x.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 7")
    conn.close()
    db = Database(path, migrations=[V1], what="the test store", hint=", or move it aside")
    with pytest.raises(SchemaTooNew) as caught:
        db.open_sync()
    db.close_sync()
    assert str(caught.value) == (
        f"the test store {str(path)!r} has schema version 7, newer than this companyd "
        "understands (1); upgrade companyd, or move it aside"
    )
    assert isinstance(caught.value, sqlite3.DatabaseError)
    assert version(path) == 7 and tables(path) == set()
    reader = Database(path, migrations=[V1], readonly=True)
    with pytest.raises(SchemaTooNew, match="schema version 7"):
        reader.open_sync()
    reader.close_sync()


def test_apply_migrations_on_a_connection_returns_the_old_version(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "x.sqlite", isolation_level=None)
    assert apply_migrations(conn, [V1]) == 0
    assert apply_migrations(conn, [V1, V2]) == 1
    assert apply_migrations(conn, [V1, V2]) == 2
    conn.close()


@pytest.mark.anyio
async def test_all_work_runs_on_one_worker_thread(tmp_path: Path) -> None:
    db = Database(tmp_path / "x.sqlite", migrations=[V1], thread_name="the-owner")
    loop_thread = threading.get_ident()
    async with asyncio.timeout(10):
        seen = {await db.run(lambda c: threading.get_ident()) for _ in range(5)}
        names = await db.run(lambda c: threading.current_thread().name)
        # run_sync from another thread hands the work over; on the worker it runs at once
        # (no deadlock waiting for itself)
        other = await asyncio.to_thread(db.run_sync, lambda c: threading.get_ident())
        nested = await db.run(lambda c: db.run_sync(lambda c2: (c2 is c, db.on_worker)))
        conn = await db.run(lambda c: c)
        with pytest.raises(sqlite3.ProgrammingError, match="thread"):
            conn.execute("SELECT 1")  # the connection is the worker's alone
        assert not db.on_worker
        await db.close()
        with pytest.raises(DatabaseClosed, match="closed"):
            await db.run(lambda c: None)
    assert len(seen) == 1 and loop_thread not in seen and {other} == seen
    assert names.startswith("the-owner") and nested == (True, True)


@pytest.mark.anyio
async def test_errors_keep_their_sqlite_code_so_a_full_disk_is_told_apart(
    tmp_path: Path,
) -> None:
    db = Database(tmp_path / "x.sqlite", migrations=[V1])

    def fill(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA max_page_count = 20")  # the "disk" is full at 20 pages
        for _ in range(200):
            conn.execute("INSERT INTO a (text) VALUES (?)", ("x" * 4000,))

    async with asyncio.timeout(10):
        with pytest.raises(sqlite3.OperationalError) as full:
            await db.run(fill)
        with pytest.raises(sqlite3.OperationalError) as other:
            await db.run(lambda c: c.execute("SELECT nothing FROM nowhere"))
        await db.close()
    assert is_disk_failure(full.value)
    assert not is_disk_failure(other.value)
    # a store's own error raised from it is a disk failure too (its cause is kept)
    try:
        raise RuntimeError("the store could not write") from full.value
    except RuntimeError as wrapped:
        assert is_disk_failure(wrapped)


@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_files_are_private_whatever_the_umask(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "deep" / "state" / "x.sqlite"
    db = Database(path, migrations=[V1])
    db.open_sync()
    db.run_sync(lambda c: c.execute("INSERT INTO a (text) VALUES ('x')"))
    files = {p.name: stat.S_IMODE(p.stat().st_mode) for p in path.parent.iterdir()}
    db.close_sync()
    assert files["x.sqlite"] == 0o600 and files.get("x.sqlite-wal") == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_in_memory_and_a_fresh_start_after_a_file_was_set_aside(tmp_path: Path) -> None:
    mem = Database(None, migrations=[V1])
    assert mem.run_sync(lambda c: c.execute("PRAGMA user_version").fetchone()[0]) == 1
    mem.close_sync()
    path = tmp_path / "x.sqlite"
    path.write_bytes(b"not a database at all" * 200)
    db = Database(path, migrations=[V1])

    def start_over(conn: sqlite3.Connection | None = None) -> int:
        try:
            db.open_sync()
        except sqlite3.DatabaseError:
            db.reset()
            os.replace(path, path.with_suffix(".corrupt"))
            db.open_sync()
        return int(db.connection.execute("PRAGMA user_version").fetchone()[0])

    assert db.executor.submit(start_over).result(timeout=10) == 1
    db.open_sync(memory=True)  # degrade to memory (the alert outbox's last resort)
    assert db.run_sync(lambda c: c.execute("PRAGMA database_list").fetchone()[2]) == ""
    db.close_sync()
    db.close_sync()  # idempotent


def test_the_synchronous_path_belongs_to_the_thread_that_opened_it(tmp_path: Path) -> None:
    db = Database(tmp_path / "x.sqlite", migrations=[V1], worker=False)
    db.open_sync()
    here = threading.get_ident()
    assert db.run_sync(lambda c: threading.get_ident()) == here  # no thread crossing
    assert db.run_sync(lambda c: c.execute("PRAGMA user_version").fetchone()[0]) == 1
    elsewhere: list[BaseException] = []

    def other() -> None:
        try:
            db.run_sync(lambda c: None)
        except RuntimeError as exc:
            elsewhere.append(exc)

    t = threading.Thread(target=other)
    t.start()
    t.join(10)
    assert elsewhere and "no worker thread" in str(elsewhere[0])
    db.close_sync()
    with pytest.raises(DatabaseClosed):
        db.run_sync(lambda c: None)
