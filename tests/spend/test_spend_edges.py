"""Edge cases found by a checker pass: thresholds jumped by one call, month budgets without
a daily one in a zone far from UTC, and report totals against the rows.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from companyd.clock import ManualClock
from companyd.events import EventBus
from companyd.llm._model import Usage
from companyd.spend import BudgetExhausted, SpendBook

from .spendkit import events, make_config, micro, reserve, running, spend


def local_ts(tz: str, year: int, month: int, day: int, hour: int, minute: int) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=ZoneInfo(tz)).timestamp()


@pytest.mark.anyio
async def test_one_call_over_two_levels_publishes_the_higher_once(
    tmp_path: Path, bus: EventBus
) -> None:
    # One message saying where the spend is — "used 80%", not also "used 50%" in the same
    # second (and, for a call that overshoots, "50%", "80%", "100%" of a budget at 141%).
    clock = ManualClock(start=local_ts("UTC", 2026, 11, 20, 9, 0))
    cfg = make_config(tmp_path, company="{daily_usd: 1.0, warn_at: [0.5, 0.8, 1.0]}")
    book = SpendBook(cfg, tmp_path / "state", bus=bus, clock=clock)
    async with running(book):
        await spend(book, "ceo", 850_000)  # 0 % -> 85 % in one call
        await spend(book, "ceo", 10_000)
        await book.flush()
        got = [(e.data["level"], e.data["used_usd"]) for e in events(bus, "budget_threshold")]
        assert got == [(0.8, 0.85)]
    book = SpendBook(cfg, tmp_path / "state", bus=bus, clock=clock)  # a restart
    async with running(book):
        await spend(book, "ceo", 140_000)  # 100 %: the level passed over stays passed
        await book.flush()
        got = [(e.data["level"], e.data["used_usd"]) for e in events(bus, "budget_threshold")]
        assert got == [(0.8, 0.85), (1.0, 1.0)]


@pytest.mark.anyio
async def test_a_month_budget_alone_rolls_over_at_local_month_end_in_auckland(
    tmp_path: Path, bus: EventBus
) -> None:
    tz = "Pacific/Auckland"  # UTC+13 in December: the month turns on 30 Nov at 11:00 UTC
    clock = ManualClock(start=local_ts(tz, 2026, 11, 30, 23, 50))
    cfg = make_config(tmp_path, tz=tz, company="{monthly_usd: 0.5}")
    book = SpendBook(cfg, tmp_path / "state", bus=bus, clock=clock)
    async with running(book):
        await spend(book, "ceo", 500_000)
        with pytest.raises(BudgetExhausted) as ei:
            await reserve(book, "cfo", 1)
        assert ei.value.period == "month"
        assert ei.value.resets_at == "2026-12-01T00:00:00+13:00"
        clock.advance(20 * 60)
        async with asyncio.timeout(5):
            while not [e for e in events(bus, "budget_reset") if e.data["period"] == "month"]:
                await asyncio.sleep(0.01)
        (month,) = [e for e in events(bus, "budget_reset") if e.data["period"] == "month"]
        assert (month.data["previous"], month.data["current"]) == ("2026-11", "2026-12")
        assert month.data["company"] is True
        assert book.exhausted("cfo") is None
        assert await spend(book, "cfo", 400_000) == micro(400_000)
        report = await book.budget_report()
        assert (report["day"], report["month"]) == ("2026-12-01", "2026-12")


@pytest.mark.anyio
async def test_every_grouping_of_the_report_adds_up_to_the_ledger_rows(
    tmp_path: Path, bus: EventBus
) -> None:
    clock = ManualClock(start=local_ts("Europe/Berlin", 2026, 11, 20, 23, 0))
    cfg = make_config(tmp_path, tz="Europe/Berlin", company="unlimited")
    book = SpendBook(cfg, tmp_path / "state", bus=bus, clock=clock)
    calls = [
        ("ceo", "daily", "unit-model", Usage(input_tokens=1234, output_tokens=77)),
        ("cfo", None, "claude-sonnet-5-5", Usage(input_tokens=10, cache_write_1h_tokens=999)),
        ("cfo", "daily", "claude-haiku-5-5", Usage(cache_read_tokens=120_000, output_tokens=3)),
        ("ceo", None, "mystery-model", Usage(cache_write_5m_tokens=7, output_tokens=1)),
    ]
    async with running(book):
        for i, (agent, routine, model, usage) in enumerate(calls):
            res = await book.reserve(
                agent=agent,
                run_id=f"run-{i}",
                routine=routine,
                model=model,
                input_tokens=usage.total_tokens,
                max_output_tokens=usage.output_tokens,
            )
            await book.settle(res, model=model, usage=usage)
            clock.advance(1800)  # the last two calls fall on the next local day
        rows = await book.ledger_rows()
        exact = sum((Decimal(r["cost_pusd"]) for r in rows), Decimal(0)) / Decimal(10**12)
        for by in ("agent", "model", "routine", "day"):
            report = await book.spend_report(by, "2026-11-20..2026-11-21")
            assert Decimal(report["total"]["cost_usd_exact"]) == exact, by
            assert sum(r["calls"] for r in report["rows"]) == len(calls), by
