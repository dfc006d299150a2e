"""The outbound queue (companyd.alerts._outbound) with its webhook target, on both backends.

Real parts only: the alert outbox's store (alerts.sqlite, or a schema on the throwaway
PostgreSQL cluster), httpx over a real socket to the loopback receiver
(companyd.testing.webhook_receiver), which verifies each request with the standardwebhooks
package. Time is a ManualClock started at the real time, so that the signatures' timestamps
are inside the receiver's 5-minute window.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from companyd.alerts._outbound import (
    BACKOFF_MAX,
    BACKOFF_MIN,
    GIVE_UP_AFTER,
    OutboundQueue,
    OutboundRow,
    Queued,
    backoff,
)
from companyd.alerts._outbox import STEPS, AlertStore
from companyd.alerts._webhooks import WebhookTarget
from companyd.clock import ManualClock
from companyd.storage import Backend
from companyd.testing.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.anyio

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(SECRET) as rx:
        yield rx


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5.0) as c:
        yield c


def event(n: int, target: str = "ops", type_: str = "run.completed") -> Queued:
    return Queued(
        target=target,
        kind="webhook",
        key=f"{type_}:run-{n}",
        type=type_,
        timestamp=1_790_000_000.0 + n,
        data={"run_id": f"run-{n}", "agent": "cfo", "cost_usd": 0.01},
    )


class Setup:
    def __init__(
        self, path: Path, backend: Backend, clock: ManualClock, target: WebhookTarget
    ) -> None:
        self.path, self.backend, self.clock, self.target = path, backend, clock, target
        self.done: list[OutboundRow] = []

    async def open(self) -> tuple[AlertStore, OutboundQueue]:
        store = AlertStore(self.path, backend=self.backend)
        assert await store.open() is None
        queue = OutboundQueue(store, {self.target.name: self.target}, self.clock)

        async def done(row: OutboundRow) -> bool:
            self.done.append(row)
            return False

        queue.on_done = done
        return store, queue


@pytest.fixture
def setup(
    tmp_path: Path, state_backend: Backend, receiver: WebhookReceiver, client: httpx.AsyncClient
) -> Setup:
    clock = ManualClock(start=time.time())
    target = WebhookTarget("ops", receiver.url, SECRET, client, clock.time)
    return Setup(tmp_path / "alerts.sqlite", state_backend, clock, target)


async def test_a_queued_event_arrives_signed_and_verifies_with_standardwebhooks(
    setup: Setup, receiver: WebhookReceiver
) -> None:
    store, queue = await setup.open()
    try:
        ids = await queue.enqueue([event(1)])
        assert await queue.deliver_pass() is None
        got = receiver.received()
        assert [r.verified for r in got] == [True], [r.problem for r in got]
        assert got[0].id == ids[0] and ids[0].startswith("msg_")
        body = got[0].json()
        assert body["type"] == "run.completed"
        assert body["timestamp"].endswith("Z")
        assert body["data"] == {"run_id": "run-1", "agent": "cfo", "cost_usd": 0.01}
        assert got[0].headers["content-type"] == "application/json"
        (row,) = await queue.rows()
        assert (row.state, row.attempts, row.sent_at) == ("sent", 1, setup.clock.time())
        assert [r.id for r in setup.done] == ids
    finally:
        await store.close()


async def test_the_same_event_is_queued_once_per_target(setup: Setup) -> None:
    store, queue = await setup.open()
    try:
        first = await queue.enqueue([event(1)])
        again = await queue.enqueue([event(1), event(2)])
        assert len(first) == 1 and len(again) == 1 and again[0] != first[0]
        assert len(await queue.rows()) == 2
    finally:
        await store.close()


async def test_a_receiver_down_gets_every_event_later_once_with_the_same_id(
    setup: Setup, receiver: WebhookReceiver
) -> None:
    store, queue = await setup.open()
    try:
        receiver.go_down()
        ids = await queue.enqueue([event(1), event(2)])
        due = await queue.deliver_pass()
        # the first failed: the second waits behind it, not tried in the same pass
        assert due == pytest.approx(setup.clock.time() + BACKOFF_MIN)
        rows = await queue.rows()
        assert [(r.state, r.attempts) for r in rows] == [("pending", 1), ("pending", 0)]
        assert "cannot reach" in (rows[0].last_error or "")
        # down for 30 s: retried on the backoff, nothing delivered
        for _ in range(3):
            setup.clock.advance((due or 0) - setup.clock.time())
            due = await queue.deliver_pass()
        assert receiver.received() == []
        receiver.come_up()
        setup.clock.advance((due or 0) - setup.clock.time())
        assert await queue.deliver_pass() is None
        got = receiver.delivered()
        assert [r.id for r in got] == ids  # in order, once each
        assert [r.state for r in await queue.rows()] == ["sent", "sent"]
    finally:
        await store.close()


async def test_retries_reuse_the_webhook_id_and_a_5xx_or_429_is_retried(
    setup: Setup, receiver: WebhookReceiver
) -> None:
    store, queue = await setup.open()
    try:
        (mid,) = await queue.enqueue([event(1)])
        due: float | None = setup.clock.time()
        for status in (503, 429, 408, 204):
            receiver.status = status
            setup.clock.advance((due or 0) - setup.clock.time())  # to the next attempt
            due = await queue.deliver_pass()
        assert due is None
        got = receiver.received()
        assert [r.status for r in got] == [503, 429, 408, 204]
        assert {r.id for r in got} == {mid}
        assert all(r.verified for r in got)  # each attempt signed afresh, still valid
        (row,) = await queue.rows()
        assert (row.state, row.attempts) == ("sent", 4)
    finally:
        await store.close()


async def test_a_4xx_is_permanent_recorded_once_and_not_retried(
    setup: Setup, receiver: WebhookReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    store, queue = await setup.open()
    try:
        receiver.status = 410
        (mid,) = await queue.enqueue([event(1)])
        assert await queue.deliver_pass() is None
        for _ in range(3):
            setup.clock.advance(BACKOFF_MAX * 10)
            assert await queue.deliver_pass() is None
        assert [r.status for r in receiver.received()] == [410]
        (row,) = await queue.rows()
        assert (row.state, row.attempts) == ("failed", 1)
        assert "410" in (row.last_error or "")
        assert [r.state for r in setup.done] == ["failed"]
        refusals = [r for r in caplog.records if "for good" in r.getMessage()]
        assert len(refusals) == 1 and mid in refusals[0].getMessage()
    finally:
        await store.close()


async def test_a_restart_loses_and_repeats_nothing(setup: Setup, receiver: WebhookReceiver) -> None:
    store, queue = await setup.open()
    try:
        ids = await queue.enqueue([event(1)])
        await queue.deliver_pass()
        receiver.go_down()
        ids += await queue.enqueue([event(2), event(3)])
        await queue.deliver_pass()
    finally:
        await store.close()
    receiver.come_up()
    store, queue = await setup.open()  # a new process: the same file (or schema)
    try:
        setup.clock.advance(BACKOFF_MAX)
        assert await queue.deliver_pass() is None
        assert [r.id for r in receiver.delivered()] == ids
        assert len(receiver.received()) == 3
    finally:
        await store.close()


async def test_an_event_failing_past_the_give_up_time_is_failed(
    setup: Setup, receiver: WebhookReceiver
) -> None:
    store, queue = await setup.open()
    try:
        receiver.status = 500
        await queue.enqueue([event(1)])
        await queue.deliver_pass()
        setup.clock.advance(GIVE_UP_AFTER)
        assert await queue.deliver_pass() is None
        (row,) = await queue.rows()
        assert (row.state, row.attempts) == ("failed", 2)
    finally:
        await store.close()


def test_backoff_doubles_to_its_cap_and_honours_retry_after_within_it() -> None:
    assert [backoff(n) for n in (1, 2, 3)] == [BACKOFF_MIN, 2 * BACKOFF_MIN, 4 * BACKOFF_MIN]
    assert backoff(40) == BACKOFF_MAX
    assert backoff(1, retry_after=42.0) == 42.0
    assert backoff(1, retry_after=10 * BACKOFF_MAX) == BACKOFF_MAX


def test_the_outbound_table_is_the_outbox_store_s_fourth_step() -> None:
    assert "CREATE TABLE IF NOT EXISTS outbound" in STEPS[3].sqlite
    assert "DOUBLE PRECISION" in STEPS[3].postgres


async def test_two_daemons_on_one_schema_send_each_message_once(
    pg_backend: Backend, receiver: WebhookReceiver, client: httpx.AsyncClient
) -> None:
    """A leader and the standby taking over share the PostgreSQL outbox: both deliver the
    same 20 queued messages at once; each reaches the receiver once (claimed in its row).
    """
    clock = ManualClock(start=time.time())
    target = WebhookTarget("ops", receiver.url, SECRET, client, clock.time)
    stores = [AlertStore(None, backend=pg_backend, owner=o) for o in ("a", "b")]
    for s in stores:
        assert await s.open() is None
    try:
        queues = [OutboundQueue(s, {"ops": target}, clock) for s in stores]
        ids = await queues[0].enqueue([event(n) for n in range(20)])
        assert await queues[1].enqueue([event(n) for n in range(20)]) == []  # queued once
        await asyncio.gather(*(q.deliver_pass() for q in queues))
        assert [await q.deliver_pass() for q in queues] == [None, None]  # nothing left
        assert sorted(r.id for r in receiver.delivered()) == sorted(ids)
        assert len(receiver.received()) == 20
    finally:
        for s in stores:
            await s.close()


async def test_a_redirect_is_not_followed_and_is_final(
    setup: Setup, receiver: WebhookReceiver
) -> None:
    store, queue = await setup.open()
    try:
        receiver.status = 301
        await queue.enqueue([event(1)])
        assert await queue.deliver_pass() is None
        (row,) = await queue.rows()
        assert (row.state, row.attempts) == ("failed", 1)
        assert "a redirect is not followed" in (row.last_error or "")
        assert len(receiver.received()) == 1
    finally:
        await store.close()


async def test_the_rows_of_a_removed_target_are_forgotten_those_still_configured_kept(
    setup: Setup,
) -> None:
    store, _ = await setup.open()
    try:
        target = setup.target
        # crm: configured, its secret unset (no target): what it owes waits for it
        queue = OutboundQueue(
            store,
            {target.name: target},
            setup.clock,
            kind="webhook",
            configured=["ops", "crm", "old"],
            section="alerts.webhooks",
        )
        told: list[OutboundRow] = []

        async def done(row: OutboundRow) -> bool:
            told.append(row)
            return True

        queue.on_done = done
        result = Queued(
            target="old",
            kind="webhook",
            key="result:run-9",
            type="run.completed",
            timestamp=1_790_000_009.0,
            data={},
        )
        channel = Queued(
            target="channel:x",
            kind="apprise",
            key="alert:x",
            type="alert",
            timestamp=1_790_000_010.0,
            data={},
        )
        await queue.enqueue([event(1), event(2, "crm"), event(3, "old"), result, channel])
        assert await queue.forget_removed() == 0  # "old" is still configured
        queue.set_targets({target.name: target}, configured=["ops", "crm"])
        assert await queue.forget_removed() == 2
        rows = {(r.target, r.key): r for r in await queue.rows()}
        assert sorted(rows) == [
            ("channel:x", "alert:x"),  # another kind's: not this queue's to forget
            ("crm", "run.completed:run-2"),
            ("old", "result:run-9"),
            ("ops", "run.completed:run-1"),
        ]
        gone = rows[("old", "result:run-9")]
        assert gone.state == "failed" and "no longer in alerts.webhooks" in (gone.last_error or "")
        assert [r.id for r in told] == [gone.id]  # its run's record says so
        assert rows[("crm", "run.completed:run-2")].state == "pending"
    finally:
        await store.close()
