"""routines.sqlite: one writer thread, batches with savepoints, readers beside it.

The tests that take ``state_backend`` run on both backends: the file, and the company's
schema on a throwaway PostgreSQL cluster (docs/storage.md).
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from companyd.scheduler import _guards as guards
from companyd.scheduler import _store as db
from companyd.scheduler._store import FireRecord, RoutineStore, StoreError
from companyd.storage import Backend
from companyd.storage._dialect import Connection

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


async def test_a_failing_write_does_not_undo_its_neighbours(
    tmp_path: Path, state_backend: Backend
) -> None:
    errors: list[BaseException] = []
    store = RoutineStore(tmp_path / db.DB_NAME, on_error=errors.append, backend=state_backend)

    def boom(c: Connection) -> None:
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


async def test_stats_count_due_runs_only(tmp_path: Path, state_backend: Backend) -> None:
    store = RoutineStore(tmp_path / db.DB_NAME, backend=state_backend)
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


async def test_statements_are_bulk_applied_and_a_bad_one_is_isolated(
    tmp_path: Path, state_backend: Backend
) -> None:
    errors: list[BaseException] = []
    store = RoutineStore(tmp_path / db.DB_NAME, on_error=errors.append, backend=state_backend)
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
    duplicate = (
        sqlite3.IntegrityError if state_backend.kind == "sqlite" else psycopg.errors.UniqueViolation
    )
    assert len(errors) == 1 and isinstance(errors[0], duplicate)


async def test_work_posted_behind_a_batch_waits_for_it_and_keeps_its_order(
    tmp_path: Path, state_backend: Backend
) -> None:
    # Statements posted behind a batch (a cancelled fire's closing UPDATE) must still be
    # committed before anything written about the same fire later (start, finish).
    store = RoutineStore(tmp_path / db.DB_NAME, backend=state_backend)
    state = db.RoutineState(routine="r", trigger="t", cursor=0.0)
    seen: list[tuple[str, int]] = []

    def count(label: str) -> Callable[[Connection], None]:
        def fn(c: Connection) -> None:
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


async def test_close_writes_work_still_held_behind_a_batch(
    tmp_path: Path, state_backend: Backend
) -> None:
    store = RoutineStore(tmp_path / db.DB_NAME, backend=state_backend)
    async with asyncio.timeout(10):
        await store.open()
        store.post_execute_next(db.insert_fire_stmt(fire(1)))
        store.post(lambda c: None)
        await asyncio.sleep(0)
        await store.close()
    got = db.read_history(
        tmp_path / db.DB_NAME,
        lambda c: [r.fire_id for r in db.recent_fires(c, "r", 10)],
        backend=state_backend,
    )
    assert got == ["fire-1"]


async def test_a_cursor_ahead_of_the_history_is_closed_and_idle_rows_it_needs_are_kept(
    tmp_path: Path, state_backend: Backend
) -> None:
    store = RoutineStore(tmp_path / db.DB_NAME, backend=state_backend)
    async with asyncio.timeout(10):
        await store.open()

        def setup(c: Connection) -> None:
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


def _claim(n: int, at: float, *, routine: str = "r") -> FireRecord:
    return FireRecord(
        fire_id=f"fire-{n}", routine=routine, agent="coo", kind="scheduled", scheduled=at, fired=at
    )


async def test_a_fire_time_is_claimed_once_and_the_cursor_never_moves_back(
    tmp_path: Path, state_backend: Backend
) -> None:
    store = RoutineStore(tmp_path / db.DB_NAME, backend=state_backend)
    state = db.RoutineState(routine="r", trigger="t", cursor=100.0)
    async with asyncio.timeout(10):
        await store.open()
        await store.call(lambda c: db.put_state(c, state))
        claims = []
        for rec in (
            _claim(1, 160.0),
            _claim(2, 160.0),  # the same fire time again: taken
            _claim(3, 150.0),  # before the cursor: dealt with already
            _claim(4, 220.0),
            _claim(5, 300.0, routine="gone"),  # no state: not claimed
        ):
            won = await store.call(
                functools.partial(
                    db.claim_fire, routine=rec.routine, fire_time=rec.scheduled, now=1.0
                )
            )
            if won:  # as the scheduler does: the row of a won claim follows
                store.post_execute(db.insert_fire_stmt(rec))
            claims.append(won)
        await store.execute(db.advance_cursor_stmt("r", 200.0, 2.0))  # never back
        after = await store.call(lambda c: db.load_states(c)["r"])
        rows = await store.call(lambda c: db.fires_between(c, 0.0, 1000.0))
        for at, why in ((5.0, "first"), (6.0, "systemctl restart")):
            await store.call(functools.partial(db.mark_clean_stop, at=at, reason=why))
        stop = await store.call(db.clean_stop)
        await store.call(db.clear_clean_stop)
        cleared = await store.call(db.clean_stop)
        await store.call(lambda c: db.set_marker(c, "r", "m1", 7.0))
        closed = await store.call(lambda c: db.close_interrupted(c, 8.0, "why", keep={"fire-4"}))
        still_open = await store.call(db.open_fires)
        await store.call(lambda c: db.delete_states(c, ["r"]))
        states = await store.call(db.load_states)
        await store.close()
    assert claims == [True, False, False, True, False]
    assert (after.cursor, after.last_fire, after.updated) == (220.0, 220.0, 2.0)
    assert [(r.fire_id, r.scheduled, r.outcome) for r in rows] == [
        ("fire-1", 160.0, None),
        ("fire-4", 220.0, None),
    ]
    assert stop == (6.0, "systemctl restart") and cleared is None
    assert [r.fire_id for r in closed] == ["fire-1"]
    assert [r.fire_id for r in still_open] == ["fire-4"]
    assert states == {}


async def test_two_schedulers_racing_for_the_same_fire_time_claim_it_once(
    tmp_path: Path, state_backend: Backend
) -> None:
    """Two daemons of one company on one database (on SQLite: two stores on one file), both
    claiming each fire time at the same moment, each on its own worker thread and its own
    connection: exactly one claim of each fire time succeeds, and each has one row.
    """
    path = tmp_path / db.DB_NAME
    stores = [RoutineStore(path, backend=state_backend) for _ in range(2)]
    times = [1000.0 + 60 * i for i in range(25)]
    async with asyncio.timeout(60):
        for store in stores:
            await store.open()
        state = db.RoutineState(routine="r", trigger="t", cursor=0.0)
        await stores[0].call(lambda c: db.put_state(c, state))
        won: list[list[bool]] = []
        for i, at in enumerate(times):
            claims = await asyncio.gather(
                *(
                    s.call(functools.partial(db.claim_fire, routine="r", fire_time=at, now=at))
                    for s in stores
                )
            )
            for k, (s, ours) in enumerate(zip(stores, claims, strict=True)):
                if ours:  # as the scheduler does: only the winner writes the fire's row
                    await s.execute(db.insert_fire_stmt(_claim(2 * i + k, at)))
            won.append(list(claims))
        rows = await stores[1].call(lambda c: db.fires_between(c, 0.0, 1e9))
        cursor = await stores[1].call(lambda c: db.load_states(c)["r"].cursor)
        for store in stores:
            await store.close()
    assert [sum(w) for w in won] == [1] * len(times)
    assert [r.scheduled for r in rows] == times  # one row per fire time, the winner's
    assert cursor == times[-1]


async def test_a_reader_reads_without_creating_anything(
    tmp_path: Path, state_backend: Backend
) -> None:
    """``companyd jobs`` with no daemon: nothing yet is None (no file, no tables made);
    after a daemon wrote, the reader sees its rows.
    """
    path = tmp_path / "state" / db.DB_NAME
    nothing = db.read_history(path, db.load_states, backend=state_backend)
    again = db.read_history(path, db.load_states, backend=state_backend)
    store = RoutineStore(path, backend=state_backend)
    async with asyncio.timeout(10):
        await store.open()
        await store.call(lambda c: db.insert_fires(c, [fire(1), fire(2, "failed")]))
        await store.close()
    got = db.read_history(
        path, lambda c: [r.fire_id for r in db.recent_fires(c, "r", 10)], backend=state_backend
    )
    assert nothing is None and again is None
    assert got == ["fire-2", "fire-1"]
    assert path.exists() == (state_backend.kind == "sqlite")  # postgres: no file at all


async def test_a_newer_schema_in_postgres_is_refused_with_what_to_do(
    tmp_path: Path, pg_backend: Backend
) -> None:
    store = RoutineStore(tmp_path / db.DB_NAME, backend=pg_backend)
    async with asyncio.timeout(10):
        await store.open()
        await store.close()
    assert pg_backend.dsn is not None
    with psycopg.connect(pg_backend.dsn, autocommit=True) as conn:
        conn.execute(
            f'UPDATE "{pg_backend.schema}".companyd_migrations SET version = 99 '
            "WHERE store = 'routines'"
        )
    again = RoutineStore(tmp_path / db.DB_NAME, backend=pg_backend)
    async with asyncio.timeout(10):
        with pytest.raises(StoreError, match=r"schema version 99.*upgrade companyd"):
            await again.open()
        with pytest.raises(StoreError, match="schema version 99"):  # later callers learn why
            await again.call(lambda c: None)
        await again.close()
    with pytest.raises(StoreError, match="schema version 99"):
        db.read_history(tmp_path / db.DB_NAME, db.load_states, backend=pg_backend)


async def test_the_runaway_guards_read_and_write_on_both_backends(
    tmp_path: Path, state_backend: Backend
) -> None:
    store = RoutineStore(tmp_path / db.DB_NAME, backend=state_backend)
    runs = [
        replace(fire(1, "ok"), started=1001.0, ended=1002.0),
        replace(fire(2, "failed"), started=1003.0, ended=1004.0),
        replace(fire(3, "skipped"), ended=1005.0),
        replace(fire(4, "unverified"), started=1006.0, ended=1007.0),
        replace(fire(5, "idle"), ended=1008.0),
    ]
    async with asyncio.timeout(20):
        await store.open()
        try:
            await store.call(lambda c: db.insert_fires(c, runs))
            assert await store.call(lambda c: guards.runs_between(c, "r", 1000.0, 1010.0)) == 3
            streak = await store.call(lambda c: guards.failure_streak(c, "r", None, 5))
            assert streak == [("unverified", "why"), ("failed", "why")]
            assert await store.call(lambda c: guards.failure_streak(c, "r", 1004.5, 5)) == [
                ("unverified", "why")
            ]
            await store.call(lambda c: guards.set_routine_paused(c, "r", "paused: why", 1009.0))
            assert await store.call(guards.paused_routines) == {"r": "paused: why"}
            assert await store.call(lambda c: guards.mark_limit_told(c, "r", "2027-01-04"))
            assert not await store.call(lambda c: guards.mark_limit_told(c, "r", "2027-01-04"))
            assert await store.call(lambda c: guards.resume_routine(c, "r", 1010.0))
            assert not await store.call(lambda c: guards.resume_routine(c, "r", 1011.0))
            assert await store.call(guards.paused_routines) == {}
            assert await store.call(lambda c: guards.guard_state(c, "r")) == (
                None,
                1011.0,
                "2027-01-04",
            )
        finally:
            await store.close()


async def test_webhook_ids_are_claimed_once_per_routine_on_both_backends(
    tmp_path: Path, state_backend: Backend
) -> None:
    store = RoutineStore(tmp_path / db.DB_NAME, backend=state_backend)
    async with asyncio.timeout(20):
        await store.open()
        try:
            first = await store.call(lambda c: db.claim_webhook_id(c, "pay", "m1", "f1", 10.0))
            again = await store.call(lambda c: db.claim_webhook_id(c, "pay", "m1", "f2", 11.0))
            other = await store.call(lambda c: db.claim_webhook_id(c, "ship", "m1", "f3", 12.0))
            # a webhook fire is a row of its own kind (the CHECK constraint takes it)
            await store.call(lambda c: db.insert_fires(c, [fire(1, kind="webhook")]))
            kinds = await store.call(lambda c: [r.kind for r in db.fires_between(c, 0, 5000)])
            # a week later the id is forgotten (a signature that old is refused anyway)
            late = 12.0 + db.WEBHOOK_ID_KEEP_S + 1
            reused = await store.call(lambda c: db.claim_webhook_id(c, "pay", "m1", "f4", late))
        finally:
            await store.close()
    assert (first, again, other) == (None, "f1", None)
    assert kinds == ["webhook"]
    assert reused is None


async def test_a_version_2_history_keeps_its_fires_when_it_learns_webhooks(
    tmp_path: Path,
) -> None:
    path = tmp_path / db.DB_NAME
    conn = sqlite3.connect(path)
    for script in db.MIGRATIONS[:2]:
        assert isinstance(script, str)
        conn.executescript(script)
    conn.execute("PRAGMA user_version = 2")
    conn.execute(
        "INSERT INTO fires (fire_id, routine, agent, kind, scheduled, outcome) "
        "VALUES ('fire-old', 'r', 'coo', 'manual', 5.0, 'ok')"
    )
    conn.commit()
    conn.close()
    store = RoutineStore(path)
    async with asyncio.timeout(20):
        await store.open()
        try:
            await store.call(lambda c: db.insert_fires(c, [fire(1, kind="webhook")]))
            rows = await store.call(lambda c: db.fires_between(c, 0, 5000))
        finally:
            await store.close()
    assert [(r.fire_id, r.kind) for r in rows] == [("fire-old", "manual"), ("fire-1", "webhook")]
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA user_version").fetchone()[0] == db.SCHEMA_VERSION == 3
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
