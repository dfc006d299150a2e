"""routines.sqlite: one writer thread, batches with savepoints, readers beside it."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from companyd.scheduler import store as db
from companyd.scheduler.store import FireRecord, RoutineStore, StoreError

pytestmark = pytest.mark.anyio


def fire(
    n: int,
    outcome: str | None = "ok",
    *,
    routine: str = "r",
    kind: str = "scheduled",
    fires: int = 1,
) -> FireRecord:
    return FireRecord(
        fire_id=f"fire-{n}",
        routine=routine,
        agent="coo",
        kind=kind,
        scheduled=1000.0 + n,
        outcome=outcome,
        reason=None if outcome in ("ok", None) else "why",
        fires=fires,
    )


async def test_wal_mode_and_a_reader_beside_the_writer(tmp_path: Path) -> None:
    store = RoutineStore(tmp_path / "state" / db.DB_NAME)
    async with asyncio.timeout(10):
        await store.open()
        mode = await store.call(lambda c: c.execute("PRAGMA journal_mode").fetchone()[0])
        sync = await store.call(lambda c: c.execute("PRAGMA synchronous").fetchone()[0])
        await store.call(lambda c: db.insert_fires(c, [fire(1), fire(2, "failed")]))
        reader = db.open_readonly(store.path)
        assert reader is not None
        try:
            assert [r.fire_id for r in db.recent_fires(reader, "r", 10)] == ["fire-2", "fire-1"]
            with pytest.raises(sqlite3.OperationalError, match="readonly"):
                reader.execute("DELETE FROM fires")
        finally:
            reader.close()
        await store.close()
    assert mode == "wal"
    assert sync == 1  # NORMAL


async def test_a_failing_write_does_not_undo_its_neighbours(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    store = RoutineStore(tmp_path / db.DB_NAME, on_error=errors.append)

    def boom(c: sqlite3.Connection) -> None:
        db.insert_fires(c, [fire(2)])
        raise ValueError("half-done work must be rolled back")

    async with asyncio.timeout(10):
        await store.open()
        store.post(lambda c: db.insert_fires(c, [fire(1)]))
        store.post(boom)
        store.post(lambda c: db.insert_fires(c, [fire(3)]))
        await store.drain()
        got = await store.call(lambda c: [r.fire_id for r in db.recent_fires(c, "r", 10)])
        await store.close()
    assert got == ["fire-3", "fire-1"]
    assert len(errors) == 1 and isinstance(errors[0], ValueError)


async def test_a_newer_schema_is_refused_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / db.DB_NAME
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    store = RoutineStore(path)
    async with asyncio.timeout(10):
        with pytest.raises(StoreError, match=r"schema version 99.*upgrade companyd"):
            await store.open()
        await store.close()
    with pytest.raises(StoreError, match="schema version 99"):
        db.open_readonly(path)


async def test_an_unusable_state_dir_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("a file where the directory should be")
    store = RoutineStore(tmp_path / "state" / db.DB_NAME)
    async with asyncio.timeout(10):
        with pytest.raises(StoreError, match=r"cannot open .*state directory"):
            await store.open()
        with pytest.raises(StoreError, match="cannot open"):  # later callers learn why too
            await store.call(lambda c: None)
        await store.close()


async def test_stats_count_due_runs_only(tmp_path: Path) -> None:
    store = RoutineStore(tmp_path / db.DB_NAME)
    rows = [
        fire(1),
        fire(2, "failed"),
        fire(3, "idle"),  # not a due run
        fire(4, "ok", kind="manual"),  # not a due run
        fire(5, None),  # still running: not counted yet
        fire(6, "missed", fires=5),  # one row standing for five fire times
        fire(7, "ok", routine="other"),
    ]
    async with asyncio.timeout(10):
        await store.open()
        await store.call(lambda c: db.insert_fires(c, rows))
        stats = await store.call(lambda c: db.routine_stats(c, 0.0))
        later = await store.call(lambda c: db.routine_stats(c, 1003.5))
        latest = await store.call(db.latest_fires)
        await store.close()
    assert (stats["r"].due, stats["r"].ok) == (7, 1)
    assert stats["other"].success_rate == 1.0
    assert (later["r"].due, later["r"].ok) == (5, 0)
    assert latest["r"].fire_id == "fire-6"


async def test_statements_are_bulk_applied_and_a_bad_one_is_isolated(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    store = RoutineStore(tmp_path / db.DB_NAME, on_error=errors.append)
    state = db.RoutineState(routine="r", trigger="t", cursor=0.0)
    async with asyncio.timeout(10):
        await store.open()
        await store.call(lambda c: db.put_state(c, state))
        # One loop turn: these share a batch. The cursor only moves forward whatever the order.
        store.post_execute(db.insert_fire_stmt(fire(1)), db.advance_cursor_stmt("r", 5.0, 9.0))
        store.post_execute(db.insert_fire_stmt(fire(2)), db.advance_cursor_stmt("r", 3.0, 9.0))
        store.post_execute(db.insert_fire_stmt(fire(1)))  # duplicate fire id: rejected alone
        await store.drain()
        got = await store.call(lambda c: [r.fire_id for r in db.recent_fires(c, "r", 10)])
        cursor = await store.call(lambda c: db.load_states(c)["r"].cursor)
        await store.close()
    assert got == ["fire-2", "fire-1"]
    assert cursor == 5.0
    assert len(errors) == 1 and isinstance(errors[0], sqlite3.IntegrityError)


async def test_work_posted_behind_a_batch_waits_for_it_and_keeps_its_order(
    tmp_path: Path,
) -> None:
    # The scheduler waits only for a fire's cursor; its row is posted behind that batch. The
    # row must still be committed before anything written about it later (start, finish).
    store = RoutineStore(tmp_path / db.DB_NAME)
    state = db.RoutineState(routine="r", trigger="t", cursor=0.0)
    seen: list[tuple[str, int]] = []

    def count(label: str) -> Callable[[sqlite3.Connection], None]:
        def fn(c: sqlite3.Connection) -> None:
            seen.append((label, c.execute("SELECT COUNT(*) FROM fires").fetchone()[0]))

        return fn

    async with asyncio.timeout(10):
        await store.open()
        await store.call(lambda c: db.put_state(c, state))
        # What the scheduler does in one step: the row behind, the cursor now.
        store.post_execute_next(db.insert_fire_stmt(fire(1, None)))
        store.post_execute(db.advance_cursor_stmt("r", 1001.0, 9.0))
        store.post(count("with the cursor"))  # same batch as the cursor: no row yet
        await asyncio.sleep(0)  # the cursor's batch is handed over; the row is held
        assert store.pending == 3
        store.post(count("after"))  # submitted while held: goes after the row
        store.post_execute(db.finish_fire_stmt("fire-1", outcome="ok", reason=None, ended=5.0))
        await store.drain()
        cursor = await store.call(lambda c: db.load_states(c)["r"].cursor)
        assert store.pending == 0
        [row] = await store.call(lambda c: db.recent_fires(c, "r", 10))
        await store.close()
    assert seen == [("with the cursor", 0), ("after", 1)]
    assert row.outcome == "ok" and row.ended == 5.0
    assert cursor == 1001.0


async def test_close_writes_work_still_held_behind_a_batch(tmp_path: Path) -> None:
    store = RoutineStore(tmp_path / db.DB_NAME)
    async with asyncio.timeout(10):
        await store.open()
        store.post_execute_next(db.insert_fire_stmt(fire(1)))
        store.post(lambda c: None)
        await asyncio.sleep(0)
        await store.close()
    conn = db.open_readonly(tmp_path / db.DB_NAME)
    assert conn is not None
    try:
        assert [r.fire_id for r in db.recent_fires(conn, "r", 10)] == ["fire-1"]
    finally:
        conn.close()


async def test_a_cursor_ahead_of_the_history_is_closed_and_idle_rows_it_needs_are_kept(
    tmp_path: Path,
) -> None:
    store = RoutineStore(tmp_path / db.DB_NAME)
    async with asyncio.timeout(10):
        await store.open()

        def setup(c: sqlite3.Connection) -> None:
            for name, last in (("r", 1001.0), ("quiet", 1002.0), ("gone", 1003.0)):
                db.put_state(
                    c, db.RoutineState(routine=name, trigger="t", cursor=last, last_fire=last)
                )
            # r: its last fire has a row; quiet: its only row is an old idle one
            db.insert_fires(c, [fire(1), fire(2, "idle", routine="quiet"), fire(0, "idle")])

        await store.call(setup)
        pruned = await store.call(lambda c: db.prune_idle(c, 5000.0))
        added = await store.call(
            lambda c: db.close_unrecorded(c, 6000.0, "why", {"r": "coo", "quiet": "coo"})
        )
        again = await store.call(lambda c: db.close_unrecorded(c, 7000.0, "why", {}))
        await store.close()
    assert pruned == 1  # r's old idle row went; quiet's is its last fire and stays
    [rec] = added
    assert (rec.routine, rec.agent, rec.scheduled, rec.outcome, rec.reason) == (
        "gone",
        "?",
        1003.0,
        "cancelled",
        "why",
    )
    assert again == []
