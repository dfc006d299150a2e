"""The alert outbox on both backends: SQLite (alerts.sqlite) and PostgreSQL (a company schema
on a throwaway cluster). The same calls give the same records, threads and follow-ups; on
PostgreSQL, where several daemons share the outbox, a queued alert's first send is claimed by
exactly one of them.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from companyd.alerts._outbox import (
    CLAIM_LEASE,
    MIGRATIONS,
    AlertRecord,
    AlertStore,
    Delivery,
    FollowUp,
    OutboxUnavailable,
)
from companyd.alerts._service import AlertService
from companyd.events import EventBus
from companyd.storage import Backend

from .test_alerts import TOKEN, Ctx, RecordingAdmin, harness, make_config, token_env

__all__ = ["token_env"]  # the fixture, used by name

pytestmark = pytest.mark.anyio

#: a supergroup's chat id: past 2³¹, BIGINT on PostgreSQL
CHAT = -1001234567890
T0 = 1_800_000_000.0


def record(rid: int, *, chat: int = CHAT, **data: object) -> AlertRecord:
    return AlertRecord(
        id=rid,
        key=f"crash|agent/cfo|{rid}",
        kind="child_exited",
        severity="warning",
        source="agent/cfo",
        data=dict(data),
        counts={"child_exited": 1},
        first_ts=T0,
        last_ts=T0,
        window_end=T0 + 60.0,
        text=f"cfo crashed ({rid})",
        deliveries={chat: Delivery()},
    )


def sent(rec: AlertRecord, message_id: int) -> AlertRecord:
    for d in rec.deliveries.values():
        d.message_id, d.state, d.sent_version = message_id, "sent", rec.version
    return rec


async def test_records_threads_and_follow_ups_are_the_same_on_both_backends(
    tmp_path: Path, state_backend: Backend
) -> None:
    store = AlertStore(tmp_path / "alerts.sqlite", backend=state_backend)
    assert await store.open() is None
    try:
        desk = record(1, item="desk-7")
        desk.kind = "founder_result"
        number = record(2, item=7)  # not the string "7": json_extract's test, on both
        await store.save(desk, number, record(3, item="desk-7"))
        await store.save(sent(record(3, item="desk-7"), 99))  # an update replaces the row
        active, next_id = await store.load_active(T0)
        got = await store.get(3)
        found = (
            await store.find("item", "desk-7"),
            await store.find("item", "desk-7", "founder_result"),
            await store.find("item", "7"),
            await store.find("item", "desk-7", "digest"),
        )
        await store.link(CHAT, [10, 11], "run-1", "cfo", T0)
        await store.link(CHAT, [11], "run-2", "ceo", T0 + 5)  # the message shows run-2 now
        threads = (await store.thread(CHAT, 10), await store.thread(CHAT, 11))
        missing = await store.thread(CHAT, 12)
        f = FollowUp(
            task_id="task-1",
            chat_id=CHAT,
            message_id=11,
            agent="ceo",
            reply_to="run-2",
            text="and next week?",
            created=T0 + 6,
        )
        owed_twice = (await store.owe(f), await store.owe(f))
        await store.owe(
            FollowUp(
                task_id="task-0",
                chat_id=CHAT,
                message_id=10,
                agent="cfo",
                reply_to="run-1",
                text="why?",
                created=T0 + 1,
            )
        )
        owed = [x.task_id for x in await store.owed()]
        await store.answered("task-1", sent(record(4), 100))
        await store.forget("task-0")
        after = await store.owed()
        pruned_threads = await store.prune_threads(T0 + 1)
        pruned = await store.prune(T0 + 1)  # only the settled ones: 3 and 4
        left = [r.id for r in (await store.load_active(0.0))[0]]
    finally:
        await store.close()
    assert [r.id for r in active] == [1, 2, 3] and next_id == 4
    assert got is not None and got.deliveries[CHAT].message_id == 99 and got.settled
    assert [r.id if r else None for r in found] == [3, 1, None, None]
    assert threads == (("run-1", "cfo"), ("run-2", "ceo")) and missing is None
    assert owed_twice == (True, False) and owed == ["task-0", "task-1"] and after == []
    assert pruned_threads == 1 and pruned == 2 and left == [1, 2]


async def test_an_outbox_survives_a_reopen(tmp_path: Path, state_backend: Backend) -> None:
    store = AlertStore(tmp_path / "alerts.sqlite", backend=state_backend)
    await store.open()
    await store.save(record(5))
    await store.owe(
        FollowUp(
            task_id="task-1",
            chat_id=CHAT,
            message_id=11,
            agent="ceo",
            reply_to="run-2",
            text="and?",
            created=T0,
        )
    )
    await store.close()
    again = AlertStore(tmp_path / "alerts.sqlite", backend=state_backend)
    assert await again.open() is None
    try:
        records, next_id = await again.load_active(T0)
        owed = await again.owed()
    finally:
        await again.close()
    assert [(r.id, r.text) for r in records] == [(5, "cfo crashed (5)")] and next_id == 6
    assert [f.chat_id for f in owed] == [CHAT]


async def test_a_sqlite_outbox_is_one_daemons_and_its_file_is_as_before(tmp_path: Path) -> None:
    """daemon.lock gives a state directory to one daemon: every claim is its own, and the
    file gets no claims table (its tables are those of before the backends, plus the
    outbound queue of version 4).
    """
    path = tmp_path / "alerts.sqlite"
    first, second = AlertStore(path, owner="a"), AlertStore(path, owner="b")
    await first.open()
    await second.open()
    try:
        await first.save(record(1))
        claims = [await s.claim(1, CHAT, T0) for s in (first, second)]
    finally:
        await first.close()
        await second.close()
    assert [c.verdict for c in claims] == ["mine", "mine"]
    with sqlite3.connect(path) as conn:
        tables = sorted(
            r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        )
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    assert tables == ["alerts", "follow_ups", "outbound", "threads"]
    assert version == len(MIGRATIONS) == 4


async def test_two_daemons_claim_each_queued_alert_once(pg_backend: Backend) -> None:
    """Two outboxes on one schema (a leader and the standby that takes over): both try to
    send the same 20 queued alerts at once; each alert is claimed by exactly one, and the
    other learns it was delivered once the holder recorded it.
    """
    a = AlertStore(None, backend=pg_backend, owner="host-a")
    b = AlertStore(None, backend=pg_backend, owner="host-b")
    await a.open()
    await b.open()
    try:
        await a.save(*(record(i) for i in range(1, 21)))
        claims = await asyncio.gather(*(s.claim(i, CHAT, T0) for i in range(1, 21) for s in (a, b)))
        winners = {}
        for i in range(1, 21):
            first, second = claims[2 * (i - 1)], claims[2 * (i - 1) + 1]
            assert sorted([first.verdict, second.verdict]) == ["mine", "taken"], i
            winners[i] = "host-a" if first.verdict == "mine" else "host-b"
            loser = second if first.verdict == "mine" else first
            assert loser.holder == winners[i] and loser.until == T0 + CLAIM_LEASE
        # the holders record their sends; the other daemon then adopts them
        for i, holder in winners.items():
            await (a if holder == "host-a" else b).save(sent(record(i), 1000 + i))
        again = [
            await (b if holder == "host-a" else a).claim(i, CHAT, T0 + 1)
            for i, holder in winners.items()
        ]
        # a holder asking again keeps its claim
        renewed = [
            await (a if holder == "host-a" else b).claim(i, CHAT, T0 + 2)
            for i, holder in winners.items()
        ]
    finally:
        await a.close()
        await b.close()
    assert [c.verdict for c in again] == ["done"] * 20
    assert [c.stored.message_id if c.stored else None for c in again] == list(range(1001, 1021))
    assert {c.verdict for c in renewed} == {"mine"}


async def test_a_claim_whose_holder_died_mid_send_is_taken_over_after_the_lease(
    pg_backend: Backend,
) -> None:
    a = AlertStore(None, backend=pg_backend, owner="host-a")
    b = AlertStore(None, backend=pg_backend, owner="host-b")
    await a.open()
    await b.open()
    try:
        await a.save(record(1))
        assert (await a.claim(1, CHAT, T0)).verdict == "mine"
        await a.close()  # host-a dies before recording the send
        early = await b.claim(1, CHAT, T0 + CLAIM_LEASE - 1)
        late = await b.claim(1, CHAT, T0 + CLAIM_LEASE + 1)
    finally:
        await b.close()
    assert (early.verdict, early.holder) == ("taken", "host-a")
    assert (late.verdict, late.holder) == ("mine", "host-b")


async def test_an_unreachable_database_is_a_clear_error(tmp_path: Path) -> None:
    """No in-memory outbox on PostgreSQL: the pager does not start, and says why (without
    the connection string's password). The port refuses at once; the store gives up after
    its connect wait — 0.5 s here, not the product's 5 s: the claim is the error, and the
    error names the wait it honoured.
    """
    backend = Backend(
        kind="postgres",
        dsn="postgresql://companyd:s3cret-pw@127.0.0.1:1/companyd?connect_timeout=1",
        schema="acme",
        connect_wait=0.5,
    )
    store = AlertStore(tmp_path / "alerts.sqlite", backend=backend)
    try:
        with pytest.raises(OutboxUnavailable) as info:
            await store.open()
    finally:
        await store.close()
    text = str(info.value)
    assert "cannot open the alert outbox in postgres schema 'acme' (alerts)" in text
    assert "check the PostgreSQL server and state.dsn_env" in text
    assert "after 0.5 sec" in text  # psycopg_pool's words: the wait it was given
    assert "s3cret-pw" not in text
    assert not (tmp_path / "alerts.sqlite").exists()


async def test_two_pagers_on_one_schema_send_a_queued_alert_once(
    tmp_path: Path, pg_backend: Backend, token_env: None
) -> None:
    """The takeover case end to end: an alert queued in the shared outbox, and two pagers
    (each with its own bus and state directory) that both load it as unsent and both reach
    Telegram. The Bot API stand-in receives it once; the pager that did not send it learns,
    when the claim has run out, that it was delivered and stops waiting for it.
    """
    queued = record(1, chat=111)
    store = AlertStore(None, backend=pg_backend)
    await store.open()
    await store.save(queued)
    await store.close()
    async with harness(tmp_path) as h:
        cfg = make_config(tmp_path, h.server.url)
        pagers = [
            AlertService(
                cfg,
                tmp_path / name,
                bus=EventBus(h.clock),
                admin=RecordingAdmin(),
                clock=h.clock,
                backend=pg_backend,
            )
            for name in ("a", "b")
        ]
        ctxs = [Ctx(), Ctx()]
        tasks = [asyncio.create_task(p.run(c)) for p, c in zip(pagers, ctxs, strict=True)]
        try:
            await h.until(lambda: all(c.ready.is_set() for c in ctxs))
            await h.until(lambda: len(h.bot_messages()) == 1)
            # the other pager waits for the claim, then adopts the recorded delivery
            await h.until(lambda: all(p.snapshot()["queued"] == 0 for p in pagers), step=5.0)
        finally:
            for c in ctxs:
                c.stopping.set()
            async with asyncio.timeout(20):
                await asyncio.gather(*tasks)
            for p in pagers:
                p.close()
        texts = [m.text for m in h.bot_messages()]
    assert texts == ["cfo crashed (1)"]
    assert TOKEN not in repr(texts)
    assert not (tmp_path / "a" / "alerts.sqlite").exists()
