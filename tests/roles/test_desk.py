"""The founder's desk: items created once per asking call, decided once, expired on the
injected clock, durable across a new Desk on the same file (a restart).
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from companyd.clock import ManualClock
from companyd.events import EventBus
from companyd.roles.desk import MIGRATIONS, Desk, DeskError, DeskItem, ItemKind, ItemState


def _desk(tmp_path: Path, clock: ManualClock, bus: EventBus | None = None) -> Desk:
    return Desk(tmp_path / "desk.sqlite", bus=bus or EventBus(clock), clock=clock)


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
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    bus = EventBus(clock)
    desk = _desk(tmp_path, clock, bus)
    first = await _approval(desk)
    again = await _approval(desk)
    assert again.id == first.id and first.id.startswith("ap-") and first.pending
    await desk.close()
    reopened = _desk(tmp_path, clock, bus)
    try:
        assert (await _approval(reopened)).id == first.id
        assert [i.id for i in await reopened.pending()] == [first.id]
    finally:
        await reopened.close()
    assert len(bus.recent({"founder_approval_requested"})) == 1


@pytest.mark.anyio
async def test_a_waiting_run_wakes_on_the_decision_and_a_second_decision_is_refused(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    desk = _desk(tmp_path, clock)
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
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    desk = _desk(tmp_path, clock)
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
async def test_a_question_is_answered_not_approved(tmp_path: Path) -> None:
    clock = ManualClock()
    desk = _desk(tmp_path, clock)
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
