"""SpendBook: reservations, settlement, refusals, thresholds, rollover, raises, runaway.

Real SQLite in tmp_path, a ManualClock for time, the real EventBus.
"""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from companyd.clock import ManualClock
from companyd.events import EventBus
from companyd.llm._model import Usage
from companyd.spend import BudgetExhausted, LedgerError, SpendBook, SpendError
from companyd.spend._ledger import PUSD, InflightRow, Ledger

from .spendkit import company_yaml, events, make_config, micro, reserve, running, spend


def book_for(tmp_path: Path, bus: EventBus, clock: ManualClock, **kw: Any) -> SpendBook:
    return SpendBook(make_config(tmp_path, **kw), tmp_path / "state", bus=bus, clock=clock)


def local_ts(tz: str, year: int, month: int, day: int, hour: int, minute: int) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=ZoneInfo(tz)).timestamp()


@pytest.mark.anyio
async def test_settle_records_the_exact_cost_and_frees_the_rest(
    tmp_path: Path, bus: EventBus
) -> None:
    clock = ManualClock()
    book = book_for(tmp_path, bus, clock, agents={"ceo": None, "cfo": "{daily_usd: 0.5}"})
    async with running(book):
        res = await book.reserve(
            agent="cfo",
            run_id="run-7",
            routine="weekly",
            model="unit-model",
            input_tokens=100_000,
            max_output_tokens=50_000,
        )
        assert res.amount_usd == Decimal("0.15")
        report = await book.budget_report()
        cfo_day = next(b for b in report["budgets"] if b["agent"] == "cfo")
        assert cfo_day["reserved_usd"] == 0.15 and cfo_day["remaining_usd"] == 0.35
        assert report["in_flight"] == 1
        cost = await book.settle(
            res,
            model="unit-model",
            usage=Usage(input_tokens=100_000, output_tokens=10_000, cache_read_tokens=7),
            request_id="req_1",
        )
        assert cost == Decimal("0.1100007")
        report = await book.budget_report()
        company_day = report["budgets"][0]
        assert (company_day["used_usd"], company_day["reserved_usd"]) == (0.110001, 0.0)
        rows = await book.ledger_rows()
    assert len(rows) == 1
    row = rows[0]
    assert row["agent"] == "cfo" and row["routine"] == "weekly" and row["run_id"] == "run-7"
    assert row["model"] == "unit-model" and row["request_id"] == "req_1"
    assert (row["input_tokens"], row["output_tokens"], row["cache_read_tokens"]) == (
        100_000,
        10_000,
        7,
    )
    assert Decimal(row["cost_pusd"]) / PUSD == Decimal("0.1100007")
    assert row["day"] == datetime.fromtimestamp(clock.time(), UTC).date().isoformat()


@pytest.mark.anyio
async def test_release_is_idempotent_and_settling_twice_is_refused(
    tmp_path: Path, bus: EventBus
) -> None:
    book = book_for(tmp_path, bus, ManualClock())
    async with running(book):
        res = await reserve(book, "cfo", 400_000)
        await book.release(res)
        await book.release(res)
        report = await book.budget_report()
        assert report["budgets"][0]["reserved_usd"] == 0.0
        res = await reserve(book, "cfo", 1_000)
        await book.settle(res, model="unit-model", usage=Usage(input_tokens=1_000))
        with pytest.raises(SpendError, match="already settled"):
            await book.settle(res, model="unit-model", usage=Usage(input_tokens=1_000))
        await book.release(res)  # a settled reservation is left alone
        assert len(await book.ledger_rows()) == 1


