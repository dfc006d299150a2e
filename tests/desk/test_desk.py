"""The founder's desk: items created once per asking call, decided once, expired on the
injected clock, durable across a new Desk on the same store (a restart). The store's own
tests run on both backends (``state_backend``: desk.sqlite, a company's PostgreSQL schema);
those about the SQLite file itself on SQLite.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

import pytest

from companyd.clock import ManualClock
from companyd.desk import Desk, DeskError, DeskFull, DeskItem, ItemKind, ItemState
from companyd.desk._store import MIGRATIONS, PG_POLL_SECONDS
from companyd.events import EventBus
from companyd.storage import SQLITE, Backend
from racekit import race_at


def _desk(
    tmp_path: Path, clock: ManualClock, bus: EventBus | None = None, backend: Backend = SQLITE
) -> Desk:
    return Desk(tmp_path / "desk.sqlite", bus=bus or EventBus(clock), clock=clock, backend=backend)


async def _approval(desk: Desk, key: str = "run-1/tu-1", timeout: float = 3600.0) -> DeskItem:
    return await desk.request(
        key=key,
        kind=ItemKind.APPROVAL,
        agent="marketing",
        run_id="run-1",
        routine=None,
        payload={"tool": "post_tweet", "input": {"text": "hi"}, "reason": "launch day"},
        timeout=timeout,
    )


@pytest.mark.anyio
async def test_one_item_per_asking_call_announced_once_and_found_again_after_a_restart(
    tmp_path: Path, state_backend: Backend
) -> None:
    clock = ManualClock()
    bus = EventBus(clock)
    desk = _desk(tmp_path, clock, bus, state_backend)
    first = await _approval(desk)
    again = await _approval(desk)
    assert again.id == first.id and first.id.startswith("ap-") and first.pending
    await desk.close()
    reopened = _desk(tmp_path, clock, bus, state_backend)
    try:
        assert (await _approval(reopened)).id == first.id
        assert [i.id for i in await reopened.pending()] == [first.id]
    finally:
        await reopened.close()
    assert len(bus.recent({"founder_approval_requested"})) == 1


@pytest.mark.anyio
async def test_a_waiting_run_wakes_on_the_decision_and_a_second_decision_is_refused(
    tmp_path: Path, state_backend: Backend
) -> None:
    clock = ManualClock()
    desk = _desk(tmp_path, clock, backend=state_backend)
    try:
        item = await _approval(desk)
        waiter = asyncio.create_task(desk.wait(item))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        await desk.decide(item.id, ItemState.REJECTED, "not on a Sunday", by="founder")
        async with asyncio.timeout(5):
            done = await waiter
        assert done.state is ItemState.REJECTED and done.text == "not on a Sunday"
        with pytest.raises(DeskError, match=r"already rejected by founder; nothing changed"):
            await desk.decide(item.id, ItemState.APPROVED)
        with pytest.raises(DeskError, match=r"nothing on the founder's desk has id 'ap-nope'"):
            await desk.decide("ap-nope", ItemState.APPROVED)
    finally:
        await desk.close()


@pytest.mark.anyio
async def test_an_unanswered_item_expires_at_its_deadline_on_the_injected_clock(
    tmp_path: Path, state_backend: Backend
) -> None:
    clock = ManualClock()
    desk = _desk(tmp_path, clock, backend=state_backend)
    try:
        item = await _approval(desk, timeout=86_400.0)
        waiter = asyncio.create_task(desk.wait(item))
        async with asyncio.timeout(5):
            while clock.sleepers == 0:
                await asyncio.sleep(0.01)
            clock.advance(86_400.0)
            done = await waiter
        assert done.state is ItemState.EXPIRED
        assert await desk.pending() == []
        with pytest.raises(DeskError, match="already expired"):
            await desk.decide(item.id, ItemState.APPROVED)
    finally:
        await desk.close()


@pytest.mark.anyio
async def test_a_runs_pending_items_are_withdrawn_with_the_reason_its_result_stays(
    tmp_path: Path, state_backend: Backend
) -> None:
    clock = ManualClock()
    bus = EventBus(clock)
    desk = _desk(tmp_path, clock, bus, state_backend)
    try:
        ap = await _approval(desk)
        result = await desk.request(
            key="task-1/result/1",
            kind=ItemKind.RESULT,
            agent="marketing",
            run_id="run-1",
            routine="daily-post",
            payload={"answer": "Draft"},
            timeout=600.0,
        )
        waiter = asyncio.create_task(desk.wait(ap))
        closed = await desk.withdraw_run("run-1", "the asker stopped waiting")
        assert [i.id for i in closed] == [ap.id]
        async with asyncio.timeout(5):
            done = await waiter  # a waiter (there is none in practice) is woken too
        assert (done.state, done.text, done.decided_by) == (
            ItemState.WITHDRAWN,
            "the asker stopped waiting",
            "companyd",
        )
        assert [i.id for i in await desk.pending()] == [result.id]
        with pytest.raises(DeskError, match=r"was withdrawn \(the asker stopped waiting\)"):
            await desk.decide(ap.id, ItemState.APPROVED)
        assert await desk.withdraw_run("run-1", "again") == []  # once
    finally:
        await desk.close()
    [decided] = bus.recent({"founder_decided"})
    assert (decided.data["state"], decided.data["via"]) == ("withdrawn", "companyd")


@pytest.mark.anyio
async def test_a_question_is_answered_not_approved(tmp_path: Path, state_backend: Backend) -> None:
    clock = ManualClock()
    desk = _desk(tmp_path, clock, backend=state_backend)
    try:
        q = await desk.request(
            key="run-2/tu-9",
            kind=ItemKind.QUESTION,
            agent="ceo",
            run_id="run-2",
            routine=None,
            payload={"question": "Friday or Monday?"},
            timeout=600.0,
        )
        assert q.id.startswith("q-")
        with pytest.raises(DeskError, match="answer it"):
            await desk.decide(q.id, ItemState.APPROVED)
        with pytest.raises(DeskError, match="needs some text"):
            await desk.decide(q.id, ItemState.ANSWERED, "  ")
        done = await desk.decide(q.id, ItemState.ANSWERED, "Friday")
        assert done.state is ItemState.ANSWERED and done.text == "Friday"
    finally:
        await desk.close()


async def _question(desk: Desk, n: int, agent: str = "ceo", timeout: float = 600.0) -> DeskItem:
    return await desk.request(
        key=f"run-{agent}/tu-{n}",
        kind=ItemKind.QUESTION,
        agent=agent,
        run_id=f"run-{agent}",
        routine=None,
        payload={"question": f"question {n}?"},
        timeout=timeout,
        open_limit=3,
    )


def _asked(bus: EventBus) -> list[str]:
    return [str(e.data["item_id"]) for e in bus.recent({"founder_question"})]


@pytest.mark.anyio
async def test_a_burst_of_questions_is_announced_one_at_a_time_in_order(
    tmp_path: Path, state_backend: Backend
) -> None:
    """Issue 32 item 8: an agent's questions asked while one of its questions waits are
    queued, not announced; each answer (or expiry, skipping a queued one already past its
    deadline) announces the next; another agent's question is not held up.
    """
    clock = ManualClock()
    bus = EventBus(clock)
    desk = _desk(tmp_path, clock, bus, state_backend)
    try:
        q = [await _question(desk, 0), await _question(desk, 1), await _question(desk, 2)]
        other = await _question(desk, 0, agent="cfo")
        assert _asked(bus) == [q[0].id, other.id]
        assert {i.id for i in await desk.pending()} == {*(x.id for x in q), other.id}
        # the inbox says which are queued (their deadlines run, and nobody was shown them)
        from companyd.desk import gather_inbox

        rows = {i.id: i.summary for i in (await gather_inbox(desk, None, None)).items}
        queued = [i for i, summary in rows.items() if "(queued: not sent to Telegram" in summary]
        assert sorted(queued) == sorted([q[1].id, q[2].id])
        await desk.decide(q[0].id, ItemState.ANSWERED, "yes")
        assert _asked(bus) == [q[0].id, other.id, q[1].id]
        # a queued question answered on the command line before its turn is not announced
        await desk.decide(q[2].id, ItemState.ANSWERED, "no")
        await desk.decide(q[1].id, ItemState.ANSWERED, "maybe")
        assert _asked(bus) == [q[0].id, other.id, q[1].id]
        # expiry: the shown question expires; the next in line already expired is skipped
        late = [await _question(desk, 3, timeout=100.0), await _question(desk, 4, timeout=50.0)]
        last = await _question(desk, 5, timeout=1000.0)
        clock.advance(100.0)
        assert (await desk.wait(late[0])).state is ItemState.EXPIRED
        assert _asked(bus)[-2:] == [late[0].id, last.id]
    finally:
        await desk.close()


@pytest.mark.anyio
async def test_a_queued_question_is_not_reminded_of_before_it_was_sent(
    tmp_path: Path, state_backend: Backend
) -> None:
    """Three quarters of the time gone: the founder is reminded of the question on screen,
    not of the one queued behind it (a reminder would be a second message of the burst).
    """
    clock = ManualClock()
    bus = EventBus(clock)
    desk = _desk(tmp_path, clock, bus, state_backend)
    try:
        shown, queued = await _question(desk, 0), await _question(desk, 1)
        waiters = [asyncio.create_task(desk.wait(q)) for q in (shown, queued)]
        async with asyncio.timeout(5):
            while clock.sleepers < 2:
                await asyncio.sleep(0.01)
            clock.advance(480.0)
            while not bus.recent({"founder_reminder"}):
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)
        reminded = [e.data["item_id"] for e in bus.recent({"founder_reminder"})]
        assert reminded == [shown.id]
        for w in waiters:
            w.cancel()
    finally:
        await desk.close()


@pytest.mark.anyio
async def test_a_queued_question_whose_turn_came_while_down_is_announced_on_resume(
    tmp_path: Path, state_backend: Backend
) -> None:
    """The queue is derived from the store: the shown question answered by another desk
    (the CLI with no daemon) — the daemon restarted, its resumed run waits on the queued
    question again and announces it, once.
    """
    clock = ManualClock()
    desk = _desk(tmp_path, clock, EventBus(clock), state_backend)
    first, second = await _question(desk, 0), await _question(desk, 1)
    await desk.close()
    cli_bus = EventBus(clock)
    cli = Desk(
        tmp_path / "desk.sqlite", bus=cli_bus, clock=clock, backend=state_backend, announces=False
    )
    try:
        await cli.decide(first.id, ItemState.ANSWERED, "yes", by="root", via="cli")
    finally:
        await cli.close()
    assert _asked(cli_bus) == []  # its events reach no one: it leaves the turn to the daemon
    bus = EventBus(clock)
    resumed = _desk(tmp_path, clock, bus, state_backend)
    try:
        again = await _question(resumed, 1)
        waiters = [asyncio.create_task(resumed.wait(again)) for _ in range(2)]
        async with asyncio.timeout(5):
            while len(_asked(bus)) < 1:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        assert _asked(bus) == [second.id]
        await resumed.decide(second.id, ItemState.ANSWERED, "no")
        async with asyncio.timeout(5):
            assert all(d.state is ItemState.ANSWERED for d in await asyncio.gather(*waiters))
    finally:
        await resumed.close()


@pytest.mark.anyio
async def test_the_file_carries_its_schema_version(tmp_path: Path) -> None:
    clock = ManualClock()
    desk = _desk(tmp_path, clock)
    await _approval(desk)
    await desk.close()
    with sqlite3.connect(tmp_path / "desk.sqlite") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)


@pytest.mark.anyio
async def test_a_desk_from_before_via_keeps_its_items_and_records_via_from_now_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "desk.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(str(MIGRATIONS[0]))
    conn.execute("PRAGMA user_version=1")
    conn.execute(
        "INSERT INTO items (id, key, kind, agent, run_id, routine, payload, state, created, "
        "deadline, decided, text, decided_by) VALUES ('r-0000000001', 'task-1/result/1', "
        "'result', 'marketing', 'run-1', 'daily-post', '{\"round\": 1}', 'approved', 1.0, 9.0, "
        "2.0, '', 'founder')"
    )
    conn.execute(
        "INSERT INTO items (id, key, kind, agent, run_id, routine, payload, state, created, "
        "deadline) VALUES ('r-0000000002', 'task-2/result/1', 'result', 'marketing', 'run-2', "
        "'daily-post', '{\"round\": 1}', 'pending', 1.0, 9e12)"
    )
    conn.close()
    clock = ManualClock()
    desk = _desk(tmp_path, clock)
    try:
        [old] = await desk.of_run("run-1")
        assert (old.state, old.decided_by, old.via) == (ItemState.APPROVED, "founder", "")
        done = await desk.decide("r-0000000002", ItemState.REJECTED, "off-brand", "root", "cli")
        assert (done.decided_by, done.via, done.text) == ("root", "cli", "off-brand")
        assert [i.id for i in await desk.of_run("run-2")] == ["r-0000000002"]
    finally:
        await desk.close()


# -- several deciders on one store (two daemons on one database, the CLI beside one) -----


@pytest.mark.anyio
async def test_two_desks_on_one_store_deciding_the_same_item_at_once_decide_it_once(
    tmp_path: Path, state_backend: Backend
) -> None:
    """Each desk has its own thread and connection, as two daemons would (or the dashboard
    and Telegram on two hosts): of two decisions sent at once exactly one is kept, the other
    is refused with what the first was, and one ``founder_decided`` goes out. Seen failing
    before the decision was one transaction: two approvals both "won".
    """
    clock = ManualClock()
    buses = (EventBus(clock), EventBus(clock))
    a = _desk(tmp_path, clock, buses[0], state_backend)
    b = _desk(tmp_path, clock, buses[1], state_backend)
    try:
        pairs = [(ItemState.APPROVED, ItemState.APPROVED), (ItemState.APPROVED, ItemState.REJECTED)]
        for n in range(12):
            first, second = pairs[n % 2]
            item = await _approval(a, key=f"run-1/tu-{n}")
            both = await asyncio.gather(
                a.decide(item.id, first, "a", by="alice", via="telegram"),
                b.decide(item.id, second, "b", by="bob", via="cli"),
                return_exceptions=True,
            )
            won = [r for r in both if isinstance(r, DeskItem)]
            lost = [r for r in both if isinstance(r, DeskError)]
            assert len(won) == len(lost) == 1, both
            stored = await b.get(item.id)
            assert stored is not None and stored == won[0]
            assert str(lost[0]) == (
                f"approval {item.id} was already {stored.state} by {stored.decided_by}; "
                "nothing changed"
            )
    finally:
        await a.close()
        await b.close()
    decided = [e for bus in buses for e in bus.recent({"founder_decided"})]
    assert len(decided) == 12


@pytest.mark.anyio
async def test_an_ask_counts_the_open_items_that_another_desk_adds_meanwhile(
    tmp_path: Path,
) -> None:
    """Two desks on one file (two processes): one asks while the other adds an item for
    the same agent between the first's count of its open items and its insert. The count
    stays true until the insert (the write lock taken at ``BEGIN``): of two asks over a
    limit of one, one waits on the desk and the other is told the desk is full — not a
    "database is locked" for the ask whose reads went stale, as with a plain ``BEGIN``.
    """
    clock = ManualClock()
    a, b = _desk(tmp_path, clock), _desk(tmp_path, clock)

    async def ask(desk: Desk, key: str) -> DeskItem:
        return await desk.request(
            key=key,
            kind=ItemKind.APPROVAL,
            agent="marketing",
            run_id=key.split("/")[0],
            routine=None,
            payload={"tool": "post_tweet", "input": {"text": key}, "reason": "launch"},
            timeout=3600.0,
            open_limit=1,
        )

    try:
        first, second = await race_at(
            a._db, "INSERT INTO items", ask(a, "run-1/tu-1"), b._db, ask(b, "run-2/tu-1")
        )
        assert isinstance(first, DeskItem), first
        assert isinstance(second, DeskFull), second
        assert second.open_ids == [first.id]
        assert [i.id for i in await b.pending()] == [first.id]
    finally:
        await a.close()
        await b.close()


@pytest.mark.anyio
async def test_a_run_waiting_on_one_daemon_wakes_on_a_decision_taken_by_another(
    tmp_path: Path, pg_backend: Backend
) -> None:
    """On PostgreSQL the decision may come from another daemon (or the CLI on another
    host): the waiting run re-reads its item every PG_POLL_SECONDS of the desk's clock.
    """
    clock = ManualClock()
    leader = _desk(tmp_path, clock, backend=pg_backend)
    other = _desk(tmp_path / "other-host", clock, backend=pg_backend)
    try:
        item = await _approval(leader)
        waiter = asyncio.create_task(leader.wait(item))
        async with asyncio.timeout(10):
            while clock.sleepers == 0:
                await asyncio.sleep(0.01)
            await other.decide(item.id, ItemState.APPROVED, by="founder", via="cli")
            assert not waiter.done()
            clock.advance(PG_POLL_SECONDS)
            done = await waiter
        assert (done.state, done.decided_by, done.via) == (ItemState.APPROVED, "founder", "cli")
    finally:
        await leader.close()
        await other.close()


@pytest.mark.anyio
async def test_items_asked_in_the_same_instant_keep_the_order_they_were_asked_in(
    tmp_path: Path, state_backend: Backend
) -> None:
    clock = ManualClock()  # time stands still: every item has the same created
    desk = _desk(tmp_path, clock, backend=state_backend)
    try:
        asked = [(await _approval(desk, key=f"run-1/tu-{n}")).id for n in (3, 1, 2)]
        assert [i.id for i in await desk.pending()] == asked
        assert [i.id for i in await desk.of_run("run-1")] == asked
        assert [i.id for i in await desk.recent()] == asked[::-1]
        latest = await desk.latest("run-1/")
        assert latest is not None and latest.id == asked[-1]
        assert await desk.latest("run-1/tu_") is None  # LIKE's _ is a plain character here
    finally:
        await desk.close()


@pytest.mark.anyio
async def test_asking_whether_a_desk_exists_creates_nothing(
    tmp_path: Path, state_backend: Backend
) -> None:
    """The CLI without a daemon asks first (``runs show``, ``inbox``, a decision): on
    PostgreSQL "no tables yet" is a missing file's twin.
    """
    clock = ManualClock()
    desk = _desk(tmp_path, clock, backend=state_backend)
    try:
        assert not await desk.present()
        assert not await desk.present()
        assert not (tmp_path / "desk.sqlite").exists()
        await _approval(desk)
        assert await desk.present()
    finally:
        await desk.close()


@pytest.mark.anyio
async def test_one_reminder_at_three_quarters_of_the_time_not_repeated_after_a_restart(
    tmp_path: Path, state_backend: Backend
) -> None:
    clock = ManualClock()
    bus = EventBus(clock)
    desk = _desk(tmp_path, clock, bus, state_backend)

    async def until_asleep() -> None:
        while clock.sleepers == 0:
            await asyncio.sleep(0.01)

    try:
        item = await _approval(desk, timeout=4000.0)
        waiter = asyncio.create_task(desk.wait(item))
        async with asyncio.timeout(5):
            await until_asleep()
            clock.advance(2999.0)  # not yet three quarters
            await asyncio.sleep(0.05)
            assert bus.recent({"founder_reminder"}) == []
            await until_asleep()
            clock.advance(1.0)  # 3000 s of 4000: reminded
            while not bus.recent({"founder_reminder"}):
                await asyncio.sleep(0.01)
        waiter.cancel()  # the daemon stops while the run waits (the item stays pending)
        with contextlib.suppress(asyncio.CancelledError):
            await waiter
    finally:
        await desk.close()
    [reminder] = bus.recent({"founder_reminder"})
    assert reminder.data["item_id"] == item.id
    assert reminder.data["deadline"] == item.deadline
    assert "post_tweet" in reminder.data["summary"]
    # After a restart the resumed run waits again: still pending, not asked again, not
    # reminded again; at the deadline it is denied (expired).
    reopened = _desk(tmp_path, clock, bus, state_backend)
    try:
        again = await _approval(reopened)
        assert again.id == item.id and again.pending
        waiter = asyncio.create_task(reopened.wait(again))
        async with asyncio.timeout(5):
            await until_asleep()
            clock.advance(1000.0)
            done = await waiter
        assert done.state is ItemState.EXPIRED
    finally:
        await reopened.close()
    assert len(bus.recent({"founder_reminder"})) == 1
    assert len(bus.recent({"founder_approval_requested"})) == 1


@pytest.mark.anyio
async def test_the_pager_reads_the_decisions_made_without_it_as_their_events(
    tmp_path: Path,
) -> None:
    # the daemon's ResultRecords answers the pager's start: which offered items were
    # decided (a `companyd approve` with no daemon published to no pager)
    from companyd.daemon._deliveries import ResultRecords
    from companyd.runs import Journal

    clock = ManualClock(start=1_800_000_000.0)
    desk = _desk(tmp_path, clock)
    journal = Journal(tmp_path / "runs.sqlite")
    try:
        decided, pending = await _approval(desk), await _approval(desk, key="run-1/tu-2")
        clock.advance(60.0)
        await desk.decide(decided.id, ItemState.APPROVED, by="root", via="cli")
        records = ResultRecords(journal, desk, clock, lambda: 30.0)
        (event,) = await records.decided([decided.id, pending.id, "ap-gone"])
        assert (event.item_id, event.state, event.by, event.via) == (
            decided.id,
            "approved",
            "root",
            "cli",
        )
        assert event.ts == 1_800_000_060.0 and event.item_kind == "approval"
    finally:
        await journal.close()
        await desk.close()


@pytest.mark.anyio
async def test_a_runs_questions_are_among_its_founder_decisions(tmp_path: Path) -> None:
    # `runs show` lists them: who answered, through what, and the answer
    from companyd.desk import decisions_of

    clock = ManualClock(start=1_800_000_000.0)
    desk = _desk(tmp_path, clock)
    try:
        q = await _question(desk, 0)
        await desk.decide(q.id, ItemState.ANSWERED, "the blue one", by="root", via="cli")
        (said,) = decisions_of(await desk.of_run("run-ceo"))
        assert (said["item_id"], said["decision"], said["by"], said["via"], said["text"]) == (
            q.id,
            "answered",
            "root",
            "cli",
            "the blue one",
        )
    finally:
        await desk.close()
