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

from companyd.alerts.coalesce import AlertBook
from companyd.alerts.outbox import AlertRecord, AlertStore, Delivery
from companyd.alerts.policy import Policy
from companyd.clock import ManualClock
from companyd.testing.disk import DiskUnavailable, fill, small_disk

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
