"""Issue 15 item 8: a full state disk (a small tmpfs, filled) is not a crash loop. A run
whose journal or ledger write fails ends failed with the reason, its agent is paused, ONE
critical ``state_disk_full`` alert is raised, and the daemon stays up with status and the
control socket working; with space back, resuming works.

The disk filling under a running daemon is watched on ``companyd run``'s composition root
in this process (:class:`~companyd.testing.inprocess.InProcessDaemon`, offline model): the
stores, the supervisor and the alarm are the same objects, and "stays up" is its tree still
running and its control socket answering. A real ``companyd run`` is kept where the process
is the claim: one started on a full disk comes up (READY, the socket answers) instead of
exiting, and stops with exit 0.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from companyd.testing.daemon import short_dir
from companyd.testing.daemon_process import DaemonProcess
from companyd.testing.disk import DiskUnavailable, fill, small_disk
from companyd.testing.inprocess import InProcessDaemon

pytestmark = pytest.mark.anyio

COMPANY = {
    "schema": "companyd/v1",
    "company": {"name": "Full Disk Co", "timezone": "UTC", "budget": {"daily_usd": 10}},
    "departments": {"finance": {"title": "Finance"}},
    "agents": {
        "ceo": {"title": "CEO", "instructions": "You are the CEO."},
        "cfo": {"title": "CFO", "instructions": "You are the CFO.", "reports_to": "ceo"},
    },
}


@pytest.fixture
def work() -> Iterator[Path]:
    with short_dir() as d:
        yield d


@pytest.fixture
def disk(work: Path) -> Iterator[Path]:
    try:
        with small_disk(work / "disk", "16m") as d:
            yield d
    except DiskUnavailable as exc:
        pytest.skip(f"no real full disk here: {exc}")


async def test_a_full_state_disk_fails_the_run_pauses_the_agent_and_the_daemon_stays_up(
    work: Path, disk: Path
) -> None:
    cfg = work / "company.yaml"
    cfg.write_text(yaml.safe_dump(COMPANY, sort_keys=False), encoding="utf-8")
    async with InProcessDaemon(cfg, disk / "state") as daemon:
        first = await daemon.call("ask", agent="cfo", question="Before the disk fills?")
        assert first.get("answer"), first
        filler = fill(disk)
        failed = await daemon.call("ask", agent="cfo", question="And now?")
        assert failed["status"] == "failed", failed
        assert "state disk full: writes failing" in failed["reason"], failed
        also = await daemon.call("ask", agent="ceo", question="And you?")
        assert also["status"] == "failed", also
        status = await daemon.call("status")
        assert not daemon.events("max_intensity")  # no supervisor gave up
        assert status["daemon"]["state"] == "running", status
        assert status["agents"]["paused"] == 2, status["agents"]
        alerts = daemon.events("state_disk_full")
        assert len(alerts) == 1, alerts
        assert "Traceback" not in daemon.log_text()
        os.unlink(filler)
        for agent in ("cfo", "ceo"):
            await daemon.call("resume", agent=agent)
        again = await daemon.call("ask", agent="cfo", question="Space is back?")
        assert again.get("answer"), again
    assert "Traceback" not in daemon.log_text()


async def test_started_on_a_full_disk_the_daemon_comes_up_degraded(work: Path, disk: Path) -> None:
    cfg = work / "company.yaml"
    cfg.write_text(yaml.safe_dump(COMPANY, sort_keys=False), encoding="utf-8")
    # once with space: the stores exist, as after an upgrade or reboot
    async with InProcessDaemon(cfg, disk / "state") as before:
        assert (await before.call("ask", agent="cfo", question="Hello?")).get("answer")
    filler = fill(disk)
    daemon = DaemonProcess(cfg, disk / "state", log=work / "daemon2.log")
    await daemon.start()  # comes up (ready, control socket answers) instead of exiting
    try:
        status = await daemon.call("status")
        assert status["daemon"]["state"] == "running", status["daemon"]
        failed = await daemon.call("ask", agent="cfo", question="Now?")
        assert failed["status"] in ("failed", "cancelled"), failed
        assert "state disk full" in failed["reason"], failed
        assert len(daemon.events("state_disk_full")) == 1
        assert "Traceback" not in daemon.log_text()
        os.unlink(filler)
    finally:
        assert await daemon.stop() == 0, daemon.log_text()[-3000:]


async def test_each_outage_raises_one_alert_and_clears_when_every_store_writes_again(
    work: Path, disk: Path
) -> None:
    """Chaos review: the disk alarm was one flag that only the ledger and the memory cleared,
    so an outage the run journal reported never cleared, and the next outage raised no alert.
    """
    cfg = work / "company.yaml"
    cfg.write_text(yaml.safe_dump(COMPANY, sort_keys=False), encoding="utf-8")
    async with InProcessDaemon(cfg, disk / "state") as daemon:
        assert (await daemon.call("ask", agent="cfo", question="Before?")).get("answer")
        for outage in (1, 2):
            filler = fill(disk)
            failed = await daemon.call("ask", agent="cfo", question=f"Outage {outage}?")
            assert failed["status"] == "failed", failed
            await _counted(daemon, "state_disk_full", outage)
            assert len(daemon.events("state_disk_full")) == outage
            os.unlink(filler)
            await daemon.call("resume", agent="cfo")
            again = await daemon.call("ask", agent="cfo", question=f"After outage {outage}?")
            assert again.get("answer"), again
            await _counted(daemon, "state_disk_recovered", outage)
            assert len(daemon.events("state_disk_recovered")) == outage
        # and no third of either: one alert per outage, one all-clear per recovery
        assert len(daemon.events("state_disk_full")) == 2
        assert len(daemon.events("state_disk_recovered")) == 2
    assert "Traceback" not in daemon.log_text()


async def _counted(daemon: InProcessDaemon, kind: str, n: int, timeout: float = 30.0) -> None:
    """Until ``n`` events of ``kind`` were published (≤ ``timeout`` real seconds): an alarm
    is published by the store's writer thread a moment after the answer.
    """
    async with asyncio.timeout(timeout):
        while len(daemon.events(kind)) < n:
            await asyncio.sleep(0.02)
