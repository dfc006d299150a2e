"""Leadership on a real PostgreSQL server: one leader, takeovers, the lease, fencing."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

import companyd
from companyd.clock import Clock, ManualClock, SystemClock
from companyd.storage import Backend, Fence, Fenced, PgConnection, PgDatabase, open_database
from companyd.storage._leadership import Leadership, LostLeadership
from companyd.storage._postgres import lock_key

from .linkproxy import LinkProxy

pytestmark = pytest.mark.anyio

ITEMS = ("CREATE TABLE items (id BIGINT PRIMARY KEY, name TEXT NOT NULL)",)


def _lead(
    backend: Backend,
    node: str,
    *,
    clock: Clock | None = None,
    lease: float = 2.0,
    dsn: str | None = None,
) -> Leadership:
    assert backend.dsn is not None
    return Leadership(
        dsn or backend.dsn,
        backend.schema,
        node=node,
        clock=clock or SystemClock(),
        lease=lease,
        poll=0.1,
    )


def _items(backend: Backend, fence: Fence | None) -> PgDatabase:
    db = open_database(
        dataclasses.replace(backend, fence=fence),
        path=None,
        store="items",
        migrations=ITEMS,
        what="item store",
    )
    assert isinstance(db, PgDatabase)
    return db


def _insert(conn: PgConnection, item: int) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("INSERT INTO items (id, name) VALUES (?, ?)", (item, f"item {item}"))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _count(conn: PgConnection) -> int:
    return int(conn.execute("SELECT count(*) FROM items").fetchone()[0])


async def _sql(backend: Backend, query: str, *params: Any) -> list[tuple[Any, ...]]:
    assert backend.dsn is not None
    async with await psycopg.AsyncConnection.connect(backend.dsn, autocommit=True) as conn:
        cur = await conn.execute(query, params)
        return await cur.fetchall() if cur.description else []


async def _holders(backend: Backend) -> list[int]:
    key = lock_key(backend.schema, "leader")
    rows = await _sql(
        backend,
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
        "AND classid::bigint = %s AND objid::bigint = %s",
        (key >> 32) & 0xFFFFFFFF,
        key & 0xFFFFFFFF,
    )
    return [int(r[0]) for r in rows]


async def _until(check: Any, what: str, seconds: float = 30.0) -> Any:
    """Poll ``await check()`` until truthy, for at most ``seconds``."""
    async with asyncio.timeout(seconds):
        while not (result := await check()):
            await asyncio.sleep(0.05)
    assert result, what
    return result


async def _backend_pid(backend: Backend) -> int:
    rows = await _sql(backend, f"SELECT backend_pid FROM {backend.schema}.companyd_leader")
    return int(rows[0][0])


async def _end_lock_session(backend: Backend) -> None:
    """Terminate the leader's lock session, as an operator or the server would."""
    await _sql(backend, "SELECT pg_terminate_backend(%s)", await _backend_pid(backend))


async def _standbys_tried(backend: Backend, leader: str, standbys: int) -> bool:
    """Whether every standby's lock session has asked about the lock since ``leader`` won
    (its last query names the leadership table).
    """
    rows = await _sql(
        backend,
        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE "
        "'companyd leader n%%' AND application_name <> %s "
        "AND query LIKE '%%companyd_leader%%'",
        f"companyd leader {leader}",
    )
    return int(rows[0][0]) >= standbys


def _leading(lead: Leadership) -> bool:
    """``lead.leading`` read anew (mypy would narrow the property across awaits)."""
    return lead.leading