@pytest.mark.anyio
async def test_a_call_that_does_not_fit_is_refused_before_it_is_made(
    tmp_path: Path, bus: EventBus
) -> None:
    clock = ManualClock(start=local_ts("UTC", 2026, 11, 20, 12, 0))
    book = book_for(
        tmp_path, bus, clock, agents={"ceo": None, "cfo": "{daily_usd: 0.30}", "coo": None}
    )
    async with running(book):
        await spend(book, "ceo", 950_000)
        with pytest.raises(BudgetExhausted) as ei:
            await reserve(book, "coo", 100_000)
        e = ei.value
        assert (e.scope, e.agent, e.period) == ("company", "coo", "day")
        assert (e.needed_usd, e.remaining_usd, e.limit_usd) == (
            Decimal("0.1"),
            Decimal("0.05"),
            Decimal("1"),
        )
        assert e.resets_at == "2026-11-21T00:00:00+00:00"
        assert "company's daily budget of $1.00 is exhausted" in str(e)
        # what the founder reads (a paused agent's reason, a failed fire's): the company's
        # clock, named, as every time shown to a person — the ISO form is for machines
        assert "resets at 2026-11-21 00:00 UTC" in str(e)
        for agent in ("ceo", "cfo", "coo"):
            reason = book.exhausted(agent)
            assert reason is not None and "company's daily budget" in reason
        with pytest.raises(BudgetExhausted):
            await reserve(book, "cfo", 100_000)
        await book.flush()
        exhausted = events(bus, "budget_exhausted")
        assert len(exhausted) == 1  # one per scope, period and limit — never a storm
        assert exhausted[0].data["scope"] == "company"
        assert exhausted[0].data["remaining_usd"] == 0.05
        # A smaller call still fits the $0.05 left.
        assert await spend(book, "coo", 40_000) == micro(40_000)


@pytest.mark.anyio
async def test_an_agent_budget_stops_only_that_agent(tmp_path: Path, bus: EventBus) -> None:
    book = book_for(tmp_path, bus, ManualClock(), agents={"ceo": None, "cfo": "{daily_usd: 0.3}"})
    async with running(book):
        await spend(book, "cfo", 250_000)
        with pytest.raises(BudgetExhausted) as ei:
            await reserve(book, "cfo", 100_000)
        assert ei.value.scope == "agent" and ei.value.agent == "cfo"
        assert book.exhausted("cfo") is not None
        assert book.exhausted("ceo") is None
        await spend(book, "ceo", 500_000)
        await book.flush()
        (ev,) = events(bus, "budget_exhausted")
        assert ev.data["scope"] == "agent" and ev.data["agent"] == "cfo"
        agent_levels = [
            (e.data["agent"], e.data["level"])
            for e in events(bus, "budget_threshold")
            if e.data["scope"] == "agent"
        ]
        assert agent_levels == [("cfo", 0.8)]  # $0.25 of $0.30 in one call: 80 %, once


@pytest.mark.anyio
async def test_a_call_waits_for_reservations_in_flight_rather_than_failing(
    tmp_path: Path, bus: EventBus
) -> None:
    book = book_for(tmp_path, bus, ManualClock(), company="{daily_usd: 0.25}")
    async with running(book):
        first = await reserve(book, "ceo", 200_000)
        second = asyncio.ensure_future(reserve(book, "cfo", 100_000))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not second.done()  # 0.10 fits the settled spend, not the $0.20 reserved
        await book.settle(first, model="unit-model", usage=Usage(input_tokens=50_000))
        async with asyncio.timeout(5):
            res2 = await second
        assert res2.amount_usd == Decimal("0.1")
        # Now the settled spend leaves $0.20 and $0.10 is reserved: a $0.15 call waits and
        # is refused once the reservation settles and shows the money is really gone.
        third = asyncio.ensure_future(reserve(book, "ceo", 150_000))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not third.done()
        await book.settle(res2, model="unit-model", usage=Usage(input_tokens=100_000))
        async with asyncio.timeout(5):
            with pytest.raises(BudgetExhausted):
                await third


@pytest.mark.anyio
async def test_waiting_has_a_deadline(tmp_path: Path, bus: EventBus) -> None:
    cfg = make_config(tmp_path, company="{daily_usd: 0.25}")
    book = SpendBook(cfg, tmp_path / "state", bus=bus, clock=ManualClock(), reserve_wait=0.05)
    async with running(book):
        held = await reserve(book, "ceo", 200_000)
        async with asyncio.timeout(5):
            with pytest.raises(BudgetExhausted):
                await reserve(book, "cfo", 100_000)
        assert "waited 0.05 s" in (book.exhausted("cfo") or "")
        await book.release(held)


