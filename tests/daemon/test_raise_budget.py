"""Budget raises against the daemon (issue 15, item 4): the CLI and raw control-socket
requests with absurd, non-finite or negative amounts are refused with a plain message and
change nothing; never "internal error", and status and budget keep working.

The daemon is ``companyd run``'s composition root in this process
(:class:`~companyd.testing.inprocess.InProcessDaemon`: the same control socket, answered
by the same code) and the commands run by the CLI's entry point: nothing here is about a
process.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from companyd.testing.daemon import short_dir
from companyd.testing.inprocess import InProcessDaemon

COMPANY = {
    "schema": "companyd/v1",
    "company": {"name": "Night Co", "timezone": "UTC", "budget": {"daily_usd": 10}},
    "agents": {
        "ceo": {"title": "CEO", "instructions": "You are the ceo."},
        "cfo": {
            "title": "CFO",
            "instructions": "You are the cfo.",
            "reports_to": "ceo",
            "budget": {"daily_usd": 2},
        },
    },
}


@pytest.fixture
def work() -> Iterator[Path]:
    with short_dir() as d:
        yield d


async def _raw(sock: Path, *lines: bytes) -> list[dict[str, object]]:
    async with asyncio.timeout(20):
        reader, writer = await asyncio.open_unix_connection(str(sock))
        try:
            out = []
            for line in lines:
                writer.write(line)
                await writer.drain()
                raw = await reader.readline()
                # a connection closed instead of answered is recorded, not a JSON error
                out.append(json.loads(raw) if raw else {"closed": line.decode()})
            return out
        finally:
            writer.close()


async def _cfo_day(daemon: InProcessDaemon) -> dict[str, object]:
    report = await daemon.call("budget")
    return next(b for b in report["budgets"] if b["agent"] == "cfo" and b["period"] == "day")


@pytest.mark.anyio
async def test_absurd_raises_are_refused_plainly_and_change_nothing(work: Path) -> None:
    cfg = work / "company.yaml"
    cfg.write_text(yaml.safe_dump(COMPANY, sort_keys=False), encoding="utf-8")
    async with InProcessDaemon(cfg, work / "s") as daemon:
        cli = await daemon.cli("raise-budget", "cfo", "10000000")
        assert cli.rc != 0 and "at most $1,000,000" in cli.err, cli.err
        assert "internal" not in cli.err and "Traceback" not in cli.err
        answers = await _raw(
            daemon.socket,
            *(
                b'{"op": "raise_budget", "args": {"agent": "cfo", "usd": %s}}\n' % v
                for v in (
                    b"1e308",
                    b"NaN",
                    b"Infinity",
                    b"-Infinity",
                    b"-5",
                    b"0",
                    b"1" + b"0" * 400,
                )
            ),
        )
        for answer in answers:
            assert answer["ok"] is False, answer
            assert answer["code"] in ("admin", "bad_request"), answer
            assert "internal" not in str(answer["error"]), answer
        assert (await _cfo_day(daemon))["limit_usd"] == 2
        status = await daemon.cli("status")
        budget = await daemon.cli("budget")
        assert status.rc == 0 and budget.rc == 0, (status.err, budget.err)
        ok = await daemon.cli("raise-budget", "cfo", "3")
        assert ok.rc == 0, ok.err
        assert (await _cfo_day(daemon))["limit_usd"] == 5
    assert "Traceback" not in daemon.log_text()