async def test_exactly_one_of_three_leads_and_each_resignation_hands_over_with_the_next_epoch(
    pg_backend: Backend,
) -> None:
    leads = [_lead(pg_backend, f"n{i}") for i in range(3)]
    tasks = {asyncio.create_task(lead.campaign()): lead for lead in leads}
    epochs: list[int] = []
    try:
        while tasks:
            async with asyncio.timeout(30):
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            assert len(done) == 1
            task = done.pop()
            winner = tasks.pop(task)
            epochs.append(task.result())

            await _until(
                lambda: _standbys_tried(pg_backend, winner.node, len(tasks)),  # noqa: B023
                "every standby tried",
            )
            assert not any(t.done() for t in tasks)  # they are still standbys
            holders = await _holders(pg_backend)
            assert holders == [await _backend_pid(pg_backend)]
            for standby in tasks.values():
                info = await standby.who()
                assert info is not None
                assert (info.node, info.epoch, info.pid) == (winner.node, epochs[-1], os.getpid())
                assert not _leading(standby) and standby.fence.epoch is None
            assert winner.leading and winner.fence.epoch == epochs[-1]
            await winner.resign()
            assert not _leading(winner) and winner.fence.deposed
        assert await leads[0].who() is None  # nobody holds the lock
    finally:
        for t in tasks:
            t.cancel()
        for lead in leads:
            await lead.close()
    assert epochs == [1, 2, 3]
    with pytest.raises(RuntimeError, match="closed"):
        await leads[0].who()