@pytest.mark.anyio
async def test_thresholds_fire_once_per_level_per_period_even_across_restarts(
    tmp_path: Path, bus: EventBus
) -> None:
    clock = ManualClock(start=local_ts("UTC", 2026, 11, 20, 9, 0))
    cfg = make_config(tmp_path, company="{daily_usd: 1.0, warn_at: [0.5, 0.8, 1.0]}")
    state = tmp_path / "state"
    book = SpendBook(cfg, state, bus=bus, clock=clock)
    async with running(book):
        for _ in range(6):
            await spend(book, "ceo", 100_000)  # 10 % at a time
        assert [e.data["level"] for e in events(bus, "budget_threshold")] == [0.5]
    book = SpendBook(cfg, state, bus=bus, clock=clock)  # a restart
    async with running(book):
        await spend(book, "cfo", 100_000)
        await spend(book, "cfo", 100_000)  # 80 %
        await spend(book, "cfo", 100_000)
        await spend(book, "cfo", 100_000)  # 100 %
        with pytest.raises(BudgetExhausted):
            await reserve(book, "cfo", 1)
        await book.flush()
    book = SpendBook(cfg, state, bus=bus, clock=clock)  # another restart, same day
    async with running(book):
        with pytest.raises(BudgetExhausted):
            await reserve(book, "ceo", 1)
        await book.flush()
        levels = [e.data["level"] for e in events(bus, "budget_threshold")]
        assert levels == [0.5, 0.8, 1.0]
        assert len(events(bus, "budget_exhausted")) == 1
        first = events(bus, "budget_threshold")[0].data
        assert first["scope"] == "company" and first["period"] == "day"
        assert first["key"] == "2026-11-20" and first["limit_usd"] == 1.0
        # the next day the levels fire again, once each
        clock.advance(86400)
        for _ in range(10):
            await spend(book, "ceo", 100_000)
        levels = [e.data["level"] for e in events(bus, "budget_threshold")]
        assert levels == [0.5, 0.8, 1.0, 0.5, 0.8, 1.0]
        assert events(bus, "budget_threshold")[-1].data["key"] == "2026-11-21"


@pytest.mark.anyio
async def test_day_and_month_roll_over_at_local_midnight(tmp_path: Path, bus: EventBus) -> None:
    tz = "Asia/Kathmandu"  # UTC+05:45: a UTC-midnight rollover would be caught out
    clock = ManualClock(start=local_ts(tz, 2026, 11, 29, 23, 50))
    book = book_for(
        tmp_path,
        bus,
        clock,
        tz=tz,
        company="{daily_usd: 0.30, monthly_usd: 0.50}",
        agents={"ceo": None, "cfo": None},
    )
    async with running(book):
        await spend(book, "cfo", 300_000)
        with pytest.raises(BudgetExhausted) as ei:
            await reserve(book, "cfo", 100_000)
        assert ei.value.period == "day"
        assert ei.value.resets_at == "2026-11-30T00:00:00+05:45"
        # 00:10 local on the 30th; still 18:25 UTC on the 29th
        clock.advance(20 * 60)
        async with asyncio.timeout(5):
            while not events(bus, "budget_reset"):
                await asyncio.sleep(0.01)  # the run() watcher wakes at local midnight
        (reset,) = events(bus, "budget_reset")
        assert reset.data["period"] == "day"
        assert (reset.data["previous"], reset.data["current"]) == ("2026-11-29", "2026-11-30")
        assert reset.data["company"] is True
        assert book.exhausted("cfo") is None
        await spend(book, "cfo", 200_000)  # the month now holds $0.50
        with pytest.raises(BudgetExhausted) as ei:
            await reserve(book, "ceo", 100_000)
        assert ei.value.period == "month"
        assert ei.value.resets_at == "2026-12-01T00:00:00+05:45"
        assert "it resets at 2026-12-01 00:00 +0545" in str(ei.value)
        assert "resets at 2026-12-01 00:00 +0545" in (book.exhausted("ceo") or "")
        clock.advance(86400)  # 1 December, local
        async with asyncio.timeout(5):
            while len(events(bus, "budget_reset")) < 3:
                await asyncio.sleep(0.01)
        periods = sorted(e.data["period"] for e in events(bus, "budget_reset")[1:])
        assert periods == ["day", "month"]
        assert await spend(book, "ceo", 300_000) == micro(300_000)
        report = await book.budget_report()
        assert (report["day"], report["month"]) == ("2026-12-01", "2026-12")


