"""The stores' one write transaction (``companyd._sqlite.transaction``), on both backends:
committed when the block ends, rolled back when it raises (a ``BaseException`` too) or
when its ``COMMIT`` fails, the write lock taken at once, the connection usable afterwards.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from companyd._sqlite import store_errors, transaction
from companyd.storage import Backend, StoreDatabase, open_database

STEPS = (
    "CREATE TABLE parent (id INTEGER PRIMARY KEY)",
    # deferred: a child without its parent is refused by the COMMIT, not by the INSERT
    "CREATE TABLE child (id INTEGER PRIMARY KEY, parent INTEGER NOT NULL "
    "REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)",
)


def _db(backend: Backend, path: Path, *, worker: bool = False) -> StoreDatabase:
    return open_database(
        backend,
        path=path,
        store="txn",
        migrations=STEPS,
        what="transaction test store",
        timeout=0.0 if backend.kind == "sqlite" else 5.0,  # SQLite: a held lock fails at once
        worker=worker,
    )


@pytest.fixture
def db(state_backend: Backend, tmp_path: Path) -> Any:
    database = _db(state_backend, tmp_path / "txn.sqlite")
    # SQLite checks foreign keys only when asked (a no-op on PostgreSQL)
    database.run_sync(lambda c: c.execute("PRAGMA foreign_keys = ON"))
    yield database
    database.close_sync()


def _parents(db: StoreDatabase) -> list[int]:
    return [int(r[0]) for r in db.run_sync(lambda c: c.execute("SELECT id FROM parent"))]


def _open(db: StoreDatabase) -> bool:
    return bool(db.run_sync(lambda c: c.in_transaction))


def test_the_block_is_committed_when_it_ends(db: StoreDatabase) -> None:
    def write(c: Any) -> str:
        with transaction(c):
            c.execute("INSERT INTO parent (id) VALUES (1)")
            assert c.in_transaction
            return "returned"  # a return out of the block commits too

    assert db.run_sync(write) == "returned"
    assert _parents(db) == [1] and not _open(db)


@pytest.mark.parametrize(
    "error", [ValueError("bad row"), asyncio.CancelledError(), KeyboardInterrupt()], ids=repr
)
def test_a_block_that_raises_is_rolled_back_and_the_error_kept(
    db: StoreDatabase, error: BaseException
) -> None:
    # one job, one connection throughout (on PostgreSQL the pool would roll back what a job
    # left open when it hands the connection back, hiding a helper that did not)
    def job(c: Any) -> bool:
        with pytest.raises(type(error)) as raised, transaction(c):
            c.execute("INSERT INTO parent (id) VALUES (2)")
            raise error
        assert raised.value is error
        left_open = bool(c.in_transaction)
        _insert_parent(c, 3)  # the connection is usable: the next transaction commits
        return left_open

    assert db.run_sync(job) is False
    assert _parents(db) == [3] and not _open(db)


def test_a_failing_commit_is_rolled_back_and_raised(db: StoreDatabase) -> None:
    def job(c: Any) -> bool:
        with pytest.raises(store_errors()), transaction(c):
            c.execute("INSERT INTO parent (id) VALUES (4)")
            c.execute("INSERT INTO child (id, parent) VALUES (1, 99)")  # no parent 99
        # SQLite keeps the transaction open after a refused COMMIT (PostgreSQL ends it)
        left_open = bool(c.in_transaction)
        _insert_parent(c, 5)
        return left_open

    assert db.run_sync(job) is False
    assert _parents(db) == [5] and not _open(db)


def test_the_write_lock_is_taken_before_the_block_runs(
    state_backend: Backend, tmp_path: Path
) -> None:
    """``BEGIN IMMEDIATE``: a second writer of the store is held off before the block has
    written anything; with ``immediate=False`` (``BEGIN``) on SQLite it is not.
    """
    path = tmp_path / "lock.sqlite"
    first, second = _db(state_backend, path), _db(state_backend, path, worker=True)
    try:
        first.open_sync()
        second.open_sync()
        held: dict[bool, bool] = {}
        for immediate in (True, False):

            def inside(c: Any, immediate: bool = immediate) -> None:
                with transaction(c, immediate=immediate):
                    held[immediate] = second.run_sync(_other_writer_is_held_off)

            first.run_sync(inside)
    finally:
        first.close_sync()
        second.close_sync()
    assert held[True] is True
    # on PostgreSQL every BEGIN takes the store's lock; on SQLite BEGIN waits for a write
    assert held[False] is (state_backend.kind == "postgres")


# -- helpers ----------------------------------------------------------------------------


def _insert_parent(c: Any, pid: int) -> None:
    with transaction(c):
        c.execute("INSERT INTO parent (id) VALUES (?)", (pid,))


def _other_writer_is_held_off(c: Any) -> bool:
    """Whether this connection's ``BEGIN IMMEDIATE`` is refused at once (the lock is held
    elsewhere); when it is not, its empty transaction is rolled back.
    """
    if not isinstance(c, sqlite3.Connection):
        c.execute("SET lock_timeout = '200ms'")
    try:
        c.execute("BEGIN IMMEDIATE")
    except store_errors():
        return True
    finally:
        if not isinstance(c, sqlite3.Connection):
            c.execute("SET lock_timeout = 0")
    c.execute("ROLLBACK")
    return False