async def test_hold_returns_on_resign_and_a_standby_leads_with_the_next_epoch(
    pg_backend: Backend,
) -> None:
    a, b = _lead(pg_backend, "a"), _lead(pg_backend, "b")
    try:
        async with asyncio.timeout(30):
            first = await a.campaign()
            holding = asyncio.create_task(a.hold())
            standby = asyncio.create_task(b.campaign())
            await _until(lambda: b.who(), "b sees a leader")
            assert not standby.done() and not holding.done()
            await a.resign()
            await holding  # returns
            assert await standby == first + 1
        info = await a.who()
        assert info is not None and (info.node, info.epoch) == ("b", first + 1)
    finally:
        await a.close()
        await b.close()


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from companyd.clock import SystemClock
    from companyd.storage._leadership import Leadership

    async def main():
        lead = Leadership(sys.argv[1], sys.argv[2], node="child", clock=SystemClock(),
                          lease=2.0, poll=0.1)
        print(await lead.campaign(), flush=True)
        await lead.hold()

    asyncio.run(main())
    """
)


async def test_a_standby_takes_over_from_a_leader_process_killed_with_sigkill(
    pg_backend: Backend,
) -> None:
    assert pg_backend.dsn is not None
    src = str(Path(companyd.__file__).resolve().parents[1])
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CHILD,
        pg_backend.dsn,
        pg_backend.schema,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": src},
    )
    standby = _lead(pg_backend, "standby")
    try:
        async with asyncio.timeout(60):
            assert proc.stdout is not None
            child_epoch = int(await proc.stdout.readline())
        task = asyncio.create_task(standby.campaign())
        info = await _until(lambda: standby.who(), "the child leads")
        assert (info.node, info.pid, info.epoch) == ("child", proc.pid, child_epoch)
        assert not task.done()
        proc.kill()
        async with asyncio.timeout(30):
            await proc.wait()
            assert await task == child_epoch + 1
        info = await standby.who()
        assert info is not None and (info.node, info.epoch) == ("standby", child_epoch + 1)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await standby.close()


async def test_a_terminated_lock_session_ends_hold_and_a_standby_leads(
    pg_backend: Backend,
) -> None:
    a, b = _lead(pg_backend, "a"), _lead(pg_backend, "b")
    try:
        async with asyncio.timeout(30):
            first = await a.campaign()
            holding = asyncio.create_task(a.hold())
            await _end_lock_session(pg_backend)
            with pytest.raises(LostLeadership, match="lock connection broke"):
                await holding
            assert not _leading(a) and a.fence.deposed and a.epoch is None
            assert await b.campaign() == first + 1
    finally:
        await a.close()
        await b.close()


async def test_a_leader_whose_link_died_is_replaced_fenced_and_deposes_itself(
    pg_backend: Backend, pg_cluster: Any
) -> None:
    """The leader's link freezes (its session stays open on the server): the standby sees
    no renewal for longer than the lease, ends that session and leads. The old leader,
    whose clock has not yet told it, still believes it leads — and its writes are refused
    by the database. When its lease runs out on its own clock, hold() says so.
    """
    clock = ManualClock()
    async with LinkProxy(pg_cluster.port) as link:
        # a's lease is what b waits out on the server's clock, in real time; a itself runs
        # on the ManualClock, so none of its own bounds can fire early on a busy machine
        a = _lead(pg_backend, "a", clock=clock, dsn=link.dsn(pg_cluster.dsn), lease=0.5)
        b = _lead(pg_backend, "b")
        db = _items(pg_backend, a.fence)
        try:
            async with asyncio.timeout(60):
                first = await a.campaign()
                await db.run(lambda c: _insert(c, 1))
                holding = asyncio.create_task(a.hold())
                await _until(lambda: asyncio.sleep(0, clock.sleepers), "hold sleeps")
                link.freeze()
                assert await b.campaign() == first + 1
                assert a.leading  # it cannot know yet
                with pytest.raises(Fenced, match=f"epoch {first}, but epoch {first + 1}"):
                    await db.run(lambda c: _insert(c, 2))
                assert await db.run(_count) == 1  # reads still work; nothing landed
                clock.advance(a.lease / 3)  # the renewal goes out into the dead link
                await _until(lambda: asyncio.sleep(0, clock.sleepers), "renewal waits")
                clock.advance(a.lease)
                with pytest.raises(LostLeadership, match=r"within 0\.5 s"):
                    await holding
                assert not _leading(a) and a.fence.deposed
                with pytest.raises(Fenced, match="lost leadership"):
                    await db.run(lambda c: _insert(c, 3))
            info = await b.who()
            assert info is not None and (info.node, info.epoch) == ("b", first + 1)
        finally:
            await db.close()
            await a.close()
            await b.close()


async def test_a_deposed_leaders_writes_fail_with_fenced_while_its_reads_work(
    pg_backend: Backend,
) -> None:
    a, b = _lead(pg_backend, "a"), _lead(pg_backend, "b")
    db = _items(pg_backend, a.fence)
    try:
        async with asyncio.timeout(30):
            first = await a.campaign()
            await db.run(lambda c: _insert(c, 1))
            await db.run(lambda c: c.execute("INSERT INTO items VALUES (2, 'autocommit')"))
            # a's lock session ends behind its back; it has not noticed (no hold running)
            await _end_lock_session(pg_backend)
            assert await b.campaign() == first + 1
            assert a.fence.epoch == first and not a.fence.deposed
            with pytest.raises(Fenced) as caught:
                await db.run(lambda c: _insert(c, 3))
            assert (caught.value.epoch, caught.value.current, caught.value.node) == (
                first,
                first + 1,
                "b",
            )
            with pytest.raises(Fenced):  # a write outside a transaction is fenced too
                await db.run(lambda c: c.execute("INSERT INTO items VALUES (4, 'autocommit')"))
            assert await db.run(_count) == 2
            assert await db.run(lambda c: c.in_transaction) is False
        unfenced = _items(pg_backend, b.fence)
        try:
            await unfenced.run(lambda c: _insert(c, 5))  # the new leader writes
            assert await unfenced.run(_count) == 3
        finally:
            await unfenced.close()
    finally:
        await db.close()
        await a.close()
        await b.close()


async def test_a_write_in_flight_when_leadership_moves_commits_before_the_new_epoch(
    pg_backend: Backend,
) -> None:
    """The old leader's write that passed its check holds the epoch row until it
    commits: the new leader's epoch bump waits for it, then its next write is refused.
    """
    a, b = _lead(pg_backend, "a", lease=30.0), _lead(pg_backend, "b", lease=30.0)
    db = _items(pg_backend, a.fence)
    began, release = threading.Event(), threading.Event()

    def slow_write(conn: PgConnection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO items (id, name) VALUES (1, 'in flight')")
        began.set()
        assert release.wait(30)
        conn.execute("COMMIT")

    try:
        async with asyncio.timeout(60):
            first = await a.campaign()
            await db.open()
            writing = db.submit(slow_write)
            assert await asyncio.to_thread(began.wait, 30)
            await _end_lock_session(pg_backend)
            taking = asyncio.create_task(b.campaign())

            async def bump_waits() -> bool:
                rows = await _sql(
                    pg_backend,
                    "SELECT 1 FROM pg_stat_activity WHERE application_name = "
                    "'companyd leader b' AND wait_event_type = 'Lock'",
                )
                return bool(rows)

            await _until(bump_waits, "the epoch bump waits for the write")
            assert not taking.done()
            release.set()
            await asyncio.wrap_future(writing)  # committed under the old epoch
            assert await taking == first + 1
            with pytest.raises(Fenced):
                await db.run(lambda c: _insert(c, 2))
            assert await db.run(lambda c: c.execute("SELECT id FROM items").fetchall()) == [(1,)]
    finally:
        release.set()
        await db.close()
        await a.close()
        await b.close()


async def test_a_write_of_the_old_epoch_stuck_in_its_transaction_is_ended_by_the_new_leader(
    pg_backend: Backend,
) -> None:
    a, b = _lead(pg_backend, "a"), _lead(pg_backend, "b", lease=1.0)
    db = _items(pg_backend, a.fence)
    began, release = threading.Event(), threading.Event()

    def stuck_write(conn: PgConnection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO items (id, name) VALUES (1, 'stuck')")
        began.set()
        release.wait(60)
        conn.execute("COMMIT")

    try:
        async with asyncio.timeout(60):
            first = await a.campaign()
            await db.open()
            writing = db.submit(stuck_write)
            assert await asyncio.to_thread(began.wait, 30)
            await a.resign()
            assert await b.campaign() == first + 1
            release.set()
            with pytest.raises(psycopg.OperationalError):
                await asyncio.wrap_future(writing)
            assert await db.run(_count) == 0
    finally:
        release.set()
        await db.close()
        await a.close()
        await b.close()


async def test_hold_without_an_epoch_and_bad_settings_are_refused(pg_backend: Backend) -> None:
    a = _lead(pg_backend, "a")
    try:
        with pytest.raises(LostLeadership, match="campaign first"):
            await a.hold()
    finally:
        await a.close()
    assert pg_backend.dsn is not None
    with pytest.raises(ValueError, match="lease must be"):
        Leadership(pg_backend.dsn, "s", node="n", clock=SystemClock(), lease=0)
    with pytest.raises(ValueError, match="poll must be"):
        Leadership(pg_backend.dsn, "s", node="n", clock=SystemClock(), poll=-1)


def test_a_fence_takes_no_part_in_a_backends_equality_or_repr() -> None:
    plain = Backend(kind="postgres", dsn="postgresql://x@127.0.0.1/db", schema="acme")
    fenced = dataclasses.replace(plain, fence=Fence(epoch=3))
    assert plain == fenced and repr(plain) == repr(fenced)


async def test_a_campaign_cancelled_while_taking_over_lets_the_lock_go(
    pg_backend: Backend,
) -> None:
    a, b = _lead(pg_backend, "a", lease=30.0), _lead(pg_backend, "b", lease=30.0)
    db = _items(pg_backend, a.fence)
    began, release = threading.Event(), threading.Event()

    def slow_write(conn: PgConnection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        began.set()
        assert release.wait(30)
        conn.execute("COMMIT")

    try:
        async with asyncio.timeout(60):
            await a.campaign()
            await db.open()
            writing = db.submit(slow_write)
            assert await asyncio.to_thread(began.wait, 30)
            await _end_lock_session(pg_backend)
            taking = asyncio.create_task(b.campaign())
            b_pid = 0

            async def b_holds_and_waits() -> bool:
                nonlocal b_pid
                rows = await _sql(
                    pg_backend,
                    "SELECT pid FROM pg_stat_activity WHERE application_name = "
                    "'companyd leader b' AND wait_event_type = 'Lock'",
                )
                b_pid = int(rows[0][0]) if rows else 0
                return bool(rows)

            await _until(b_holds_and_waits, "b holds the lock, its bump waits")
            assert await _holders(pg_backend) == [b_pid]
            taking.cancel()
            with pytest.raises(asyncio.CancelledError):
                await taking
            await _until(lambda: _no_holders(pg_backend), "b let the lock go")
            release.set()
            await asyncio.wrap_future(writing)
    finally:
        release.set()
        await db.close()
        await a.close()
        await b.close()


async def _no_holders(backend: Backend) -> bool:
    return not await _holders(backend)