@pytest.mark.anyio
async def test_a_new_day_does_not_reset_the_month(tmp_path: Path, bus: EventBus) -> None:
    clock = ManualClock(start=local_ts("Europe/Berlin", 2026, 11, 10, 12, 0))
    book = book_for(
        tmp_path, bus, clock, tz="Europe/Berlin", company="{daily_usd: 0.3, monthly_usd: 0.5}"
    )
    async with running(book):
        await spend(book, "ceo", 300_000)
        clock.advance(86400)
        await spend(book, "ceo", 200_000)
        with pytest.raises(BudgetExhausted) as ei:
            await reserve(book, "ceo", 1)
        assert ei.value.period == "month"
        clock.advance(86400)
        with pytest.raises(BudgetExhausted):
            await reserve(book, "ceo", 1)


@pytest.mark.anyio
async def test_a_one_off_raise_lasts_for_today_only(tmp_path: Path, bus: EventBus) -> None:
    clock = ManualClock(start=local_ts("UTC", 2026, 11, 20, 9, 0))
    cfg = make_config(tmp_path, agents={"ceo": None, "cfo": "{daily_usd: 0.2}"})
    state = tmp_path / "state"
    book = SpendBook(cfg, state, bus=bus, clock=clock)
    async with running(book):
        await spend(book, "cfo", 200_000)
        with pytest.raises(BudgetExhausted):
            await reserve(book, "cfo", 100_000)
        assert book.exhausted("cfo") is not None
        await book.raise_today("cfo", Decimal("0.15"))
        assert book.exhausted("cfo") is None
        await spend(book, "cfo", 100_000)
        (raised,) = events(bus, "budget_raised")
        assert raised.data == {
            "scope": "agent",
            "agent": "cfo",
            "day": "2026-11-20",
            "usd": 0.15,
            "raised_today_usd": 0.15,
        }
        with pytest.raises(SpendError, match="unknown agent 'cf0'"):
            await book.raise_today("cf0", 1)
        with pytest.raises(SpendError, match="positive amount"):
            await book.raise_today("cfo", -1)
        with pytest.raises(SpendError, match="no budget to raise"):
            await book.raise_today("ceo", 1)
    book = SpendBook(cfg, state, bus=bus, clock=clock)  # the raise survives a restart
    async with running(book):
        await spend(book, "cfo", 40_000)
        report = await book.budget_report()
        cfo = next(b for b in report["budgets"] if b["agent"] == "cfo")
        assert cfo["limit_usd"] == 0.35 and cfo["raised_today_usd"] == 0.15
        clock.advance(86400)  # ... and ends with the day
        report = await book.budget_report()
        cfo = next(b for b in report["budgets"] if b["agent"] == "cfo")
        assert cfo["limit_usd"] == 0.2 and cfo["used_usd"] == 0.0


@pytest.mark.anyio
async def test_reconfigure_applies_new_budgets_to_the_next_reservation(
    tmp_path: Path, bus: EventBus
) -> None:
    book = book_for(tmp_path, bus, ManualClock(), company="{daily_usd: 1.0}")
    async with running(book):
        await spend(book, "ceo", 600_000)
        (tmp_path / "b").mkdir()
        book.reconfigure(make_config(tmp_path / "b", company="{daily_usd: 0.5}"))
        with pytest.raises(BudgetExhausted):
            await reserve(book, "ceo", 1)
        (tmp_path / "c").mkdir()
        book.reconfigure(make_config(tmp_path / "c", company="{daily_usd: 2.0}"))
        assert book.exhausted("ceo") is None
        await spend(book, "ceo", 1_000_000)


