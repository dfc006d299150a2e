"""The alert outbox on a real full disk (a small tmpfs): a delivery recorded while the disk
refused the outbox's writes is written once it has room, so a restart does not send the
alert again.

Chaos week (seed 1): a crash alert was sent during the full-disk fault, its delivery could
not be written, and after a SIGKILL 7 s after the disk had room again it was sent twice.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from companyd._fs import DiskAlarm
from companyd.alerts._coalesce import AlertBook
from companyd.alerts._outbox import AlertRecord, AlertStore, Delivery
from companyd.alerts._policy import Policy
from companyd.clock import ManualClock
from companyd.testing.disk import DiskUnavailable, fill, small_disk

from .test_alerts import harness, token_env

__all__ = ["token_env"]  # the fixture, used by name

pytestmark = pytest.mark.anyio

CHAT = 42


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    try:
        with small_disk(tmp_path / "disk", "4m") as d:
            yield d
    except DiskUnavailable as exc:
        pytest.skip(f"no real full disk here: {exc}")


def record(rid: int, **data: object) -> AlertRecord:
    return AlertRecord(
        id=rid,
        key=f"crash|agent/cfo|{rid}",
        kind="child_exited",
        severity="warning",
        source="agent/cfo",
        data=dict(data),
        counts={"child_exited": 1},
        first_ts=0.0,
        last_ts=0.0,
        window_end=60.0,
        text="cfo crashed and was restarted",
        deliveries={CHAT: Delivery()},
    )


async def test_a_delivery_the_full_disk_kept_out_of_the_outbox_is_written_later(
    disk: Path,
) -> None:
    utc = ZoneInfo("UTC")
    policy = Policy(
        min_rank=0,
        routes={},
        coalesce=60.0,
        quiet=None,
        quiet_tz=utc,
        tz=utc,
        company="Acme",
        agents=frozenset(),
    )
    path = disk / "alerts.sqlite"
    store = AlertStore(path)
    await store.open()
    book = AlertBook(policy, ManualClock())
    book.store = store
    crash = record(1)
    await book.save(crash)
    filler = fill(disk)
    # sent: the delivery is recorded in memory; the full disk refuses the outbox's write
    crash.deliveries[CHAT] = Delivery(message_id=7, sent_version=1, state="sent")
    crash.data["padding"] = "x" * 400_000  # more than SQLite can fit in free pages
    await book.save(crash)
    os.unlink(filler)
    await book.save(record(2))  # the next alert's write succeeds
    await store.close()

    again = AlertStore(path)  # what a restart reads
    await again.open()
    try:
        stored = await again.get(1)
    finally:
        await again.close()
    assert stored is not None
    assert stored.deliveries[CHAT].state == "sent", "a restart would send it again"
    assert stored.settled


async def test_a_full_disk_only_the_outbox_hit_raises_the_one_disk_alert_sent_from_memory(
    disk: Path, token_env: None
) -> None:
    """Chaos week (seed 3): the full-disk fault hit only the alert outbox (no run was writing
    at the time): the outbox logged its failure but raised no "state disk full" alert. It
    now reports to the daemon's disk alarm; the alert cannot be stored, so it is sent from
    memory; the outbox's next write that succeeds clears it.
    """
    async with harness(disk) as h, h.service() as (_svc, _ctx):
        filler = fill(disk)
        h.bus.emit("run_failed", "roles", agent="cfo", reason="x" * 400_000)
        await h.until(lambda: any("state disk full" in m.text for m in h.bot_messages()))
        assert DiskAlarm.of(h.bus).failing == {"alert outbox"}
        assert len(h.bus.recent({"state_disk_full"})) == 1
        os.unlink(filler)
        h.bus.emit("run_failed", "roles", agent="ceo", reason="space is back")
        await h.until(lambda: not DiskAlarm.of(h.bus).failing)
        assert len(h.bus.recent({"state_disk_recovered"})) == 1