@pytest.mark.anyio
async def test_an_unknown_model_is_priced_at_the_dearest_rate_and_reported_once(
    tmp_path: Path, bus: EventBus
) -> None:
    book = book_for(tmp_path, bus, ManualClock(), company="unlimited")
    async with running(book):
        dearest = book.prices.most_expensive
        for _ in range(3):
            res = await book.reserve(
                agent="ceo",
                run_id="r",
                routine=None,
                model="claude-future-9",
                input_tokens=1000,
                max_output_tokens=100,
            )
            assert res.amount_usd == dearest.worst_case(1000, 100)
            cost = await book.settle(
                res, model="claude-future-9", usage=Usage(input_tokens=1000, output_tokens=100)
            )
            assert cost == dearest.cost(Usage(input_tokens=1000, output_tokens=100)) > 0
        rows = await book.ledger_rows()
    (ev,) = events(bus, "unknown_model_price")
    assert ev.data["model"] == "claude-future-9"
    assert ev.data["priced_as"]["output"] == float(dearest.output)
    assert [r["price_known"] for r in rows] == [0, 0, 0]


@pytest.mark.anyio
async def test_runaway_spend_is_reported_once_per_window_even_under_budget(
    tmp_path: Path, bus: EventBus
) -> None:
    clock = ManualClock(start=local_ts("UTC", 2026, 11, 20, 0, 0))
    text = company_yaml(company="{daily_usd: 100}")
    text += "spend: {runaway_factor: 5, runaway_window: 10m}\n"
    book = SpendBook(make_config(tmp_path, text), tmp_path / "state", bus=bus, clock=clock)
    async with running(book):
        for _ in range(4):  # a usual day: $0.05 per active ten minutes
            await spend(book, "cfo", 50_000)
            clock.advance(3600)
        assert events(bus, "spend_runaway") == []
        for _ in range(5):  # $0.25 in one window: five times the usual — not yet more
            await spend(book, "cfo", 50_000)
            clock.advance(10)
        assert events(bus, "spend_runaway") == []
        await spend(book, "cfo", 50_000)
        await spend(book, "cfo", 50_000)  # still the same window: no second event
        (ev,) = events(bus, "spend_runaway")
        assert ev.data["agent"] == "cfo" and ev.data["basis"] == "history"
        assert ev.data["window_spend_usd"] == 0.3
        assert ev.data["usual_usd_per_min"] == 0.005
        assert ev.data["rate_usd_per_min"] == 0.03
        clock.advance(600)
        for _ in range(7):
            await spend(book, "cfo", 50_000)
        assert len(events(bus, "spend_runaway")) == 2
        assert book.exhausted("cfo") is None  # still well under budget


@pytest.mark.anyio
async def test_runaway_without_history_uses_the_per_run_limit(
    tmp_path: Path, bus: EventBus
) -> None:
    text = company_yaml(company="{daily_usd: 100}") + ("spend: {runaway_factor: 4}\n")
    text = text.replace("defaults:\n", "defaults:\n  limits: {max_cost_usd: 0.10}\n")
    book = SpendBook(make_config(tmp_path, text), tmp_path / "state", bus=bus, clock=ManualClock())
    async with running(book):
        for _ in range(4):
            await spend(book, "ceo", 100_000)
        assert events(bus, "spend_runaway") == []
        await spend(book, "ceo", 100_000)  # $0.50 > 4 × $0.10 in one window
        (ev,) = events(bus, "spend_runaway")
        assert ev.data["basis"] == "default"


@pytest.mark.anyio
async def test_the_api_spend_limit_pages_once_an_hour(tmp_path: Path, bus: EventBus) -> None:
    clock = ManualClock()
    book = book_for(tmp_path, bus, clock)
    book.note_api_spend_limit("limit reached (cfo)")
    book.note_api_spend_limit("limit reached (ceo)")
    clock.advance(3601)
    book.note_api_spend_limit("limit reached (coo)")
    first, second = events(bus, "api_spend_limit")
    assert str(first.severity) == "critical"
    assert first.data["message"] == "limit reached (cfo)"
    assert (first.data["repeats_suppressed"], second.data["repeats_suppressed"]) == (0, 1)


@pytest.mark.anyio
async def test_spend_report_groups_and_totals(tmp_path: Path, bus: EventBus) -> None:
    clock = ManualClock(start=local_ts("UTC", 2026, 11, 20, 9, 0))
    book = book_for(tmp_path, bus, clock, company="unlimited")
    async with running(book):
        await spend(book, "ceo", 100_000, routine="daily")
        await spend(book, "cfo", 300_000)
        clock.advance(86400)
        await spend(book, "cfo", 50_000, routine="daily")
        today = await book.spend_report()
        assert [(r["key"], r["cost_usd"]) for r in today["rows"]] == [("cfo", 0.05)]
        month = await book.spend_report("agent", "month")
        assert [(r["key"], r["cost_usd"], r["calls"]) for r in month["rows"]] == [
            ("cfo", 0.35, 2),
            ("ceo", 0.1, 1),
        ]
        assert month["total"]["cost_usd_exact"] == "0.45"
        by_routine = await book.spend_report("routine", "2026-11-20..2026-11-21")
        assert {r["key"]: r["cost_usd"] for r in by_routine["rows"]} == {
            None: 0.3,
            "daily": 0.15,
        }
        by_day = await book.spend_report("day", "2026-11-01..")
        assert [(r["key"], r["cost_usd"]) for r in by_day["rows"]] == [
            ("2026-11-20", 0.4),
            ("2026-11-21", 0.05),
        ]
        by_model = await book.spend_report("model", "2026-11-20")
        assert by_model["rows"][0]["key"] == "unit-model"
        with pytest.raises(SpendError, match="expected one of agent, model, routine, day"):
            await book.spend_report("colour")
        with pytest.raises(SpendError, match="unknown period 'fortnight'"):
            await book.spend_report("agent", "fortnight")


@pytest.mark.anyio
async def test_spend_per_day_has_one_row_per_day_and_key(tmp_path: Path, bus: EventBus) -> None:
    clock = ManualClock(start=local_ts("UTC", 2026, 11, 20, 9, 0))
    book = book_for(tmp_path, bus, clock, company="unlimited")
    async with running(book):
        await spend(book, "ceo", 100_000, routine="daily")
        await spend(book, "cfo", 300_000)
        clock.advance(86400)
        await spend(book, "cfo", 50_000, routine="daily")
        await spend(book, "cfo", 20_000, routine="daily")
        report = await book.spend_report("agent", "2026-11-20..2026-11-21", per_day=True)
        assert [(r["day"], r["key"], r["cost_usd"], r["calls"]) for r in report["rows"]] == [
            ("2026-11-20", "cfo", 0.3, 1),
            ("2026-11-20", "ceo", 0.1, 1),
            ("2026-11-21", "cfo", 0.07, 2),
        ]
        assert report["total"]["cost_usd_exact"] == "0.47"
        by_routine = await book.spend_report("routine", "2026-11-20..2026-11-21", per_day=True)
        assert [(r["day"], r["key"]) for r in by_routine["rows"]] == [
            ("2026-11-20", None),
            ("2026-11-20", "daily"),
            ("2026-11-21", "daily"),
        ]
        plain = await book.spend_report("agent", "2026-11-20..2026-11-21")
        assert "day" not in plain["rows"][0]  # the usual report keeps its shape


@pytest.mark.anyio
async def test_stale_reservations_are_dropped_and_reported_on_start(
    tmp_path: Path, bus: EventBus
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    led = Ledger(state / "spend.sqlite")
    led.add_inflight(
        InflightRow(
            id="r1",
            agent="cfo",
            run_id="run-9",
            routine=None,
            model="unit-model",
            amount_pusd=1_250 * PUSD,  # a large worst case: said with thousands separated
            created=0.0,
            pid=os.getpid(),  # even a live pid: only one daemon owns the state dir
            boot="old",
        )
    )
    led.close()
    book = SpendBook(make_config(tmp_path), state, bus=bus, clock=ManualClock())
    async with running(book):
        report = await book.budget_report()
        assert all(b["reserved_usd"] == 0.0 for b in report["budgets"])
        await spend(book, "ceo", 1_000_000)  # the whole $1 is available: no phantom
    (ev,) = events(bus, "spend_unsettled")
    assert ev.data["calls"] == 1 and ev.data["worst_case_usd"] == 1250.0
    assert "up to $1,250.0000 may have been spent without being recorded" in ev.data["message"]
    assert ev.data["agents"] == ["cfo"] and ev.data["runs"] == ["run-9"]


@pytest.mark.anyio
async def test_a_closed_book_refuses_to_budget(tmp_path: Path, bus: EventBus) -> None:
    book = book_for(tmp_path, bus, ManualClock())
    with pytest.raises(LedgerError, match="not open"):
        await reserve(book, "ceo", 1)
    async with running(book):
        pass
    with pytest.raises(LedgerError, match="not open"):
        await reserve(book, "ceo", 1)


@pytest.mark.anyio
async def test_an_unwritable_state_dir_fails_to_start_with_a_clear_message(
    tmp_path: Path, bus: EventBus
) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("a file where the state directory should be")
    book = SpendBook(make_config(tmp_path), blocker, bus=bus, clock=ManualClock())
    with pytest.raises(LedgerError, match="cannot open the spend ledger"):
        async with running(book):
            pass


@pytest.mark.anyio
async def test_a_settle_whose_caller_is_cancelled_still_records_the_call(
    tmp_path: Path, bus: EventBus
) -> None:
    clock = ManualClock(start=local_ts("UTC", 2026, 11, 20, 23, 59))
    book = book_for(tmp_path, bus, clock)
    async with running(book):
        res = await reserve(book, "ceo", 100_000)
        clock.advance(120)  # past midnight: settle first has to load the new day
        caller = asyncio.ensure_future(
            book.settle(res, model="unit-model", usage=Usage(input_tokens=50_000))
        )
        for _ in range(3):
            await asyncio.sleep(0)
        caller.cancel()  # e.g. the run's heartbeat expired right now
        with pytest.raises(asyncio.CancelledError):
            await caller
        async with asyncio.timeout(5):
            while res.state != "settled":
                await asyncio.sleep(0.01)
        await book.flush()
        (row,) = await book.ledger_rows()
        assert row["day"] == "2026-11-21" and row["input_tokens"] == 50_000
        report = await book.budget_report()
        assert report["in_flight"] == 0
        assert report["budgets"][0]["used_usd"] == 0.05


@pytest.mark.anyio
async def test_small_sums_read_as_the_spend_cli_prints_them(tmp_path: Path, bus: EventBus) -> None:
    # a budget of $0.004 read "$0.00" (`:.2f`), a worst case of $0.00002 "$0.0000": every
    # amount in a reason, refusal or alert message is companyd.admin.format_usd's
    clock = ManualClock(start=local_ts("UTC", 2026, 11, 20, 12, 0))
    book = book_for(tmp_path, bus, clock, agents={"ceo": None, "cfo": "{daily_usd: 0.004}"})
    async with running(book):
        await spend(book, "cfo", 3_500)
        await spend(book, "cfo", 500)
        assert (book.exhausted("cfo") or "").startswith(
            "agent 'cfo' daily budget of $0.004 is used up ($0.0040 spent)"
        )
        with pytest.raises(BudgetExhausted) as ei:
            await reserve(book, "cfo", 10)
        assert str(ei.value).startswith(
            "agent cfo's daily budget of $0.004 is exhausted: this call could cost up to "
            "$0.00001 but only $0.0000 is left"  # each exact: $0.00001 needed, nothing left
        )
        res = await reserve(book, "ceo", 20)
        await book.forfeit(res, reason="ModelTimeout: no answer")
        await book.flush()
    (warned, *_) = events(bus, "budget_threshold")
    assert warned.data["message"].endswith("daily budget ($0.0035 of $0.0040)")
    (unanswered,) = events(bus, "spend_unanswered")
    assert unanswered.data["message"] == "1 call timed out; up to $0.00002 may have been billed"


@pytest.mark.anyio
async def test_status_shows_each_agents_day_and_month_whichever_budgets_it_has(
    tmp_path: Path, bus: EventBus
) -> None:
    # an agent with only a monthly budget showed $0 today, one with only a daily budget $0
    # this month, and one with none was left out (status and the dashboard read these rows)
    from companyd.daemon._operator import spend_for_status

    agents = {"ceo": "{monthly_usd: 5}", "ops": "{daily_usd: 1}", "cfo": None}
    book = book_for(tmp_path, bus, ManualClock(), agents=agents)
    async with running(book):
        for agent, tokens in (("ceo", 2_000), ("ops", 3_000), ("cfo", 4_000)):
            await spend(book, agent, tokens)
        status = spend_for_status(await book.budget_report(), {})
    got = {a.agent: (a.today_usd, a.month_usd) for a in status.agents}
    assert got == {"ceo": (0.002, 0.002), "ops": (0.003, 0.003), "cfo": (0.004, 0.004)}
    assert status.today.used_usd == 0.009


def test_the_budget_tables_note_says_a_small_spend_as_it_is() -> None:
    # "ops: … (today $0.0000)" was a false zero: the note's figure is said on its own
    from companyd.spend._reports import format_budget_report

    row = {
        "scope": "agent:ops",
        "agent": "ops",
        "period": None,
        "limit_usd": None,
        "used_today_usd": 0.000042,
        "used_month_usd": 0.000042,
        "reserved_usd": 0.0,
        "note": "no budget of its own; only the company budget applies",
    }
    text = format_budget_report({"timezone": "UTC", "now": "2026-11-29T00:00", "budgets": [row]})
    assert text.splitlines()[-1] == (
        "ops: no budget of its own; only the company budget applies (today $0.000042)"
    )


@pytest.mark.anyio
async def test_a_call_larger_than_the_whole_budget_is_refused_as_too_small_not_exhausted(
    tmp_path: Path, bus: EventBus
) -> None:
    # nothing spent, and the reset changes nothing: "exhausted … resets at" misled
    book = book_for(tmp_path, bus, ManualClock(), company="{daily_usd: 1.0}")
    async with running(book):
        with pytest.raises(BudgetExhausted) as refused:
            await reserve(book, "cfo", 2_000_000)  # $2 of unit-model input
        assert str(refused.value) == (
            "the company's daily budget of $1.00 is too small for one call: this call could "
            "cost up to $2.0000, more than the whole budget — raise today's budget, increase "
            "it in company.yaml, or lower model.max_output_tokens"
        )
        await book.flush()
    (event,) = events(bus, "budget_exhausted")
    from companyd.alerts._render_kinds import render

    rendered, _ = render("budget_exhausted", event.data, "spend", {}, ["cfo"])
    assert rendered.title == "the company's daily budget is too small for one call"
    assert rendered.lines[-1].startswith("no call fits until the budget is raised")


@pytest.mark.anyio
async def test_a_raise_does_not_come_back_on_the_same_date_in_a_new_time_zone(
    tmp_path: Path, bus: EventBus
) -> None:
    # raised on 2026-11-29 in Kiritimati (UTC+14); company.timezone then moved to Chicago
    # (UTC-6), whose 2026-11-29 begins after that raise: the raise applied a second day
    agents = {"ceo": None, "cfo": "{daily_usd: 0.2}"}
    clock = ManualClock(start=local_ts("Pacific/Kiritimati", 2026, 11, 29, 9, 0))
    book = book_for(tmp_path, bus, clock, tz="Pacific/Kiritimati", agents=agents)
    async with running(book):
        await book.raise_today("cfo", Decimal("5"))
        report = await book.budget_report()
        cfo = next(b for b in report["budgets"] if b["agent"] == "cfo")
        assert cfo["raised_today_usd"] == 5.0
        book.reconfigure(make_config(tmp_path, tz="America/Chicago", agents=agents))
        # Chicago's own 29th, 9:00: a day and five hours of the clock on
        clock.advance(local_ts("America/Chicago", 2026, 11, 29, 9, 0) - clock.time())
        report = await book.budget_report()
        cfo = next(b for b in report["budgets"] if b["agent"] == "cfo")
        assert report["budgets"] and cfo["key"] == "2026-11-29"
        assert cfo["raised_today_usd"] == 0.0 and cfo["limit_usd"] == 0.2


@pytest.mark.anyio
async def test_status_shows_an_unlimited_companys_spend(tmp_path: Path, bus: EventBus) -> None:
    # `budget: unlimited` has no company row per period: status read $0 today and this month
    from companyd.daemon._operator import spend_for_status

    book = book_for(tmp_path, bus, ManualClock(), company="unlimited")
    async with running(book):
        await spend(book, "cfo", 4_000)
        status = spend_for_status(await book.budget_report(), {})
    assert status.today.used_usd == 0.004 and status.month.used_usd == 0.004
    assert status.today.limit_usd is None
